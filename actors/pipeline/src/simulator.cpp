#include "strata/pipeline/simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

namespace strata::pipeline {

cost_model cost_model::uniform(int num_stages, double forward, double backward, double send_latency) {
  cost_model c;
  c.forward.assign(static_cast<std::size_t>(std::max(num_stages, 0)), forward);
  c.backward.assign(static_cast<std::size_t>(std::max(num_stages, 0)), backward);
  c.send_latency = send_latency;
  return c;
}

namespace {

bool is_receive(action_kind k) noexcept {
  return k == action_kind::recv_activation || k == action_kind::recv_gradient;
}
bool is_send(action_kind k) noexcept {
  return k == action_kind::send_activation || k == action_kind::send_gradient;
}

/// A message in flight: (receiving stage, is a gradient, micro-batch, chunk).
using message_key = std::tuple<int, bool, int, int>;

/// The stage that sends what `a` receives on stage `s` (may be out of range).
int sender_of(int s, const action& a) { return a.kind == action_kind::recv_activation ? s - 1 : s + 1; }

/// The send on stage `sender` that satisfies receive `a` on stage `s`.
action matching_send(const action& a) {
  return {a.kind == action_kind::recv_activation ? action_kind::send_activation : action_kind::send_gradient,
          a.micro_batch, a.chunk};
}

/// The execution state of all stages; `costs` null means "message flow only".
struct execution {
  const plan& p;
  const cost_model* costs;
  std::vector<std::size_t> pc;
  std::vector<double> clock;
  std::vector<double> busy;
  std::vector<int> in_flight;
  std::vector<int> peak;
  std::map<message_key, double> arrivals;
  std::vector<double> link_free;  ///< Per boundary and direction (2b: forward, 2b+1: back): when it is free.
  std::vector<timeline_entry> timeline;

  execution(const plan& pl, const cost_model* c)
      : p(pl), costs(c), pc(pl.stages.size(), 0), clock(pl.stages.size(), 0.0), busy(pl.stages.size(), 0.0),
        in_flight(pl.stages.size(), 0), peak(pl.stages.size(), 0),
        link_free(2 * pl.stages.size(), 0.0) {}

  double duration(int s, action_kind k) const {
    if (!costs) return 0;
    const auto i = static_cast<std::size_t>(s);
    const double per_chunk = 1.0 / p.chunks;
    switch (k) {
      case action_kind::forward: return costs->forward[i] * per_chunk;
      case action_kind::backward: return costs->backward[i] * per_chunk;
      case action_kind::push_gradients: return costs->push_gradients;
      case action_kind::pull_weights: return costs->pull_weights;
      default: return 0;
    }
  }

  /// When a message sent by stage `from` to `to` at `sent` arrives. A direction of a boundary
  /// is only ever used by one stage, whose clock never goes back, so the link's queue follows
  /// the send order whatever order the stages are advanced in.
  double arrival(int from, int to, double sent) {
    if (!costs) return sent;
    const double delay = costs->send_latency + costs->transfer / p.chunks;
    if (costs->link_latency.empty() && costs->link_transfer.empty()) return sent + delay;
    const auto b = static_cast<std::size_t>(std::min(from, to));
    const double occupy = costs->link_transfer.empty() ? 0 : costs->link_transfer[b] / p.chunks;
    const double latency = costs->link_latency.empty() ? 0 : costs->link_latency[b];
    double& free_at = link_free[2 * b + (to < from ? 1 : 0)];
    free_at = std::max(sent, free_at) + occupy;
    return free_at + (latency + delay);
  }

