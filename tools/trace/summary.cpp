// strata-trace's summary: the trace's file, actors, message types, device streams, transfers
// between ranks and drops (this file), the pipeline (summary_pipeline.cpp) and the critical path
// (summary_critical_path.cpp), as JSON (docs/trace-tools.md) and as tables for people.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "summary_sections.hpp"
#include "text_table.hpp"
#include "trace_views.hpp"

namespace strata::trace_tools {

using nlohmann::json;

namespace {

json quantiles(std::vector<std::uint64_t>& v) {
  if (v.empty()) return json{{"count", 0}, {"p50", nullptr}, {"p99", nullptr}, {"max", nullptr}};
  return json{{"count", v.size()}, {"p50", percentile(v, 0.50)}, {"p99", percentile(v, 0.99)}, {"max", percentile(v, 1.0)}};
}

/// The file the trace came from: its format, size and span, its rank in the job (format 2) and
/// the messages that crossed ranks.
json file_json(const trace_model& m) {
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
  return out;
}

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

/// Time-weighted mean mailbox depth of `a` over its lifetime [first_ts, life_end), and the
/// deepest it was.
std::pair<double, std::uint32_t> mailbox_depth(const actor_info& a, std::uint64_t life_end, std::uint64_t lifetime) {
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
  return {lifetime > 0 ? area / static_cast<double>(lifetime) : 0.0, max_depth};
}

/// An actor's row: its life, messages, busy time, mailbox depth, handler times and mailbox waits.
json actor_json(const trace_model& m, std::uint64_t id, const actor_info& a, std::vector<std::uint64_t>& waits) {
  std::vector<std::uint64_t> durations;
  std::uint64_t busy = 0;
  for (const auto& s : a.slices) {
    durations.push_back(s.end - s.begin);
    busy += s.end - s.begin;
  }
  const std::uint64_t life_end = a.lifetime_end(m.end);
  const std::uint64_t lifetime = life_end > a.first_ts ? life_end - a.first_ts : 0;
  const auto [mean_depth, max_depth] = mailbox_depth(a, life_end, lifetime);
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
  j["mailbox_depth_mean"] = mean_depth;
  j["handler_ns"] = quantiles(durations);
  j["mailbox_wait_ns"] = quantiles(waits);
  if (a.pipeline_stage >= 0) j["pipeline_stage"] = a.pipeline_stage;
  if (a.rank >= 0) j["rank"] = a.rank;
  return j;
}

/// A row per actor (the system's id 0 left out), with its mailbox waits per receiving actor.
json actors_json(const trace_model& m) {
  std::map<std::uint64_t, std::vector<std::uint64_t>> waits;
  for (const auto& fl : m.flows)
    if (fl.enqueue_ts != 0 && fl.handle_ts >= fl.enqueue_ts) waits[fl.receiver].push_back(fl.handle_ts - fl.enqueue_ts);
  json actors = json::array();
  for (const auto& [id, a] : m.actors)
    if (id != 0) actors.push_back(actor_json(m, id, a, waits[id]));
  return actors;
}

/// A row per message type: sent, handled, and the latency from the send to the handler's start.
json message_types_json(const trace_model& m) {
  const trace_file& f = *m.file;
  std::map<std::uint32_t, std::vector<std::uint64_t>> latency;
  for (const auto& fl : m.flows)
    if (fl.handle_ts >= fl.send_ts) latency[fl.type].push_back(fl.handle_ts - fl.send_ts);
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
  return types;
}

/// A row per device stream: its work items, busy time and utilisation over the span and over
/// its active window.
json device_streams_json(const trace_model& m) {
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
  return streams;
}

/// Dropped and unhandled messages: by reason, and by receiver, type and reason.
json drops_json(const trace_model& m) {
  const trace_file& f = *m.file;
  std::map<std::string, std::uint64_t> by_reason;
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> by_detail;
  for (const auto& d : m.drops) {
    ++by_reason[errc_name(d.reason)];
    ++by_detail[{m.actor_name(d.receiver), f.type_name(d.type), errc_name(d.reason)}];
  }
  json details = json::array();
  for (const auto& [k, n] : by_detail)
    details.push_back({{"receiver", std::get<0>(k)}, {"type", std::get<1>(k)}, {"reason", std::get<2>(k)}, {"count", n}});
  return {{"total", m.drops.size()}, {"by_reason", by_reason}, {"details", details}};
}

/// The first lines of the text summary: the file, its rank in the job, the cross-rank messages.
void print_file(const json& s, std::ostream& out) {
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
}

void print_actors(const json& s, std::ostream& out) {
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
}

void print_message_types(const json& s, std::ostream& out) {
  out << "\nmessage types (latency: send -> handler start)\n";
  text_table types({"type", "sent", "handled", "latency p50", "latency p99"});
  for (const auto& t : s["message_types"])
    types.add({short_type_name(t["type"].get<std::string>()), std::to_string(t["sent"].get<std::uint64_t>()),
               std::to_string(t["handled"].get<std::uint64_t>()), format_ns(t["latency_ns"]["p50"]),
               format_ns(t["latency_ns"]["p99"])});
  types.print(out);
}

void print_device_streams(const json& s, std::ostream& out) {
  if (s["device_streams"].empty()) return;
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

void print_transfers(const json& s, std::ostream& out) {
  if (!s.contains("transfers")) return;
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

void print_drops(const json& s, std::ostream& out) {
  const auto& drops = s["drops"];
  out << "\ndrops and unhandled messages: " << drops["total"] << "\n";
  if (!drops["details"].empty()) {
    text_table t({"receiver", "type", "reason", "count"});
    for (const auto& d : drops["details"])
      t.add({d["receiver"].get<std::string>(), short_type_name(d["type"].get<std::string>()),
             d["reason"].get<std::string>(), std::to_string(d["count"].get<std::uint64_t>())});
    t.print(out);
  }
}

}  // namespace

json summary_json(const trace_model& m) {
  json out = file_json(m);
  if (!m.transfers.empty()) out["transfers"] = transfers_json(m);
  out["actors"] = actors_json(m);
  out["message_types"] = message_types_json(m);
  out["device_streams"] = device_streams_json(m);
  out["drops"] = drops_json(m);
  out["pipeline"] = pipeline_json(m);
  out["critical_path"] = critical_path_json(m);
  return out;
}

void print_summary(const json& s, std::ostream& out) {
  print_file(s, out);
  print_actors(s, out);
  print_message_types(s, out);
  print_device_streams(s, out);
  print_transfers(s, out);
  print_drops(s, out);
  if (!s["pipeline"].is_null()) print_pipeline(s["pipeline"], out);
  if (s.contains("critical_path") && !s["critical_path"].is_null()) print_critical_path(s["critical_path"], out);
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
