#pragma once
// The math of one pipeline stage of the LSTM language model: parameters, gradients and every
// activation buffer of one training step, allocated once on the stage's device; forward/backward
// of one (micro-batch, chunk) unit as device work items. One implementation of the math serves
// cpu devices (strata::kernels::cpu on host memory) and cuda devices (strata::kernels::cuda on
// device memory, cuBLAS on the stream's handle); sim devices get the work's cost only.
// Private to strata::lm (actors/lm/src).

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/lm/config.hpp"
#include "strata/device/device.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/device/work.hpp"

namespace strata::lm {

class lm_stage {
public:
  /// Parameters and gradients are tensors on `dev`, allocated and initialised on `s`. With
  /// `carry_state`, each step's first chunk starts from the (h, c) its micro-batch's columns
  /// ended the previous step with (detached: no gradient crosses steps).
  /// \throws std::invalid_argument for an invalid config; device_error when memory runs out.
  lm_stage(const lm::config& config, stage_span span, device dev, const stream& s, bool carry_state = false);

  const stage_span& span() const noexcept { return span_; }
  const device& get_device() const noexcept { return dev_; }
  bool computes() const noexcept { return computes_; }  // false on sim devices (modelled only)

  /// Names of this stage's parameters, in PyTorch order.
  const std::vector<std::string>& names() const noexcept { return names_; }
  tensor& value(std::size_t i) { return values_[i]; }
  tensor& grad(std::size_t i) { return grads_[i]; }
  std::size_t count(std::size_t i) const { return static_cast<std::size_t>(values_[i].numel()); }
  /// Parameter `i`'s values, copied to the host through `s` (blocks until the copy is done).
  std::vector<float> read_value(std::size_t i, const stream& s) const;
  /// Overwrites parameter `i` with `values` (count(i) of them) through `s`.
  void write_value(std::size_t i, std::span<const float> values, const stream& s);

  /// Tokens and targets of micro-batch `mb` for this step ([T, Bm], seq-major), stage 0 / last;
  /// copied to the device on `s`.
  void set_tokens(std::size_t mb, const std::vector<std::int32_t>& tokens, const stream& s);
  void set_targets(std::size_t mb, const std::vector<std::int32_t>& targets, const stream& s);

  /// Where unit (mb, chunk)'s input activation (stages after the first) and output gradient
  /// (stages before the last) live for this step: the producer's buffer when readable in place,
  /// else a copy of it in this stage's memory.
  void set_input(std::size_t mb, std::size_t chunk, const float* x) { input_[unit(mb, chunk)] = x; }
  void set_output_grad(std::size_t mb, std::size_t chunk, const float* dy) { dout_[unit(mb, chunk)] = dy; }

  /// The output activation of (mb, chunk) ([Tc, Bm, H]) and the input gradient sent back
  /// ([Tc, Bm, input of the first layer]); invalid tensors on sim devices.
  tensor output(std::size_t mb, std::size_t chunk) const { return computes_ ? y_[unit(mb, chunk)].back() : tensor{}; }
  tensor input_grad(std::size_t mb, std::size_t chunk) const { return computes_ ? dx_out_[unit(mb, chunk)] : tensor{}; }

  /// The training step the next forward and backward work items belong to: dropout's masks
  /// (config::dropout) are drawn from it.
  void set_step(std::uint64_t step) noexcept { step_ = step; }