  /// Advances stage s until it finishes or blocks on a receive; true when it moved.
  bool advance(int s) {
    const auto i = static_cast<std::size_t>(s);
    const auto& actions = p.stages[i];
    bool moved = false;
    while (pc[i] < actions.size()) {
      const action& a = actions[pc[i]];
      if (is_receive(a.kind)) {
        auto it = arrivals.find({s, a.kind == action_kind::recv_gradient, a.micro_batch, a.chunk});
        if (it == arrivals.end()) break;
        clock[i] = std::max(clock[i], it->second);
        arrivals.erase(it);  // consumed: a second receive of the same message must wait forever
      } else if (is_send(a.kind)) {
        const int to = a.kind == action_kind::send_activation ? s + 1 : s - 1;
        arrivals.emplace(message_key{to, a.kind == action_kind::send_gradient, a.micro_batch, a.chunk},
                         arrival(s, to, clock[i]));
      } else {
        const double d = duration(s, a.kind);
        timeline.push_back({s, a.kind, a.micro_batch, a.chunk, clock[i], clock[i] + d});
        clock[i] += d;
        busy[i] += d;
        if (a.kind == action_kind::forward) peak[i] = std::max(peak[i], ++in_flight[i]);
        if (a.kind == action_kind::backward) --in_flight[i];
      }
      ++pc[i];
      moved = true;
    }
    return moved;
  }

  /// Runs every stage as far as it can go. Times do not depend on the order stages are
  /// advanced in: a stage's clock only depends on its own actions and the arrival times of
  /// the messages it receives (a Kahn process network).
  void run() {
    bool moved = true;
    while (moved) {
      moved = false;
      for (int s = 0; s < p.num_stages; ++s) moved = advance(s) || moved;
    }
  }

