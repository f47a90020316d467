#include <chrono>
#include <cstdio>

#include <strata/strata.hpp>

bool pipeline_kvstore_and_simulator_work(strata::actor_system& sys);  // pipeline.cpp

int main() {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto doubler = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int x) { return 2 * x; }}; });
  auto r = sys.request<int>(doubler, std::chrono::seconds(10), 21).get();
  if (!r || *r != 42) return 1;
  std::printf("consumer: strata answered %d\n", *r);
  auto supervisor = sys.spawn_supervisor(strata::restart_policy{.max_restarts = 2, .within = std::chrono::seconds(1)},
                                         strata::spawn_options{.name = "consumer-supervisor"});
  sys.stop(supervisor);
#ifndef STRATA_CONSUMER_RUNTIME_ONLY
  if (!pipeline_kvstore_and_simulator_work(sys)) return 1;
  std::printf("consumer: a pipeline step, a kvstore update and a simulated plan ran\n");
#endif
  return 0;
}
