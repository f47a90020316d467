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

/// Where the path ends: the handler slice that ends last (the later begin on a tie); and how
/// many nodes the walk may visit at most (every handler slice, plus two).
struct path_target {
  const actor_info* actor = nullptr;
  std::size_t slice = 0;
  std::size_t nodes = 2;
};

path_target last_handled(const trace_model& m) {
  path_target target;
  for (const auto& [id, a] : m.actors) {
    target.nodes += a.slices.size();
    for (std::size_t i = 0; i < a.slices.size(); ++i) {
      const auto& s = a.slices[i];
      const auto* cur = target.actor != nullptr ? &target.actor->slices[target.slice] : nullptr;
      if (!cur || s.end > cur->end || (s.end == cur->end && s.begin >= cur->begin)) {
        target.actor = &a;
        target.slice = i;
      }
    }
  }
  return target;
}

/// Device work of each pipeline stage's device track (all its streams), sorted by end, and the
/// first actor tagged as each stage.
struct stage_device_work {
  std::map<std::int64_t, std::vector<device_item>> work;
  std::map<std::int64_t, std::uint64_t> actor;

  /// Adds the work items to `nodes`.
  stage_device_work(const trace_model& m, std::size_t& nodes) {
    for (const auto& [key, slices] : m.streams) {
      const std::int64_t stage = stage_of_device(key.first);
      if (stage < 0) continue;
      auto& v = work[stage];
      for (const auto& s : slices) v.push_back({&s, key.first, key.second});
      nodes += slices.size();
    }
    for (auto& [stage, v] : work)
      std::stable_sort(v.begin(), v.end(), [](const device_item& a, const device_item& b) { return a.slice->end < b.slice->end; });
    for (const auto& [id, a] : m.actors)
      if (a.pipeline_stage >= 0) actor.try_emplace(a.pipeline_stage, id);
  }

  /// The device work of `a`'s stage (when `a` is the stage's actor) that ended after `arrived`
  /// and began before `t`: the latest such end.
  const device_item* cause(const actor_info& a, std::uint64_t arrived, std::uint64_t t) const {
    if (a.pipeline_stage < 0) return nullptr;
    auto sa = actor.find(a.pipeline_stage);
    auto sw = work.find(a.pipeline_stage);
    if (sa == actor.end() || sa->second != a.id || sw == work.end()) return nullptr;
    const auto& items = sw->second;
    auto ub = std::upper_bound(items.begin(), items.end(), t,
                               [](std::uint64_t v, const device_item& d) { return v < d.slice->end; });
    while (ub != items.begin()) {
      --ub;
      if (ub->slice->end <= arrived) break;
      if (ub->slice->begin < t) return &*ub;
    }
    return nullptr;
  }
};

/// A handler segment (`s` runs) or a wait segment (`s`'s message waits) of actor `a`.
path_segment message_segment(path_kind kind, const actor_info& a, const handler_slice& s, std::uint64_t b, std::uint64_t e) {
  return {.kind = kind, .begin = b, .end = e, .actor = a.id, .type = s.type, .msg = s.msg};
}

path_segment device_segment(const actor_info& a, const device_item& dev) {
  const device_slice& d = *dev.slice;
  return {.kind = path_kind::device, .begin = d.begin, .end = d.end, .actor = a.id, .msg = d.work, .device = dev.device,
          .stream = dev.stream, .work_name = d.name};
}

/// The walk backwards in time from the target: a step at a time from a point inside a handler
/// slice to what caused it, either the device work it waited for or the message that started
/// it (then the handler that sent that message).
class path_walk {
public:
  path_walk(const trace_model& m, const stage_device_work& stages, const path_target& target)
      : m_(m), stages_(stages), actor_(target.actor), slice_(target.slice), t_(target.actor->slices[target.slice].end) {}