  std::optional<deadlock> stall() const {
    deadlock d;
    for (int s = 0; s < p.num_stages; ++s) {
      const auto i = static_cast<std::size_t>(s);
      if (pc[i] >= p.stages[i].size()) continue;
      stuck_stage st;
      st.stage = s;
      st.action_index = pc[i];
      st.waiting_for = p.stages[i][pc[i]];
      const int from = sender_of(s, st.waiting_for);
      if (from < 0 || from >= p.num_stages) {
        st.never_sent = true;
      } else {
        st.sender = from;
        const auto& theirs = p.stages[static_cast<std::size_t>(from)];
        const action want = matching_send(st.waiting_for);
        st.never_sent = std::find(theirs.begin() + static_cast<std::ptrdiff_t>(pc[static_cast<std::size_t>(from)]),
                                  theirs.end(), want) == theirs.end();
      }
      d.stuck.push_back(st);
    }
    if (d.stuck.empty()) return std::nullopt;

    // Wait-for graph: stuck stage -> its sender (when that sender still has the send to do).
    std::map<int, int> waits_on;
    for (const auto& st : d.stuck)
      if (!st.never_sent) waits_on[st.stage] = st.sender;
    for (const auto& st : d.stuck) {
      std::vector<int> path;
      int cur = st.stage;
      while (waits_on.count(cur) && std::find(path.begin(), path.end(), cur) == path.end()) {
        path.push_back(cur);
        cur = waits_on[cur];
      }
      auto at = std::find(path.begin(), path.end(), cur);
      if (at != path.end()) {
        d.cycle.assign(at, path.end());
        break;
      }
    }
    return d;
  }
};

/// "waits at action 7 (recv_gradient mb 0 chunk 0)".
std::string waits_at(const stuck_stage& st) {
  return "waits at action " + std::to_string(st.action_index) + " (" + to_string(st.waiting_for) + ")";
}

error invalid(std::string sentence) { return error(errc::invalid_argument, std::move(sentence)); }

/// A number as a user wrote it: "-1", "0.25", "nan", "inf".
std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

std::string deadlock::to_string() const {
  std::string out = "plan deadlocks: ";
  auto find = [&](int stage) -> const stuck_stage& {
    return *std::find_if(stuck.begin(), stuck.end(), [&](const stuck_stage& s) { return s.stage == stage; });
  };
  if (!cycle.empty()) {
    // Each stage of the cycle waits for the next, so "which" always names the stage just said.
    for (std::size_t k = 0; k < cycle.size(); ++k) {
      const auto& st = find(cycle[k]);
      out += (k == 0 ? "stage " + std::to_string(st.stage) + " " : std::string(", which ")) + waits_at(st) +
             " for stage " + std::to_string(st.sender);
    }
  } else {
    const auto& st = *std::find_if(stuck.begin(), stuck.end(), [](const stuck_stage& s) { return s.never_sent; });
    out += "stage " + std::to_string(st.stage) + " " + waits_at(st) +
           (st.sender < 0 ? ", which no stage sends" : ", which stage " + std::to_string(st.sender) + " never sends");
  }
  if (stuck.size() > 1) {
    out += " (stuck: stages";
    for (const auto& st : stuck) out += ' ' + std::to_string(st.stage);
    out += ')';
  }
  return out;
}

error check_link(const link_model& link) {
  if (!(link.latency_s >= 0) || !std::isfinite(link.latency_s))
    return invalid("the link latency must be a finite number of seconds >= 0, got " + number(link.latency_s));
  if (!(link.bytes_per_s > 0))
    return invalid("the link bandwidth must be a positive number of bytes per second, got " + number(link.bytes_per_s));
  return {};
}

error check_rank_placement(const rank_placement& placement, int num_stages) {
  if (placement.num_ranks < 1)
    return invalid("the rank placement needs a job of at least 1 rank, got " + std::to_string(placement.num_ranks));
  if (static_cast<int>(placement.ranks.size()) != num_stages)
    return invalid("the rank placement needs one rank per stage: got " + std::to_string(placement.ranks.size()) +
                   " ranks for " + std::to_string(num_stages) + " stages");
  for (std::size_t s = 0; s < placement.ranks.size(); ++s) {
    const int r = placement.ranks[s];
    if (r < 0 || r >= placement.num_ranks)
      return invalid("the rank placement puts stage " + std::to_string(s) + " on rank " + std::to_string(r) +
                     ", but the job has " + std::to_string(placement.num_ranks) + " rank" +
                     (placement.num_ranks == 1 ? " (0)" : "s (0-" + std::to_string(placement.num_ranks - 1) + ")"));
  }
  return {};
}

expected<cost_model> with_links(cost_model base, const rank_placement& placement,
                                const std::vector<double>& boundary_bytes, const link_model& link) {
  const auto S = base.forward.size();
  if (base.backward.size() != S)
    return invalid("the cost model has forward/backward times for " + std::to_string(S) + "/" +
                   std::to_string(base.backward.size()) + " stages");
  if (auto err = check_link(link)) return err;
  if (auto err = check_rank_placement(placement, static_cast<int>(S))) return err;
  if (boundary_bytes.size() + 1 != std::max<std::size_t>(S, 1))
    return invalid("the link costs need the bytes of " + std::to_string(S > 0 ? S - 1 : 0) +
                   " stage boundaries, got " + std::to_string(boundary_bytes.size()));
  base.link_latency.assign(boundary_bytes.size(), 0.0);
  base.link_transfer.assign(boundary_bytes.size(), 0.0);
  for (std::size_t b = 0; b < boundary_bytes.size(); ++b) {
    const double bytes = boundary_bytes[b];
    if (!(bytes >= 0) || !std::isfinite(bytes))
      return invalid("the activation bytes at stage boundary " + std::to_string(b) +
                     " must be a finite number >= 0, got " + number(bytes));
    if (placement.ranks[b] == placement.ranks[b + 1]) continue;
    base.link_latency[b] = link.latency_s;
    base.link_transfer[b] = bytes / link.bytes_per_s;
  }
  return base;
}

std::optional<deadlock> find_deadlock(const plan& p) {
  if (static_cast<int>(p.stages.size()) != p.num_stages || p.chunks < 1) return std::nullopt;
  execution ex(p, nullptr);
  ex.run();
  return ex.stall();
}

error check_plan(const plan& p) {
  const int S = p.num_stages;
  const int M = p.micro_batches;
  const int C = p.chunks;
  if (S < 1 || M < 1 || C < 1)
    return invalid("a plan needs at least 1 stage, micro-batch and chunk, got " + std::to_string(S) + ", " +
                   std::to_string(M) + " and " + std::to_string(C));
  if (static_cast<int>(p.stages.size()) != S)
    return invalid("the plan says " + std::to_string(S) + " stages but holds " + std::to_string(p.stages.size()) +
                   " action lists");

  for (int s = 0; s < S; ++s) {
    const auto& actions = p.stages[static_cast<std::size_t>(s)];
    const std::string where = "stage " + std::to_string(s);
    // Position of each kind of action per unit; -1 = absent.
    const auto units = static_cast<std::size_t>(M * C);
    std::vector<std::array<long, 8>> at(units);
    for (auto& a : at) a.fill(-1);
    long push = -1;
    long pull = -1;
    long last_backward = -1;
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const action& a = actions[k];
      const auto pos = static_cast<long>(k);
      const std::string what = where + " action " + std::to_string(k) + " (" + to_string(a) + ")";
      if (a.kind == action_kind::push_gradients || a.kind == action_kind::pull_weights) {
        long& slot = a.kind == action_kind::push_gradients ? push : pull;
        if (slot >= 0) return invalid(what + " repeats; it must come once per step");
        slot = pos;
        continue;
      }
      if (a.micro_batch < 0 || a.micro_batch >= M || a.chunk < 0 || a.chunk >= C)
        return invalid(what + " names a unit outside " + std::to_string(M) + " micro-batches x " + std::to_string(C) +
                       " chunks");
      if ((a.kind == action_kind::recv_activation || a.kind == action_kind::send_gradient) && s == 0)
        return invalid(what + " has no stage before it to talk to");
      if ((a.kind == action_kind::send_activation || a.kind == action_kind::recv_gradient) && s == S - 1)
        return invalid(what + " has no stage after it to talk to");
      auto& slot = at[static_cast<std::size_t>(a.micro_batch * C + a.chunk)][static_cast<std::size_t>(a.kind)];
      if (slot >= 0) return invalid(what + " repeats action " + std::to_string(slot));
      slot = pos;
      if (a.kind == action_kind::backward) last_backward = pos;
    }
    auto pos_of = [&](int mb, int c, action_kind k) {
      return at[static_cast<std::size_t>(mb * C + c)][static_cast<std::size_t>(k)];
    };
    for (int mb = 0; mb < M; ++mb) {
      for (int c = 0; c < C; ++c) {
        const std::string unit = where + " micro-batch " + std::to_string(mb) + " chunk " + std::to_string(c);
        const long f = pos_of(mb, c, action_kind::forward);
        const long b = pos_of(mb, c, action_kind::backward);
        if (f < 0) return invalid(unit + " has no forward");
        if (b < 0) return invalid(unit + " has no backward");
        if (b < f) return invalid(unit + " runs its backward before its forward");
        if (c > 0 && pos_of(mb, c - 1, action_kind::forward) > f)
          return invalid(unit + " runs its forward before chunk " + std::to_string(c - 1) + "'s, whose final state it needs");
        if (c + 1 < C && pos_of(mb, c + 1, action_kind::backward) > b)
          return invalid(unit + " runs its backward before chunk " + std::to_string(c + 1) +
                         "'s, whose state gradient it needs");
        if (s > 0) {
          const long r = pos_of(mb, c, action_kind::recv_activation);
          if (r < 0 || r > f) return invalid(unit + " runs its forward without first receiving the activation from stage " + std::to_string(s - 1));
          const long g = pos_of(mb, c, action_kind::send_gradient);
          if (g < 0 || g < b) return invalid(unit + " never sends its input gradient to stage " + std::to_string(s - 1) + " after the backward");
        }
        if (s < S - 1) {
          const long sa = pos_of(mb, c, action_kind::send_activation);
          if (sa < 0 || sa < f) return invalid(unit + " never sends its output to stage " + std::to_string(s + 1) + " after the forward");
          const long r = pos_of(mb, c, action_kind::recv_gradient);
          if (r < 0 || r > b) return invalid(unit + " runs its backward without first receiving the gradient from stage " + std::to_string(s + 1));
        }
      }
    }
    if (push < 0 || push < last_backward) return invalid(where + " must push its gradients once, after its last backward");
    if (pull < 0 || pull < push) return invalid(where + " must pull its weights once, after pushing its gradients");
  }
  return {};
}

expected<simulation> simulate(const plan& p, const cost_model& costs) {
  if (p.num_stages < 1 || static_cast<int>(p.stages.size()) != p.num_stages || p.chunks < 1)
    return check_plan(p);
  const auto S = static_cast<std::size_t>(p.num_stages);
  if (costs.forward.size() != S || costs.backward.size() != S)
    return invalid("the cost model has forward/backward times for " + std::to_string(costs.forward.size()) + "/" +
                   std::to_string(costs.backward.size()) + " stages but the plan has " + std::to_string(S));
  for (std::size_t s = 0; s < S; ++s)
    if (!(costs.forward[s] >= 0) || !(costs.backward[s] >= 0))
      return invalid("the cost model's times for stage " + std::to_string(s) + " must be non-negative numbers");

  for (const auto* link : {&costs.link_latency, &costs.link_transfer}) {
    const char* name = link == &costs.link_latency ? "link_latency" : "link_transfer";
    if (!link->empty() && link->size() != S - 1)
      return invalid(std::string("the cost model's ") + name + " has " + std::to_string(link->size()) +
                     " entries but the plan has " + std::to_string(S - 1) + " stage boundaries (or leave it empty)");
    for (std::size_t b = 0; b < link->size(); ++b)
      if (!((*link)[b] >= 0) || !std::isfinite((*link)[b]))
        return invalid(std::string("the cost model's ") + name + " for boundary " + std::to_string(b) +
                       " must be a finite non-negative number, got " + number((*link)[b]));
  }

  execution ex(p, &costs);
  ex.run();
  if (auto d = ex.stall()) return invalid(d->to_string());
  if (auto err = check_plan(p)) return err;

  simulation out;
  for (std::size_t s = 0; s < S; ++s) out.makespan = std::max(out.makespan, ex.clock[s]);
  out.busy = ex.busy;
  double total = 0;
  for (double b : out.busy) total += b;
  out.bubble = out.makespan > 0 ? 1.0 - total / (static_cast<double>(S) * out.makespan) : 0.0;
  out.peak_in_flight_units = ex.peak;
  for (int u : ex.peak) out.peak_in_flight_micro_batches.push_back(static_cast<double>(u) / p.chunks);
  out.timeline = std::move(ex.timeline);
  std::stable_sort(out.timeline.begin(), out.timeline.end(), [](const timeline_entry& a, const timeline_entry& b) {
    return std::tie(a.stage, a.start) < std::tie(b.stage, b.start);
  });
  return out;
}

std::string render_ascii(const std::vector<timeline_entry>& timeline, double time_per_column) {
  int stages = 0;
  double end = 0;
  double shortest = 0;
  for (const auto& e : timeline) {
    stages = std::max(stages, e.stage + 1);
    end = std::max(end, e.end);
    const double d = e.end - e.start;
    if (is_compute(e.kind) && d > 0 && (shortest == 0 || d < shortest)) shortest = d;
  }
  const double q = time_per_column > 0 ? time_per_column : (shortest > 0 ? shortest : 1.0);
  const auto columns = static_cast<std::size_t>(std::llround(std::ceil(end / q - 1e-9)));
  std::vector<std::string> rows(static_cast<std::size_t>(stages), std::string(columns, '.'));
  for (const auto& e : timeline) {
    char symbol = 'P';
    if (e.kind == action_kind::forward) symbol = static_cast<char>('0' + e.micro_batch % 10);
    else if (e.kind == action_kind::backward) symbol = static_cast<char>('a' + e.micro_batch % 26);
    else if (e.kind == action_kind::pull_weights) symbol = 'W';
    const auto from = static_cast<std::size_t>(std::max(0LL, std::llround(e.start / q)));
    const auto to = std::min(columns, static_cast<std::size_t>(std::max(0LL, std::llround(e.end / q))));
    for (std::size_t c = from; c < to; ++c) rows[static_cast<std::size_t>(e.stage)][c] = symbol;
  }
  std::ostringstream os;
  os << "one column = " << q << " time units; 0-9 forward of micro-batch n, a-z backward (a = 0), P/W push/pull, . idle\n";
  for (int s = 0; s < stages; ++s) os << "stage " << s << " |" << rows[static_cast<std::size_t>(s)] << "|\n";
  return os.str();
}

}  // namespace strata::pipeline
