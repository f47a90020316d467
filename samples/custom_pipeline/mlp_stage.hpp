#pragma once
// The stage model of samples/custom_pipeline: dense layers [first, last) of a small MLP, written
// against strata::pipeline's stage_model concept (docs/pipeline.md, the tutorial).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "strata/device/all.hpp"

namespace custom_pipeline {

constexpr std::size_t batch = 32, micro_batches = 4, rows = batch / micro_batches, steps = 5;
constexpr float lr = 0.1f;
const std::vector<std::size_t> widths = {8, 32, 32, 16, 4};  // input, hidden..., output

/// Dense layers [first, last) of the MLP: tanh after each hidden layer; the last stage computes
/// the mean squared error. Every touch of the data happens in work on the stage's stream.
class mlp_stage {
public:
  mlp_stage(std::size_t first, std::size_t last, strata::device dev, strata::stream& s)
      : first_(first), last_(last), dev_(std::move(dev)) {
    std::mt19937 rng(7);  // one seed for the whole MLP: each layer gets the same weights anywhere
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
      std::normal_distribution<float> init(0.0f, 1.0f / std::sqrt(static_cast<float>(widths[l])));
      std::vector<float> w(widths[l] * widths[l + 1]);
      for (auto& v : w) v = init(rng);
      if (l < first_ || l >= last_) continue;
      w_.push_back(matrix_of(w, widths[l], widths[l + 1], s));
      gw_.push_back(matrix_of(std::vector<float>(w.size(), 0.0f), widths[l], widths[l + 1], s));
    }
    for (std::size_t mb = 0; mb < micro_batches; ++mb) {
      y_.push_back(tensor_of(widths[last_], s));
      dx_.push_back(tensor_of(widths[first_], s));
      act_.emplace_back(last_ - first_ + 1);
    }
    x_.resize(micro_batches);
    dy_.resize(micro_batches);
  }
  bool is_last() const { return last_ + 1 == widths.size(); }
  void set_data(std::vector<float> x, std::vector<float> t) { data_ = std::move(x), targets_ = std::move(t); }