  /// One step; false where the chain starts.
  bool step() {
    const actor_info& a = *actor_;
    const handler_slice& s = a.slices[slice_];
    // The message that started this slice, when its send is in the trace and precedes it.
    const send_record* snd = nullptr;
    if (auto it = m_.send_by_msg.find(s.msg); it != m_.send_by_msg.end() && m_.sends[it->second].ts <= s.begin)
      snd = &m_.sends[it->second];
    // Where the message chain ends (sent from outside any handler: e.g. a device completion
    // callback, or no send recorded), device work since the previous slice began may be the cause.
    const bool dead_end = !snd || snd->sender == 0 || snd->sender_slice < 0 || !m_.actors.count(snd->sender);
    const std::uint64_t arrived = !dead_end ? snd->ts : (slice_ > 0 ? a.slices[slice_ - 1].begin : 0);
    if (const device_item* dev = stages_.cause(a, arrived, t_)) return through_device(a, s, *dev);
    return through_message(a, s, snd);
  }

  /// The segments, latest first.
  const std::vector<path_segment>& reversed_segments() const { return rev_; }

private:
  void push(path_segment s) {
    if (s.end > s.begin) rev_.push_back(s);
  }

  /// To the device work `dev`, then the handler that submitted it: the latest slice of the stage
  /// actor begun before it.
  bool through_device(const actor_info& a, const handler_slice& s, const device_item& dev) {
    const device_slice& d = *dev.slice;
    push(message_segment(path_kind::handler, a, s, std::max(d.end, s.begin), t_));
    if (d.end < s.begin) push({path_kind::other, d.end, s.begin, a.id});
    push(device_segment(a, dev));
    auto it = std::upper_bound(a.slices.begin(), a.slices.end(), d.begin,
                               [](std::uint64_t v, const handler_slice& h) { return v < h.begin; });
    if (it == a.slices.begin()) return false;
    --it;
    if (it->end < d.begin) push({path_kind::other, it->end, d.begin, a.id});
    slice_ = static_cast<std::size_t>(it - a.slices.begin());
    t_ = std::min(it->end, d.begin);
    return true;
  }

  /// To the message `snd` that started the slice (its wait in the mailbox), then the handler
  /// slice it was sent from; the chain starts here when sent outside any.
  bool through_message(const actor_info& a, const handler_slice& s, const send_record* snd) {
    push(message_segment(path_kind::handler, a, s, s.begin, t_));
    if (!snd) return false;  // nothing earlier caused it (no send recorded)
    push(message_segment(path_kind::wait, a, s, snd->ts, s.begin));
    auto sender = m_.actors.find(snd->sender);
    if (snd->sender == 0 || snd->sender_slice < 0 || sender == m_.actors.end() ||
        static_cast<std::size_t>(snd->sender_slice) >= sender->second.slices.size())
      return false;
    const auto& ps = sender->second.slices[static_cast<std::size_t>(snd->sender_slice)];
    if (snd->ts < ps.begin || snd->ts > ps.end) return false;
    actor_ = &sender->second;
    slice_ = static_cast<std::size_t>(snd->sender_slice);
    t_ = snd->ts;
    return true;
  }

  const trace_model& m_;
  const stage_device_work& stages_;
  const actor_info* actor_;
  std::size_t slice_;
  std::uint64_t t_;                ///< the point reached, inside actor_->slices[slice_]
  std::vector<path_segment> rev_;  ///< built backwards in time
};

}  // namespace

critical_path compute_critical_path(const trace_model& m) {
  critical_path path;
  const path_target target = last_handled(m);
  if (!target.actor) return path;
  std::size_t nodes = target.nodes;
  const stage_device_work stages(m, nodes);
  path.end = target.actor->slices[target.slice].end;
  path_walk walk(m, stages, target);
  // Every step moves to an earlier point or to another node; the bound only guards odd input.
  for (std::size_t step = 0; step < nodes; ++step)
    if (!walk.step()) break;
  const auto& rev = walk.reversed_segments();
  path.segments.assign(rev.rbegin(), rev.rend());
  path.begin = path.segments.empty() ? path.end : path.segments.front().begin;
  for (const auto& seg : path.segments) path.by_kind[static_cast<std::size_t>(seg.kind)] += seg.duration();
  return path;
}

}  // namespace strata::trace_tools
