// strata-trace on a real traced run: the reader, the summary figures, the Chrome export's
// structural guarantees, the timeline and the message graph; and the reader's rejections.

#define BOOST_TEST_MODULE strata_trace_tools
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "sample_workload.hpp"
#include "strata/trace_tools/trace_model.hpp"
#include "strata/trace_tools/trace_reader.hpp"
#include "trace_views.hpp"

namespace tt = strata::trace_tools;
using nlohmann::json;

namespace {

/// The sample trace, recorded once per test run.
struct sample {
  std::string path;
  std::string bytes;
  tt::trace_file file;
  sample() {
    path = (std::filesystem::temp_directory_path() / ("strata-trace-tools-" + std::to_string(::getpid()) + ".strace")).string();
    auto err = tt::test::write_sample_trace(path);
    if (!err.empty()) throw std::runtime_error(err);
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    auto r = tt::read_trace(path);
    if (!r.ok()) throw std::runtime_error(r.error);
    file = std::move(r.trace);
  }
  ~sample() { std::filesystem::remove(path); }
};

const sample& the_sample() {
  static sample s;
  return s;
}

const json* find_by(const json& array, const char* key, const std::string& value) {
  for (const auto& e : array)
    if (e.contains(key) && e[key] == value) return &e;
  return nullptr;
}

const json* find_type(const json& types, const std::string& short_name) {
  for (const auto& t : types)
    if (tt::short_type_name(t["type"].get<std::string>()) == short_name) return &t;
  return nullptr;
}

std::int64_t ns_of(const json& us) { return std::llround(us.get<double>() * 1000.0); }

}  // namespace

BOOST_AUTO_TEST_SUITE(reader)

BOOST_AUTO_TEST_CASE(the_reader_parses_a_recorded_trace_and_names_every_spawned_actor) {
  const auto& f = the_sample().file;
  BOOST_TEST(f.version == 1u);
  BOOST_TEST(f.dropped == 0u);
  BOOST_TEST(f.events.size() > 1000u);
  auto m = tt::build_model(f);
  std::set<std::string> names;
  for (const auto& [id, a] : m.actors) names.insert(a.name);
  for (const char* n : {"ponger", "pinger", "squarer", "client", "collector", "producer-0", "stage-0", "stage-2", "trainer"})
    BOOST_TEST(names.count(n) == 1u, n);
}

