#include "strata/trace_tools/trace_merge.hpp"

#include <algorithm>
#include <filesystem>
#include <new>
#include <string>
#include <unistd.h>

#include "strata/files.hpp"
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace strata::trace_tools {

using trace::event_kind;

namespace {

template <class T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

/// strata::net's handle ids for actors of another rank: top bit, by-name bit, 16 bits of rank,
/// 46 bits of key (the actor's id there, or the hash of its published name).
struct proxy_address {
  bool by_name = false;
  std::uint32_t rank = 0;
  std::uint64_t key = 0;
};
bool is_proxy(std::uint64_t id) { return (id >> 63) != 0; }
proxy_address decode_proxy(std::uint64_t id) {
  return {((id >> 62) & 1) != 0, static_cast<std::uint32_t>((id >> 46) & 0xffff), id & ((std::uint64_t{1} << 46) - 1)};
}

using rank_key = std::pair<std::uint32_t, std::uint64_t>;

struct rank_key_hash {
  std::size_t operator()(const rank_key& k) const noexcept {
    return std::hash<std::uint64_t>{}(k.second * 0x9e3779b97f4a7c15ull ^ k.first);
  }
};

/// The tables and id maps of the merged trace.
class merger {
public:
  explicit merger(trace_file& out) : out_(out) {
    out_.strings.assign(1, "");
    out_.types.assign(1, "");
  }

  std::uint32_t string_id(const std::string& text) {
    auto [it, inserted] = string_ids_.try_emplace(text, static_cast<std::uint32_t>(out_.strings.size()));
    if (inserted) out_.strings.push_back(text);
    return it->second;
  }
  std::uint32_t type_id(const trace_file& f, std::uint32_t type) {
    if (type == 0 || type == 0xffff || type >= f.types.size()) return type == 0 ? 0 : 0xffff;
    auto [it, inserted] = type_ids_.try_emplace(f.types[type], static_cast<std::uint32_t>(out_.types.size()));
    if (inserted) out_.types.push_back(f.types[type]);
    return it->second < 0xffff ? it->second : 0xffff;
  }
  /// The job-wide id of actor `id` as rank `rank` recorded it (0 stays 0: outside actors).
  std::uint64_t actor_id(std::uint32_t rank, std::uint64_t id) {
    if (id == 0) return 0;
    if (is_proxy(id)) {
      const auto p = decode_proxy(id);
      // An actor addressed by its published name is known only by the name's hash.
      if (p.by_name) return allocate(p.rank, p.key | (std::uint64_t{1} << 63));
      return actor_id(p.rank, p.key);
    }
    return allocate(rank, id);
  }
  std::uint64_t message_id(std::uint32_t rank, std::uint64_t id) {
    if (id == 0) return 0;
    auto [it, inserted] = messages_.try_emplace(rank_key{rank, id}, next_message_ + 1);
    if (inserted) ++next_message_;
    return it->second;
  }
  /// Gives message `id` of `rank` the merged id `merged` (a receipt takes its send's id).
  void alias_message(std::uint32_t rank, std::uint64_t id, std::uint64_t merged) { messages_[rank_key{rank, id}] = merged; }
  /// (rank, local id, merged id) of every actor met, in the order met.
  const std::vector<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>>& actors() const { return actor_list_; }

private:
  std::uint64_t allocate(std::uint32_t rank, std::uint64_t id) {
    auto [it, inserted] = actors_.try_emplace(rank_key{rank, id}, actor_list_.size() + 1);
    if (inserted) actor_list_.emplace_back(rank, id, it->second);
    return it->second;
  }

  trace_file& out_;
  std::unordered_map<std::string, std::uint32_t> string_ids_, type_ids_;
  std::unordered_map<rank_key, std::uint64_t, rank_key_hash> actors_, messages_;
  std::vector<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>> actor_list_;
  std::uint64_t next_message_ = 0;
};

/// One sentence when the inputs cannot be merged, else empty.
std::string check_inputs(const std::vector<const trace_file*>& in) {
  if (in.empty()) return "no trace files to merge";
  for (const auto* f : in) {
    if (f->version < 2)
      return f->name + ": has no rank (a format version 1 trace, written by a world of one); merge takes the "
                       "FILE.rank<r> traces the ranks of one mpirun job write";
    if (f->merged()) return f->name + ": is already a merged trace; merge takes the per-rank traces (FILE.rank<r>)";
  }
  const trace_file& first = *in.front();
  for (const auto* f : in) {
    if (f->job_id != first.job_id || f->world_size != first.world_size)
      return f->name + " and " + first.name + " come from different jobs (job " + std::to_string(f->job_id) + " of " +
             std::to_string(f->world_size) + " ranks, job " + std::to_string(first.job_id) + " of " +
             std::to_string(first.world_size) + " ranks); merge the traces of one run";
  }
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i]->rank == in[i - 1]->rank)
      return in[i - 1]->name + " and " + in[i]->name + " are both rank " + std::to_string(in[i]->rank) +
             " (give each rank's trace once)";
  return {};
}

