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

}  // namespace

json chrome_trace(const trace_model& m) {
  const trace_file& f = *m.file;
  json events = json::array();
  auto meta = [&](const char* what, int pid, std::uint64_t tid, json args) {
    events.push_back({{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}});
  };
  // A merged trace (strata-trace merge) gets one process per rank, holding that rank's actors and
  // device streams; sends from outside actors stay on tid 0 of rank 0's process.
  const bool merged = f.merged();
  auto pid_of = [&](std::uint64_t actor) -> int {
    if (!merged) return actor_pid;
    auto it = m.actors.find(actor);
    return it != m.actors.end() && it->second.rank >= 0 ? static_cast<int>(it->second.rank) + 1 : 1;
  };
  std::set<int> pids;
  if (merged) {
    pids.insert(1);
    for (const auto& [id, a] : m.actors) pids.insert(pid_of(id));
    for (const auto& [key, slices] : m.streams) pids.insert(static_cast<int>(m.device_rank(key.first)) + 1);
    for (int pid : pids) {
      meta("process_name", pid, 0, {{"name", "strata rank " + std::to_string(pid - 1)}});
      meta("process_sort_index", pid, 0, {{"sort_index", pid}});
    }
  } else {
    meta("process_name", actor_pid, 0, {{"name", "strata actors"}});
    meta("process_sort_index", actor_pid, 0, {{"sort_index", 1}});
  }

  // Handler slices per actor.
  std::map<std::uint64_t, std::vector<span>> tracks;
  for (const auto& [id, a] : m.actors) {
    auto& spans = tracks[id];
    for (const auto& s : a.slices) {
      json args = {{"msg", s.msg}, {"sender", m.actor_name(s.sender)}, {"sender_id", s.sender}};
      if (s.threw) args["threw"] = true;
      if (s.unfinished) args["unfinished"] = true;
      if (s.phase != pipeline_phase::none) {
        args["pipeline"] = s.phase == pipeline_phase::forward ? "forward" : "backward";
        args["micro_batch"] = s.micro_batch;
      }
      spans.push_back({s.begin, s.end, {{"name", f.type_name(s.type)}, {"cat", "handler"}, {"args", std::move(args)}}});
    }
    make_disjoint(spans);
  }
  // Sends outside any handler on the sender's track get a small slice of their own.
  std::map<std::uint64_t, std::vector<std::uint64_t>> outside;
  for (const auto& fl : m.flows) {
    auto& spans = tracks[fl.sender];
    if (!enclosing(spans, fl.send_ts)) outside[fl.sender].push_back(fl.send_ts);
  }
  for (auto& [id, points] : outside) {
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    add_anchors(tracks[id], points, id == 0 ? "send" : "send (outside a handler)");
  }

  // Track names.
  int sort_index = 0;
  for (auto& [id, spans] : tracks) {
    if (spans.empty() && id != 0 && m.actors.count(id) == 0) continue;
    std::string name = id == 0 ? "external (outside actors)" : m.actor_name(id) + " #" + std::to_string(id);
    meta("thread_name", pid_of(id), id, {{"name", name}});
    meta("thread_sort_index", pid_of(id), id, {{"sort_index", id == 0 ? 0 : ++sort_index}});
  }

  // Slices.
  auto emit_spans = [&](int pid, std::uint64_t tid, const std::vector<span>& spans) {
    for (const auto& s : spans) {
      json e = s.event;
      e["ph"] = "X";
      e["pid"] = pid;
      e["tid"] = tid;
      e["ts"] = us(s.begin);
      e["dur"] = us(s.end - s.begin);
      events.push_back(std::move(e));
    }
  };
  for (const auto& [id, spans] : tracks) emit_spans(pid_of(id), id, spans);

  // Flow arrows: both ends present by construction (flows are sends whose handler_begin is in the trace).
  std::uint64_t flow_id = 0;
  for (const auto& fl : m.flows) {
    const auto& from = tracks[fl.sender];
    const auto& to = tracks[fl.receiver];
    auto s_idx = enclosing(from, fl.send_ts);
    auto f_idx = enclosing(to, fl.handle_ts);
    if (!s_idx || !f_idx) continue;  // a clipped slice no longer covers the point
    const auto& fs = from[*s_idx];
    const auto& ts = to[*f_idx];
    ++flow_id;
    std::string name = short_type_name(f.type_name(fl.type));
    events.push_back({{"name", name}, {"cat", "message"}, {"ph", "s"}, {"id", flow_id}, {"pid", pid_of(fl.sender)},
                      {"tid", fl.sender}, {"ts", us(inside(fl.send_ts, fs.begin, fs.end))}});
    events.push_back({{"name", name}, {"cat", "message"}, {"ph", "f"}, {"bp", "e"}, {"id", flow_id},
                      {"pid", pid_of(fl.receiver)}, {"tid", fl.receiver}, {"ts", us(inside(fl.handle_ts, ts.begin, ts.end))}});
  }

  // Mailbox depth counters.
  for (const auto& [id, a] : m.actors) {
    if (a.depth.empty()) continue;
    std::string name = "mailbox " + a.name + " #" + std::to_string(id);
    for (const auto& d : a.depth)
      events.push_back({{"name", name}, {"ph", "C"}, {"pid", pid_of(id)}, {"tid", id}, {"ts", us(d.ts)},
                        {"args", {{"depth", d.depth}}}});
  }

  // Drops and exits as instants on the receiver's track.
  for (const auto& d : m.drops) {
    if (tracks.count(d.receiver) == 0) continue;
    events.push_back({{"name", "drop " + errc_name(d.reason)}, {"ph", "i"}, {"s", "t"}, {"pid", pid_of(d.receiver)},
                      {"tid", d.receiver}, {"ts", us(d.ts)},
                      {"args", {{"type", f.type_name(d.type)}, {"sender", m.actor_name(d.sender)}}}});
  }
  for (const auto& [id, a] : m.actors) {
    if (!a.exit_ts) continue;
    events.push_back({{"name", "exit " + errc_name(a.exit_code)}, {"ph", "i"}, {"s", "t"}, {"pid", pid_of(id)},
                      {"tid", id}, {"ts", us(*a.exit_ts)}, {"args", {{"reason", a.exit_reason}}}});
  }

  // Device streams.
  if (!m.streams.empty()) {
    if (!merged) {
      meta("process_name", device_pid, 0, {{"name", "strata devices"}});
      meta("process_sort_index", device_pid, 0, {{"sort_index", 2}});
    }
    // " on cuda:0" when the stage's actor (on the track's rank) said where its work runs.
    auto stage_device_name = [&](std::int64_t rank, std::int64_t stage) -> std::string {
      const actor_info* found = nullptr;
      for (const auto& [id, a] : m.actors)
        if (a.pipeline_stage == stage && a.device_key && (found == nullptr || a.rank == rank)) found = &a;
      return found != nullptr ? " on " + device_key_name(*found->device_key) : std::string();
    };
    // In a merged trace device tracks sit below the rank's actors (tids past every actor id).
    std::uint64_t tid = merged ? std::uint64_t{1} << 40 : 0;
    for (const auto& [key, slices] : m.streams) {
      ++tid;
      const int pid = merged ? static_cast<int>(m.device_rank(key.first)) + 1 : device_pid;
      const std::uint64_t device = m.local_device(key.first);
      const std::int64_t stage = stage_of_device(key.first);
      meta("thread_name", pid, tid,
           {{"name", stage >= 0 ? "stage " + std::to_string(stage) + " device #" + std::to_string(device) + " stream " +
                                      std::to_string(key.second) + stage_device_name(m.device_rank(key.first), stage)
                                : "device " + std::to_string(device) + " stream " + std::to_string(key.second)}});
      meta("thread_sort_index", pid, tid, {{"sort_index", tid}});
      std::vector<span> spans;
      for (const auto& s : slices) {
        json args = {{"work", s.work}};
        if (s.unfinished) args["unfinished"] = true;
        if (stage >= 0) args["pipeline_stage"] = stage;
        if (s.phase != work_phase::other) args["phase"] = work_phase_name(s.phase);
        if (s.micro_batch >= 0) args["micro_batch"] = s.micro_batch;
        if (s.chunk >= 0) args["chunk"] = s.chunk;
        const auto& wname = f.string_at(s.name);
        spans.push_back({s.begin, s.end, {{"name", wname.empty() ? "work" : wname}, {"cat", "device"}, {"args", args}}});
      }
      make_disjoint(spans);
      emit_spans(pid, tid, spans);
    }
  }

  // Transfers between ranks (kinds 16 and 17): per rank and direction, one lane for each transfer
  // in flight at once, below the rank's device streams; in a merged trace an arrow joins each
  // send to the receive of the same tag on the other rank.
  if (!m.transfers.empty()) {
    if (!merged) {
      meta("process_name", network_pid, 0, {{"name", "strata network"}});
      meta("process_sort_index", network_pid, 0, {{"sort_index", 3}});
    }
    using lane_key = std::tuple<std::uint64_t, trace::transfer, std::size_t>;  // rank, what, lane
    std::vector<lane_key> lane_of(m.transfers.size());
    std::map<std::pair<std::uint64_t, trace::transfer>, std::vector<std::uint64_t>> lane_ends;
    std::map<lane_key, std::vector<span>> lanes;
    for (std::size_t i = 0; i < m.transfers.size(); ++i) {
      const auto& t = m.transfers[i];
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
    auto pid_of_rank = [&](std::uint64_t rank) { return merged ? static_cast<int>(rank) + 1 : network_pid; };
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
    for (const auto& [a, b] : m.transfer_links) {  // merged traces only
      const auto& from = m.transfers[a];
      const auto& to = m.transfers[b];
      ++flow_id;
      events.push_back({{"name", "tensor data"}, {"cat", "network"}, {"ph", "s"}, {"id", flow_id},
                        {"pid", pid_of_rank(from.rank)}, {"tid", lane_tid.at(lane_of[a])},
                        {"ts", us(inside(from.begin, from.begin, from.end))}});
      events.push_back({{"name", "tensor data"}, {"cat", "network"}, {"ph", "f"}, {"bp", "e"}, {"id", flow_id},
                        {"pid", pid_of_rank(to.rank)}, {"tid", lane_tid.at(lane_of[b])},
                        {"ts", us(inside(to.end, to.begin, to.end))}});
    }
  }

  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ns"},
          {"otherData", {{"source", f.name}, {"format_version", f.version}, {"start_unix_ns", f.start_unix_ns}}}};
}

}  // namespace strata::trace_tools
