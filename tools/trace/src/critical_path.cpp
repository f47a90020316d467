// The critical path of a trace: the causal chain that ends at the last handled message
// (docs/trace-tools.md, "critical path").
#include <algorithm>

#include "strata/trace_tools/trace_model.hpp"

namespace strata::trace_tools {

const char* path_kind_name(path_kind k) {
  switch (k) {
    case path_kind::handler: return "handler";
    case path_kind::wait: return "wait";
    case path_kind::device: return "device";
    case path_kind::other: return "other";
  }
  return "other";
}

namespace {

struct device_item {
  const device_slice* slice;
  std::uint64_t device;
  std::uint64_t stream;
};

}  // namespace

critical_path compute_critical_path(const trace_model& m) {
  critical_path path;
  // The target: the handler slice that ends last (the later begin on a tie).
  const actor_info* cur_actor = nullptr;
  std::size_t cur_slice = 0;
  std::size_t total_nodes = 2;
  for (const auto& [id, a] : m.actors) {
    total_nodes += a.slices.size();
    for (std::size_t i = 0; i < a.slices.size(); ++i) {
      const auto& s = a.slices[i];
      if (!cur_actor || s.end > cur_actor->slices[cur_slice].end ||
          (s.end == cur_actor->slices[cur_slice].end && s.begin >= cur_actor->slices[cur_slice].begin)) {
        cur_actor = &a;
        cur_slice = i;
      }
    }
  }
  if (!cur_actor) return path;

  // Device work of each pipeline stage's device track (all its streams), sorted by end.
  std::map<std::int64_t, std::vector<device_item>> stage_work;
  for (const auto& [key, slices] : m.streams) {
    const std::int64_t stage = stage_of_device(key.first);
    if (stage < 0) continue;
    auto& v = stage_work[stage];
    for (const auto& s : slices) v.push_back({&s, key.first, key.second});
    total_nodes += slices.size();
  }
  for (auto& [stage, v] : stage_work)
    std::stable_sort(v.begin(), v.end(), [](const device_item& a, const device_item& b) { return a.slice->end < b.slice->end; });
  std::map<std::int64_t, std::uint64_t> stage_actor;  // the first actor tagged as stage s
  for (const auto& [id, a] : m.actors)
    if (a.pipeline_stage >= 0) stage_actor.try_emplace(a.pipeline_stage, id);

  std::vector<path_segment> rev;  // built backwards in time
  auto push = [&rev](path_segment s) {
    if (s.end > s.begin) rev.push_back(s);
  };
  auto handler_segment = [](const actor_info& a, const handler_slice& s, std::uint64_t b, std::uint64_t e) {
    path_segment seg;
    seg.kind = path_kind::handler;
    seg.begin = b;
    seg.end = e;
    seg.actor = a.id;
    seg.type = s.type;
    seg.msg = s.msg;
    return seg;
  };

  path.end = cur_actor->slices[cur_slice].end;
  std::uint64_t t = path.end;  // the point reached, inside cur_actor->slices[cur_slice]
  // Every step moves to an earlier point or to another node; the bound only guards odd input.
  for (std::size_t step = 0; step < total_nodes; ++step) {
    const actor_info& a = *cur_actor;
    const handler_slice& s = a.slices[cur_slice];
    // The message that started this slice, when its send is in the trace and precedes it.
    const send_record* snd = nullptr;
    if (auto it = m.send_by_msg.find(s.msg); it != m.send_by_msg.end() && m.sends[it->second].ts <= s.begin)
      snd = &m.sends[it->second];
    // Where the message chain ends (sent from outside any handler: e.g. a device completion
    // callback, or no send recorded), device work since the previous slice began may be the cause.
    const bool dead_end = !snd || snd->sender == 0 || snd->sender_slice < 0 || !m.actors.count(snd->sender);
    const std::uint64_t arrived =
        !dead_end ? snd->ts : (cur_slice > 0 ? a.slices[cur_slice - 1].begin : 0);

    // Device work of this stage that ended after the message arrived and before the point.
    const device_item* dev = nullptr;
    if (a.pipeline_stage >= 0) {
      auto sa = stage_actor.find(a.pipeline_stage);
      auto sw = stage_work.find(a.pipeline_stage);
      if (sa != stage_actor.end() && sa->second == a.id && sw != stage_work.end()) {
        const auto& work = sw->second;
        auto ub = std::upper_bound(work.begin(), work.end(), t,
                                   [](std::uint64_t v, const device_item& d) { return v < d.slice->end; });
        while (ub != work.begin()) {
          --ub;
          if (ub->slice->end <= arrived) break;
          if (ub->slice->begin < t) {
            dev = &*ub;
            break;
          }
        }
      }
    }
    if (dev) {
      const device_slice& d = *dev->slice;
      push(handler_segment(a, s, std::max(d.end, s.begin), t));
      if (d.end < s.begin) push({path_kind::other, d.end, s.begin, a.id});
      path_segment ds;
      ds.kind = path_kind::device;
      ds.begin = d.begin;
      ds.end = d.end;
      ds.actor = a.id;
      ds.msg = d.work;
      ds.device = dev->device;
      ds.stream = dev->stream;
      ds.work_name = d.name;
      push(ds);
      // The handler that submitted it: the latest slice of the stage actor begun before it.
      auto it = std::upper_bound(a.slices.begin(), a.slices.end(), d.begin,
                                 [](std::uint64_t v, const handler_slice& h) { return v < h.begin; });
      if (it == a.slices.begin()) {
        break;
      }
      --it;
      if (it->end < d.begin) push({path_kind::other, it->end, d.begin, a.id});
      cur_slice = static_cast<std::size_t>(it - a.slices.begin());
      t = std::min(it->end, d.begin);
      continue;
    }
    push(handler_segment(a, s, s.begin, t));
    if (!snd) break;  // nothing earlier caused it (no send recorded)
    path_segment w;
    w.kind = path_kind::wait;
    w.begin = snd->ts;
    w.end = s.begin;
    w.actor = a.id;
    w.type = s.type;
    w.msg = s.msg;
    push(w);
    // The handler slice it was sent from; the chain starts here when sent outside any.
    auto sender = m.actors.find(snd->sender);
    if (snd->sender == 0 || snd->sender_slice < 0 || sender == m.actors.end() ||
        static_cast<std::size_t>(snd->sender_slice) >= sender->second.slices.size())
      break;
    const auto& ps = sender->second.slices[static_cast<std::size_t>(snd->sender_slice)];
    if (snd->ts < ps.begin || snd->ts > ps.end) break;
    cur_actor = &sender->second;
    cur_slice = static_cast<std::size_t>(snd->sender_slice);
    t = snd->ts;
  }
  path.segments.assign(rev.rbegin(), rev.rend());
  path.begin = path.segments.empty() ? path.end : path.segments.front().begin;
  for (const auto& seg : path.segments) path.by_kind[static_cast<std::size_t>(seg.kind)] += seg.duration();
  return path;
}

}  // namespace strata::trace_tools
