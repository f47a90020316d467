// strata-trace on pipeline traces built in memory, with known intervals (no timing, no runtime):
// stage device work named "forward mb M chunk C" (the generic stage actor's contract,
// docs/trace-format.md), stages sharing devices through `pipeline.device` tags, and the LM's
// older plain names.
//
// Contract: micro-batches are counted from the work names when no handler is tagged; the
// measured bubble is 1 - sum(device busy) / (devices x wall) with a device's busy the union of
// the work of all its stages, which is the old 1 - sum(stage busy) / (stages x wall) when each
// stage has a device of its own; the export and the timeline show the work under the stage rows.
#define BOOST_TEST_MODULE strata_trace_pipeline
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "strata/trace_tools/trace_model.hpp"
#include "strata/trace_tools/trace_reader.hpp"
#include "trace_views.hpp"

namespace tt = strata::trace_tools;
using nlohmann::json;
using strata::trace::event_kind;

namespace {

constexpr std::uint32_t cuda0 = (1u << 16) | 0u;  // pipeline.device keys: (kind << 16) | ordinal
constexpr std::uint32_t cuda1 = (1u << 16) | 1u;

/// A trace written event by event, as the stage actors would record it.
class trace_builder {
public:
  trace_builder() {
    file_.name = "synthetic.strace";
    file_.version = 1;
    file_.strings = {""};
    file_.types = {""};
  }

  /// A merged trace (strata-trace merge): actors are placed on ranks, device ids carry the rank.
  void merged(std::uint32_t world_size) {
    file_.version = 2;
    file_.rank = tt::all_ranks;
    file_.world_size = world_size;
  }

  /// Stage actor `actor` named "stage-S": spawned at 0, then its `pipeline.stage` tag and, when
  /// given, its `pipeline.device` tag.
  void stage(std::uint64_t actor, std::uint32_t stage, std::optional<std::uint32_t> device_key,
             std::optional<std::uint32_t> rank = std::nullopt) {
    add(0, event_kind::spawn, actor, 0, 0, intern("stage-" + std::to_string(stage)));
    if (rank) add(0, event_kind::placement, actor, 0, 0, *rank);
    add(1, event_kind::tag, actor, 0, intern("pipeline.stage"), stage);
    if (device_key) add(1, event_kind::tag, actor, 0, intern("pipeline.device"), *device_key);
  }

  /// Device work of `stage` on its device track [begin, end), on stream `stream`.
  void work(std::uint32_t stage, std::uint64_t begin, std::uint64_t end, const std::string& name,
            std::uint64_t stream = 7, std::uint32_t rank = 0) {
    const std::uint64_t track = (std::uint64_t{rank} << 32) | (tt::stage_device_base + stage);
    const std::uint64_t id = ++work_ids_;
    add(begin, event_kind::device_begin, track, stream, id, intern(name));
    add(end, event_kind::device_end, track, stream, id, intern(name));
  }

  /// A handled message on `actor` [begin, end), tagged `pipeline.forward` with `micro_batch`.
  void tagged_forward(std::uint64_t actor, std::uint64_t begin, std::uint64_t end, std::uint32_t micro_batch) {
    const std::uint64_t msg = 1000 + ++work_ids_;
    add(begin, event_kind::handler_begin, actor, 0, msg);
    add(begin, event_kind::tag, actor, 0, intern("pipeline.forward"), micro_batch);
    add(end, event_kind::handler_end, actor, 0, msg);
  }

  /// The trace, events sorted by time (stable: the order of recording within one instant).
  tt::trace_file file() const {
    tt::trace_file f = file_;
    std::stable_sort(f.events.begin(), f.events.end(),
                     [](const strata::trace::record& a, const strata::trace::record& b) { return a.ts_ns < b.ts_ns; });
    return f;
  }

private:
  std::uint32_t intern(const std::string& s) {
    auto it = std::find(file_.strings.begin(), file_.strings.end(), s);
    if (it != file_.strings.end()) return static_cast<std::uint32_t>(it - file_.strings.begin());
    file_.strings.push_back(s);
    return static_cast<std::uint32_t>(file_.strings.size() - 1);
  }
  void add(std::uint64_t ts, event_kind k, std::uint64_t actor, std::uint64_t peer, std::uint64_t msg,
           std::uint32_t arg = 0) {
    file_.events.push_back({ts, actor, peer, msg, arg, 0, static_cast<std::uint8_t>(k), 0});
  }

