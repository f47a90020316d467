#pragma once
// The math of one pipeline stage of the LSTM language model: parameters, gradients and every
// activation buffer of one training step, allocated once; forward/backward of one
// (micro-batch, chunk) unit as device work items. Private to strata::actors.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/actors/lm_config.hpp"
#include "strata/device/device.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/device/work.hpp"

namespace strata::lm {

/// What one layer's work item costs in the sim model: FLOPs and bytes read plus written. lm_stage
/// sums these per stage; measure_layer_costs (lm_costs.cpp) submits them per layer on sim devices.
struct work_cost {
  double flops = 0;
  double bytes = 0;
};
/// One LSTM layer over `steps` timesteps of `batch` rows with `input` inputs.
work_cost lstm_forward_cost(std::size_t steps, std::size_t batch, std::size_t input, std::size_t hidden);
work_cost lstm_backward_cost(std::size_t steps, std::size_t batch, std::size_t input, std::size_t hidden);
/// The fused decoder + cross-entropy forward and backward over `rows` rows.
work_cost decoder_cost(std::size_t rows, std::size_t hidden, std::size_t vocab);

class lm_stage {
public:
  /// Parameters and gradients are tensors on `dev`, allocated on `s` (cpu: filled at once).
  lm_stage(const lm_config& config, stage_span span, device dev, const stream& s);

  const stage_span& span() const noexcept { return span_; }
  bool computes() const noexcept { return computes_; }  // false on sim devices (modelled only)

  /// Names of this stage's parameters, in PyTorch order.
  const std::vector<std::string>& names() const noexcept { return names_; }
  tensor& value(std::size_t i) { return values_[i]; }
  tensor& grad(std::size_t i) { return grads_[i]; }
  /// Host pointers (cpu devices only).
  float* value_data(std::size_t i) { return values_[i].data<float>(); }
  float* grad_data(std::size_t i) { return grads_[i].data<float>(); }
  std::size_t count(std::size_t i) const { return static_cast<std::size_t>(values_[i].numel()); }

  /// Tokens and targets of micro-batch `mb` for this step ([T, Bm], seq-major), stage 0 / last.
  void set_tokens(std::size_t mb, std::vector<std::int32_t> tokens) { tokens_[mb] = std::move(tokens); }
  void set_targets(std::size_t mb, std::vector<std::int32_t> targets) { targets_[mb] = std::move(targets); }

  /// Where unit (mb, chunk)'s input activation lives (stages after the first): a pointer into
  /// the previous stage's output buffer, valid for the whole step.
  void set_input(std::size_t mb, std::size_t chunk, const float* x) { input_[unit(mb, chunk)] = x; }
  void set_output_grad(std::size_t mb, std::size_t chunk, const float* dy) { dout_[unit(mb, chunk)] = dy; }

  /// The output activation of (mb, chunk) ([Tc, Bm, H]) and the input gradient sent back.
  const float* output(std::size_t mb, std::size_t chunk) const { return y_[unit(mb, chunk)].back().data(); }
  const float* input_grad(std::size_t mb, std::size_t chunk) const { return dx_out_[unit(mb, chunk)].data(); }

  /// Work items (cpu: the math; sim: its cost).
  kernel_work forward_work(std::size_t mb, std::size_t chunk);
  kernel_work backward_work(std::size_t mb, std::size_t chunk);
  /// Sum of squared gradients into `sq_norm()`; zero gradients; apply `scale` and SGD.
  kernel_work norm_work();
  kernel_work update_work(double scale, double lr);
  /// Multiplies every gradient by `scale` (before a push to the kvstore).
  kernel_work scale_work(double scale);
  /// Zeroes every gradient (after the kvstore applied them).
  kernel_work zero_grad_work();
  double sq_norm() const noexcept { return sq_norm_; }
  /// Fault injection: the `n`-th forward/backward work item from now throws (0: never).
  void fail_after(std::size_t n) noexcept {
    fail_at_ = n;
    work_count_ = 0;
  }
  double loss_sum() const noexcept { return loss_sum_; }  // last stage: summed cross-entropy of the step

private:
  std::size_t unit(std::size_t mb, std::size_t chunk) const noexcept { return mb * config_.chunks + chunk; }
  std::size_t layer_input(std::size_t layer) const noexcept { return layer == 0 ? config_.embed : config_.hidden; }
  void forward_math(std::size_t mb, std::size_t chunk);
  void backward_math(std::size_t mb, std::size_t chunk);

  lm_config config_;
  stage_span span_;
  device dev_;
  bool computes_;
  std::size_t bm_, tc_;

  std::vector<std::string> names_;
  std::vector<tensor> values_, grads_;
  std::size_t emb_index_ = 0, dec_w_index_ = 0, dec_b_index_ = 0;
  std::vector<std::size_t> layer_index_;  // first of the four parameters of each stage layer

  std::vector<std::vector<std::int32_t>> tokens_, targets_;  // per micro-batch
  std::vector<const float*> input_, dout_;                   // per unit
  std::vector<std::vector<float>> emb_out_;                  // per unit [Tc, Bm, E]
  std::vector<std::vector<std::vector<float>>> y_, reserve_, h_, c_;  // per unit, per stage layer
  std::vector<std::vector<float>> dtop_;                     // last stage: dh of the top layer, per unit
  std::vector<std::vector<float>> dx_out_;                   // per unit: gradient for the previous stage
  std::vector<std::vector<std::vector<float>>> carry_;       // per (mb, layer): dh/dc x2 parities
  std::vector<float> dx_a_, dx_b_, workspace_, ce_workspace_;
  std::vector<double> unit_loss_;
  double sq_norm_ = 0;
  double loss_sum_ = 0;
  std::atomic<std::size_t> fail_at_{0}, work_count_{0};
  void maybe_fail();
};

}  // namespace strata::lm
