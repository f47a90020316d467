// build_model: a trace's events, in time order, become the model: actors with their handler
// slices and mailbox depths, sends and flows, drops, device work, transfers between ranks and
// tags. A method per kind of event (model_builder), then what the trace ended inside of.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "strata/trace_tools/trace_model.hpp"

namespace strata::trace_tools {

using trace::event_kind;

namespace {

struct actor_state {
  std::optional<std::size_t> open_slice;             // index into actor_info::slices
  std::unordered_set<std::uint64_t> pending;          // enqueued, not yet taken
};

/// The model of one trace file, built an event at a time.
class model_builder {
public:
  explicit model_builder(const trace_file& file) : file_(file) {
    m_.file = &file;
    if (!file.events.empty()) {
      m_.begin = file.events.front().ts_ns;
      m_.end = file.events.back().ts_ns;
    }
  }

  void add(const trace::record& e) {
    switch (static_cast<event_kind>(e.kind)) {
      case event_kind::spawn: return on_spawn(e);
      case event_kind::exit: return on_exit(e);
      case event_kind::remote_send:
        ++m_.remote_sends;
        [[fallthrough]];
      case event_kind::send: return on_send(e);
      case event_kind::enqueue: return on_enqueue(e);
      case event_kind::handler_begin: return on_handler_begin(e);
      case event_kind::handler_end: return on_handler_end(e);
      case event_kind::drop:
        if (e.actor != 0) take_from_mailbox(e.actor, e.msg, e.ts_ns);
        m_.drops.push_back({e.ts_ns, e.actor, e.peer, e.type, e.arg32});
        return;
      case event_kind::unhandled:
        take_from_mailbox(e.actor, e.msg, e.ts_ns);
        ++actor(e.actor, e.ts_ns).unhandled;
        m_.drops.push_back({e.ts_ns, e.actor, e.peer, e.type, 6 /* errc::unhandled_message */});
        return;
      case event_kind::timer_fire: return;
      case event_kind::remote_recv:
        ++m_.remote_receipts;  // the enqueue and handling that follow carry this rank's message id
        return;
      case event_kind::placement:
        placement_[e.actor] = e.arg32;
        return;
      case event_kind::device_begin: return on_device_begin(e);
      case event_kind::device_end: return on_device_end(e);
      case event_kind::transfer_begin: return on_transfer_begin(e);
      case event_kind::transfer_end: return on_transfer_end(e);
      case event_kind::tag: return on_tag(e);
      default: ++m_.unknown_events; return;
    }
  }

  /// The model after the last event: ranks placed, what is still open closed at the trace's
  /// end, transfers linked across ranks (merged traces), slices in time order.
  trace_model finish() && {
    for (auto& [id, rank] : placement_)
      if (auto it = m_.actors.find(id); it != m_.actors.end()) it->second.rank = rank;
    close_open();
    std::stable_sort(m_.transfers.begin(), m_.transfers.end(),
                     [](const transfer_slice& a, const transfer_slice& b) { return a.begin < b.begin; });
    if (file_.merged()) link_transfers();
    for (auto& [key, v] : m_.streams)
      std::stable_sort(v.begin(), v.end(), [](const device_slice& a, const device_slice& b) { return a.begin < b.begin; });
    return std::move(m_);
  }

private:
  actor_info& actor(std::uint64_t id, std::uint64_t ts) {
    auto [it, inserted] = m_.actors.try_emplace(id);
    if (inserted) {
      it->second.id = id;
      // A handle to an actor of another rank (strata::net's proxy ids: top bit, by-name bit,
      // 16 bits of rank, 46 of key) sends from outside this trace's actors.
      it->second.name = id >> 63 ? "remote r" + std::to_string((id >> 46) & 0xffff) +
                                       ((id >> 62) & 1 ? " name#" : " #") + std::to_string(id & ((1ull << 46) - 1))
                                 : "actor-" + std::to_string(id);
      it->second.first_ts = ts;
    }
    return it->second;
  }

  void take_from_mailbox(std::uint64_t id, std::uint64_t msg, std::uint64_t ts) {
    auto& st = state_[id];
    if (st.pending.erase(msg) != 0) {
      auto& a = actor(id, ts);
      a.depth.push_back({ts, static_cast<std::uint32_t>(st.pending.size())});
    }
  }

