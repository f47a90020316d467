// Chrome Trace Event JSON (the "JSON Object Format" read by Perfetto and chrome://tracing).
//
// Tracks: pid 1 holds one thread per actor (tid = actor id) plus tid 0 "external" for sends
// from outside actors; pid 2 holds one thread per device stream. Slices never partially
// overlap on a track, every flow has both ends, and each end lies strictly inside a slice on
// its track (flow ends bind to the enclosing slice), so both viewers draw every arrow.

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "trace_views.hpp"

namespace strata::trace_tools {

using nlohmann::json;

namespace {

constexpr int actor_pid = 1;
constexpr int device_pid = 2;
constexpr int network_pid = 3;  // transfers between ranks, in a trace of one rank
constexpr std::uint64_t anchor_ns = 1000;  // length of the small slice that holds an outside send

double us(std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

/// "512 B", "4.0 KiB", "64.0 MiB".
std::string byte_size(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* unit = "KiB";
  double v = static_cast<double>(bytes) / 1024.0;
  if (v >= 1024.0) v /= 1024.0, unit = "MiB";
  if (v >= 1024.0) v /= 1024.0, unit = "GiB";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", v, unit);
  return text;
}

struct span {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  json event;  // the "X" event, without ts/dur
};

/// A point strictly inside [b, e] when the slice is long enough (viewers bind flow ends to the
/// slice enclosing them; a point on a boundary could bind to a neighbour).
std::uint64_t inside(std::uint64_t ts, std::uint64_t b, std::uint64_t e) {
  if (e - b < 2) return b;
  return std::clamp(ts, b + 1, e - 1);
}

/// Index of the slice containing ts (begin <= ts <= end) in sorted, disjoint `spans`.
std::optional<std::size_t> enclosing(const std::vector<span>& spans, std::uint64_t ts) {
  auto it = std::upper_bound(spans.begin(), spans.end(), ts, [](std::uint64_t t, const span& s) { return t < s.begin; });
  if (it == spans.begin()) return std::nullopt;
  --it;
  if (ts <= it->end) return static_cast<std::size_t>(it - spans.begin());
  return std::nullopt;
}

/// Makes sorted spans disjoint (a slice starting before the previous one ended is clipped).
void make_disjoint(std::vector<span>& spans) {
  std::stable_sort(spans.begin(), spans.end(), [](const span& a, const span& b) { return a.begin < b.begin; });
  std::uint64_t prev_end = 0;
  bool first = true;
  for (auto& s : spans) {
    if (!first && s.begin < prev_end) {
      s.begin = prev_end;
      s.end = std::max(s.end, s.begin);
    }
    prev_end = s.end;
    first = false;
  }
}

/// Adds small "send" slices at `points` (sorted, distinct, none inside `spans`), each ending
/// before the next point or slice.
void add_anchors(std::vector<span>& spans, const std::vector<std::uint64_t>& points, const std::string& name) {
  std::vector<span> added;
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::uint64_t t = points[i];
    std::uint64_t limit = t + anchor_ns;
    if (i + 1 < points.size()) limit = std::min(limit, points[i + 1] - 1);
    auto next = std::upper_bound(spans.begin(), spans.end(), t, [](std::uint64_t v, const span& s) { return v < s.begin; });
    if (next != spans.end()) limit = std::min(limit, next->begin - 1);
    span s;
    s.begin = t;
    s.end = std::max(limit, t);
    s.event = {{"name", name}, {"cat", "send"}};
    added.push_back(std::move(s));
  }
  spans.insert(spans.end(), added.begin(), added.end());
  std::stable_sort(spans.begin(), spans.end(), [](const span& a, const span& b) { return a.begin < b.begin; });
}

/// Chrome Trace Event JSON built a part at a time; chrome_trace() lists the parts in order.
class chrome_exporter {
public:
  explicit chrome_exporter(const trace_model& m) : m_(m), f_(*m.file), merged_(f_.merged()) {}

  /// One process for the actors, or in a merged trace (strata-trace merge) one per rank holding
  /// that rank's actors and device streams; sends from outside actors stay on tid 0 of rank 0's.
  void add_processes() {
    if (!merged_) {
      meta("process_name", actor_pid, 0, {{"name", "strata actors"}});
      meta("process_sort_index", actor_pid, 0, {{"sort_index", 1}});
      return;
    }
    std::set<int> pids;
    pids.insert(1);
    for (const auto& [id, a] : m_.actors) pids.insert(pid_of(id));
    for (const auto& [key, slices] : m_.streams) pids.insert(static_cast<int>(m_.device_rank(key.first)) + 1);
    for (int pid : pids) {
      meta("process_name", pid, 0, {{"name", "strata rank " + std::to_string(pid - 1)}});
      meta("process_sort_index", pid, 0, {{"sort_index", pid}});
    }
  }