BOOST_AUTO_TEST_CASE(every_truncation_of_a_valid_trace_is_rejected_with_a_sentence_naming_the_file) {
  const auto& bytes = the_sample().bytes;
  // Every prefix up to the tables and then a spread of lengths inside the events.
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n < 400 && n < bytes.size(); ++n) lengths.push_back(n);
  for (std::size_t n = 400; n < bytes.size(); n += 997) lengths.push_back(n);
  lengths.push_back(bytes.size() - 1);
  for (auto n : lengths) {
    auto r = tt::parse_trace(std::string_view(bytes).substr(0, n), "cut.strace");
    BOOST_REQUIRE_MESSAGE(!r.ok(), "a trace cut to " << n << " bytes was accepted");
    BOOST_TEST(r.error.rfind("cut.strace: ", 0) == 0u);
    BOOST_TEST(r.error.find('\n') == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_corrupt_header_or_table_is_rejected_with_what_is_wrong) {
  const auto& good = the_sample().bytes;
  auto patch32 = [&](std::size_t at, std::uint32_t v) {
    std::string b = good;
    std::memcpy(b.data() + at, &v, 4);
    return b;
  };
  auto patch64 = [&](std::size_t at, std::uint64_t v) {
    std::string b = good;
    std::memcpy(b.data() + at, &v, 8);
    return b;
  };
  struct bad_case {
    std::string bytes;
    std::string expected;
  };
  std::string trailing = good + "x";
  std::string magic = good;
  magic[0] = 'X';
  std::vector<bad_case> cases = {
      {"", "the file is empty"},
      {magic, "not a strata trace"},
      {patch32(8, 3), "trace format version 3 is not supported (this strata-trace reads versions 1 and 2)"},
      {patch32(12, 48), "record size of 48"},
      {patch64(24, 0xffffffffffffffffull), "truncated: the header announces"},
      {patch64(24, 1), "unexpected data follow"},
      {patch32(40, 0x7fffffff), "the string table claims 2147483647 entries"},
      {patch32(48, 0x7fffffff), "string 0 claims 2147483647 bytes"},
      {trailing, "1 bytes of unexpected data"},
  };
  for (const auto& c : cases) {
    auto r = tt::parse_trace(c.bytes, "bad.strace");
    BOOST_TEST_REQUIRE(!r.ok());
    BOOST_TEST(r.error.find(c.expected) != std::string::npos, r.error << " (expected: " << c.expected << ")");
  }
}

BOOST_AUTO_TEST_CASE(missing_files_and_directories_are_named_as_such) {
  auto r = tt::read_trace("/nonexistent/strata.strace");
  BOOST_TEST(r.error == "/nonexistent/strata.strace: no such file");
  r = tt::read_trace(std::filesystem::temp_directory_path().string());
  BOOST_TEST(r.error.find("is a directory") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(summary)

BOOST_AUTO_TEST_CASE(the_summary_counts_what_the_workload_did) {
  const tt::test::sample_counts n;
  auto m = tt::build_model(the_sample().file);
  auto s = tt::summary_json(m);
  const auto& actors = s["actors"];
  auto ponger = find_by(actors, "name", "ponger");
  BOOST_REQUIRE(ponger);
  BOOST_TEST((*ponger)["handled"].get<int>() == n.round_trips);
  BOOST_TEST((*ponger)["messages_out"].get<int>() == n.round_trips);
  auto collector = find_by(actors, "name", "collector");
  BOOST_REQUIRE(collector);
  BOOST_TEST((*collector)["handled"].get<int>() == n.producers * n.readings_per_producer);
  BOOST_TEST((*collector)["unhandled"].get<int>() == 1);
  BOOST_TEST((*collector)["mailbox_depth_max"].get<int>() >= 1);
  BOOST_TEST((*collector)["mailbox_wait_ns"]["count"].get<int>() == n.producers * n.readings_per_producer);
  auto squarer = find_by(actors, "name", "squarer");
  BOOST_REQUIRE(squarer);
  BOOST_TEST((*squarer)["handled"].get<int>() == n.requests);
  for (const auto& a : actors) {
    BOOST_TEST(a["busy_percent"].get<double>() >= 0.0);
    BOOST_TEST(a["busy_percent"].get<double>() <= 100.0);
    if (a["handler_ns"]["count"].get<int>() > 0)
      BOOST_TEST(a["handler_ns"]["p50"].get<std::uint64_t>() <= a["handler_ns"]["p99"].get<std::uint64_t>());
  }
  auto stage0 = find_by(actors, "name", "stage-0");
  BOOST_REQUIRE(stage0);
  // Each stage spins 300 us forward and 500 us backward per micro-batch.
  BOOST_TEST((*stage0)["busy_ns"].get<std::uint64_t>() >= std::uint64_t(n.micro_batches) * 800'000u);

  auto reading = find_type(s["message_types"], "reading");
  BOOST_REQUIRE(reading);
  BOOST_TEST((*reading)["sent"].get<int>() == n.producers * n.readings_per_producer);
  BOOST_TEST((*reading)["latency_ns"]["count"].get<int>() == n.producers * n.readings_per_producer);

  BOOST_TEST(s["device_streams"].size() == std::size_t(n.stages));
  for (const auto& d : s["device_streams"]) {
    BOOST_TEST(d["work_items"].get<int>() == 2 * n.micro_batches);
    BOOST_TEST(d["utilisation_percent"].get<double>() > 0.0);
    BOOST_TEST(d["utilisation_percent"].get<double>() <= 100.0);
  }

  BOOST_TEST(s["drops"]["by_reason"]["unhandled_message"].get<int>() == 1);
  BOOST_TEST(s["drops"]["by_reason"]["target_terminated"].get<int>() >= 1);

  const auto& p = s["pipeline"];
  BOOST_REQUIRE(!p.is_null());
  BOOST_TEST(p["stages"].get<int>() == n.stages);
  BOOST_TEST(p["micro_batches"].get<int>() == n.micro_batches);
  BOOST_TEST(p["bubble"].get<double>() > 0.0);
  BOOST_TEST(p["bubble"].get<double>() < 1.0);
  BOOST_TEST(p["ideal_bubble"].get<double>() == 2.0 / 6.0, boost::test_tools::tolerance(1e-5));
  for (const auto& st : p["per_stage"]) {
    BOOST_TEST(st["forward_slices"].get<int>() == n.micro_batches);
    BOOST_TEST(st["backward_slices"].get<int>() == n.micro_batches);
  }
}

BOOST_AUTO_TEST_CASE(the_text_summary_has_a_row_per_actor_and_the_pipeline_line) {
  auto m = tt::build_model(the_sample().file);
  std::ostringstream out;
  tt::print_summary(tt::summary_json(m), out);
  const auto text = out.str();
  for (const char* s : {"ponger", "collector", "stage-1", "measured bubble", "device streams", "target_terminated"})
    BOOST_TEST(text.find(s) != std::string::npos, s);
}

BOOST_AUTO_TEST_CASE(the_critical_path_is_a_time_ordered_chain_ending_at_the_last_handled_message) {
  auto m = tt::build_model(the_sample().file);
  const auto p = tt::compute_critical_path(m);
  BOOST_REQUIRE(!p.empty());
  // It ends where the last handler slice ends, with that slice.
  std::uint64_t last_end = 0, last_actor = 0;
  for (const auto& [id, a] : m.actors)
    for (const auto& sl : a.slices)
      if (sl.end >= last_end) last_end = sl.end, last_actor = id;
  BOOST_TEST(p.end == last_end);
  BOOST_TEST(p.segments.back().end == last_end);
  BOOST_TEST((p.segments.back().kind == tt::path_kind::handler));
  BOOST_TEST(p.segments.back().actor == last_actor);
  // Time-ordered, non-overlapping, each of positive length, inside the trace; the breakdown adds up.
  std::uint64_t prev_end = p.begin, sum = 0;
  for (const auto& seg : p.segments) {
    BOOST_TEST(seg.begin < seg.end);
    BOOST_TEST(seg.begin >= prev_end);
    prev_end = seg.end;
    sum += seg.duration();
  }
  BOOST_TEST(p.begin >= m.begin);
  BOOST_TEST(p.end <= m.end);
  BOOST_TEST(p.total() <= m.span());
  BOOST_TEST(sum == p.total());
  BOOST_TEST(p.by_kind[0] + p.by_kind[1] + p.by_kind[2] + p.by_kind[3] == p.total());
  BOOST_TEST(p.by_kind[static_cast<int>(tt::path_kind::handler)] > 0u);
  // The pipeline ends the workload: its chain runs through the stages' handlers (forward
  // 300 us, backward 500 us each), so the path holds at least one stage's forward and backward.
  std::set<std::string> on_path;
  for (const auto& seg : p.segments)
    if (seg.kind == tt::path_kind::handler) on_path.insert(m.actor_name(seg.actor));
  if (m.actor_name(last_actor) == "trainer") {
    BOOST_TEST(on_path.count("stage-0") == 1u);
    BOOST_TEST(p.total() >= 800'000u);
  }

  // The summary carries the same path.
  const auto s = tt::summary_json(m);
  const auto& cp = s["critical_path"];
  BOOST_REQUIRE(cp.is_object());
  BOOST_TEST(cp["total_ns"].get<std::uint64_t>() == p.total());
  BOOST_TEST(cp["handler_ns"].get<std::uint64_t>() + cp["wait_ns"].get<std::uint64_t>() +
                 cp["device_ns"].get<std::uint64_t>() + cp["other_ns"].get<std::uint64_t>() ==
             p.total());
  BOOST_TEST(cp["total_ns"].get<std::uint64_t>() <= s["span_ns"].get<std::uint64_t>());
  BOOST_TEST(cp["segment_count"].get<std::size_t>() == p.segments.size());
  BOOST_TEST(cp["segments"].size() + cp["segments_omitted"].get<std::size_t>() == p.segments.size());
  BOOST_REQUIRE(!cp["top_segments"].empty());
  BOOST_TEST(cp["top_segments"].size() <= 5u);
  for (std::size_t i = 1; i < cp["top_segments"].size(); ++i)
    BOOST_TEST(cp["top_segments"][i - 1]["duration_ns"].get<std::uint64_t>() >=
               cp["top_segments"][i]["duration_ns"].get<std::uint64_t>());
  std::ostringstream out;
  tt::print_summary(s, out);
  for (const char* t : {"critical path: ", "mailbox wait", "longest segments"})
    BOOST_TEST(out.str().find(t) != std::string::npos, t);
}

namespace {

/// A hand-made trace: the bytes of a version-1 file with these strings, types and events.
std::string make_trace_bytes(const std::vector<std::string>& strings, const std::vector<std::string>& types,
                             const std::vector<strata::trace::record>& events) {
  std::string b = "STRATATR";
  auto put = [&b](auto v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(std::uint32_t{1});
  put(std::uint32_t{40});
  put(std::uint64_t{0});
  put(static_cast<std::uint64_t>(events.size()));
  put(std::uint64_t{0});
  put(static_cast<std::uint32_t>(strings.size()));
  put(static_cast<std::uint32_t>(types.size()));
  for (const auto* table : {&strings, &types})
    for (const auto& str : *table) {
      put(static_cast<std::uint32_t>(str.size()));
      b += str;
    }
  for (const auto& e : events) put(e);
  return b;
}

strata::trace::record ev(std::uint64_t ts, strata::trace::event_kind kind, std::uint64_t actor, std::uint64_t peer,
                         std::uint64_t msg, std::uint16_t type = 0, std::uint32_t arg32 = 0) {
  return {ts, actor, peer, msg, arg32, type, static_cast<std::uint8_t>(kind), 0};
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_critical_path_goes_through_a_stages_device_work) {
  using k = strata::trace::event_kind;
  const std::uint64_t track = tt::stage_device_base + 0;
  // Stage actor 1 gets `go` from outside and submits device work (250..600) that completes
  // asynchronously; the completion `done` comes from outside, and its handler sends `next` to 2.
  const std::vector<std::string> strings{"", "stage-0", "sink", "pipeline.stage", "forward"};
  const std::vector<std::string> types{"go", "done", "next"};
  const std::vector<strata::trace::record> events{
      ev(0, k::spawn, 1, 0, 0, 0, 1),          ev(1, k::tag, 1, 0, 3, 0, 0),
      ev(2, k::spawn, 2, 0, 0, 0, 2),          ev(100, k::send, 0, 1, 10, 1),
      ev(100, k::enqueue, 1, 0, 10, 1),        ev(200, k::handler_begin, 1, 0, 10, 1),
      ev(250, k::device_begin, track, 0, 7, 0, 4), ev(300, k::handler_end, 1, 0, 10, 1),
      ev(600, k::device_end, track, 0, 7, 0, 4),   ev(650, k::send, 0, 1, 11, 2),
      ev(650, k::enqueue, 1, 0, 11, 2),        ev(700, k::handler_begin, 1, 0, 11, 2),
      ev(750, k::send, 1, 2, 12, 3),           ev(750, k::enqueue, 2, 1, 12, 3),
      ev(800, k::handler_end, 1, 0, 11, 2),    ev(900, k::handler_begin, 2, 1, 12, 3),
      ev(1000, k::handler_end, 2, 0, 12, 3)};
  auto r = tt::parse_trace(make_trace_bytes(strings, types, events), "device-path.strace");
  BOOST_REQUIRE_MESSAGE(r.ok(), r.error);
  auto m = tt::build_model(r.trace);
  const auto p = tt::compute_critical_path(m);
  struct expected {
    tt::path_kind kind;
    std::uint64_t begin, end, actor;
  };
  const std::vector<expected> want{{tt::path_kind::wait, 100, 200, 1},    {tt::path_kind::handler, 200, 250, 1},
                                   {tt::path_kind::device, 250, 600, 1},  {tt::path_kind::other, 600, 700, 1},
                                   {tt::path_kind::handler, 700, 750, 1}, {tt::path_kind::wait, 750, 900, 2},
                                   {tt::path_kind::handler, 900, 1000, 2}};
  BOOST_REQUIRE_EQUAL(p.segments.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    BOOST_TEST((p.segments[i].kind == want[i].kind), "segment " << i);
    BOOST_TEST(p.segments[i].begin == want[i].begin, "segment " << i);
    BOOST_TEST(p.segments[i].end == want[i].end, "segment " << i);
    BOOST_TEST(p.segments[i].actor == want[i].actor, "segment " << i);
  }
  BOOST_TEST(p.total() == 900u);
  BOOST_TEST(p.by_kind[static_cast<int>(tt::path_kind::device)] == 350u);
  const auto cp = tt::summary_json(m)["critical_path"];
  BOOST_TEST(cp["device_ns"].get<std::uint64_t>() == 350u);
  BOOST_TEST(cp["other_ns"].get<std::uint64_t>() == 100u);
  BOOST_TEST(cp["top_segments"][0]["kind"].get<std::string>() == "device");
  BOOST_TEST(cp["top_segments"][0]["type"].get<std::string>() == "forward");
  BOOST_TEST(cp["top_segments"][0]["device"].get<std::uint64_t>() == track);
}

BOOST_AUTO_TEST_CASE(a_trace_without_handled_messages_has_no_critical_path) {
  using k = strata::trace::event_kind;
  auto r = tt::parse_trace(make_trace_bytes({"", "lonely"}, {}, {ev(5, k::spawn, 1, 0, 0, 0, 1)}), "none.strace");
  BOOST_REQUIRE_MESSAGE(r.ok(), r.error);
  auto m = tt::build_model(r.trace);
  BOOST_TEST(tt::compute_critical_path(m).empty());
  BOOST_TEST(tt::summary_json(m)["critical_path"].is_null());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(chrome_export)

BOOST_AUTO_TEST_CASE(the_export_has_named_tracks_nested_slices_and_flows_with_both_ends_inside_slices) {
  auto m = tt::build_model(the_sample().file);
  // Through text, as a viewer reads it.
  const std::string text = tt::chrome_trace(m).dump();
  const json doc = json::parse(text);
  BOOST_TEST(doc["displayTimeUnit"] == "ns");
  const auto& events = doc["traceEvents"];
  BOOST_REQUIRE(events.is_array());

  using track = std::pair<int, std::uint64_t>;
  struct slice {
    std::int64_t begin, end;
  };
  std::set<track> named;
  std::map<track, std::vector<slice>> slices;
  struct flow_end {
    track where;
    std::int64_t ts;
  };
  std::map<std::uint64_t, std::vector<flow_end>> starts, finishes;
  std::size_t counters = 0;
  for (const auto& e : events) {
    const std::string ph = e["ph"];
    track t{e["pid"].get<int>(), e["tid"].get<std::uint64_t>()};
    if (ph == "M" && e["name"] == "thread_name") {
      BOOST_TEST(!e["args"]["name"].get<std::string>().empty());
      named.insert(t);
    } else if (ph == "X") {
      BOOST_TEST(e["dur"].get<double>() >= 0.0);
      BOOST_TEST(!e["name"].get<std::string>().empty());
      slices[t].push_back({ns_of(e["ts"]), ns_of(e["ts"]) + ns_of(e["dur"])});
    } else if (ph == "s") {
      starts[e["id"].get<std::uint64_t>()].push_back({t, ns_of(e["ts"])});
    } else if (ph == "f") {
      BOOST_TEST(e["bp"] == "e");
      finishes[e["id"].get<std::uint64_t>()].push_back({t, ns_of(e["ts"])});
    } else if (ph == "C") {
      ++counters;
      BOOST_TEST(e["args"]["depth"].get<int>() >= 0);
    }
  }
  BOOST_TEST(counters > 0u);
  // Tracks: every actor with handled messages, the external track, three device streams.
  BOOST_TEST(slices.size() >= 10u);
  std::size_t device_tracks = 0;
  for (const auto& [t, v] : slices) {
    BOOST_TEST(named.count(t) == 1u, "track " << t.first << "/" << t.second << " has no name");
    device_tracks += t.first == 2;
    // Per track: start times increase, and slices nest or are disjoint (never partially overlap).
    std::vector<std::int64_t> open_ends;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) BOOST_TEST_REQUIRE(v[i].begin >= v[i - 1].begin);
      while (!open_ends.empty() && open_ends.back() <= v[i].begin) open_ends.pop_back();
      if (!open_ends.empty())
        BOOST_TEST_REQUIRE(v[i].end <= open_ends.back(), "partial overlap on track " << t.second);
      open_ends.push_back(v[i].end);
    }
  }
  BOOST_TEST(device_tracks == 3u);

  // Flows: exactly one start and one finish per id, each inside a slice on its own track.
  BOOST_TEST(starts.size() >= 900u);  // 200 ping + 200 pong + 50 + 50 request/response + 400 readings + ...
  BOOST_TEST(starts.size() == finishes.size());
  auto inside_a_slice = [&](const flow_end& p) {
    for (const auto& s : slices[p.where])
      if (s.begin <= p.ts && p.ts <= s.end) return true;
    return false;
  };
  for (const auto& [id, s] : starts) {
    BOOST_TEST_REQUIRE(s.size() == 1u);
    auto f = finishes.find(id);
    BOOST_TEST_REQUIRE((f != finishes.end() && f->second.size() == 1u), "flow " << id << " has no single finish");
    BOOST_TEST_REQUIRE(inside_a_slice(s[0]), "flow " << id << " starts outside any slice");
    BOOST_TEST_REQUIRE(inside_a_slice(f->second[0]), "flow " << id << " ends outside any slice");
    BOOST_TEST(s[0].ts <= f->second[0].ts);
  }
  // The external track exists: producers and micro-batches were started from outside actors.
  BOOST_TEST(named.count({1, 0}) == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(pictures)

BOOST_AUTO_TEST_CASE(the_timeline_has_a_labelled_row_per_busy_actor_and_stream_an_axis_and_a_legend) {
  auto m = tt::build_model(the_sample().file);
  const auto svg = tt::timeline_svg(m);
  BOOST_TEST(svg.rfind("<svg", 0) == 0u);
  BOOST_TEST(svg.find("</svg>") != std::string::npos);
  for (const char* s : {">ponger #", ">collector #", "(stage 0)", ">device 0 stream 0<", "forward, micro-batch 0",
                        "backward, micro-batch 3", "ms</text>", ">reading<"})
    BOOST_TEST(svg.find(s) != std::string::npos, s);
}

BOOST_AUTO_TEST_CASE(the_message_graph_names_actors_and_counts_messages_on_edges) {
  const tt::test::sample_counts n;
  auto m = tt::build_model(the_sample().file);
  const auto dot = tt::message_graph_dot(m);
  BOOST_TEST(dot.find("digraph") != std::string::npos);
  BOOST_TEST(dot.find("\"ponger\\n#") != std::string::npos);
  BOOST_TEST(dot.find("ping x" + std::to_string(n.round_trips)) != std::string::npos);
  BOOST_TEST(dot.find("reading x" + std::to_string(n.readings_per_producer)) != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