  void on_spawn(const trace::record& e) {
    auto& a = actor(e.actor, e.ts_ns);
    a.spawn_seen = true;
    a.first_ts = e.ts_ns;
    const auto& name = file_.string_at(e.arg32);
    if (!name.empty()) a.name = name;
  }

  void on_exit(const trace::record& e) {
    auto& a = actor(e.actor, e.ts_ns);
    a.exit_ts = e.ts_ns;
    a.exit_code = e.arg32;
    a.exit_reason = file_.string_at(e.msg);
    // A failing handler records its exit before its handler_end: the slice stays open.
    auto& st = state_[e.actor];
    if (!st.pending.empty()) {
      st.pending.clear();
      a.depth.push_back({e.ts_ns, 0});
    }
  }

  void on_send(const trace::record& e) {
    m_.send_by_msg[e.msg] = m_.sends.size();
    send_record snd{e.ts_ns, e.actor, e.peer, e.type};
    snd.remote = e.kind == static_cast<std::uint8_t>(event_kind::remote_send);
    if (e.actor != 0) {
      auto st = state_.find(e.actor);
      if (st != state_.end() && st->second.open_slice) snd.sender_slice = static_cast<std::int64_t>(*st->second.open_slice);
    }
    m_.sends.push_back(snd);
    if (e.actor != 0) ++actor(e.actor, e.ts_ns).sent;
  }

  void on_enqueue(const trace::record& e) {
    auto& a = actor(e.actor, e.ts_ns);
    ++a.enqueued;
    enqueue_ts_[e.msg] = e.ts_ns;
    auto& st = state_[e.actor];
    if (st.pending.insert(e.msg).second) a.depth.push_back({e.ts_ns, static_cast<std::uint32_t>(st.pending.size())});
  }

  void on_handler_begin(const trace::record& e) {
    take_from_mailbox(e.actor, e.msg, e.ts_ns);
    auto& a = actor(e.actor, e.ts_ns);
    auto& st = state_[e.actor];
    if (st.open_slice) {  // a begin without an end: close the previous slice here
      auto& prev = a.slices[*st.open_slice];
      prev.end = e.ts_ns;
      prev.unfinished = true;
    }
    handler_slice s;
    s.begin = s.end = e.ts_ns;
    s.msg = e.msg;
    s.type = e.type;
    s.sender = e.peer;
    st.open_slice = a.slices.size();
    a.slices.push_back(s);
    ++a.handled;
    auto it = m_.send_by_msg.find(e.msg);
    if (it != m_.send_by_msg.end()) {
      const auto& snd = m_.sends[it->second];
      auto eq = enqueue_ts_.find(e.msg);
      m_.flows.push_back({e.msg, e.type, snd.ts, snd.sender, e.actor, eq == enqueue_ts_.end() ? 0 : eq->second,
                          e.ts_ns});
    }
  }

  void on_handler_end(const trace::record& e) {
    auto it = m_.actors.find(e.actor);
    if (it == m_.actors.end()) return;
    auto& st = state_[e.actor];
    if (!st.open_slice) return;  // an end without a begin (recording started mid-handler)
    auto& s = it->second.slices[*st.open_slice];
    s.end = e.ts_ns;
    s.threw = (e.arg32 & 1u) != 0;
    st.open_slice.reset();
  }

  void on_device_begin(const trace::record& e) {
    device_slice s;
    s.begin = s.end = e.ts_ns;
    s.work = e.msg;
    s.name = e.arg32;
    const auto parts = parse_work_name(file_.string_at(e.arg32));
    s.phase = parts.phase;
    s.micro_batch = parts.micro_batch;
    s.chunk = parts.chunk;
    auto key = std::make_tuple(e.actor, e.peer, e.msg);
    auto [it, inserted] = open_work_.try_emplace(key, s);
    if (!inserted) {  // the same work id began twice: the first never ended
      it->second.unfinished = true;
      it->second.end = e.ts_ns;
      m_.streams[{e.actor, e.peer}].push_back(it->second);
      it->second = s;
    }
  }

  void on_device_end(const trace::record& e) {
    auto it = open_work_.find(std::make_tuple(e.actor, e.peer, e.msg));
    if (it == open_work_.end()) return;
    it->second.end = e.ts_ns;
    m_.streams[{e.actor, e.peer}].push_back(it->second);
    open_work_.erase(it);
  }

