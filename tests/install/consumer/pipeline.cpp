// A user's own stage model on strata::pipeline, and the kvstore and simulator beside it, written
// with designated initialisers where docs/pipeline.md, docs/runtime.md and docs/kvstore.md use
// them. The consumer project builds this with -Wall -Wextra -Werror and strata's headers not
// treated as system headers: a public aggregate whose omitted member warns
// (-Wmissing-field-initializers) fails the build.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <strata/device/all.hpp>
#include <strata/kvstore/kvstore.hpp>
#include <strata/pipeline/partitioner.hpp>
#include <strata/pipeline/plan.hpp>
#include <strata/pipeline/simulator.hpp>
#include <strata/pipeline/stage_actor.hpp>
#include <strata/strata.hpp>

namespace {

constexpr std::size_t micro_batches = 2, width = 4;

/// Stage s adds s + 1 to its input (stage 0's input: zeros); backward passes the gradient on. The
/// last stage reports the sum of its outputs.
class add_stage {
public:
  add_stage(float add, bool last, strata::device dev, strata::stream& s) : add_(add), last_(last), dev_(std::move(dev)) {
    const std::vector<float> zeros(width, 0.0f);
    for (std::size_t mb = 0; mb < micro_batches; ++mb) {
      y_.push_back(strata::tensor::from_host<float>(std::span<const float>(zeros), dev_, s));
      dx_.push_back(strata::tensor::from_host<float>(std::span<const float>(zeros), dev_, s));
      x_.push_back(strata::tensor::from_host<float>(std::span<const float>(zeros), dev_, s));  // stage 0's input
      dy_.push_back(strata::tensor::from_host<float>(std::span<const float>(zeros), dev_, s));
    }
  }
  void forward(std::size_t mb, std::size_t, strata::stream& s) {
    s.launch({.name = "add", .flops = double(width), .cpu = [this, mb] {
                for (std::size_t i = 0; i < width; ++i) y_[mb].data<float>()[i] = x_[mb].data<float>()[i] + add_;
              }});
  }
  void backward(std::size_t mb, std::size_t, strata::stream& s) {
    s.launch({.name = "pass", .cpu = [this, mb] {
                for (std::size_t i = 0; i < width; ++i) dx_[mb].data<float>()[i] = last_ ? 1.0f : dy_[mb].data<float>()[i];
              }});
  }
  strata::tensor output(std::size_t mb, std::size_t) const { return y_[mb]; }
  strata::tensor input_grad(std::size_t mb, std::size_t) const { return dx_[mb]; }
  void accept_input(std::size_t mb, std::size_t, const strata::tensor& t, strata::stream&) { x_[mb] = t; }
  void accept_output_grad(std::size_t mb, std::size_t, const strata::tensor& t, strata::stream&) { dy_[mb] = t; }
  void end_compute(strata::stream& s) {
    s.launch({.name = "sum", .kind = strata::work_kind::pointwise, .cpu = [this] {
                sum_ = 0;
                for (const auto& y : y_)
                  for (std::size_t i = 0; i < width; ++i) sum_ += y.data<float>()[i];
              }});
  }
  std::vector<double> report() const { return {sum_}; }

private:
  float add_;
  bool last_;
  strata::device dev_;
  std::vector<strata::tensor> y_, dx_, x_, dy_;
  double sum_ = 0;
};

/// Two stages, one step: the last stage's outputs are 0 + 1 + 2 = 3 everywhere.
bool a_pipeline_steps(strata::actor_system& sys, std::vector<strata::device>& devices) {
  namespace sp = strata::pipeline;
  auto plan = sp::make_plan(sp::schedule_kind::one_f_one_b, 2, static_cast<int>(micro_batches));
  std::vector<std::shared_ptr<sp::stage_context>> contexts;
  std::vector<std::shared_ptr<add_stage>> models;
  for (int s = 0; s < 2; ++s) {
    contexts.push_back(std::make_shared<sp::stage_context>(s, devices[static_cast<std::size_t>(s)]));
    auto compute = contexts.back()->compute();
    models.push_back(std::make_shared<add_stage>(float(s + 1), s == 1, devices[static_cast<std::size_t>(s)], compute));
  }
  const sp::pipeline_options options{
      .stage_name = "consumer-stage",
      .driver_name = "consumer-driver",
      .restarts = strata::restart_policy{.max_restarts = 1, .strategy = strata::restart_strategy::all_for_one}};
  auto p = sp::spawn_pipeline(sys, plan, contexts, models, options);
  auto outcome = sys.request<sp::step_outcome>(p.driver, std::chrono::seconds(30), sp::run_step{}).get();
  sys.stop(p.driver);
  sys.stop(p.supervisor);
  for (const auto& c : contexts) c->compute().synchronize();
  if (!outcome) {
    std::fprintf(stderr, "consumer: the pipeline step failed: %s\n", outcome.error().message().c_str());
    return false;
  }
  const double expected = 3.0 * width * micro_batches;
  if (outcome->reports.back().at(0) != expected) {
    std::fprintf(stderr, "consumer: the pipeline's last stage summed %g, expected %g\n", outcome->reports.back().at(0), expected);
    return false;
  }
  return true;
}

/// One key, one SGD step through the kvstore: 1 - 0.5 * 1 = 0.5.
bool a_kvstore_updates(strata::actor_system& sys, strata::device& dev) {
  auto s = dev.create_stream();
  const std::vector<float> ones(width, 1.0f), zeros(width, 0.0f);
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, strata::kvstore::options{.name = "consumer-store"}));
  auto w = strata::tensor::from_host<float>(std::span<const float>(ones), dev, s);
  auto g = strata::tensor::from_host<float>(std::span<const float>(ones), dev, s);
  auto out = strata::tensor::from_host<float>(std::span<const float>(zeros), dev, s);
  bool ok = kv.init("w", w).get().has_value() && kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.5}).get().has_value() &&
            kv.send(strata::kvstore::push{.keys = {"w"}, .values = {g}}).get().has_value();
  auto pulled = kv.send(strata::kvstore::pull{.keys = {"w"}, .outs = {out}}).get();
  sys.stop(kv.store());
  if (!ok || !pulled) {
    std::fprintf(stderr, "consumer: the kvstore refused a request\n");
    return false;
  }
  s.wait(pulled->front().ready_event());
  const auto value = pulled->front().to_host<float>(s);
  if (value != std::vector<float>(width, 0.5f)) {
    std::fprintf(stderr, "consumer: the kvstore's SGD gave %g, expected 0.5\n", double(value.front()));
    return false;
  }
  return true;
}

/// GPipe on two stages on two ranks, the link between them costing 1 ms: simulated step 4 + 2 ms.
bool a_plan_simulates_with_a_link() {
  namespace sp = strata::pipeline;
  auto costs = sp::with_links(sp::cost_model{.forward = {1e-3, 1e-3}, .backward = {1e-3, 1e-3}},
                              sp::rank_placement{.ranks = {0, 1}, .num_ranks = 2}, {1e6},
                              sp::link_model{.latency_s = 0.5e-3, .bytes_per_s = 2e9});
  if (!costs) return false;
  auto sim = sp::simulate(sp::make_plan(sp::schedule_kind::gpipe, 2, 1), *costs);
  return sim && sim->makespan > 4e-3;
}

}  // namespace

bool pipeline_kvstore_and_simulator_work(strata::actor_system& sys) {
  auto devices = strata::make_devices("cpu:2");
  return a_pipeline_steps(sys, devices) && a_kvstore_updates(sys, devices[0]) && a_plan_simulates_with_a_link();
}
