// strata-trace on a traced pipeline of a model that is not the LM: a stage model of the test's own
// on the generic stage actor, 4 stages sharing 2 cpu devices (1F1B, 4 micro-batches, 2 steps).
// The stage actor records the model's device work, so the summary counts the micro-batches,
// measures the bubble over the 2 devices the stages share, and the export and timeline show each
// stage's work by micro-batch.

#define BOOST_TEST_MODULE strata_trace_custom_pipeline
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/device/all.hpp"
#include "strata/pipeline/stage_actor.hpp"
#include "strata/strata.hpp"
#include "strata/trace_tools/trace_model.hpp"
#include "strata/trace_tools/trace_reader.hpp"
#include "trace_views.hpp"

namespace sp = strata::pipeline;
namespace tt = strata::trace_tools;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr int stages = 4, micro_batches = 4, steps = 2;
constexpr std::int64_t width = 4096;

/// y = x + 1 over `width` floats per micro-batch (enough work to show on the device tracks);
/// backward passes the gradient through. Local update: nothing to update.
class add_stage {
public:
  add_stage(strata::device dev, strata::stream& s) {
    for (int mb = 0; mb < micro_batches; ++mb) {
      y_.push_back(strata::tensor::empty({width}, strata::dtype::float32, dev, s));
      dx_.push_back(strata::tensor::empty({width}, strata::dtype::float32, dev, s));
    }
    x_.resize(micro_batches);
  }
  void forward(std::size_t mb, std::size_t, strata::stream& s) {
    s.launch({.name = "add", .cpu = [this, mb] {
                float* y = y_[mb].data<float>();
                for (std::int64_t i = 0; i < width; ++i) y[i] = (x_[mb].valid() ? x_[mb].data<float>()[i] : 0.0f) + 1.0f;
              }});
  }
  void backward(std::size_t mb, std::size_t, strata::stream& s) {
    s.launch({.name = "pass", .cpu = [this, mb] {
                float* dx = dx_[mb].data<float>();
                for (std::int64_t i = 0; i < width; ++i) dx[i] = 1.0f;
              }});
  }
  strata::tensor output(std::size_t mb, std::size_t) const { return y_[mb]; }
  strata::tensor input_grad(std::size_t mb, std::size_t) const { return dx_[mb]; }
  void accept_input(std::size_t mb, std::size_t, const strata::tensor& t, strata::stream&) { x_[mb] = t; }
  void accept_output_grad(std::size_t, std::size_t, const strata::tensor&, strata::stream&) {}
  void update(const std::vector<double>&, strata::stream&) {}

private:
  std::vector<strata::tensor> y_, dx_, x_;
};

struct custom_trace {
  std::string path;
  tt::trace_file file;
  custom_trace() {
    path = (std::filesystem::temp_directory_path() / ("strata-trace-custom-" + std::to_string(::getpid()) + ".strace")).string();
    auto devices = strata::make_devices("cpu:2");
    std::vector<std::shared_ptr<sp::stage_context>> contexts;
    std::vector<std::shared_ptr<add_stage>> models;
    {
      strata::actor_system sys(strata::system_config{.worker_threads = 1, .trace_file = path});
      for (int s = 0; s < stages; ++s) {
        contexts.push_back(std::make_shared<sp::stage_context>(s, devices[static_cast<std::size_t>(s % 2)]));
        auto compute = contexts.back()->compute();
        models.push_back(std::make_shared<add_stage>(devices[static_cast<std::size_t>(s % 2)], compute));
      }
      auto actors = sp::spawn_pipeline(sys, sp::make_plan(sp::schedule_kind::one_f_one_b, stages, micro_batches), contexts, models);
      for (int k = 0; k < steps; ++k) {
        auto r = sys.request<sp::step_outcome>(actors.driver, 30s, sp::run_step{}).get();
        if (!r) throw std::runtime_error(r.error().to_string());
      }
      auto report = sys.shutdown();
      if (!report.trace_error.empty()) throw std::runtime_error(report.trace_error);
    }
    for (auto& c : contexts) c->compute().synchronize();
    auto r = tt::read_trace(path);
    if (!r.ok()) throw std::runtime_error(r.error);
    file = std::move(r.trace);
  }
  ~custom_trace() { std::filesystem::remove(path); }
};

const custom_trace& the_trace() {
  static custom_trace t;
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_summary_counts_the_micro_batches_and_takes_the_bubble_over_the_shared_devices) {
  auto m = tt::build_model(the_trace().file);
  const json s = tt::summary_json(m);
  const auto& p = s["pipeline"];
  BOOST_REQUIRE(!p.is_null());
  BOOST_TEST(p["source"] == "device");
  BOOST_TEST(p["stages"].get<int>() == stages);
  BOOST_TEST(p["devices"].get<int>() == 2);
  BOOST_TEST(p["micro_batches"].get<int>() == micro_batches);
  BOOST_REQUIRE(p["per_stage"].size() == static_cast<std::size_t>(stages));
  for (int stage = 0; stage < stages; ++stage) {
    const auto& st = p["per_stage"][static_cast<std::size_t>(stage)];
    BOOST_TEST_CONTEXT("stage " << stage) {
      BOOST_TEST(st["stage"].get<int>() == stage);
      // One slice per unit: micro-batches x steps forwards and backwards.
      BOOST_TEST(st["forward_slices"].get<int>() == micro_batches * steps);
      BOOST_TEST(st["backward_slices"].get<int>() == micro_batches * steps);
      BOOST_TEST(st["busy_ns"].get<std::uint64_t>() > 0u);
    }
  }
  // Busy of each device is the union of its stages' work; the bubble is over 2 devices, not 4.
  std::uint64_t device_busy = 0;
  for (const auto& d : p["per_device"]) device_busy += d["busy_ns"].get<std::uint64_t>();
  const double wall = static_cast<double>(p["wall_ns"].get<std::uint64_t>());
  BOOST_TEST(p["bubble"].get<double>() == 1.0 - static_cast<double>(device_busy) / (2.0 * wall),
             boost::test_tools::tolerance(1e-9));
  std::ostringstream text;
  tt::print_summary(s, text);
  BOOST_TEST(text.str().find("4 micro-batches") != std::string::npos, text.str());
  BOOST_TEST(text.str().find("4 stages on 2 devices") != std::string::npos, text.str());
}

BOOST_AUTO_TEST_CASE(the_export_and_timeline_show_each_stages_work_by_micro_batch) {
  auto m = tt::build_model(the_trace().file);
  const json doc = tt::chrome_trace(m);
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e.contains("args") && e["args"].contains("micro_batch")) names.insert(e["name"].get<std::string>());
  for (int mb = 0; mb < micro_batches; ++mb) {
    BOOST_TEST(names.count("forward mb " + std::to_string(mb) + " chunk 0") == 1u);
    BOOST_TEST(names.count("backward mb " + std::to_string(mb) + " chunk 0") == 1u);
  }
  const std::string svg = tt::timeline_svg(m);
  for (int stage = 0; stage < stages; ++stage)
    BOOST_TEST(svg.find("stage " + std::to_string(stage) + " device, stream") != std::string::npos);
  BOOST_TEST(svg.find("forward, micro-batch 0") != std::string::npos);
}