  void on_transfer_begin(const trace::record& e) {
    transfer_slice t;
    t.begin = t.end = e.ts_ns;
    t.rank = e.actor;
    t.peer = e.peer;
    t.key = e.msg;
    t.what = static_cast<trace::transfer>(e.type);
    t.bytes = e.arg32;
    auto [it, inserted] = open_transfers_.try_emplace(std::make_tuple(e.actor, e.peer, e.msg, e.type), t);
    if (!inserted) {  // the same transfer began twice: the first never ended
      it->second.unfinished = true;
      m_.transfers.push_back(it->second);
      it->second = t;
    }
  }

  void on_transfer_end(const trace::record& e) {
    auto it = open_transfers_.find(std::make_tuple(e.actor, e.peer, e.msg, e.type));
    if (it == open_transfers_.end()) return;
    it->second.end = e.ts_ns;
    it->second.bytes = e.arg32;  // a receive may get fewer bytes than it posted for
    m_.transfers.push_back(it->second);
    open_transfers_.erase(it);
  }

  void on_tag(const trace::record& e) {
    tag_record t{e.ts_ns, e.actor, file_.string_at(e.msg), e.arg32};
    if (t.name == "pipeline.stage" && e.actor != 0) {
      actor(e.actor, e.ts_ns).pipeline_stage = e.arg32;
    } else if (t.name == "pipeline.device" && e.actor != 0) {
      actor(e.actor, e.ts_ns).device_key = e.arg32;
    } else if (t.name == "pipeline.forward" || t.name == "pipeline.backward") {
      auto st = state_.find(e.actor);
      if (st != state_.end() && st->second.open_slice) {
        auto& s = m_.actors[e.actor].slices[*st->second.open_slice];
        s.phase = t.name == "pipeline.forward" ? pipeline_phase::forward : pipeline_phase::backward;
        s.micro_batch = e.arg32;
      }
    } else if (t.name == "pipeline.ideal_bubble_ppm") {
      m_.ideal_bubble = static_cast<double>(e.arg32) / 1e6;
    }
    m_.tags.push_back(std::move(t));
  }

  /// Closes what the trace ended inside of: handler slices, device work, transfers.
  void close_open() {
    for (auto& [id, st] : state_) {
      if (!st.open_slice) continue;
      auto& s = m_.actors[id].slices[*st.open_slice];
      s.end = m_.end;
      s.unfinished = true;
    }
    for (auto& [key, s] : open_work_) {
      device_slice c = s;
      c.end = m_.end;
      c.unfinished = true;
      m_.streams[{std::get<0>(key), std::get<1>(key)}].push_back(c);
    }
    for (auto& [key, t] : open_transfers_) {
      transfer_slice c = t;
      c.end = m_.end;
      c.unfinished = true;
      m_.transfers.push_back(c);
    }
  }

  /// A merged trace: each send joined to the receive of its tag on the other rank, in time order.
  void link_transfers() {
    // (rank, peer, tag, what) -> indices into m_.transfers, in time order
    std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, trace::transfer>, std::vector<std::size_t>> by_key;
    for (std::size_t i = 0; i < m_.transfers.size(); ++i) {
      const auto& t = m_.transfers[i];
      by_key[{t.rank, t.peer, t.key, t.what}].push_back(i);
    }
    for (const auto& [key, sends] : by_key) {
      const auto& [rank, peer, tag, what] = key;
      if (what != trace::transfer::send) continue;
      auto rec = by_key.find({peer, rank, tag, trace::transfer::receive});
      const std::size_t matched = rec == by_key.end() ? 0 : std::min(sends.size(), rec->second.size());
      m_.unlinked_sends += sends.size() - matched;
      for (std::size_t k = 0; k < matched; ++k) m_.transfer_links.emplace_back(sends[k], rec->second[k]);
    }
  }

  const trace_file& file_;
  trace_model m_;
  std::unordered_map<std::uint64_t, actor_state> state_;
  std::unordered_map<std::uint64_t, std::uint64_t> enqueue_ts_;
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, device_slice> open_work_;
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint16_t>, transfer_slice> open_transfers_;
  std::unordered_map<std::uint64_t, std::uint32_t> placement_;  // actor -> rank
};

}  // namespace

trace_model build_model(const trace_file& file) {
  model_builder builder(file);
  for (const auto& e : file.events) builder.add(e);
  return std::move(builder).finish();
}

}  // namespace strata::trace_tools
