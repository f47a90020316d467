// A model of your own on strata's pipeline: a small MLP split into two stages over cpu:2, trained
// with GPipe and 1F1B on data it makes itself, checked against the same training on one device.
// The tutorial that walks through this file: docs/pipeline.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "strata/device/all.hpp"
#include "strata/pipeline/stage_actor.hpp"
#include "strata/strata.hpp"

namespace {

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
      w_.push_back(w);
      gw_.emplace_back(w.size(), 0.0f);
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
                  a[l - first_ + 1] = dense(a[l - first_], w_[l - first_], widths[l], widths[l + 1]);
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
                  auto& w = w_[l - first_];
                  std::vector<float> dn(rows * n, 0.0f);
                  for (std::size_t r = 0; r < rows; ++r)
                    for (std::size_t i = 0; i < n; ++i)
                      for (std::size_t j = 0; j < m; ++j) {
                        gw_[l - first_][i * m + j] += a[l - first_][r * n + i] * d[r * m + j];
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
  void update(const std::vector<double>&, strata::stream& s) {
    s.launch({.name = "sgd", .cpu = [this] {
                for (std::size_t l = 0; l < w_.size(); ++l)
                  for (std::size_t i = 0; i < w_[l].size(); ++i) w_[l][i] -= lr * std::exchange(gw_[l][i], 0.0f);
              }});
  }
  std::vector<float> weights() const {  // read after the stream has completed
    std::vector<float> all;
    for (const auto& w : w_) all.insert(all.end(), w.begin(), w.end());
    return all;
  }

private:
  strata::tensor tensor_of(std::size_t width, strata::stream& s) {
    return strata::tensor::empty({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(width)},
                                 strata::dtype::float32, dev_, s);
  }
  const float* input(std::size_t mb) const {
    return first_ == 0 ? data_.data() + mb * rows * widths[0] : x_[mb].data<float>();
  }
  static std::vector<float> dense(const std::vector<float>& x, const std::vector<float>& w, std::size_t n, std::size_t m) {
    std::vector<float> y(rows * m, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < m; ++j) y[r * m + j] += x[r * n + i] * w[i * m + j];
    return y;
  }

  std::size_t first_, last_;
  strata::device dev_;
  std::vector<std::vector<float>> w_, gw_;
  std::vector<strata::tensor> y_, dx_, x_, dy_;
  std::vector<std::vector<std::vector<float>>> act_;  // per micro-batch: each layer's input, then the output
  std::vector<float> data_, targets_;
  double loss_ = 0;
};

}  // namespace

int main() {
  namespace sp = strata::pipeline;
  // Data the program makes itself: targets are a fixed smooth function of the inputs.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(batch * widths.front()), t(batch * widths.back());
  for (auto& v : x) v = u(rng);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t j = 0; j < widths.back(); ++j) t[r * widths.back() + j] = std::sin(x[r * widths.front() + j] * 2.0f);

  // One device: the whole MLP as one stage, its micro-batches forward and backward in order.
  auto one = strata::make_devices("cpu:1");
  auto s = one[0].create_stream();
  mlp_stage whole(0, widths.size() - 1, one[0], s);
  whole.set_data(x, t);
  for (std::size_t step = 0; step < steps; ++step) {
    for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.forward(mb, 0, s);
    for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.backward(mb, 0, s);
    whole.update({}, s);
  }
  s.synchronize();
  const auto reference = whole.weights();

  // The same training on two stages (layers 0-1 and 2-3), with each schedule.
  strata::actor_system system;
  auto devices = strata::make_devices("cpu:2");
  bool ok = true;
  for (auto schedule : {sp::schedule_kind::gpipe, sp::schedule_kind::one_f_one_b}) {
    auto plan = sp::make_plan(schedule, 2, static_cast<int>(micro_batches));
    std::vector<std::shared_ptr<sp::stage_context>> contexts;
    std::vector<std::shared_ptr<mlp_stage>> stages;
    for (int i = 0; i < 2; ++i) {
      contexts.push_back(std::make_shared<sp::stage_context>(i, devices[static_cast<std::size_t>(i)]));
      auto compute = contexts.back()->compute();
      stages.push_back(std::make_shared<mlp_stage>(i == 0 ? 0 : 2, i == 0 ? 2 : 4, devices[static_cast<std::size_t>(i)], compute));
    }
    stages[0]->set_data(x, {});
    stages[1]->set_data({}, t);
    auto actors = sp::spawn_pipeline(system, plan, contexts, stages);
    for (std::size_t step = 0; step < steps; ++step) {
      auto r = system.request<sp::step_outcome>(actors.driver, std::chrono::minutes(1), sp::run_step{}).get();
      if (!r) {
        std::fprintf(stderr, "custom_pipeline: %s\n", r.error().message().c_str());
        return 1;
      }
      std::printf("%s step %zu: loss %.6f\n", sp::to_string(schedule), step + 1, r->reports[1].at(0));
    }
    system.stop(actors.supervisor);
    system.stop(actors.driver);
    auto split = stages[0]->weights(), tail = stages[1]->weights();
    split.insert(split.end(), tail.begin(), tail.end());
    double diff = 0;
    for (std::size_t i = 0; i < split.size(); ++i) diff = std::max(diff, std::abs(double(split[i]) - reference[i]));
    std::printf("%s: max |diff| vs one device %.3g\n", sp::to_string(schedule), diff);
    ok = ok && split.size() == reference.size() && diff <= 1e-5;
  }
  return ok ? 0 : 1;
}
