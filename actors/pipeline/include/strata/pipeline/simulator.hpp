#pragma once
/// \file
/// A discrete-event simulator that executes a pipeline plan as S concurrent stages blocking on
/// their receives, and the checks that go with it: completeness, dependencies, deadlock.
///
/// Example:
/// \code
///   using namespace strata::pipeline;
///   auto p = make_plan(schedule_kind::one_f_one_b, 4, 8);
///   auto sim = simulate(p, cost_model::uniform(4, 1.0, 2.0));
///   if (!sim) std::cerr << sim.error().message() << '\n';
///   else std::cout << "bubble " << sim->bubble << '\n' << render_ascii(sim->timeline);
/// \endcode

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "strata/pipeline/plan.hpp"
#include "strata/error.hpp"

namespace strata::pipeline {

/// How long each action takes. Times are in any one unit (seconds in the partitioner).
///
/// `forward[s]` and `backward[s]` are stage s's times for one whole micro-batch (all T
/// timesteps); a (micro-batch, chunk) unit of a plan with C chunks takes 1/C of it, because an
/// LSTM's time is linear in the timesteps. One cost model thus compares schedules with
/// different chunk counts fairly.
struct cost_model {
  std::vector<double> forward{};   ///< Per stage: forward time of one micro-batch.
  std::vector<double> backward{};  ///< Per stage: backward time of one micro-batch.
  double send_latency = 0;         ///< Per message: from the send until the receiver can use it.
  double transfer = 0;             ///< Per micro-batch's worth of data (1/C of it per chunk message).
  double push_gradients = 0;       ///< Per stage, once per step.
  double pull_weights = 0;         ///< Per stage, once per step.
  /// Per boundary b (between stages b and b + 1), or empty for none: what each message across
  /// it pays on top of `send_latency` and `transfer`, in both directions (`with_links` fills
  /// these from a rank placement and a measured link).
  std::vector<double> link_latency{};
  /// Per boundary b, or empty for none: how long one micro-batch's message (1/C of it per chunk
  /// message) occupies the link. Unlike `transfer`, the link is a resource: messages in one
  /// direction of one boundary cross it one after another, in the order they were sent, so a
  /// slow link limits the throughput and not only the latency. Each direction is separate.
  std::vector<double> link_transfer{};

  /// Every stage takes `forward` and `backward` per micro-batch.
  static cost_model uniform(int num_stages, double forward, double backward, double send_latency = 0);
};

/// A link between two ranks or machines: a message of `b` bytes takes `latency_s + b /
/// bytes_per_s` from its send until the receiver has it. `strata-bench-net --json` measures one
/// (`link_latency_us`, `link_gbps`); docs/pipeline.md shows how to feed them in.
struct link_model {
  double latency_s = 0;  ///< Per message, seconds (>= 0, finite).
  double bytes_per_s = std::numeric_limits<double>::infinity();  ///< Bandwidth (> 0; infinity: free).

  /// The link `strata-bench-net --json` prints: `latency_us` microseconds per message and
  /// `gbps` 1e9 bytes per second (its unit for every bandwidth). Not checked: see `check_link`.
  static link_model measured(double latency_us, double gbps) noexcept { return {latency_us * 1e-6, gbps * 1e9}; }