  // ---- the stage_model concept --------------------------------------------------------------
  void forward(std::size_t mb, std::size_t, strata::stream& s) {
    s.launch({.name = "forward", .cpu = [this, mb] {
                auto& a = act_[mb];
                a[0].assign(input(mb), input(mb) + rows * widths[first_]);
                for (std::size_t l = first_; l < last_; ++l) {
                  a[l - first_ + 1] = dense(a[l - first_], w_[l - first_].data<float>(), widths[l], widths[l + 1]);
                  if (l + 2 < widths.size()) for (auto& v : a[l - first_ + 1]) v = std::tanh(v);
                }
                std::copy(a.back().begin(), a.back().end(), y_[mb].data<float>());
              }});
  }
  void backward(std::size_t mb, std::size_t, strata::stream& s) {
    s.launch({.name = "backward", .cpu = [this, mb] {
                auto& a = act_[mb];
                std::vector<float> d(rows * widths[last_]);
                for (std::size_t i = 0; i < d.size(); ++i)  // d loss / d y: MSE over the global batch
                  d[i] = is_last() ? (a.back()[i] - targets_[mb * d.size() + i]) / batch : dy_[mb].data<float>()[i];
                for (std::size_t l = last_; l-- > first_;) {
                  const std::size_t n = widths[l], m = widths[l + 1];
                  if (l + 2 < widths.size())
                    for (std::size_t i = 0; i < d.size(); ++i) d[i] *= 1 - a[l - first_ + 1][i] * a[l - first_ + 1][i];
                  const float* w = w_[l - first_].data<float>();
                  float* gw = gw_[l - first_].data<float>();
                  std::vector<float> dn(rows * n, 0.0f);
                  for (std::size_t r = 0; r < rows; ++r)
                    for (std::size_t i = 0; i < n; ++i)
                      for (std::size_t j = 0; j < m; ++j) {
                        gw[i * m + j] += a[l - first_][r * n + i] * d[r * m + j];
                        dn[r * n + i] += w[i * m + j] * d[r * m + j];
                      }
                  d = std::move(dn);
                }
                std::copy(d.begin(), d.end(), dx_[mb].data<float>());
              }});
  }
  strata::tensor output(std::size_t mb, std::size_t) const { return y_[mb]; }
  strata::tensor input_grad(std::size_t mb, std::size_t) const { return dx_[mb]; }
  void accept_input(std::size_t mb, std::size_t, const strata::tensor& t, strata::stream&) { x_[mb] = t; }
  void accept_output_grad(std::size_t mb, std::size_t, const strata::tensor& t, strata::stream&) { dy_[mb] = t; }
  // Optional: a report for the driver (the loss), and the update (SGD on this stage's layers).
  void end_compute(strata::stream& s) {
    s.launch({.name = "loss", .cpu = [this] {
                loss_ = 0;
                if (!is_last()) return;
                for (std::size_t mb = 0; mb < micro_batches; ++mb)
                  for (std::size_t i = 0; i < rows * widths.back(); ++i) {
                    const double e = act_[mb].back()[i] - targets_[mb * rows * widths.back() + i];
                    loss_ += 0.5 * e * e / batch;
                  }
              }});
  }
  std::vector<double> report() const { return {loss_}; }
  /// After a failed step (the stage actor restarted every stage): the gradients it accumulated go,
  /// so that the next update is that of a run without the failed step.
  void abandon_step(std::uint64_t, strata::stream& s) { zero_gradients(s); }
  void update(const std::vector<double>&, strata::stream& s) {
    s.launch({.name = "sgd", .cpu = [this] {
                for (std::size_t l = 0; l < w_.size(); ++l) {
                  float* w = w_[l].data<float>();
                  float* gw = gw_[l].data<float>();
                  for (std::int64_t i = 0; i < w_[l].numel(); ++i) w[i] -= lr * std::exchange(gw[i], 0.0f);
                }
              }});
  }
  std::vector<float> weights() const {  // read after the stream has completed
    std::vector<float> all;
    for (const auto& w : w_) all.insert(all.end(), w.data<float>(), w.data<float>() + w.numel());
    return all;
  }

protected:
  // For a stage that updates elsewhere (mlp_store_stage.hpp): the layers it owns, each layer's
  // weights and accumulated gradients ([inputs, outputs] tensors on the stage's device).
  std::size_t first_layer() const { return first_; }
  std::size_t layer_count() const { return last_ - first_; }
  const strata::tensor& weight(std::size_t k) const { return w_[k]; }
  const strata::tensor& gradient(std::size_t k) const { return gw_[k]; }
  void zero_gradients(strata::stream& s) {
    s.launch({.name = "zero gradients", .cpu = [this] {
                for (auto& g : gw_) std::fill(g.data<float>(), g.data<float>() + g.numel(), 0.0f);
              }});
  }

private:
  strata::tensor tensor_of(std::size_t width, strata::stream& s) {
    return strata::tensor::empty({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(width)},
                                 strata::dtype::float32, dev_, s);
  }
  const float* input(std::size_t mb) const {
    return first_ == 0 ? data_.data() + mb * rows * widths[0] : x_[mb].data<float>();
  }
  strata::tensor matrix_of(const std::vector<float>& values, std::size_t n, std::size_t m, strata::stream& s) {
    return strata::tensor::from_host<float>(std::span<const float>(values),
                                            {static_cast<std::int64_t>(n), static_cast<std::int64_t>(m)}, dev_, s);
  }
  static std::vector<float> dense(const std::vector<float>& x, const float* w, std::size_t n, std::size_t m) {
    std::vector<float> y(rows * m, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) y[r * m + j] += x[r * n + i] * w[i * m + j];
    return y;
  }

  std::size_t first_, last_;
  strata::device dev_;
  std::vector<strata::tensor> w_, gw_;  // per layer: weights, accumulated gradients
  std::vector<strata::tensor> y_, dx_, x_, dy_;
  std::vector<std::vector<std::vector<float>>> act_;  // per micro-batch: each layer's input, then the output
  std::vector<float> data_, targets_;
  double loss_ = 0;
};

}  // namespace custom_pipeline