/// The merge of the ranks' traces `in` (sorted by rank, checked) into `result`, a step at a time.
class rank_merge {
public:
  rank_merge(const std::vector<const trace_file*>& in, merge_result& result)
      : in_(in), out_(result.trace), n_(result.counts), ids_(result.trace) {}

  /// The merged trace's header; one clock: each rank's start on rank 0's wall clock, the merged
  /// trace starting at the earliest.
  void header() {
    n_.ranks = in_.size();
    out_.name = "merged";
    out_.version = 2;
    out_.rank = all_ranks;
    out_.world_size = in_.front()->world_size;
    out_.job_id = in_.front()->job_id;
    start_.resize(in_.size());
    for (std::size_t i = 0; i < in_.size(); ++i)
      start_[i] = static_cast<std::int64_t>(in_[i]->start_unix_ns) + in_[i]->clock_offset_ns;
    origin_ = *std::min_element(start_.begin(), start_.end());
    out_.start_unix_ns = static_cast<std::uint64_t>(origin_);
    for (const auto* f : in_) {
      out_.dropped += f->dropped;
      out_.clock_uncertainty_ns = std::max(out_.clock_uncertainty_ns, f->clock_uncertainty_ns);
    }
  }

  /// Receipts by (sending rank, its message id, receiving rank).
  void collect_receipts() {
    for (std::size_t i = 0; i < in_.size(); ++i)
      for (const auto& e : in_[i]->events)
        if (e.kind == static_cast<std::uint8_t>(event_kind::remote_recv))
          receipts_[{e.arg32, e.peer, in_[i]->rank}] = receipt{i, &e, false};
  }

  /// Actor ids grouped by rank, in the order each rank spawned them.
  void number_actors() {
    for (const auto* f : in_)
      for (const auto& e : f->events)
        if (e.kind == static_cast<std::uint8_t>(event_kind::spawn)) ids_.actor_id(f->rank, e.actor);
  }

  /// Links: the receipt's message takes the send's merged id; its receiver is the send's peer.
  void link_messages() {
    for (std::size_t i = 0; i < in_.size(); ++i) {
      const std::uint32_t rank = in_[i]->rank;
      for (const auto& e : in_[i]->events) {
        if (e.kind != static_cast<std::uint8_t>(event_kind::remote_send)) continue;
        auto it = receipts_.find({rank, e.msg, e.arg32});
        if (it == receipts_.end()) {
          ++n_.unmatched_sends;
          continue;
        }
        it->second.matched = true;
        ++n_.linked;
        const std::uint32_t to = in_[it->second.file]->rank;
        const std::uint64_t merged = ids_.message_id(rank, e.msg);
        ids_.alias_message(to, it->second.event->msg, merged);
        delivered_locally_.insert({to, it->second.event->msg});
        send_receiver_[&e] = ids_.actor_id(to, it->second.event->actor);
        if (shifted(it->second.file, it->second.event->ts_ns) < shifted(i, e.ts_ns)) ++n_.handled_before_sent;
      }
    }
    for (const auto& [key, r] : receipts_)
      if (!r.matched) ++n_.unmatched_receipts;
  }

  /// Every event, on the one clock with job-wide ids, but the local deliveries of linked
  /// messages (the sending rank's remote_send stands for them).
  void copy_events() {
    for (std::size_t i = 0; i < in_.size(); ++i) {
      const trace_file& f = *in_[i];
      for (const auto& e : f.events) {
        if (e.kind == static_cast<std::uint8_t>(event_kind::send) && delivered_locally_.count({f.rank, e.msg}) != 0)
          continue;
        out_.events.push_back(translated(i, e));
      }
    }
  }

