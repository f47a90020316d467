#include "strata/trace_tools/trace_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>
#include <tuple>
#include <unordered_set>

namespace strata::trace_tools {

using trace::event_kind;

std::string trace_model::actor_name(std::uint64_t id) const {
  if (id == 0) return "external";
  auto it = actors.find(id);
  if (it != actors.end()) return it->second.name;
  return "actor-" + std::to_string(id);
}

std::int64_t trace_model::device_rank(std::uint64_t device) const {
  return file != nullptr && file->merged() ? static_cast<std::int64_t>(device >> 32) : -1;
}

std::uint64_t trace_model::local_device(std::uint64_t device) const {
  return file != nullptr && file->merged() ? device & 0xffffffffu : device;
}

std::string transfer_name(trace::transfer what) {
  switch (what) {
    case trace::transfer::send: return "send";
    case trace::transfer::receive: return "receive";
    case trace::transfer::allreduce: return "allreduce";
  }
  return "transfer " + std::to_string(static_cast<unsigned>(what));
}

const char* work_phase_name(work_phase p) {
  switch (p) {
    case work_phase::forward: return "forward";
    case work_phase::backward: return "backward";
    case work_phase::weight: return "weight";
    case work_phase::update: return "update";
    case work_phase::other: break;
  }
  return "other";
}

namespace {

/// Takes `word` and one space (or the end) off the front of `s`.
bool take_word(std::string_view& s, std::string_view word) {
  if (s.substr(0, word.size()) != word) return false;
  if (s.size() > word.size() && s[word.size()] != ' ') return false;
  s.remove_prefix(std::min(s.size(), word.size() + 1));
  return true;
}

/// Takes a decimal number and one space (or the end) off the front of `s`.
bool take_number(std::string_view& s, std::int64_t& value) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end == s.data() || value < 0) return false;
  const auto used = static_cast<std::size_t>(end - s.data());
  if (used < s.size() && s[used] != ' ') return false;
  s.remove_prefix(std::min(s.size(), used + 1));
  return true;
}

}  // namespace

work_name_parts parse_work_name(std::string_view name) {
  work_name_parts parts;
  for (auto phase : {work_phase::forward, work_phase::backward, work_phase::weight, work_phase::update})
    if (take_word(name, work_phase_name(phase))) {
      parts.phase = phase;
      break;
    }
  if (parts.phase == work_phase::other) return {};
  std::int64_t mb = -1, chunk = -1;
  if (!name.empty()) {
    if (!take_word(name, "mb") || !take_number(name, mb)) return {};
    if (!name.empty() && (!take_word(name, "chunk") || !take_number(name, chunk))) return {};
    if (!name.empty()) return {};
  }
  parts.micro_batch = mb;
  parts.chunk = chunk;
  return parts;
}

std::string device_key_name(std::uint32_t key) {
  const std::uint32_t kind = key >> 16, ordinal = key & 0xffffu;
  static const char* const kinds[] = {"cpu", "cuda", "sim"};
  return (kind < 3 ? std::string(kinds[kind]) : "kind " + std::to_string(kind)) + ":" + std::to_string(ordinal);
}

std::uint64_t percentile(std::vector<std::uint64_t>& values, double p) {
  if (values.empty()) return 0;
  if (!std::is_sorted(values.begin(), values.end())) std::sort(values.begin(), values.end());
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size())));
  if (rank == 0) rank = 1;
  return values[std::min(rank, values.size()) - 1];
}

namespace {

struct actor_state {
  std::optional<std::size_t> open_slice;             // index into actor_info::slices
  std::unordered_set<std::uint64_t> pending;          // enqueued, not yet taken
};

}  // namespace