  /// A track per actor: its handler slices, and a small slice of its own for each send outside
  /// any handler; named and emitted.
  void add_actor_tracks() {
    for (const auto& [id, a] : m_.actors) {
      auto& spans = tracks_[id];
      for (const auto& s : a.slices) spans.push_back(handler_span(s));
      make_disjoint(spans);
    }
    std::map<std::uint64_t, std::vector<std::uint64_t>> outside;
    for (const auto& fl : m_.flows) {
      auto& spans = tracks_[fl.sender];
      if (!enclosing(spans, fl.send_ts)) outside[fl.sender].push_back(fl.send_ts);
    }
    for (auto& [id, points] : outside) {
      std::sort(points.begin(), points.end());
      points.erase(std::unique(points.begin(), points.end()), points.end());
      add_anchors(tracks_[id], points, id == 0 ? "send" : "send (outside a handler)");
    }
    int sort_index = 0;
    for (auto& [id, spans] : tracks_) {
      if (spans.empty() && id != 0 && m_.actors.count(id) == 0) continue;
      std::string name = id == 0 ? "external (outside actors)" : m_.actor_name(id) + " #" + std::to_string(id);
      meta("thread_name", pid_of(id), id, {{"name", name}});
      meta("thread_sort_index", pid_of(id), id, {{"sort_index", id == 0 ? 0 : ++sort_index}});
    }
    for (const auto& [id, spans] : tracks_) emit_spans(pid_of(id), id, spans);
  }

  /// Flow arrows: both ends present by construction (flows are sends whose handler_begin is in the trace).
  void add_flows() {
    for (const auto& fl : m_.flows) {
      const auto& from = tracks_[fl.sender];
      const auto& to = tracks_[fl.receiver];
      auto s_idx = enclosing(from, fl.send_ts);
      auto f_idx = enclosing(to, fl.handle_ts);
      if (!s_idx || !f_idx) continue;  // a clipped slice no longer covers the point
      const auto& fs = from[*s_idx];
      const auto& ts = to[*f_idx];
      ++flow_id_;
      std::string name = short_type_name(f_.type_name(fl.type));
      events_.push_back({{"name", name}, {"cat", "message"}, {"ph", "s"}, {"id", flow_id_}, {"pid", pid_of(fl.sender)},
                         {"tid", fl.sender}, {"ts", us(inside(fl.send_ts, fs.begin, fs.end))}});
      events_.push_back({{"name", name}, {"cat", "message"}, {"ph", "f"}, {"bp", "e"}, {"id", flow_id_},
                         {"pid", pid_of(fl.receiver)}, {"tid", fl.receiver}, {"ts", us(inside(fl.handle_ts, ts.begin, ts.end))}});
    }
  }

  /// Mailbox depth counters.
  void add_mailbox_depths() {
    for (const auto& [id, a] : m_.actors) {
      if (a.depth.empty()) continue;
      std::string name = "mailbox " + a.name + " #" + std::to_string(id);
      for (const auto& d : a.depth)
        events_.push_back({{"name", name}, {"ph", "C"}, {"pid", pid_of(id)}, {"tid", id}, {"ts", us(d.ts)},
                           {"args", {{"depth", d.depth}}}});
    }
  }

  /// Drops and exits as instants on the receiver's track.
  void add_drops_and_exits() {
    for (const auto& d : m_.drops) {
      if (tracks_.count(d.receiver) == 0) continue;
      events_.push_back({{"name", "drop " + errc_name(d.reason)}, {"ph", "i"}, {"s", "t"}, {"pid", pid_of(d.receiver)},
                         {"tid", d.receiver}, {"ts", us(d.ts)},
                         {"args", {{"type", f_.type_name(d.type)}, {"sender", m_.actor_name(d.sender)}}}});
    }
    for (const auto& [id, a] : m_.actors) {
      if (!a.exit_ts) continue;
      events_.push_back({{"name", "exit " + errc_name(a.exit_code)}, {"ph", "i"}, {"s", "t"}, {"pid", pid_of(id)},
                         {"tid", id}, {"ts", us(*a.exit_ts)}, {"args", {{"reason", a.exit_reason}}}});
    }
  }