  /// Where each actor ran, at the start (kind placement: actor, arg32 = rank); then every event
  /// in time order.
  void add_placements() {
    std::vector<trace::record> placed;
    for (const auto& [rank, local, merged] : ids_.actors()) {
      trace::record p{};
      p.actor = merged;
      p.arg32 = rank;
      p.kind = static_cast<std::uint8_t>(event_kind::placement);
      placed.push_back(p);
    }
    out_.events.insert(out_.events.begin(), placed.begin(), placed.end());
    std::stable_sort(out_.events.begin(), out_.events.end(),
                     [](const trace::record& a, const trace::record& b) { return a.ts_ns < b.ts_ns; });
    n_.events = out_.events.size();
  }

private:
  struct receipt {
    std::size_t file = 0;
    const trace::record* event = nullptr;
    bool matched = false;
  };

  std::uint64_t shifted(std::size_t i, std::uint64_t ts) const { return ts + static_cast<std::uint64_t>(start_[i] - origin_); }

  /// Event `e` of input `i` with the merged trace's clock, ids, strings and types.
  trace::record translated(std::size_t i, const trace::record& e) {
    const trace_file& f = *in_[i];
    const std::uint32_t rank = f.rank;
    trace::record o = e;
    o.ts_ns = shifted(i, e.ts_ns);
    if (is_message_kind(e.kind)) {
      o.actor = ids_.actor_id(rank, e.actor);
      o.msg = ids_.message_id(rank, e.msg);
      o.type = static_cast<std::uint16_t>(ids_.type_id(f, e.type));
    }
    switch (static_cast<event_kind>(e.kind)) {
      case event_kind::spawn:
        o.actor = ids_.actor_id(rank, e.actor);
        o.peer = ids_.actor_id(rank, e.peer);
        o.arg32 = ids_.string_id((f.string_at(e.arg32).empty() ? "actor-" + std::to_string(e.actor) : f.string_at(e.arg32)) +
                                 "@r" + std::to_string(rank));
        break;
      case event_kind::exit:
      case event_kind::tag:
        o.actor = ids_.actor_id(rank, e.actor);
        o.msg = ids_.string_id(f.string_at(e.msg));
        break;
      case event_kind::remote_send: {
        auto to = send_receiver_.find(&e);
        o.peer = to != send_receiver_.end() ? to->second : ids_.actor_id(rank, e.peer);
        break;
      }
      case event_kind::remote_recv:
        // The sender's message id, which the link made this one's.
        o.peer = receipts_.at({e.arg32, e.peer, rank}).matched ? o.msg : 0;
        break;
      case event_kind::transfer_begin:
      case event_kind::transfer_end:
        break;  // actor and peer are ranks already; the MPI tag is the same on both ends
      case event_kind::device_begin:
      case event_kind::device_end:
        o.actor = (std::uint64_t{rank} << 32) | (e.actor & 0xffffffffu);
        o.arg32 = ids_.string_id(f.string_at(e.arg32));
        break;
      default:
        if (is_message_kind(e.kind)) o.peer = ids_.actor_id(rank, e.peer);
        else ++n_.unknown_events;  // copied; its fields cannot be translated
        break;
    }
    return o;
  }

  const std::vector<const trace_file*>& in_;
  trace_file& out_;
  merge_counts& n_;
  merger ids_;
  std::vector<std::int64_t> start_;
  std::int64_t origin_ = 0;
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>, receipt> receipts_;
  std::unordered_map<const trace::record*, std::uint64_t> send_receiver_;  // remote_send -> merged receiver
  std::set<rank_key> delivered_locally_;  // (receiving rank, its message id): the proxy's send record
};

}  // namespace

merge_result merge_traces(const std::vector<trace_file>& ranks) {
  merge_result result;
  std::vector<const trace_file*> in;
  for (const auto& f : ranks) in.push_back(&f);
  std::stable_sort(in.begin(), in.end(), [](const trace_file* a, const trace_file* b) { return a->rank < b->rank; });
  if (auto err = check_inputs(in); !err.empty()) {
    result.error = err;
    return result;
  }
  rank_merge merge(in, result);
  merge.header();
  merge.collect_receipts();
  merge.number_actors();
  merge.link_messages();
  merge.copy_events();
  merge.add_placements();
  return result;
}