  tt::trace_file file_;
  std::uint64_t work_ids_ = 0;
};

/// Four stages, two micro-batches, the work of every stage with known intervals (ns).
/// `keys[s]` is stage s's `pipeline.device` key (none: no tag).
///
///   stage 0: F0 [100,200) F1 [200,300) B0 [800,1000) B1 [1000,1200)            busy 600
///   stage 1: F0 [200,300) F1 [300,400) B0 [600,800) B1 [800,1000) U [1000,1050) busy 650
///   stage 2: F0 [300,400) F1 [400,500) B0 [500,700) B1 [700,800) W1 [800,900)  busy 600
///   stage 3: F0 [400,500) F1 [450,550) (another stream) B0 [600,700) B1 [1100,1300)  busy 450
///
/// Wall: 100 .. 1300 = 1200. Stage busy sums to 2300.
/// On two devices (stages 0, 2 on cuda:0; 1, 3 on cuda:1):
///   cuda:0 = [100,300) u [300,500) u [500,900) u [800,1200) = [100,1200) = 1100
///   cuda:1 = [200,400) u [400,550) = 350, [600,1000) u [600,700) u [1000,1050) = 450, [1100,1300) = 200: 1000
///   bubble = 1 - (1100 + 1000) / (2 x 1200) = 0.125 (one device per stage would say 1 - 2300 / 4800).
tt::trace_file four_stages(const std::vector<std::optional<std::uint32_t>>& keys) {
  trace_builder b;
  for (std::uint32_t s = 0; s < 4; ++s) b.stage(10 + s, s, keys[s]);
  b.work(0, 100, 200, "forward mb 0 chunk 0");
  b.work(0, 200, 300, "forward mb 1 chunk 0");
  b.work(0, 800, 1000, "backward mb 0 chunk 0");
  b.work(0, 1000, 1200, "backward mb 1 chunk 0");
  b.work(1, 200, 300, "forward mb 0 chunk 0");
  b.work(1, 300, 400, "forward mb 1 chunk 0");
  b.work(1, 600, 800, "backward mb 0 chunk 0");
  b.work(1, 800, 1000, "backward mb 1 chunk 0");
  b.work(1, 1000, 1050, "update");
  b.work(2, 300, 400, "forward mb 0 chunk 0");
  b.work(2, 400, 500, "forward mb 1 chunk 0");
  b.work(2, 500, 700, "backward mb 0 chunk 0");
  b.work(2, 700, 800, "backward mb 1 chunk 0");
  b.work(2, 800, 900, "weight mb 1 chunk 0");
  b.work(3, 400, 500, "forward mb 0 chunk 0");
  b.work(3, 450, 550, "forward mb 1 chunk 0", 8);
  b.work(3, 600, 700, "backward mb 0 chunk 0");
  b.work(3, 1100, 1300, "backward mb 1 chunk 0");
  return b.file();
}

const std::vector<std::optional<std::uint32_t>> two_devices = {cuda0, cuda1, cuda0, cuda1};
constexpr double one_device_per_stage_bubble = 1.0 - 2300.0 / (4.0 * 1200.0);

/// The LM's traces before the names carried micro-batches: two stages, no pipeline.device tags.
///   stage 0: forward [0,100) [100,200), backward [400,500) [500,600), update [600,650)   busy 450
///   stage 1: forward [100,200) [200,300), backward [300,400) [400,500), update [600,640) busy 440
/// Wall 0 .. 650; bubble 1 - 890 / (2 x 650).
tt::trace_file lm_plain_names() {
  trace_builder b;
  b.stage(10, 0, std::nullopt);
  b.stage(11, 1, std::nullopt);
  for (auto [s, begin, end, name] : std::vector<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t, const char*>>{
           {0, 0, 100, "forward"},     {0, 100, 200, "forward"},   {0, 400, 500, "backward"}, {0, 500, 600, "backward"},
           {0, 600, 650, "update"},    {1, 100, 200, "forward"},   {1, 200, 300, "forward"},  {1, 300, 400, "backward"},
           {1, 400, 500, "backward"},  {1, 600, 640, "update"}})
    b.work(s, begin, end, name);
  return b.file();
}

json pipeline_of(const tt::trace_file& f) { return tt::summary_json(tt::build_model(f))["pipeline"]; }

std::string text_of(const tt::trace_file& f) {
  std::ostringstream out;
  tt::print_summary(tt::summary_json(tt::build_model(f)), out);
  return out.str();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(work_names)

BOOST_AUTO_TEST_CASE(a_work_name_gives_its_phase_micro_batch_and_chunk) {
  auto p = tt::parse_work_name("forward mb 3 chunk 1");
  BOOST_TEST((p.phase == tt::work_phase::forward));
  BOOST_TEST(p.micro_batch == 3);
  BOOST_TEST(p.chunk == 1);
  p = tt::parse_work_name("backward mb 12 chunk 0");
  BOOST_TEST((p.phase == tt::work_phase::backward));
  BOOST_TEST(p.micro_batch == 12);
  BOOST_TEST(p.chunk == 0);
  p = tt::parse_work_name("weight mb 0 chunk 4");
  BOOST_TEST((p.phase == tt::work_phase::weight));
  BOOST_TEST(p.chunk == 4);
  p = tt::parse_work_name("backward mb 5");
  BOOST_TEST((p.phase == tt::work_phase::backward));
  BOOST_TEST(p.micro_batch == 5);
  BOOST_TEST(p.chunk == -1);
}

BOOST_AUTO_TEST_CASE(the_plain_names_of_older_traces_keep_their_phase_without_a_micro_batch) {
  for (auto [name, phase] : {std::pair{"forward", tt::work_phase::forward}, std::pair{"backward", tt::work_phase::backward},
                             std::pair{"update", tt::work_phase::update}}) {
    const auto p = tt::parse_work_name(name);
    BOOST_TEST((p.phase == phase), name);
    BOOST_TEST(p.micro_batch == -1, name);
    BOOST_TEST(p.chunk == -1, name);
  }
}

BOOST_AUTO_TEST_CASE(other_names_have_no_phase_and_no_micro_batch) {
  for (const char* name : {"", "work", "forwarding", "forward mb", "forward mb x", "forward mb 1 chunk", "forward mb -1",
                           "forward mb 1 chunk 2 extra", "forward chunk 2", "memcpy h2d"}) {
    const auto p = tt::parse_work_name(name);
    BOOST_TEST((p.phase == tt::work_phase::other), name);
    BOOST_TEST(p.micro_batch == -1, name);
  }
}

BOOST_AUTO_TEST_CASE(the_model_keeps_each_stage_actors_device_key_and_the_parsed_names) {
  const auto f = four_stages(two_devices);
  const auto m = tt::build_model(f);
  BOOST_TEST(*m.actors.at(10).device_key == cuda0);
  BOOST_TEST(*m.actors.at(11).device_key == cuda1);
  BOOST_TEST(tt::device_key_name(cuda1) == "cuda:1");
  BOOST_TEST(tt::device_key_name(2u << 16 | 3u) == "sim:3");
  BOOST_TEST(tt::device_key_name(0) == "cpu:0");
  const auto& stage2 = m.streams.at({tt::stage_device_base + 2, 7});
  BOOST_REQUIRE(stage2.size() == 5u);
  BOOST_TEST((stage2.back().phase == tt::work_phase::weight));
  BOOST_TEST(stage2.back().micro_batch == 1);
  BOOST_TEST(stage2.back().chunk == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(shared_devices)

BOOST_AUTO_TEST_CASE(micro_batches_are_counted_from_the_work_names_when_no_handler_is_tagged) {
  const auto p = pipeline_of(four_stages(two_devices));
  BOOST_TEST(p["source"] == "device");
  BOOST_TEST(p["stages"].get<int>() == 4);
  BOOST_TEST(p["micro_batches"].get<int>() == 2);
  BOOST_TEST(p["micro_batches_from"] == "device work names");
}

BOOST_AUTO_TEST_CASE(each_stage_gets_its_busy_time_and_its_forward_backward_and_weight_work) {
  const auto p = pipeline_of(four_stages(two_devices));
  BOOST_REQUIRE(p["per_stage"].size() == 4u);
  const std::uint64_t busy[] = {600, 650, 600, 450};
  const std::uint64_t forward_ns[] = {200, 200, 200, 150};  // stage 3's two overlap: their union
  const std::uint64_t backward_ns[] = {400, 400, 300, 300};
  for (std::size_t s = 0; s < 4; ++s) {
    const auto& st = p["per_stage"][s];
    BOOST_TEST_CONTEXT("stage " << s) {
      BOOST_TEST(st["stage"].get<std::size_t>() == s);
      BOOST_TEST(st["actor"] == "stage-" + std::to_string(s));
      BOOST_TEST(st["device"].get<std::uint64_t>() == tt::stage_device_base + s);
      BOOST_TEST(st["busy_ns"].get<std::uint64_t>() == busy[s]);
      BOOST_TEST(st["forward_slices"].get<int>() == 2);
      BOOST_TEST(st["backward_slices"].get<int>() == 2);
      BOOST_TEST(st["forward_ns"].get<std::uint64_t>() == forward_ns[s]);
      BOOST_TEST(st["backward_ns"].get<std::uint64_t>() == backward_ns[s]);
      BOOST_TEST(st["weight_slices"].get<int>() == (s == 2 ? 1 : 0));
      BOOST_TEST(st["weight_ns"].get<std::uint64_t>() == (s == 2 ? 100u : 0u));
      BOOST_TEST(st["other_slices"].get<int>() == (s == 1 ? 1 : 0));
      BOOST_TEST(st["update_slices"].get<int>() == (s == 1 ? 1 : 0));
      BOOST_TEST(st["on_device"] == (s % 2 == 0 ? "cuda:0" : "cuda:1"));
      BOOST_TEST(st["device_key"].get<std::uint32_t>() == (s % 2 == 0 ? cuda0 : cuda1));
    }
  }
  BOOST_TEST(p["busy_ns"].get<std::uint64_t>() == 2300u);
}

BOOST_AUTO_TEST_CASE(the_bubble_of_stages_sharing_devices_is_taken_over_the_devices) {
  const auto p = pipeline_of(four_stages(two_devices));
  BOOST_TEST(p["wall_ns"].get<std::uint64_t>() == 1200u);
  BOOST_TEST(p["devices"].get<int>() == 2);
  BOOST_TEST(p["bubble_denominator"] == "4 stages on 2 devices");
  BOOST_TEST(p["device_busy_ns"].get<std::uint64_t>() == 2100u);
  BOOST_TEST(p["bubble"].get<double>() == 0.125, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE(p["per_device"].size() == 2u);
  const auto& d0 = p["per_device"][0];
  const auto& d1 = p["per_device"][1];
  BOOST_TEST(d0["device"] == "cuda:0");
  BOOST_TEST(d0["busy_ns"].get<std::uint64_t>() == 1100u);
  BOOST_TEST((d0["stages"].get<std::vector<int>>() == std::vector<int>{0, 2}));
  BOOST_TEST(d1["device"] == "cuda:1");
  BOOST_TEST(d1["busy_ns"].get<std::uint64_t>() == 1000u);
  BOOST_TEST((d1["stages"].get<std::vector<int>>() == std::vector<int>{1, 3}));
}

BOOST_AUTO_TEST_CASE(one_device_per_stage_gives_the_old_bubble_tagged_or_not) {
  const std::vector<std::vector<std::optional<std::uint32_t>>> cases = {
      {std::nullopt, std::nullopt, std::nullopt, std::nullopt},
      {cuda0, cuda1, (1u << 16) | 2u, (1u << 16) | 3u},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto p = pipeline_of(four_stages(cases[i]));
    BOOST_TEST_CONTEXT((i == 0 ? "no pipeline.device tags" : "four device keys")) {
      BOOST_TEST(p["devices"].get<int>() == 4);
      BOOST_TEST(p["bubble_denominator"] == "4 stages on 4 devices");
      BOOST_TEST(p["device_busy_ns"].get<std::uint64_t>() == p["busy_ns"].get<std::uint64_t>());
      BOOST_TEST(p["bubble"].get<double>() == one_device_per_stage_bubble, boost::test_tools::tolerance(1e-12));
    }
  }
  const auto untagged = pipeline_of(four_stages(cases[0]));
  BOOST_TEST(untagged["per_stage"][1]["on_device"] == "stage 1's own device");
  BOOST_TEST(untagged["per_stage"][1]["device_key"].is_null());
}

BOOST_AUTO_TEST_CASE(the_text_summary_says_how_many_devices_the_bubble_is_over_and_which_stages_share_them) {
  const auto text = text_of(four_stages(two_devices));
  BOOST_TEST(text.find("pipeline: 4 stages, 2 micro-batches, wall 1.20 us, measured bubble 12.5 %") != std::string::npos,
             text);
  BOOST_TEST(text.find("; 4 stages on 2 devices\n") != std::string::npos, text);
  BOOST_TEST(text.find("cuda:0 runs stages 0, 2, busy 1.10 us; cuda:1 runs stages 1, 3, busy 1.00 us") !=
                 std::string::npos,
             text);
  for (const char* column : {"forward time", "backward time", "weight", "runs on"})
    BOOST_TEST(text.find(column) != std::string::npos, column);
  // One device per stage: the denominator, no line of shared devices.
  const auto own = text_of(four_stages({std::nullopt, std::nullopt, std::nullopt, std::nullopt}));
  BOOST_TEST(own.find("; 4 stages on 4 devices\n") != std::string::npos, own);
  BOOST_TEST(own.find("shared devices") == std::string::npos, own);
}

BOOST_AUTO_TEST_CASE(stages_on_different_ranks_with_the_same_device_key_are_different_devices) {
  trace_builder b;
  b.merged(2);
  b.stage(10, 0, cuda0, 0);
  b.stage(11, 1, cuda0, 1);
  b.work(0, 100, 300, "forward mb 0 chunk 0", 7, 0);
  b.work(1, 300, 500, "forward mb 0 chunk 0", 7, 1);
  const auto f = b.file();
  const auto p = pipeline_of(f);
  BOOST_TEST(p["devices"].get<int>() == 2);
  BOOST_TEST(p["per_device"][0]["device"] == "cuda:0@r0");
  BOOST_TEST(p["per_device"][1]["device"] == "cuda:0@r1");
  BOOST_TEST(p["bubble"].get<double>() == 0.5, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(older_traces)

BOOST_AUTO_TEST_CASE(a_trace_with_the_lms_plain_work_names_still_gives_its_phases_and_bubble) {
  const auto p = pipeline_of(lm_plain_names());
  BOOST_TEST(p["source"] == "device");
  BOOST_TEST(p["micro_batches"].is_null());
  BOOST_TEST(p["devices"].get<int>() == 2);
  BOOST_TEST(p["wall_ns"].get<std::uint64_t>() == 650u);
  BOOST_TEST(p["bubble"].get<double>() == 1.0 - 890.0 / 1300.0, boost::test_tools::tolerance(1e-12));
  for (const auto& st : p["per_stage"]) {
    BOOST_TEST(st["forward_slices"].get<int>() == 2);
    BOOST_TEST(st["backward_slices"].get<int>() == 2);
    BOOST_TEST(st["other_slices"].get<int>() == 1);
    BOOST_TEST(st["forward_ns"].get<std::uint64_t>() == 200u);
  }
  const auto text = text_of(lm_plain_names());
  BOOST_TEST(text.find("pipeline: 2 stages, wall 650 ns") != std::string::npos, text);
  BOOST_TEST(text.find("busy = device work of each stage's device track; 2 stages on 2 devices") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(tagged_handlers_still_give_the_micro_batches) {
  trace_builder b;
  b.stage(10, 0, std::nullopt);
  b.tagged_forward(10, 10, 20, 0);
  b.tagged_forward(10, 30, 40, 2);
  b.work(0, 10, 20, "forward mb 0 chunk 0");
  b.work(0, 30, 40, "forward mb 1 chunk 0");  // the names say 2; the tags say 3 and win
  const auto p = pipeline_of(b.file());
  BOOST_TEST(p["micro_batches"].get<int>() == 3);
  BOOST_TEST(p["micro_batches_from"] == "handler tags");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(pictures)

BOOST_AUTO_TEST_CASE(the_export_puts_each_stages_work_under_a_stage_track_named_as_recorded) {
  const auto f = four_stages(two_devices);
  const auto m = tt::build_model(f);
  const json doc = tt::chrome_trace(m);
  std::map<std::uint64_t, std::string> track_names;
  std::map<std::uint64_t, std::set<std::string>> work_names;
  bool micro_batch_args = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["pid"] != 2) continue;
    if (e["ph"] == "M" && e["name"] == "thread_name") track_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X") {
      work_names[e["tid"]].insert(e["name"].get<std::string>());
      if (e["name"] == "weight mb 1 chunk 0")
        micro_batch_args = e["args"]["phase"] == "weight" && e["args"]["micro_batch"] == 1 && e["args"]["chunk"] == 0 &&
                           e["args"]["pipeline_stage"] == 2;
    }
  }
  std::set<std::string> names;
  for (const auto& [tid, name] : track_names) names.insert(name);
  BOOST_TEST(names.count("stage 0 device #1000000000 stream 7 on cuda:0") == 1u);
  BOOST_TEST(names.count("stage 3 device #1000000003 stream 8 on cuda:1") == 1u);
  BOOST_TEST(micro_batch_args);
  for (const auto& [tid, name] : track_names)
    if (name.rfind("stage 2 ", 0) == 0) {
      BOOST_TEST(work_names[tid].count("forward mb 0 chunk 0") == 1u);
      BOOST_TEST(work_names[tid].count("backward mb 1 chunk 0") == 1u);
    }
}

BOOST_AUTO_TEST_CASE(the_timeline_draws_each_stages_work_below_its_stage_in_micro_batch_shades) {
  const auto f = four_stages(two_devices);
  const std::string svg = tt::timeline_svg(tt::build_model(f));
  // No stage actor handled a message here, so the stage device rows stand alone, in stage order.
  const auto row0 = svg.find(">stage 0 device, stream 7<");
  const auto row3 = svg.find(">stage 3 device, stream 8<");
  BOOST_TEST(row0 != std::string::npos);
  BOOST_TEST(row3 != std::string::npos);
  BOOST_TEST(row0 < row3);
  BOOST_TEST(svg.find("<title>forward mb 1 chunk 0 (work ") != std::string::npos);
  BOOST_TEST(svg.find("forward, micro-batch 1") != std::string::npos);
  BOOST_TEST(svg.find("backward, micro-batch 0") != std::string::npos);
  BOOST_TEST(svg.find("weight gradient (stage device work)") != std::string::npos);
  // The plain names of older traces: one shade per phase and its legend entry.
  const auto old = lm_plain_names();
  const std::string old_svg = tt::timeline_svg(tt::build_model(old));
  BOOST_TEST(old_svg.find("forward (stage device work)") != std::string::npos);
  BOOST_TEST(old_svg.find("backward (stage device work)") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
