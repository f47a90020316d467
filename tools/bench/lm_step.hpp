#pragma once

/// \file
/// The seed language model's training step on one CPU, composed from strata::kernels::cpu:
/// embedding -> `layers` stacked LSTMs (zero initial state) -> linear decoder + mean softmax
/// cross-entropy, backward through all of it, clip_grad_norm, SGD. The PyTorch twin is
/// tools/bench/lm_step_torch.py; tests/bench checks one step against tests/fixtures/torch.
///
/// Example:
/// \code
///   strata::kernels::cpu::set_blas_threads(1);   // oneTBB parallelism inside the kernels
///   strata::lm::lstm_lm model(strata::lm::config{});  // the seed sizes, seed 0
///   std::vector<std::int32_t> tokens(35 * 20), targets(35 * 20);  // [seq, batch], seq-major
///   float loss = model.step(tokens.data(), targets.data());
/// \endcode

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/lm/config.hpp"

namespace strata::lm {

/// One parameter tensor of the model (its name and shape: lm::parameter_spec) with views of its
/// weights and gradient in the model's blocks.
struct lm_parameter : parameter_spec {
  std::span<float> value{};  ///< the weights (row-major)
  std::span<float> grad{};   ///< its gradient after forward_backward() (clipped after clip())
};

/// Wall time of each phase of the last step, in milliseconds.
struct lm_phase_times {
  double zero_grad = 0;
  double embedding_forward = 0;
  double lstm_forward = 0;
  double decoder = 0;  ///< fused linear + cross-entropy forward and backward
  double lstm_backward = 0;
  double embedding_backward = 0;
  double clip = 0;
  double sgd = 0;
  [[nodiscard]] double total() const noexcept {
    return zero_grad + embedding_forward + lstm_forward + decoder + lstm_backward +
           embedding_backward + clip + sgd;
  }
};

/// The model, its gradients and every buffer one training step needs, allocated once.
///
/// The model is strata::lm's: its sizes and settings are an lm::config (vocab, embed, layers,
/// hidden, batch, seq, lr, clip, seed; the pipeline's micro_batches and chunks do not apply: one
/// step runs the whole batch and window), its parameters are lm::parameter_layout(config) with
/// lm::initial_parameter's values. Parameters live in one contiguous block in that order (each tensor starting
/// on a 64-byte boundary), gradients in a second block of the same layout, so zeroing,
/// clipping and the SGD update are single passes. step() allocates nothing.
/// Not thread-safe: one step at a time; the kernels parallelise inside the caller's oneTBB
/// arena.
class lstm_lm {
 public:
  /// Allocates and initialises like the pipeline's stages (lm::initial_parameter: PyTorch's
  /// defaults, from generators seeded with `config.seed` and each parameter's name).
  /// \throws std::invalid_argument if a size is 0 or clip/lr is negative.
  explicit lstm_lm(const lm::config& config);
  ~lstm_lm();
  lstm_lm(const lstm_lm&) = delete;
  lstm_lm& operator=(const lstm_lm&) = delete;

  /// One training step: forward_backward(), clip() and sgd(). Returns the mean loss before
  /// the update. tokens and targets are [seq, batch] ids in [0, vocab).
  /// \throws std::invalid_argument (from the kernels, before any parameter changes) if an id
  ///         lies outside [0, vocab).
  float step(const std::int32_t* tokens, const std::int32_t* targets);

  /// Zeroes the gradients, runs forward and backward, leaves the unclipped gradients in
  /// parameters()[i].grad and returns the mean cross-entropy loss.
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets);

  /// clip_grad_norm(config.clip) over all gradients; returns the norm before clipping.
  double clip();

  /// params -= lr * grads.
  void sgd();

  [[nodiscard]] const lm::config& config() const noexcept { return config_; }
  [[nodiscard]] std::span<const lm_parameter> parameters() const noexcept { return params_; }
  /// The parameter called `name` (PyTorch's name). \throws std::out_of_range if none is.
  [[nodiscard]] const lm_parameter& parameter(const std::string& name) const;
  [[nodiscard]] std::size_t parameter_count() const noexcept;
  /// Bytes of every buffer the model allocated (parameters, gradients, activations, reserves,
  /// workspaces): the memory one step touches.
  [[nodiscard]] std::size_t buffer_bytes() const noexcept { return arena_floats_ * sizeof(float); }
  [[nodiscard]] const lm_phase_times& last_phase_times() const noexcept { return times_; }
  [[nodiscard]] double last_grad_norm() const noexcept { return grad_norm_; }

 private:
  struct layer_buffers;
  void carve();
  void initialise();

  lm::config config_;
  std::size_t arena_floats_ = 0;
  struct arena_deleter {
    void operator()(float* p) const noexcept;
  };
  std::unique_ptr<float[], arena_deleter> arena_;
  std::vector<lm_parameter> params_;
  std::span<float> param_block_, grad_block_;
  std::vector<layer_buffers> layers_;
  float* embedded_ = nullptr;     // [T, B, E]
  float* dtop_ = nullptr;         // [T, B, H] decoder's dh
  float* dx_[2] = {};             // [T, B, max(E, H)] ping-pong input gradients
  float* lstm_workspace_ = nullptr;
  float* decoder_workspace_ = nullptr;
  std::size_t lstm_workspace_size_ = 0, decoder_workspace_size_ = 0;
  lm_phase_times times_;
  double grad_norm_ = 0;
};

}  // namespace strata::lm