trace_model build_model(const trace_file& file) {
  trace_model m;
  m.file = &file;
  if (!file.events.empty()) {
    m.begin = file.events.front().ts_ns;
    m.end = file.events.back().ts_ns;
  }
  std::unordered_map<std::uint64_t, actor_state> state;
  std::unordered_map<std::uint64_t, std::uint64_t> enqueue_ts;
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, device_slice> open_work;
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint16_t>, transfer_slice> open_transfers;
  std::unordered_map<std::uint64_t, std::uint32_t> placement;  // actor -> rank

  auto actor = [&](std::uint64_t id, std::uint64_t ts) -> actor_info& {
    auto [it, inserted] = m.actors.try_emplace(id);
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
  };
  auto take_from_mailbox = [&](std::uint64_t id, std::uint64_t msg, std::uint64_t ts) {
    auto& st = state[id];
    if (st.pending.erase(msg) != 0) {
      auto& a = actor(id, ts);
      a.depth.push_back({ts, static_cast<std::uint32_t>(st.pending.size())});
    }
  };

  for (const auto& e : file.events) {
    switch (static_cast<event_kind>(e.kind)) {
      case event_kind::spawn: {
        auto& a = actor(e.actor, e.ts_ns);
        a.spawn_seen = true;
        a.first_ts = e.ts_ns;
        const auto& name = file.string_at(e.arg32);
        if (!name.empty()) a.name = name;
        break;
      }
      case event_kind::exit: {
        auto& a = actor(e.actor, e.ts_ns);
        a.exit_ts = e.ts_ns;
        a.exit_code = e.arg32;
        a.exit_reason = file.string_at(e.msg);
        // A failing handler records its exit before its handler_end: the slice stays open.
        auto& st = state[e.actor];
        if (!st.pending.empty()) {
          st.pending.clear();
          a.depth.push_back({e.ts_ns, 0});
        }
        break;
      }
      case event_kind::remote_send:
        ++m.remote_sends;
        [[fallthrough]];
      case event_kind::send: {
        m.send_by_msg[e.msg] = m.sends.size();
        send_record snd{e.ts_ns, e.actor, e.peer, e.type};
        snd.remote = e.kind == static_cast<std::uint8_t>(event_kind::remote_send);
        if (e.actor != 0) {
          auto st = state.find(e.actor);
          if (st != state.end() && st->second.open_slice) snd.sender_slice = static_cast<std::int64_t>(*st->second.open_slice);
        }
        m.sends.push_back(snd);
        if (e.actor != 0) ++actor(e.actor, e.ts_ns).sent;
        break;
      }
      case event_kind::enqueue: {
        auto& a = actor(e.actor, e.ts_ns);
        ++a.enqueued;
        enqueue_ts[e.msg] = e.ts_ns;
        auto& st = state[e.actor];
        if (st.pending.insert(e.msg).second) a.depth.push_back({e.ts_ns, static_cast<std::uint32_t>(st.pending.size())});
        break;
      }
      case event_kind::handler_begin: {
        take_from_mailbox(e.actor, e.msg, e.ts_ns);
        auto& a = actor(e.actor, e.ts_ns);
        auto& st = state[e.actor];
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
        auto it = m.send_by_msg.find(e.msg);
        if (it != m.send_by_msg.end()) {
          const auto& snd = m.sends[it->second];
          auto eq = enqueue_ts.find(e.msg);
          m.flows.push_back({e.msg, e.type, snd.ts, snd.sender, e.actor, eq == enqueue_ts.end() ? 0 : eq->second,
                             e.ts_ns});
        }
        break;
      }
      case event_kind::handler_end: {
        auto it = m.actors.find(e.actor);
        if (it == m.actors.end()) break;
        auto& st = state[e.actor];
        if (!st.open_slice) break;  // an end without a begin (recording started mid-handler)
        auto& s = it->second.slices[*st.open_slice];
        s.end = e.ts_ns;
        s.threw = (e.arg32 & 1u) != 0;
        st.open_slice.reset();
        break;
      }
      case event_kind::drop: {
        if (e.actor != 0) take_from_mailbox(e.actor, e.msg, e.ts_ns);
        m.drops.push_back({e.ts_ns, e.actor, e.peer, e.type, e.arg32});
        break;
      }
      case event_kind::unhandled: {
        take_from_mailbox(e.actor, e.msg, e.ts_ns);
        ++actor(e.actor, e.ts_ns).unhandled;
        m.drops.push_back({e.ts_ns, e.actor, e.peer, e.type, 6 /* errc::unhandled_message */});
        break;
      }
      case event_kind::timer_fire:
        break;
      case event_kind::remote_recv:
        ++m.remote_receipts;  // the enqueue and handling that follow carry this rank's message id
        break;
      case event_kind::placement:
        placement[e.actor] = e.arg32;
        break;
      case event_kind::device_begin: {
        device_slice s;
        s.begin = s.end = e.ts_ns;
        s.work = e.msg;
        s.name = e.arg32;
        const auto parts = parse_work_name(file.string_at(e.arg32));
        s.phase = parts.phase;
        s.micro_batch = parts.micro_batch;
        s.chunk = parts.chunk;
        auto key = std::make_tuple(e.actor, e.peer, e.msg);
        auto [it, inserted] = open_work.try_emplace(key, s);
        if (!inserted) {  // the same work id began twice: the first never ended
          it->second.unfinished = true;
          it->second.end = e.ts_ns;
          m.streams[{e.actor, e.peer}].push_back(it->second);
          it->second = s;
        }
        break;
      }
      case event_kind::device_end: {
        auto it = open_work.find(std::make_tuple(e.actor, e.peer, e.msg));
        if (it == open_work.end()) break;
        it->second.end = e.ts_ns;
        m.streams[{e.actor, e.peer}].push_back(it->second);
        open_work.erase(it);
        break;
      }
      case event_kind::transfer_begin: {
        transfer_slice t;
        t.begin = t.end = e.ts_ns;
        t.rank = e.actor;
        t.peer = e.peer;
        t.key = e.msg;
        t.what = static_cast<trace::transfer>(e.type);
        t.bytes = e.arg32;
        auto [it, inserted] = open_transfers.try_emplace(std::make_tuple(e.actor, e.peer, e.msg, e.type), t);
        if (!inserted) {  // the same transfer began twice: the first never ended
          it->second.unfinished = true;
          m.transfers.push_back(it->second);
          it->second = t;
        }
        break;
      }
      case event_kind::transfer_end: {
        auto it = open_transfers.find(std::make_tuple(e.actor, e.peer, e.msg, e.type));
        if (it == open_transfers.end()) break;
        it->second.end = e.ts_ns;
        it->second.bytes = e.arg32;  // a receive may get fewer bytes than it posted for
        m.transfers.push_back(it->second);
        open_transfers.erase(it);
        break;
      }
      case event_kind::tag: {
        tag_record t{e.ts_ns, e.actor, file.string_at(e.msg), e.arg32};
        if (t.name == "pipeline.stage" && e.actor != 0) {
          actor(e.actor, e.ts_ns).pipeline_stage = e.arg32;
        } else if (t.name == "pipeline.device" && e.actor != 0) {
          actor(e.actor, e.ts_ns).device_key = e.arg32;
        } else if (t.name == "pipeline.forward" || t.name == "pipeline.backward") {
          auto st = state.find(e.actor);
          if (st != state.end() && st->second.open_slice) {
            auto& s = m.actors[e.actor].slices[*st->second.open_slice];
            s.phase = t.name == "pipeline.forward" ? pipeline_phase::forward : pipeline_phase::backward;
            s.micro_batch = e.arg32;
          }
        } else if (t.name == "pipeline.ideal_bubble_ppm") {
          m.ideal_bubble = static_cast<double>(e.arg32) / 1e6;
        }
        m.tags.push_back(std::move(t));
        break;
      }
      default:
        ++m.unknown_events;
        break;
    }
  }
  for (auto& [id, rank] : placement)
    if (auto it = m.actors.find(id); it != m.actors.end()) it->second.rank = rank;
  // Close what the trace ended inside of.
  for (auto& [id, st] : state) {
    if (!st.open_slice) continue;
    auto& s = m.actors[id].slices[*st.open_slice];
    s.end = m.end;
    s.unfinished = true;
  }
  for (auto& [key, s] : open_work) {
    device_slice c = s;
    c.end = m.end;
    c.unfinished = true;
    m.streams[{std::get<0>(key), std::get<1>(key)}].push_back(c);
  }
  for (auto& [key, t] : open_transfers) {
    transfer_slice c = t;
    c.end = m.end;
    c.unfinished = true;
    m.transfers.push_back(c);
  }
  std::stable_sort(m.transfers.begin(), m.transfers.end(),
                   [](const transfer_slice& a, const transfer_slice& b) { return a.begin < b.begin; });
  if (file.merged()) {
    // (rank, peer, tag, what) -> indices into m.transfers, in time order
    std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, trace::transfer>, std::vector<std::size_t>> by_key;
    for (std::size_t i = 0; i < m.transfers.size(); ++i) {
      const auto& t = m.transfers[i];
      by_key[{t.rank, t.peer, t.key, t.what}].push_back(i);
    }
    for (const auto& [key, sends] : by_key) {
      const auto& [rank, peer, tag, what] = key;
      if (what != trace::transfer::send) continue;
      auto rec = by_key.find({peer, rank, tag, trace::transfer::receive});
      const std::size_t matched = rec == by_key.end() ? 0 : std::min(sends.size(), rec->second.size());
      m.unlinked_sends += sends.size() - matched;
      for (std::size_t k = 0; k < matched; ++k) m.transfer_links.emplace_back(sends[k], rec->second[k]);
    }
  }
  for (auto& [key, v] : m.streams)
    std::stable_sort(v.begin(), v.end(), [](const device_slice& a, const device_slice& b) { return a.begin < b.begin; });
  return m;
}

}  // namespace strata::trace_tools