  /// Work items (cpu and cuda: the math; sim: its cost).
  kernel_work forward_work(std::size_t mb, std::size_t chunk);
  kernel_work backward_work(std::size_t mb, std::size_t chunk);
  /// Enqueues on `s` the sum of squared gradients and the step's loss; read sq_norm() and
  /// loss_sum() once the work has completed.
  void enqueue_norm(const stream& s);
  /// Multiplies every gradient by `scale` (before a push to the kvstore).
  kernel_work scale_work(double scale);
  /// Zeroes every gradient (after the kvstore applied them).
  kernel_work zero_grad_work();
  /// Zeroes the carried recurrent state (no-op without carry_state).
  kernel_work zero_state_work();
  /// carry_state: the (h, c) each stage layer carries into the next step, copied to the host
  /// through `s` (blocks): per stage layer, h then c, each [micro-batches x Bm, H] (this stage's
  /// columns in micro-batch order). Empty without carry_state or on sim devices.
  std::vector<float> read_state(const stream& s) const;
  /// Overwrites that state with `values` (the layout of read_state) through `s`.
  void write_state(std::span<const float> values, const stream& s);
  double sq_norm() const noexcept;
  double loss_sum() const noexcept;  // last stage: summed cross-entropy of the step
  /// Fault injection: the `n`-th forward/backward work item from now throws (0: never).
  void fail_after(std::size_t n) noexcept {
    fail_at_ = n;
    work_count_ = 0;
  }

private:
  template <class Ops>
  void forward_math(const Ops& ops, std::size_t mb, std::size_t chunk, std::uint64_t step);
  template <class Ops>
  void backward_math(const Ops& ops, std::size_t mb, std::size_t chunk, std::uint64_t step);
  /// Dropout of site `site` (config::dropout) on unit (mb, chunk)'s [Tc, Bm, dim] activation
  /// `x` into `y` (may be x); forward and backward alike.
  template <class Ops>
  void drop(const Ops& ops, std::uint64_t step, std::size_t site, std::size_t mb, std::size_t chunk,
            std::size_t dim, const float* x, float* y) const;
  template <class Ops>
  void norm_math(const Ops& ops);
  template <class Ops>
  void zero_state_math(const Ops& ops);

  // The constructor's steps: the parameters (and their gradients), then on devices that compute
  // the activations per unit, the carried state, the workspaces and the step's scalars.
  void make_parameters(stream& s);
  void make_activations(stream& s);
  void make_carried_state(stream& s);
  void make_workspaces(stream& s);

  std::size_t unit(std::size_t mb, std::size_t chunk) const noexcept { return mb * config_.chunks + chunk; }
  std::size_t layer_input(std::size_t layer) const noexcept { return layer == 0 ? config_.embed : config_.hidden; }
  tensor floats(std::size_t n, const stream& s);
  /// The step's scalars on the device: one loss per unit, then the gradient norm (doubles).
  double* scalar_slot(std::size_t i) const;
  void maybe_fail();

  lm::config config_;
  stage_span span_;
  device dev_;
  bool computes_;
  std::size_t bm_, tc_;
  std::uint64_t step_ = 0;

  std::vector<std::string> names_;
  std::vector<tensor> values_, grads_;
  std::size_t emb_index_ = 0, dec_w_index_ = 0, dec_b_index_ = 0;
  std::vector<std::size_t> layer_index_;  // first of the four parameters of each stage layer

  std::vector<tensor> tokens_, targets_;                     // per micro-batch, int32 [T, Bm]
  std::vector<const float*> input_, dout_;                   // per unit
  std::vector<tensor> emb_out_;                              // per unit [Tc, Bm, E]
  std::vector<std::vector<tensor>> y_, reserve_, h_, c_;     // per unit, per stage layer
  std::vector<tensor> dtop_;                                 // last stage: dh of the top layer, per unit
  std::vector<tensor> dx_out_;                               // per unit: gradient for the previous stage
  std::vector<std::vector<tensor>> carry_;                   // per (mb, layer): dh/dc x2 parities
  bool carry_state_ = false;
  std::vector<std::vector<tensor>> state_h_, state_c_;       // carry_state: per micro-batch, per stage layer
  tensor dx_a_, dx_b_, workspace_, ce_workspace_, norm_workspace_;
  tensor scalars_;                                           // (units + 1) doubles on the device
  std::vector<double> host_scalars_;                         // their host copy (cuda)
  std::atomic<std::size_t> fail_at_{0}, work_count_{0};
};

}  // namespace strata::lm