std::string serialize_trace(const trace_file& t) {
  std::string blob;
  blob.append("STRATATR", 8);
  const bool v2 = t.version == 2;
  put<std::uint32_t>(blob, v2 ? 2 : 1);
  put<std::uint32_t>(blob, sizeof(trace::record));
  put<std::uint64_t>(blob, t.start_unix_ns);
  put<std::uint64_t>(blob, t.events.size());
  put<std::uint64_t>(blob, t.dropped);
  put<std::uint32_t>(blob, static_cast<std::uint32_t>(t.strings.size()));
  put<std::uint32_t>(blob, static_cast<std::uint32_t>(t.types.empty() ? 0 : t.types.size() - 1));
  if (v2) {
    put<std::uint32_t>(blob, t.rank);
    put<std::uint32_t>(blob, t.world_size);
    put<std::uint64_t>(blob, t.job_id);
    put<std::int64_t>(blob, t.clock_offset_ns);
    put<std::uint64_t>(blob, t.clock_uncertainty_ns);
  }
  for (const auto& s : t.strings) {
    put<std::uint32_t>(blob, static_cast<std::uint32_t>(s.size()));
    blob.append(s);
  }
  for (std::size_t i = 1; i < t.types.size(); ++i) {
    put<std::uint32_t>(blob, static_cast<std::uint32_t>(t.types[i].size()));
    blob.append(t.types[i]);
  }
  blob.append(reinterpret_cast<const char*>(t.events.data()), t.events.size() * sizeof(trace::record));
  return blob;
}

merge_files_result merge_trace_files(const std::string& out, const std::vector<std::string>& files) {
  merge_files_result result;
  std::vector<trace_file> traces;
  for (const auto& file : files) {
    // Replacing an input with the merge would lose that rank's recording.
    if (std::error_code ec; std::filesystem::equivalent(file, out, ec)) {
      result.error = "the output " + out + " is one of the input traces; choose another OUT";
      return result;
    }
    auto read = read_trace(file);
    if (!read.ok()) {
      result.error = read.error;
      return result;
    }
    traces.push_back(std::move(read.trace));
  }
  try {
    auto merged = merge_traces(traces);
    if (!merged.ok()) {
      result.error = merged.error;
      return result;
    }
    const std::string bytes = serialize_trace(merged.trace);
    // The merge must read back under the strict reader, as every trace the runtime writes does.
    if (auto check = parse_trace(bytes, out); !check.ok()) {
      result.error = "the merged trace does not read back (" + check.error + "); this is a bug in strata-trace";
      return result;
    }
    if (auto written = write_file_atomically(out, bytes, out + ".tmp." + std::to_string(::getpid())); !written) {
      result.error = written.error().message();
      return result;
    }
    result.counts = merged.counts;
    result.world_size = merged.trace.world_size;
    result.clock_uncertainty_ns = merged.trace.clock_uncertainty_ns;
  } catch (const std::bad_alloc&) {
    result.error = "not enough memory to merge the traces";
  }
  return result;
}

std::string describe_merge(const std::string& who, const std::string& out, const merge_files_result& r) {
  const auto& n = r.counts;
  std::string line = who + ": merged " + std::to_string(n.ranks) + " rank" + (n.ranks == 1 ? "" : "s") + " of a world of " +
                     std::to_string(r.world_size) + " into " + out + " (" + std::to_string(n.events) + " events; " +
                     std::to_string(n.linked) + " messages between ranks linked, " + std::to_string(n.unmatched_sends) +
                     " sends and " + std::to_string(n.unmatched_receipts) + " receipts without their other end)";
  if (n.handled_before_sent > 0)
    line += "\n" + who + ": note: " + std::to_string(n.handled_before_sent) +
            " linked messages arrive before they were sent on the aligned clock: the ranks' clock offsets (measured to +/- " +
            std::to_string(r.clock_uncertainty_ns) + " ns) are off by more than those messages took";
  if (n.unknown_events > 0)
    line += "\n" + who + ": note: copied " + std::to_string(n.unknown_events) +
            " events of kinds this version does not know with only their time shifted";
  return line;
}

}  // namespace strata::trace_tools
