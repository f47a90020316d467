#pragma once
// Five of the Savina actor benchmarks (Imam and Sarkar, AGERE 2014) written on strata's public
// API, each checking its own result. samples/savina/main.cpp runs them; strata-bench-messaging
// runs them beside CAF 0.17 twins of the same algorithms (tools/bench/savina_caf.cpp).

#include <cstddef>
#include <string>

namespace savina {

/// Sizes of the five workloads; the same for every runtime measured.
struct params {
  std::size_t threads = 2;                  ///< scheduler worker threads
  std::size_t counting_messages = 1'000'000;
  std::size_t fork_join_workers = 60;
  std::size_t fork_join_messages = 10'000;  ///< per worker
  std::size_t ring_actors = 100;
  std::size_t ring_hops = 1'000'000;
  std::size_t chameneos = 100;
  std::size_t chameneos_meetings = 200'000;
  std::size_t big_actors = 120;
  std::size_t big_pings = 2'000;            ///< per actor

  /// Every size divided by `divisor` (at least 2 of everything): for tests.
  params scaled_down(std::size_t divisor) const;
};

/// What one run of one workload measured and whether its result was right.
struct result {
  double seconds = 0;  ///< wall time from the first message to the checked result
  bool ok = false;
  std::string detail;  ///< the check, e.g. "count 1000000 of 1000000"
};

/// Counting: a producer sends `counting_messages` increments to a counter, then asks for the total.
result counting(const params& p);
/// Fork-join throughput: `fork_join_messages` messages to each of `fork_join_workers` workers,
/// each doing a little arithmetic per message.
result fork_join(const params& p);
/// Thread ring: a token passed `ring_hops` times around `ring_actors` actors.
result thread_ring(const params& p);
/// Chameneos: `chameneos` creatures meet in pairs at a mall `chameneos_meetings` times, each
/// meeting changing both colours by the complement rule; the creatures' meeting counts must sum
/// to twice the meetings.
result chameneos(const params& p);
/// Big: `big_actors` actors, each pinging random peers `big_pings` times and awaiting each pong.
result big(const params& p);

/// The colour two chameneos take after they meet (Savina's complement rule).
int complement(int a, int b) noexcept;

}  // namespace savina
