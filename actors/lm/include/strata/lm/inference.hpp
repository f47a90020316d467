#pragma once
/// \file
/// The LSTM language model on the host, with the CPU kernels: evaluation (mean next-token
/// cross-entropy, carrying the recurrent state across windows) and sampling. No actors, no
/// devices: what `lstm_lm eval`/`generate` and the per-epoch validation use.
///
/// Example:
/// \code
///   auto ck = strata::lm::load_checkpoint("ckpt").value();
///   strata::lm::model model(ck.config, ck.parameters);
///   auto ids = ck.vocab.encode("some text").value();
///   auto r = strata::lm::evaluate_stream(model, ids);       // {tokens, loss} from a zero state
///   auto more = strata::lm::generate(model, ids, 100, 0.8, 1);
/// \endcode

#include <cstddef>
#include <cstdint>
#include <vector>

#include "strata/lm/config.hpp"

namespace strata::lm {

/// The model's parameters in host memory and a forward pass over [steps, batch] tokens.
/// Thread-safety: const members may run concurrently on different states.
class model {
public:
  /// Throws std::invalid_argument with one sentence if a parameter is missing or has the wrong
  /// number of values for `config`.
  model(const lm::config& config, const std::vector<named_parameter>& parameters);

  /// The recurrent state of `batch` streams: per layer h and c, [batch, hidden].
  struct state {
    std::size_t batch = 0;
    std::vector<std::vector<float>> h, c;
  };
  /// All zeros.
  state zero_state(std::size_t batch) const;

  /// Runs `steps` timesteps of `state.batch` streams (tokens [steps, batch] seq-major) from
  /// `state`, which it advances; writes the top layer's outputs [steps, batch, hidden] into
  /// `top`. Throws std::invalid_argument for a token outside the vocabulary.
  void forward(const std::int32_t* tokens, std::size_t steps, state& s, std::vector<float>& top) const;

  /// Summed cross-entropy of predicting `targets` from `tokens` (both [steps, batch]) from
  /// `state`, which it advances.
  double loss_sum(const std::int32_t* tokens, const std::int32_t* targets, std::size_t steps, state& s) const;

  /// Logits [rows, vocab] of the top-layer outputs `top` [rows, hidden].
  std::vector<float> logits(const std::vector<float>& top, std::size_t rows) const;

  const lm::config& config() const noexcept { return config_; }

private:
  lm::config config_;
  std::vector<float> embedding_, decoder_w_, decoder_b_;
  struct layer {
    std::vector<float> w_ih, w_hh, b_ih, b_hh;
  };
  std::vector<layer> layers_;
};

/// Mean next-token cross-entropy and how many predictions it averages.
struct eval_result {
  std::size_t tokens = 0;
  double loss = 0;
};

/// The text `ids` read as one stream from a zero state, in windows of `window` tokens with the
/// state carried across them: predicts ids[1..n-1]. Needs at least two ids.
eval_result evaluate_stream(const model& model, const std::vector<std::int32_t>& ids, std::size_t window = 64);

/// Faster evaluation of a long text: cut into `batch` columns (as token_batches does), each read
/// as a stream from a zero state in windows of `seq`, state carried; at most `max_tokens`
/// predictions (0: all).
eval_result evaluate_batched(const model& model, const std::vector<std::int32_t>& ids, std::size_t batch,
                             std::size_t seq, std::size_t max_tokens = 0);

/// Feeds `prompt` (at least one id) from a zero state, then samples `length` ids, each from
/// softmax(logits / temperature) (temperature 0: the most likely id), with a generator seeded by
/// `seed`; `excluded` (e.g. the <unk> id; -1: none) is never sampled. Returns the sampled ids only.
std::vector<std::int32_t> generate(const model& model, const std::vector<std::int32_t>& prompt, std::size_t length,
                                   double temperature, std::uint64_t seed, std::int32_t excluded = -1);

}  // namespace strata::lm