  /// A track per device stream; in a merged trace below the rank's actors (tids past every
  /// actor id).
  void add_device_streams() {
    if (m_.streams.empty()) return;
    if (!merged_) {
      meta("process_name", device_pid, 0, {{"name", "strata devices"}});
      meta("process_sort_index", device_pid, 0, {{"sort_index", 2}});
    }
    std::uint64_t tid = merged_ ? std::uint64_t{1} << 40 : 0;
    for (const auto& [key, slices] : m_.streams) {
      ++tid;
      const int pid = merged_ ? static_cast<int>(m_.device_rank(key.first)) + 1 : device_pid;
      const std::uint64_t device = m_.local_device(key.first);
      const std::int64_t stage = stage_of_device(key.first);
      meta("thread_name", pid, tid,
           {{"name", stage >= 0 ? "stage " + std::to_string(stage) + " device #" + std::to_string(device) + " stream " +
                                      std::to_string(key.second) + stage_device_name(m_.device_rank(key.first), stage)
                                : "device " + std::to_string(device) + " stream " + std::to_string(key.second)}});
      meta("thread_sort_index", pid, tid, {{"sort_index", tid}});
      std::vector<span> spans;
      for (const auto& s : slices) spans.push_back(work_span(s, stage));
      make_disjoint(spans);
      emit_spans(pid, tid, spans);
    }
  }

  /// Transfers between ranks (kinds 16 and 17): per rank and direction, one lane for each transfer
  /// in flight at once, below the rank's device streams; in a merged trace an arrow joins each
  /// send to the receive of the same tag on the other rank.
  void add_transfers() {
    if (m_.transfers.empty()) return;
    if (!merged_) {
      meta("process_name", network_pid, 0, {{"name", "strata network"}});
      meta("process_sort_index", network_pid, 0, {{"sort_index", 3}});
    }
    std::vector<lane_key> lane_of(m_.transfers.size());
    const auto lanes = transfer_lanes(lane_of);
    std::map<lane_key, std::uint64_t> lane_tid;
    std::uint64_t tid = std::uint64_t{1} << 41;  // past every actor id and device track
    for (const auto& [key, spans] : lanes) {
      const auto& [rank, what, lane] = key;
      lane_tid[key] = ++tid;
      meta("thread_name", pid_of_rank(rank), tid,
           {{"name", "network " + transfer_name(what) + "s" + (lane > 0 ? " (" + std::to_string(lane + 1) + ")" : "")}});
      meta("thread_sort_index", pid_of_rank(rank), tid, {{"sort_index", tid}});
      emit_spans(pid_of_rank(rank), tid, spans);  // disjoint by construction
    }
    for (const auto& [a, b] : m_.transfer_links) {  // merged traces only
      const auto& from = m_.transfers[a];
      const auto& to = m_.transfers[b];
      ++flow_id_;
      events_.push_back({{"name", "tensor data"}, {"cat", "network"}, {"ph", "s"}, {"id", flow_id_},
                         {"pid", pid_of_rank(from.rank)}, {"tid", lane_tid.at(lane_of[a])},
                         {"ts", us(inside(from.begin, from.begin, from.end))}});
      events_.push_back({{"name", "tensor data"}, {"cat", "network"}, {"ph", "f"}, {"bp", "e"}, {"id", flow_id_},
                         {"pid", pid_of_rank(to.rank)}, {"tid", lane_tid.at(lane_of[b])},
                         {"ts", us(inside(to.end, to.begin, to.end))}});
    }
  }

  json result() && {
    return {{"traceEvents", std::move(events_)},
            {"displayTimeUnit", "ns"},
            {"otherData", {{"source", f_.name}, {"format_version", f_.version}, {"start_unix_ns", f_.start_unix_ns}}}};
  }

private:
  using lane_key = std::tuple<std::uint64_t, trace::transfer, std::size_t>;  // rank, what, lane

  void meta(const char* what, int pid, std::uint64_t tid, json args) {
    events_.push_back({{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}});
  }

  int pid_of(std::uint64_t actor) const {
    if (!merged_) return actor_pid;
    auto it = m_.actors.find(actor);
    return it != m_.actors.end() && it->second.rank >= 0 ? static_cast<int>(it->second.rank) + 1 : 1;
  }

