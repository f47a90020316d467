// strata-trace on a trace of a real (tiny) LM pipeline run on cpu:2: the pipeline bubble comes
// from the stages' device tracks (device_begin/device_end on device 1e9 + stage), and the export
// and timeline show the forward and backward work there.

#define BOOST_TEST_MODULE strata_trace_lm_pipeline
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "strata/lm/pipeline.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"
#include "strata/trace_tools/trace_model.hpp"
#include "strata/trace_tools/trace_reader.hpp"
#include "support/lm_test_support.hpp"
#include "trace_views.hpp"

namespace tt = strata::trace_tools;
using nlohmann::json;

namespace {

constexpr int steps = 2;
constexpr std::size_t micro_batches = 2;

/// Two training steps of a tiny LM on two cpu stages (GPipe, 2 micro-batches), traced.
struct lm_trace {
  std::string path;
  tt::trace_file file;
  lm_trace() {
    path = (std::filesystem::temp_directory_path() / ("strata-trace-lm-" + std::to_string(::getpid()) + ".strace")).string();
    const auto c = strata::lm::test::config_of(17, 6, 7, 2, 6, 4, micro_batches);
    {
      strata::actor_system sys(strata::system_config{.worker_threads = 2, .trace_file = path});
      {
        strata::lm::lm_pipeline p(sys, strata::make_devices("cpu:2"), c, strata::pipeline::schedule_kind::gpipe, {1, 1});
        std::mt19937 rng(3);
        std::uniform_int_distribution<std::int32_t> id(0, 16);
        std::vector<std::int32_t> tokens(c.seq * c.batch), targets(c.seq * c.batch);
        for (int s = 0; s < steps; ++s) {
          for (auto& t : tokens) t = id(rng);
          for (auto& t : targets) t = id(rng);
          auto r = p.train_step(tokens, targets);
          if (!r) throw std::runtime_error(r.error().to_string());
        }
      }
      auto report = sys.shutdown();
      if (!report.trace_error.empty()) throw std::runtime_error(report.trace_error);
    }
    auto r = tt::read_trace(path);
    if (!r.ok()) throw std::runtime_error(r.error);
    file = std::move(r.trace);
  }
  ~lm_trace() {
    // STRATA_TEST_KEEP_LM_TRACE=FILE keeps a copy (for looking at it with strata-trace).
    if (const char* keep = std::getenv("STRATA_TEST_KEEP_LM_TRACE"); keep != nullptr && *keep != '\0')
      std::filesystem::copy_file(path, keep, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::remove(path);
  }
};

const lm_trace& the_trace() {
  static lm_trace t;
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lm_pipeline_trace)

BOOST_AUTO_TEST_CASE(the_bubble_of_a_traced_lm_pipeline_comes_from_its_stage_device_tracks) {
  auto m = tt::build_model(the_trace().file);
  const json s = tt::summary_json(m);
  const auto& p = s["pipeline"];
  BOOST_REQUIRE(!p.is_null());
  BOOST_TEST(p["source"] == "device");
  BOOST_TEST(p["stages"].get<int>() == 2);
  BOOST_REQUIRE(p["per_stage"].size() == 2u);
  std::uint64_t busy_total = 0;
  for (int stage = 0; stage < 2; ++stage) {
    const auto& st = p["per_stage"][static_cast<std::size_t>(stage)];
    BOOST_TEST_CONTEXT("stage " << stage) {
      BOOST_TEST(st["stage"].get<int>() == stage);
      BOOST_TEST(st["actor"].get<std::string>().rfind("stage-" + std::to_string(stage), 0) == 0u);
      BOOST_TEST(st["device"].get<std::uint64_t>() == tt::stage_device_base + static_cast<std::uint64_t>(stage));
      // GPipe: one forward and one backward work item per micro-batch and step.
      BOOST_TEST(st["forward_slices"].get<std::size_t>() >= micro_batches * steps);
      BOOST_TEST(st["backward_slices"].get<std::size_t>() >= micro_batches * steps);
      BOOST_TEST(st["busy_ns"].get<std::uint64_t>() > 0u);
      busy_total += st["busy_ns"].get<std::uint64_t>();
    }
  }
  const double bubble = p["bubble"].get<double>();
  BOOST_TEST(bubble >= 0.0);
  BOOST_TEST(bubble < 1.0);
  BOOST_TEST(p["busy_ns"].get<std::uint64_t>() == busy_total);
  BOOST_TEST(p["wall_ns"].get<std::uint64_t>() * 2 >= busy_total);

  std::ostringstream text;
  tt::print_summary(s, text);
  BOOST_TEST(text.str().find("busy = device work of each stage's device track") != std::string::npos);
  BOOST_TEST(text.str().find("stage-1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_export_and_timeline_show_forward_and_backward_work_on_stage_device_tracks) {
  auto m = tt::build_model(the_trace().file);
  const json doc = tt::chrome_trace(m);
  std::map<std::uint64_t, std::string> device_track_names;
  std::map<std::uint64_t, std::set<std::string>> work_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["pid"] != 2) continue;
    if (e["ph"] == "M" && e["name"] == "thread_name") device_track_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X") {
      work_names[e["tid"]].insert(e["name"].get<std::string>());
      BOOST_TEST(e["args"].contains("pipeline_stage"));
    }
  }
  std::set<int> stages_seen;
  for (const auto& [tid, name] : device_track_names) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(name.rfind("stage ", 0) == 0u);
      const int stage = std::stoi(name.substr(6));
      stages_seen.insert(stage);
      BOOST_TEST(name.find("device #" + std::to_string(tt::stage_device_base + static_cast<std::uint64_t>(stage))) != std::string::npos);
      // The stage actor names each unit of work by its micro-batch and chunk.
      BOOST_TEST(work_names[tid].count("forward mb 0 chunk 0") == 1u);
      BOOST_TEST(work_names[tid].count("backward mb 0 chunk 0") == 1u);
      for (const auto& n : work_names[tid])
        BOOST_TEST((n.rfind("forward mb ", 0) == 0 || n.rfind("backward mb ", 0) == 0 || n == "update"), n);
    }
  }
  BOOST_TEST((stages_seen == std::set<int>{0, 1}));

  const std::string svg = tt::timeline_svg(m);
  BOOST_TEST(svg.find("stage 0 device, stream") != std::string::npos);
  BOOST_TEST(svg.find("stage 1 device, stream") != std::string::npos);
  BOOST_TEST(svg.find("forward, micro-batch 0") != std::string::npos);
  BOOST_TEST(svg.find("backward, micro-batch 0") != std::string::npos);
  // Stage rows come in stage order: stage 0's device row before stage 1's.
  BOOST_TEST(svg.find("stage 0 device, stream") < svg.find("stage 1 device, stream"));
}

BOOST_AUTO_TEST_SUITE_END()