  /// latency_s + bytes / bytes_per_s.
  double seconds(double bytes) const noexcept { return latency_s + bytes / bytes_per_s; }
};

/// Checks a link: a finite latency >= 0 and a bandwidth > 0 (infinity allowed), not NaN. The
/// problem comes back as an `errc::invalid_argument` error with one sentence naming the value,
/// e.g. "the link bandwidth must be a positive number of bytes per second, got -1"; a default
/// error when none.
error check_link(const link_model& link);

/// Where the stages run: `ranks[s]` is stage s's rank (or machine) in a job of `num_ranks`.
/// Consecutive stages on one rank talk for free (the cost model's own `send_latency` and
/// `transfer` only); a boundary between two ranks pays the link.
struct rank_placement {
  std::vector<int> ranks{};  ///< One entry per stage, each in [0, num_ranks).
  int num_ranks = 1;
};

/// Checks a rank placement for `num_stages` stages: one rank per stage, `num_ranks` >= 1 and
/// every rank in [0, num_ranks). One sentence, e.g. "the rank placement puts stage 1 on rank 5,
/// but the job has 2 ranks (0-1)".
error check_rank_placement(const rank_placement& placement, int num_stages);

/// `base` with the link's costs on every boundary b whose stages sit on different ranks:
/// `link_latency[b] = link.latency_s` and `link_transfer[b] = boundary_bytes[b] /
/// link.bytes_per_s`, where `boundary_bytes[b]` is the size of one micro-batch's activation
/// from stage b to b + 1 (its gradient, going back, has the same shape). Boundaries inside a
/// rank get 0, so a placement on one rank, or a link of zero latency and infinite bandwidth,
/// simulates exactly like `base`. Times are in seconds: `base` must be in seconds too.
///
/// Errors (`errc::invalid_argument`, one sentence): a bad link or placement (see `check_link`,
/// `check_rank_placement`), `boundary_bytes` not of size S - 1, or `base` not sized for S stages.
expected<cost_model> with_links(cost_model base, const rank_placement& placement,
                                const std::vector<double>& boundary_bytes, const link_model& link);

/// One executed action with a duration, for pictures and the trace comparison.
struct timeline_entry {
  int stage = 0;
  action_kind kind = action_kind::forward;
  int micro_batch = -1;
  int chunk = -1;
  double start = 0;
  double end = 0;
};

/// What a plan costs when executed with a cost model.
struct simulation {
  double makespan = 0;         ///< The plan's ideal step time: the last action's end.
  std::vector<double> busy{};  ///< Per stage: time spent in forward, backward, push and pull.
  double bubble = 0;           ///< 1 - sum(busy) / (S * makespan).
  /// Per stage: the most (micro-batch, chunk) units whose activations are held for a backward
  /// at once (forwards done minus backwards done, at its peak).
  std::vector<int> peak_in_flight_units{};
  /// Per stage: `peak_in_flight_units / chunks`, in micro-batches' worth of activations
  /// (1F1B: S - s; GPipe: M; wavefront: (S - s + C - 1) / C).
  std::vector<double> peak_in_flight_micro_batches{};
  /// Every forward, backward, push_gradients and pull_weights, ordered by stage, then start.
  std::vector<timeline_entry> timeline{};
};

/// A stage that cannot go on: it waits at `action_index` for a message.
struct stuck_stage {
  int stage = 0;
  std::size_t action_index = 0;
  action waiting_for{};
  int sender = -1;          ///< The stage that would send it (-1: no stage can, e.g. stage 0's activation).
  bool never_sent = false;  ///< True when the sender's remaining plan holds no matching send.
};

/// Why a plan cannot finish.
struct deadlock {
  std::vector<stuck_stage> stuck{};  ///< Every unfinished stage, by stage index.
  /// The stages of one wait-for cycle in order (each waits for the next, the last for the
  /// first); empty when the stall is a receive with no matching send instead.
  std::vector<int> cycle{};

  /// One sentence naming the stuck stages and the actions they wait at, e.g. "plan deadlocks:
  /// stage 1 waits at action 7 (recv_gradient mb 0 chunk 0) for stage 2, which waits at action
  /// 4 (recv_activation mb 1 chunk 0) for stage 1".
  std::string to_string() const;
};

/// Runs the plan's message flow (ignoring time) and reports the deadlock if some stage can
/// never finish; `std::nullopt` when every stage runs to its end.
std::optional<deadlock> find_deadlock(const plan& p);

/// Checks the plan without running it: the shape, every (stage, micro-batch, chunk) has exactly
/// one forward and one backward with the forward first, chunks in recurrence order (forward
/// chunk c after c-1, backward chunk c after c+1), a receive before each compute that needs
/// one and a send after each compute whose output a neighbour needs (each exactly once), and
/// push_gradients then pull_weights once each after the last backward. The first problem comes
/// back as an `errc::invalid_argument` error with one sentence; a default error when none.
error check_plan(const plan& p);

/// Executes the plan as S concurrent stages, each running its actions in order, blocking on a
/// receive until the matching send's message arrives (send time + latency + transfer / C);
/// sends do not occupy the stage. Across a boundary with link costs the message first waits for
/// the link's direction to be free, occupies it for link_transfer[b] / C, then arrives
/// link_latency[b] + send_latency + transfer / C later.
///
/// Errors (`errc::invalid_argument`): a cost model whose sizes do not match the plan (link
/// vectors: empty or S - 1 non-negative finite entries), a
/// deadlock (the message is `deadlock::to_string()`), or a failed `check_plan`.
expected<simulation> simulate(const plan& p, const cost_model& costs);

/// A text picture of a timeline: one row per stage, one column per `time_per_column` (0: the
/// shortest compute in the timeline). Forwards show the micro-batch as a digit (mb % 10),
/// backwards as a letter ('a' + mb % 26), push/pull as 'P'/'W', idle time as '.'. A first
/// line explains the symbols.
std::string render_ascii(const std::vector<timeline_entry>& timeline, double time_per_column = 0);

}  // namespace strata::pipeline