  int pid_of_rank(std::uint64_t rank) const { return merged_ ? static_cast<int>(rank) + 1 : network_pid; }

  void emit_spans(int pid, std::uint64_t tid, const std::vector<span>& spans) {
    for (const auto& s : spans) {
      json e = s.event;
      e["ph"] = "X";
      e["pid"] = pid;
      e["tid"] = tid;
      e["ts"] = us(s.begin);
      e["dur"] = us(s.end - s.begin);
      events_.push_back(std::move(e));
    }
  }

  span handler_span(const handler_slice& s) const {
    json args = {{"msg", s.msg}, {"sender", m_.actor_name(s.sender)}, {"sender_id", s.sender}};
    if (s.threw) args["threw"] = true;
    if (s.unfinished) args["unfinished"] = true;
    if (s.phase != pipeline_phase::none) {
      args["pipeline"] = s.phase == pipeline_phase::forward ? "forward" : "backward";
      args["micro_batch"] = s.micro_batch;
    }
    return {s.begin, s.end, {{"name", f_.type_name(s.type)}, {"cat", "handler"}, {"args", std::move(args)}}};
  }

  span work_span(const device_slice& s, std::int64_t stage) const {
    json args = {{"work", s.work}};
    if (s.unfinished) args["unfinished"] = true;
    if (stage >= 0) args["pipeline_stage"] = stage;
    if (s.phase != work_phase::other) args["phase"] = work_phase_name(s.phase);
    if (s.micro_batch >= 0) args["micro_batch"] = s.micro_batch;
    if (s.chunk >= 0) args["chunk"] = s.chunk;
    const auto& wname = f_.string_at(s.name);
    return {s.begin, s.end, {{"name", wname.empty() ? "work" : wname}, {"cat", "device"}, {"args", args}}};
  }

  /// " on cuda:0" when the stage's actor (on the track's rank) said where its work runs.
  std::string stage_device_name(std::int64_t rank, std::int64_t stage) const {
    const actor_info* found = nullptr;
    for (const auto& [id, a] : m_.actors)
      if (a.pipeline_stage == stage && a.device_key && (found == nullptr || a.rank == rank)) found = &a;
    return found != nullptr ? " on " + device_key_name(*found->device_key) : std::string();
  }

  /// The transfers' slices by lane (the first lane of their rank and direction free at their
  /// start); `lane_of` gets each transfer's lane.
  std::map<lane_key, std::vector<span>> transfer_lanes(std::vector<lane_key>& lane_of) const {
    std::map<std::pair<std::uint64_t, trace::transfer>, std::vector<std::uint64_t>> lane_ends;
    std::map<lane_key, std::vector<span>> lanes;
    for (std::size_t i = 0; i < m_.transfers.size(); ++i) {
      const auto& t = m_.transfers[i];
      auto& ends = lane_ends[{t.rank, t.what}];
      std::size_t lane = 0;
      while (lane < ends.size() && ends[lane] > t.begin) ++lane;
      if (lane == ends.size()) ends.push_back(0);
      ends[lane] = std::max(t.end, t.begin + 1);
      lane_of[i] = {t.rank, t.what, lane};
      json args = {{"bytes", t.bytes}, {"tag", t.key}};
      if (t.what != trace::transfer::allreduce) args["peer_rank"] = t.peer;
      if (t.unfinished) args["unfinished"] = true;
      const std::string dir = t.what == trace::transfer::send      ? " to r" + std::to_string(t.peer)
                              : t.what == trace::transfer::receive ? " from r" + std::to_string(t.peer)
                                                                   : "";
      lanes[lane_of[i]].push_back({t.begin, t.end,
                                   {{"name", transfer_name(t.what) + " " + byte_size(t.bytes) + dir},
                                    {"cat", "network"},
                                    {"args", std::move(args)}}});
    }
    return lanes;
  }

  const trace_model& m_;
  const trace_file& f_;
  const bool merged_;
  json events_ = json::array();
  std::map<std::uint64_t, std::vector<span>> tracks_;  ///< per actor (tid = actor id)
  std::uint64_t flow_id_ = 0;
};

}  // namespace

json chrome_trace(const trace_model& m) {
  chrome_exporter x(m);
  x.add_processes();
  x.add_actor_tracks();
  x.add_flows();
  x.add_mailbox_depths();
  x.add_drops_and_exits();
  x.add_device_streams();
  x.add_transfers();
  return std::move(x).result();
}

}  // namespace strata::trace_tools
