#pragma once
#include <cstddef>
namespace strata::bench {
/// Sizes of the messaging workloads; the same for every runtime measured.
struct messaging_params {
  std::size_t threads = 2;                  // scheduler worker threads
  std::size_t ping_pong_round_trips = 1'000'000;
  std::size_t fan_in_senders = 2;
  std::size_t fan_in_messages_per_sender = 2'000'000;   // each message carries one int
  std::size_t ring_actors = 1000;
  std::size_t ring_hops = 1'000'000;
  std::size_t spawn_count = 100'000;         // for spawn rate and memory per idle actor
};
/// Figures of one runtime; every time is wall-clock, measured inside the process.
struct messaging_result {
  double ping_pong_ns = 0;          // mean round-trip time (ns)
  double fan_in_msgs_per_s = 0;     // messages received per second by the one receiver
  double ring_hops_per_s = 0;
  double spawn_per_s = 0;           // actors spawned per second (spawn_count actors)
  double bytes_per_idle_actor = 0;  // RSS growth (/proc/self/statm) per idle actor alive
};
/// The workloads against CAF 0.17 (built only when libcaf-dev is installed).
messaging_result run_caf_workloads(const messaging_params& params);
/// The same workloads against strata.
messaging_result run_strata_workloads(const messaging_params& params);
}
