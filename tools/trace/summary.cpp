#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "trace_views.hpp"

namespace strata::trace_tools {

using nlohmann::json;

namespace {

json quantiles(std::vector<std::uint64_t>& v) {
  if (v.empty()) return json{{"count", 0}, {"p50", nullptr}, {"p99", nullptr}, {"max", nullptr}};
  return json{{"count", v.size()}, {"p50", percentile(v, 0.50)}, {"p99", percentile(v, 0.99)}, {"max", percentile(v, 1.0)}};
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/// Length of the union of [begin, end) intervals sorted by begin.
template <class Slices>
std::uint64_t union_length(const Slices& slices) {
  std::uint64_t total = 0, cur_begin = 0, cur_end = 0;
  bool open = false;
  for (const auto& s : slices) {
    if (!open || s.begin > cur_end) {
      if (open) total += cur_end - cur_begin;
      cur_begin = s.begin;
      cur_end = s.end;
      open = true;
    } else {
      cur_end = std::max(cur_end, s.end);
    }
  }
  if (open) total += cur_end - cur_begin;
  return total;
}

std::string format_ns(const json& v) {
  if (v.is_null()) return "-";
  double ns = v.get<double>();
  char buf[32];
  if (ns < 1e3) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (ns < 1e6) std::snprintf(buf, sizeof buf, "%.2f us", ns / 1e3);
  else if (ns < 1e9) std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.3f s", ns / 1e9);
  return buf;
}

std::string format_fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

/// A plain-text table: columns sized to their widest cell, first column left-aligned.
class text_table {
public:
  explicit text_table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const {
    std::vector<std::size_t> width;
    for (const auto& r : rows_)
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (width.size() <= i) width.push_back(0);
        width[i] = std::max(width[i], display_width(r[i]));
      }
    for (const auto& r : rows_) {
      out << "  ";
      for (std::size_t i = 0; i < r.size(); ++i) {
        std::size_t pad = width[i] - display_width(r[i]);
        if (i == 0) out << r[i] << std::string(pad, ' ');
        else out << "  " << std::string(pad, ' ') << r[i];
      }
      out << '\n';
    }
  }

private:
  static std::size_t display_width(const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
  std::vector<std::vector<std::string>> rows_;
};

/// How many of the longest segments the summary lists, and how many segments the JSON carries.
constexpr std::size_t top_path_segments = 5;
constexpr std::size_t max_json_path_segments = 1000;

/// Transfers between ranks per rank and direction, and in a merged trace each send joined to the
/// receive of its tag on the other rank: from the send's post to the receive's completion.
json transfers_json(const trace_model& m) {
  json rows = json::array();
  std::map<std::pair<std::uint64_t, trace::transfer>, std::vector<const transfer_slice*>> groups;
  for (const auto& t : m.transfers) groups[{t.rank, t.what}].push_back(&t);
  for (const auto& [key, list] : groups) {
    std::vector<std::uint64_t> durations;
    std::uint64_t bytes = 0, unfinished = 0;
    for (const auto* t : list) {
      durations.push_back(t->duration());
      bytes += t->bytes;
      unfinished += t->unfinished ? 1 : 0;
    }
    std::vector<transfer_slice> sorted;
    for (const auto* t : list) sorted.push_back(*t);
    rows.push_back({{"rank", key.first}, {"what", transfer_name(key.second)}, {"count", list.size()},
                    {"bytes", bytes}, {"unfinished", unfinished}, {"busy_ns", union_length(sorted)},
                    {"duration_ns", quantiles(durations)}});
  }
  json out = {{"by_rank", std::move(rows)}};
  if (m.file != nullptr && m.file->merged()) {
    std::vector<std::uint64_t> latency;
    std::vector<std::uint64_t> mb_per_s;  // bytes per microsecond = MB/s
    for (const auto& [send, receive] : m.transfer_links) {
      const auto& a = m.transfers[send];
      const auto& b = m.transfers[receive];
      if (b.end < a.begin) continue;  // clocks off by more than the transfer took
      latency.push_back(b.end - a.begin);
      mb_per_s.push_back(b.end > a.begin ? b.bytes * 1000 / (b.end - a.begin) : 0);
    }
    out["linked"] = latency.size();
    out["unmatched_sends"] = m.unlinked_sends;
    out["send_to_received_ns"] = quantiles(latency);
    out["throughput_mb_per_s"] = quantiles(mb_per_s);
  }
  return out;
}

json path_segment_json(const trace_model& m, const path_segment& seg) {
  const trace_file& f = *m.file;
  json j;
  j["kind"] = path_kind_name(seg.kind);
  j["begin_ns"] = seg.begin;
  j["end_ns"] = seg.end;
  j["duration_ns"] = seg.duration();
  j["actor_id"] = seg.actor;
  j["actor"] = seg.actor != 0 ? json(m.actor_name(seg.actor)) : json(nullptr);
  if (seg.kind == path_kind::device) {
    j["type"] = f.string_at(seg.work_name);
    j["work"] = seg.msg;
    j["device"] = seg.device;
    j["stream"] = seg.stream;
  } else if (seg.kind == path_kind::other) {
    j["type"] = nullptr;
  } else {
    j["type"] = f.type_name(seg.type);
    j["msg"] = seg.msg;
  }
  return j;
}

json critical_path_json(const trace_model& m) {
  const critical_path p = compute_critical_path(m);
  if (p.empty()) return nullptr;
  json j;
  j["begin_ns"] = p.begin;
  j["end_ns"] = p.end;
  j["total_ns"] = p.total();
  j["span_percent"] = 100.0 * ratio(static_cast<double>(p.total()), static_cast<double>(m.span()));
  j["handler_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::handler)];
  j["wait_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::wait)];
  j["device_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::device)];
  j["other_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::other)];
  j["last_handled"] = path_segment_json(m, p.segments.back());
  j["segment_count"] = p.segments.size();
  // The segments nearest the end when there are very many (a long ping-pong chain).
  const std::size_t skip = p.segments.size() > max_json_path_segments ? p.segments.size() - max_json_path_segments : 0;
  j["segments_omitted"] = skip;
  json segs = json::array();
  for (std::size_t i = skip; i < p.segments.size(); ++i) segs.push_back(path_segment_json(m, p.segments[i]));
  j["segments"] = std::move(segs);
  std::vector<const path_segment*> order;
  for (const auto& seg : p.segments) order.push_back(&seg);
  const std::size_t top = std::min(top_path_segments, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [](const path_segment* a, const path_segment* b) {
                      return a->duration() != b->duration() ? a->duration() > b->duration() : a->begin < b->begin;
                    });
  json tops = json::array();
  for (std::size_t i = 0; i < top; ++i) tops.push_back(path_segment_json(m, *order[i]));
  j["top_segments"] = std::move(tops);
  return j;
}

/// Where a stage's device work runs: the device named by its actor's `pipeline.device` tag (one
/// per rank in a merged trace), or, untagged, a device of the stage's own. Ordered: tagged
/// devices by rank and key, then the stages' own devices by stage.
struct device_group {
  bool own = false;          ///< No `pipeline.device` tag: the stage's own device.
  std::int64_t rank = -1;    ///< Tagged, merged trace: the rank of the stage actor.
  std::uint32_t key = 0;     ///< Tagged: (kind << 16) | ordinal.
  std::int64_t stage = -1;   ///< Own: the stage.
  auto order() const { return std::make_tuple(own, rank, key, stage); }
  bool operator<(const device_group& o) const { return order() < o.order(); }
  std::string name() const {
    if (own) return "stage " + std::to_string(stage) + "'s own device";
    return device_key_name(key) + (rank >= 0 ? "@r" + std::to_string(rank) : std::string());
  }
};

/// Sorted copies of slices, for union_length.
std::vector<device_slice> sorted_copy(const std::vector<const device_slice*>& work) {
  std::vector<device_slice> v;
  for (const auto* w : work) v.push_back(*w);
  std::stable_sort(v.begin(), v.end(), [](const device_slice& a, const device_slice& b) { return a.begin < b.begin; });
  return v;
}

/// The stage actors of a trace: by stage (the first one tagged), and by (rank, stage).
struct stage_actors {
  std::map<std::int64_t, const actor_info*> by_stage;
  std::map<std::pair<std::int64_t, std::int64_t>, const actor_info*> by_rank;
  explicit stage_actors(const trace_model& m) {
    for (const auto& [id, a] : m.actors) {
      if (a.pipeline_stage < 0) continue;
      by_stage.try_emplace(a.pipeline_stage, &a);
      by_rank.try_emplace({a.rank, a.pipeline_stage}, &a);
    }
  }
  /// The actor of stage `stage` on `rank` (-1: not a merged trace), else any actor of the stage.
  const actor_info* find(std::int64_t rank, std::int64_t stage) const {
    if (auto it = by_rank.find({rank, stage}); it != by_rank.end()) return it->second;
    auto it = by_stage.find(stage);
    return it == by_stage.end() ? nullptr : it->second;
  }
};

/// The pipeline section from the stages' device tracks (docs/trace-tools.md, "Pipeline tags").
/// Stage busy = union of the stage's work; device busy = union of the work of every stage on
/// the device; bubble = 1 - sum(device busy) / (devices x wall).
json pipeline_from_devices(const trace_model& m, const stage_actors& actors, std::int64_t tagged_max_mb) {
  std::map<std::int64_t, std::vector<const device_slice*>> stage_work;
  std::map<device_group, std::vector<const device_slice*>> device_work;
  std::map<device_group, std::set<std::int64_t>> device_stages;
  std::map<std::int64_t, device_group> stage_device;  // the first device a stage's work was seen on
  for (const auto& [key, slices] : m.streams) {
    const std::int64_t stage = stage_of_device(key.first);
    if (stage < 0) continue;
    const std::int64_t rank = m.device_rank(key.first);
    const actor_info* a = actors.find(rank, stage);
    device_group g;
    if (a != nullptr && a->device_key) {
      g.rank = rank >= 0 ? rank : a->rank;
      g.key = *a->device_key;
    } else {
      g.own = true;
      g.stage = stage;
    }
    stage_device.try_emplace(stage, g);
    device_stages[g].insert(stage);
    for (const auto& s : slices) {
      stage_work[stage].push_back(&s);
      device_work[g].push_back(&s);
    }
  }

  std::uint64_t wall_begin = UINT64_MAX, wall_end = 0, busy_total = 0;
  std::int64_t named_max_mb = -1;
  json per_stage = json::array();
  for (const auto& [stage, work] : stage_work) {
    std::uint64_t count[work_phases] = {};  // by work_phase
    std::vector<const device_slice*> of_phase[work_phases];
    for (const auto* w : work) {
      wall_begin = std::min(wall_begin, w->begin);
      wall_end = std::max(wall_end, w->end);
      named_max_mb = std::max(named_max_mb, w->micro_batch);
      ++count[static_cast<std::size_t>(w->phase)];
      of_phase[static_cast<std::size_t>(w->phase)].push_back(w);
    }
    auto phase_ns = [&](work_phase p) { return union_length(sorted_copy(of_phase[static_cast<std::size_t>(p)])); };
    auto phase_count = [&](work_phase p) { return count[static_cast<std::size_t>(p)]; };
    const std::uint64_t busy = union_length(sorted_copy(work));  // streams of one device may overlap
    busy_total += busy;
    auto a = actors.by_stage.find(stage);
    const device_group& g = stage_device.at(stage);
    per_stage.push_back({{"stage", stage}, {"actor", a == actors.by_stage.end() ? json("-") : json(a->second->name)},
                         {"device", stage_device_base + static_cast<std::uint64_t>(stage)}, {"busy_ns", busy},
                         {"forward_slices", phase_count(work_phase::forward)},
                         {"backward_slices", phase_count(work_phase::backward)},
                         {"weight_slices", phase_count(work_phase::weight)},
                         {"other_slices", phase_count(work_phase::update) + phase_count(work_phase::other)},
                         {"update_slices", phase_count(work_phase::update)},
                         {"forward_ns", phase_ns(work_phase::forward)}, {"backward_ns", phase_ns(work_phase::backward)},
                         {"weight_ns", phase_ns(work_phase::weight)}, {"on_device", g.name()},
                         {"device_key", g.own ? json(nullptr) : json(g.key)}});
  }

  const std::uint64_t wall = wall_end > wall_begin ? wall_end - wall_begin : 0;
  std::uint64_t device_busy_total = 0;
  json per_device = json::array();
  for (const auto& [g, work] : device_work) {
    const std::uint64_t busy = union_length(sorted_copy(work));  // stages sharing it may overlap
    device_busy_total += busy;
    json d = {{"device", g.name()}, {"device_key", g.own ? json(nullptr) : json(g.key)},
              {"stages", device_stages[g]}, {"busy_ns", busy}};
    if (!g.own && g.rank >= 0) d["rank"] = g.rank;
    per_device.push_back(std::move(d));
  }
  const std::size_t devices = device_work.size();
  json p;
  p["stages"] = stage_work.size();
  if (tagged_max_mb >= 0) {
    p["micro_batches"] = tagged_max_mb + 1;
    p["micro_batches_from"] = "handler tags";
  } else if (named_max_mb >= 0) {
    p["micro_batches"] = named_max_mb + 1;
    p["micro_batches_from"] = "device work names";
  } else {
    p["micro_batches"] = nullptr;
    p["micro_batches_from"] = nullptr;
  }
  p["source"] = "device";
  p["counted_slices"] = "device work on the stages' device tracks (device 1000000000 + stage)";
  p["wall_ns"] = wall;
  p["busy_ns"] = busy_total;
  p["devices"] = devices;
  p["device_busy_ns"] = device_busy_total;
  p["bubble_denominator"] = std::to_string(stage_work.size()) + " stages on " + std::to_string(devices) +
                            (devices == 1 ? " device" : " devices");
  p["bubble"] = wall > 0 && devices > 0
                    ? 1.0 - static_cast<double>(device_busy_total) / (static_cast<double>(devices) * static_cast<double>(wall))
                    : 0.0;
  p["ideal_bubble"] = m.ideal_bubble ? json(*m.ideal_bubble) : json(nullptr);
  p["per_stage"] = std::move(per_stage);
  p["per_device"] = std::move(per_device);
  return p;
}

/// The pipeline section from the stage actors' handler slices (traces without stage device
/// tracks): the tagged forward/backward slices, or all of them when none is tagged.
json pipeline_from_handlers(const trace_model& m, const stage_actors& actors, std::int64_t tagged_max_mb) {
  const bool tagged = tagged_max_mb >= 0;
  std::uint64_t wall_begin = UINT64_MAX, wall_end = 0, busy_total = 0;
  std::int64_t max_mb = -1;
  json per_stage = json::array();
  for (const auto& [stage, a] : actors.by_stage) {
    std::uint64_t busy = 0, fwd = 0, bwd = 0;
    for (const auto& s : a->slices) {
      if (tagged && s.phase == pipeline_phase::none) continue;
      wall_begin = std::min(wall_begin, s.begin);
      wall_end = std::max(wall_end, s.end);
      busy += s.end - s.begin;
      fwd += s.phase == pipeline_phase::forward;
      bwd += s.phase == pipeline_phase::backward;
      max_mb = std::max(max_mb, s.micro_batch);
    }
    busy_total += busy;
    per_stage.push_back({{"stage", a->pipeline_stage}, {"actor", a->name}, {"busy_ns", busy},
                         {"forward_slices", fwd}, {"backward_slices", bwd}});
  }
  std::uint64_t wall = wall_end > wall_begin ? wall_end - wall_begin : 0;
  json p;
  p["stages"] = actors.by_stage.size();
  p["micro_batches"] = max_mb + 1;
  p["source"] = "handlers";
  p["counted_slices"] = tagged ? "tagged forward/backward handler slices" : "all handler slices of stage actors";
  p["wall_ns"] = wall;
  p["busy_ns"] = busy_total;
  p["bubble"] = wall > 0 ? 1.0 - static_cast<double>(busy_total) /
                                     (static_cast<double>(actors.by_stage.size()) * static_cast<double>(wall))
                         : 0.0;
  p["ideal_bubble"] = m.ideal_bubble ? json(*m.ideal_bubble) : json(nullptr);
  p["per_stage"] = std::move(per_stage);
  return p;
}

/// The pipeline bubble (null without stage tags or stage device tracks). Stage busy is the
/// device time of the stage's device track when the trace has one for every tagged stage
/// (device work stamped with its real start and end), else the handler time of the stage actors.
json pipeline_json(const trace_model& m) {
  const stage_actors actors(m);
  std::set<std::int64_t> stages_with_work;
  for (const auto& [key, slices] : m.streams)
    if (const std::int64_t stage = stage_of_device(key.first); stage >= 0) stages_with_work.insert(stage);
  bool device_path = !stages_with_work.empty();
  for (const auto& [stage, a] : actors.by_stage) device_path &= stages_with_work.count(stage) != 0;
  std::int64_t tagged_max_mb = -1;
  for (const auto& [stage, a] : actors.by_stage)
    for (const auto& s : a->slices)
      if (s.phase != pipeline_phase::none) tagged_max_mb = std::max(tagged_max_mb, s.micro_batch);
  if (device_path) return pipeline_from_devices(m, actors, tagged_max_mb);
  if (actors.by_stage.empty()) return nullptr;
  return pipeline_from_handlers(m, actors, tagged_max_mb);
}

/// "0, 2, 5".
std::string joined(const json& numbers) {
  std::string s;
  for (const auto& n : numbers) s += (s.empty() ? "" : ", ") + std::to_string(n.get<std::int64_t>());
  return s;
}

/// The pipeline section of the text summary: one line of figures, the devices that stages
/// share (when some do), and a row per stage.
void print_pipeline(const json& p, std::ostream& out) {
  const bool from_device = p.value("source", "handlers") == "device";
  out << "\npipeline: " << p["stages"] << " stages, ";
  if (!p["micro_batches"].is_null()) out << p["micro_batches"] << " micro-batches, ";
  out << "wall " << format_ns(p["wall_ns"]) << ", measured bubble " << format_fixed(100.0 * p["bubble"].get<double>(), 1)
      << " %";
  if (!p["ideal_bubble"].is_null())
    out << " (schedule's ideal " << format_fixed(100.0 * p["ideal_bubble"].get<double>(), 1) << " %)";
  out << (from_device ? "; busy = device work of each stage's device track" : "; busy = stage actors' handler time");
  if (p.contains("bubble_denominator")) out << "; " << p["bubble_denominator"].get<std::string>();
  out << "\n";
  bool shared = false, weight = false;
  if (p.contains("per_device"))
    for (const auto& d : p["per_device"]) shared |= d["stages"].size() > 1;
  for (const auto& st : p["per_stage"]) weight |= st.value("weight_slices", std::uint64_t{0}) > 0;
  if (shared) {
    out << "  shared devices (busy = union of their stages' work; bubble = 1 - device busy / (" << p["devices"]
        << " devices x wall)):";
    const char* sep = " ";
    for (const auto& d : p["per_device"]) {
      out << sep << d["device"].get<std::string>() << " runs stages " << joined(d["stages"]) << ", busy "
          << format_ns(d["busy_ns"]);
      sep = "; ";
    }
    out << "\n";
  }
  std::vector<std::string> header{"stage", "actor"};
  if (from_device) header.push_back("device");
  for (const char* h : {"busy", "forward", "backward"}) header.push_back(h);
  if (from_device) {
    if (weight) header.push_back("weight");
    for (const char* h : {"other", "forward time", "backward time"}) header.push_back(h);
    if (weight) header.push_back("weight time");
    header.push_back("runs on");
  }
  text_table t(header);
  for (const auto& st : p["per_stage"]) {
    std::vector<std::string> row{std::to_string(st["stage"].get<std::int64_t>()), st["actor"].get<std::string>()};
    if (from_device) row.push_back(std::to_string(st["device"].get<std::uint64_t>()));
    row.push_back(format_ns(st["busy_ns"]));
    row.push_back(std::to_string(st["forward_slices"].get<std::uint64_t>()));
    row.push_back(std::to_string(st["backward_slices"].get<std::uint64_t>()));
    if (from_device) {
      if (weight) row.push_back(std::to_string(st["weight_slices"].get<std::uint64_t>()));
      row.push_back(std::to_string(st["other_slices"].get<std::uint64_t>()));
      row.push_back(format_ns(st["forward_ns"]));
      row.push_back(format_ns(st["backward_ns"]));
      if (weight) row.push_back(format_ns(st["weight_ns"]));
      row.push_back(st["on_device"].get<std::string>());
    }
    t.add(std::move(row));
  }
  t.print(out);
}

}  // namespace

json summary_json(const trace_model& m) {
  const trace_file& f = *m.file;
  json out;
  out["file"] = f.name;
  out["format_version"] = f.version;
  out["start_unix_ns"] = f.start_unix_ns;
  out["events"] = f.events.size();
  out["events_lost_by_recorder"] = f.dropped;
  out["unknown_events_skipped"] = m.unknown_events;
  out["span_ns"] = m.span();
  if (f.version >= 2) {
    out["rank"] = f.merged() ? json("all") : json(f.rank);
    out["world_size"] = f.world_size;
    out["job_id"] = f.job_id;
    out["clock_offset_ns"] = f.clock_offset_ns;
    out["clock_uncertainty_ns"] = f.clock_uncertainty_ns;
  }
  if (m.remote_sends + m.remote_receipts > 0) {
    std::uint64_t linked = 0;  // sends to another rank whose handling is in this trace (merged)
    for (const auto& fl : m.flows) {
      auto s = m.send_by_msg.find(fl.msg);
      if (s != m.send_by_msg.end() && m.sends[s->second].remote) ++linked;
    }
    out["cross_rank"] = {{"sent", m.remote_sends}, {"received", m.remote_receipts}, {"linked", linked}};
  }

  if (!m.transfers.empty()) out["transfers"] = transfers_json(m);

  // Mailbox waits per receiving actor, latencies per type.
  std::map<std::uint64_t, std::vector<std::uint64_t>> waits;
  std::map<std::uint32_t, std::vector<std::uint64_t>> latency;
  for (const auto& fl : m.flows) {
    if (fl.enqueue_ts != 0 && fl.handle_ts >= fl.enqueue_ts) waits[fl.receiver].push_back(fl.handle_ts - fl.enqueue_ts);
    if (fl.handle_ts >= fl.send_ts) latency[fl.type].push_back(fl.handle_ts - fl.send_ts);
  }

  json actors = json::array();
  for (const auto& [id, a] : m.actors) {
    if (id == 0) continue;
    std::vector<std::uint64_t> durations;
    std::uint64_t busy = 0;
    for (const auto& s : a.slices) {
      durations.push_back(s.end - s.begin);
      busy += s.end - s.begin;
    }
    const std::uint64_t life_end = a.lifetime_end(m.end);
    const std::uint64_t lifetime = life_end > a.first_ts ? life_end - a.first_ts : 0;
    // Time-weighted mean depth over the lifetime.
    std::uint32_t max_depth = 0;
    double area = 0;
    std::uint64_t prev_ts = a.first_ts;
    std::uint32_t prev_depth = 0;
    for (const auto& d : a.depth) {
      max_depth = std::max(max_depth, d.depth);
      std::uint64_t ts = std::clamp(d.ts, a.first_ts, life_end);
      if (ts > prev_ts) area += static_cast<double>(prev_depth) * static_cast<double>(ts - prev_ts);
      prev_ts = std::max(prev_ts, ts);
      prev_depth = d.depth;
    }
    if (life_end > prev_ts) area += static_cast<double>(prev_depth) * static_cast<double>(life_end - prev_ts);
    json j;
    j["id"] = id;
    j["name"] = a.name;
    j["lifetime_ns"] = lifetime;
    j["exited"] = a.exit_ts.has_value();
    j["exit_reason"] = a.exit_ts ? json(errc_name(a.exit_code)) : json(nullptr);
    j["messages_in"] = a.enqueued;
    j["handled"] = a.handled;
    j["messages_out"] = a.sent;
    j["unhandled"] = a.unhandled;
    j["busy_ns"] = busy;
    j["busy_percent"] = 100.0 * ratio(static_cast<double>(busy), static_cast<double>(lifetime));
    j["mailbox_depth_max"] = max_depth;
    j["mailbox_depth_mean"] = lifetime > 0 ? area / static_cast<double>(lifetime) : 0.0;
    j["handler_ns"] = quantiles(durations);
    j["mailbox_wait_ns"] = quantiles(waits[id]);
    if (a.pipeline_stage >= 0) j["pipeline_stage"] = a.pipeline_stage;
    if (a.rank >= 0) j["rank"] = a.rank;
    actors.push_back(std::move(j));
  }
  out["actors"] = std::move(actors);

  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> type_counts;  // sent, handled
  for (const auto& s : m.sends) ++type_counts[s.type].first;
  for (const auto& [id, a] : m.actors)
    for (const auto& s : a.slices) ++type_counts[s.type].second;
  json types = json::array();
  for (auto& [type, counts] : type_counts) {
    types.push_back({{"type", f.type_name(type)},
                     {"sent", counts.first},
                     {"handled", counts.second},
                     {"latency_ns", quantiles(latency[type])}});
  }
  out["message_types"] = std::move(types);

  json streams = json::array();
  for (const auto& [key, slices] : m.streams) {
    std::uint64_t busy = union_length(slices);
    std::uint64_t first = slices.empty() ? 0 : slices.front().begin, last = 0;
    for (const auto& s : slices) last = std::max(last, s.end);
    streams.push_back({{"device", m.local_device(key.first)},
                       {"stream", key.second},
                       {"work_items", slices.size()},
                       {"busy_ns", busy},
                       {"utilisation_percent", 100.0 * ratio(static_cast<double>(busy), static_cast<double>(m.span()))},
                       {"active_utilisation_percent",
                        100.0 * ratio(static_cast<double>(busy), static_cast<double>(last > first ? last - first : 0))}});
    if (m.device_rank(key.first) >= 0) streams.back()["rank"] = m.device_rank(key.first);
  }
  out["device_streams"] = std::move(streams);

  std::map<std::string, std::uint64_t> by_reason;
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> by_detail;
  for (const auto& d : m.drops) {
    ++by_reason[errc_name(d.reason)];
    ++by_detail[{m.actor_name(d.receiver), f.type_name(d.type), errc_name(d.reason)}];
  }
  json details = json::array();
  for (const auto& [k, n] : by_detail)
    details.push_back({{"receiver", std::get<0>(k)}, {"type", std::get<1>(k)}, {"reason", std::get<2>(k)}, {"count", n}});
  out["drops"] = {{"total", m.drops.size()}, {"by_reason", by_reason}, {"details", details}};

  out["pipeline"] = pipeline_json(m);
  out["critical_path"] = critical_path_json(m);
  return out;
}

void print_summary(const json& s, std::ostream& out) {
  out << "trace " << s["file"].get<std::string>() << ": " << s["events"] << " events over "
      << format_ns(s["span_ns"]) << " (format version " << s["format_version"] << ")";
  if (s["events_lost_by_recorder"].get<std::uint64_t>() > 0)
    out << "; " << s["events_lost_by_recorder"] << " events lost to the recording limit";
  if (s["unknown_events_skipped"].get<std::uint64_t>() > 0)
    out << "; " << s["unknown_events_skipped"] << " events of unknown kinds skipped";
  if (s.contains("rank")) {
    if (s["rank"].is_string()) out << "\nmerged from the ranks of a world of " << s["world_size"];
    else out << "\nrank " << s["rank"] << " of a world of " << s["world_size"];
    out << ", job " << s["job_id"] << ", clock offset to rank 0 " << s["clock_offset_ns"] << " ns (+/- "
        << s["clock_uncertainty_ns"] << " ns)";
  }
  if (s.contains("cross_rank"))
    out << "\ncross-rank messages: " << s["cross_rank"]["sent"] << " sent, " << s["cross_rank"]["received"]
        << " received, " << s["cross_rank"]["linked"] << " linked from send to handling";
  out << "\n\nactors\n";
  text_table actors({"actor", "id", "in", "handled", "out", "busy %", "depth max", "depth mean", "handler p50",
                     "handler p99", "wait p50", "wait p99", "exit"});
  for (const auto& a : s["actors"]) {
    actors.add({a["name"].get<std::string>(), std::to_string(a["id"].get<std::uint64_t>()),
                std::to_string(a["messages_in"].get<std::uint64_t>()), std::to_string(a["handled"].get<std::uint64_t>()),
                std::to_string(a["messages_out"].get<std::uint64_t>()), format_fixed(a["busy_percent"].get<double>(), 1),
                std::to_string(a["mailbox_depth_max"].get<std::uint64_t>()),
                format_fixed(a["mailbox_depth_mean"].get<double>(), 2), format_ns(a["handler_ns"]["p50"]),
                format_ns(a["handler_ns"]["p99"]), format_ns(a["mailbox_wait_ns"]["p50"]),
                format_ns(a["mailbox_wait_ns"]["p99"]),
                a["exit_reason"].is_null() ? "-" : a["exit_reason"].get<std::string>()});
  }
  actors.print(out);

  out << "\nmessage types (latency: send -> handler start)\n";
  text_table types({"type", "sent", "handled", "latency p50", "latency p99"});
  for (const auto& t : s["message_types"])
    types.add({short_type_name(t["type"].get<std::string>()), std::to_string(t["sent"].get<std::uint64_t>()),
               std::to_string(t["handled"].get<std::uint64_t>()), format_ns(t["latency_ns"]["p50"]),
               format_ns(t["latency_ns"]["p99"])});
  types.print(out);

  if (!s["device_streams"].empty()) {
    out << "\ndevice streams (utilisation over the trace span / over the stream's active window)\n";
    text_table streams({"device", "stream", "work items", "busy", "util %", "active util %"});
    for (const auto& d : s["device_streams"])
      streams.add({std::to_string(d["device"].get<std::uint64_t>()) +
                       (d.contains("rank") ? "@r" + std::to_string(d["rank"].get<std::int64_t>()) : std::string()),
                   std::to_string(d["stream"].get<std::uint64_t>()),
                   std::to_string(d["work_items"].get<std::uint64_t>()), format_ns(d["busy_ns"]),
                   format_fixed(d["utilisation_percent"].get<double>(), 1),
                   format_fixed(d["active_utilisation_percent"].get<double>(), 1)});
    streams.print(out);
  }

  if (s.contains("transfers")) {
    const auto& x = s["transfers"];
    out << "\ntransfers between ranks (tensor data and collectives, as the communication thread saw them)\n";
    text_table t({"rank", "what", "count", "bytes", "busy", "p50", "p99", "unfinished"});
    for (const auto& r : x["by_rank"])
      t.add({std::to_string(r["rank"].get<std::uint64_t>()), r["what"].get<std::string>(),
             std::to_string(r["count"].get<std::uint64_t>()), std::to_string(r["bytes"].get<std::uint64_t>()),
             format_ns(r["busy_ns"]), format_ns(r["duration_ns"]["p50"]), format_ns(r["duration_ns"]["p99"]),
             std::to_string(r["unfinished"].get<std::uint64_t>())});
    t.print(out);
    if (x.contains("linked"))
      out << "send posted -> received: " << x["linked"] << " linked (" << x["unmatched_sends"]
          << " sends without their receive), p50 " << format_ns(x["send_to_received_ns"]["p50"]) << ", p99 "
          << format_ns(x["send_to_received_ns"]["p99"]) << "; throughput p50 " << x["throughput_mb_per_s"]["p50"]
          << " MB/s\n";
  }

  const auto& drops = s["drops"];
  out << "\ndrops and unhandled messages: " << drops["total"] << "\n";
  if (!drops["details"].empty()) {
    text_table t({"receiver", "type", "reason", "count"});
    for (const auto& d : drops["details"])
      t.add({d["receiver"].get<std::string>(), short_type_name(d["type"].get<std::string>()),
             d["reason"].get<std::string>(), std::to_string(d["count"].get<std::uint64_t>())});
    t.print(out);
  }

  if (!s["pipeline"].is_null()) print_pipeline(s["pipeline"], out);

  if (s.contains("critical_path") && !s["critical_path"].is_null()) {
    const auto& cp = s["critical_path"];
    const double total = cp["total_ns"].get<double>();
    auto share = [&](const char* key) {
      return format_ns(cp[key]) + " (" + format_fixed(100.0 * ratio(cp[key].get<double>(), total), 1) + " %)";
    };
    const auto& last = cp["last_handled"];
    out << "\ncritical path: " << format_ns(cp["total_ns"]) << " (" << format_fixed(cp["span_percent"].get<double>(), 1)
        << " % of the span), " << cp["segment_count"] << " segments, ending with "
        << (last["actor"].is_null() ? std::string("-") : last["actor"].get<std::string>()) << " handling "
        << (last["type"].is_null() ? std::string("-") : short_type_name(last["type"].get<std::string>())) << " at "
        << format_ns(cp["end_ns"]) << "\n";
    out << "  handler " << share("handler_ns") << ", mailbox wait " << share("wait_ns") << ", device "
        << share("device_ns") << ", other " << share("other_ns") << "\n";
    out << "  longest segments:\n";
    text_table t({"kind", "actor", "message / work", "start", "duration"});
    for (const auto& seg : cp["top_segments"])
      t.add({seg["kind"].get<std::string>(), seg["actor"].is_null() ? "-" : seg["actor"].get<std::string>(),
             seg["type"].is_null() ? "-" : short_type_name(seg["type"].get<std::string>()), format_ns(seg["begin_ns"]),
             format_ns(seg["duration_ns"])});
    t.print(out);
  }
}

std::string short_type_name(const std::string& type) {
  // Drop template arguments, then namespaces.
  std::string base;
  int depth = 0;
  bool had_args = false;
  for (char c : type) {
    if (c == '<') {
      if (depth++ == 0) had_args = true;
      continue;
    }
    if (c == '>') {
      if (depth > 0) --depth;
      continue;
    }
    if (depth == 0) base += c;
  }
  auto colon = base.rfind("::");
  if (colon != std::string::npos) base = base.substr(colon + 2);
  if (base.empty()) return type;
  return had_args ? base + "<...>" : base;
}

}  // namespace strata::trace_tools
