// A job of two ranks that talk without pause across a link that the cluster test cuts
// (tests/cluster/partition.sh): rank 0 asks rank 1 for an echo every 20 ms for SECONDS seconds.
//
//   partition SECONDS
//
// Rank 0 prints "partition: talking" once the first echo is back (the script cuts the cable
// after it), then "partition: N echoes in S s, longest wait W s" and exits 0. A cut longer than
// STRATA_NET_PEER_TIMEOUT_S ends the job from the communication thread instead, with one sentence
// naming the silent rank (docs/distributed.md, "Failure model").
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "strata/actor_system.hpp"
#include "strata/net/endpoint.hpp"

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const double seconds = argc == 2 ? std::atof(argv[1]) : 0;
  if (seconds <= 0) {
    std::fprintf(stderr, "partition: give the seconds to talk, a positive number (partition SECONDS)\n");
    return 2;
  }
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::net::endpoint net(sys);
  if (net.size() != 2) {
    std::fprintf(stderr, "partition: run it under mpirun -np 2\n");
    return 2;
  }
  if (net.rank() == 1) {
    // The echo serves until rank 0's driver is down (rank 0 left the job).
    std::promise<void> left;
    auto driver = net.remote(0, "driver").value();
    auto echo = sys.spawn([driver, &left](strata::actor& self) -> strata::behavior {
      self.monitor(driver);
      return {[](std::int32_t x) { return x; }, [&left](const strata::down_msg&) { left.set_value(); }};
    });
    (void)net.publish(echo, "echo");
    left.get_future().wait();
  } else {
    (void)net.publish(sys.spawn([](strata::actor&) -> strata::behavior { return {[](std::int32_t) {}}; }), "driver");
    auto echo = net.remote(1, "echo").value();
    const auto t0 = clock_type::now();
    double longest = 0;
    std::int32_t n = 0;
    while (std::chrono::duration<double>(clock_type::now() - t0).count() < seconds) {
      const auto asked = clock_type::now();
      auto answer = sys.request<std::int32_t>(echo, 600s, n).get();
      if (!answer || *answer != n) {
        std::fprintf(stderr, "partition: echo %d failed: %s\n", n,
                     answer ? "a wrong answer" : answer.error().to_string().c_str());
        return 1;
      }
      const double waited = std::chrono::duration<double>(clock_type::now() - asked).count();
      if (waited > longest) longest = waited;
      if (n++ == 0) {
        std::printf("partition: talking\n");
        std::fflush(stdout);
      }
      std::this_thread::sleep_for(20ms);  // the pace of the conversation, not a synchronisation
    }
    std::printf("partition: %d echoes in %.1f s, longest wait %.1f s\n", n,
                std::chrono::duration<double>(clock_type::now() - t0).count(), longest);
    std::fflush(stdout);
  }
  net.shutdown();
  sys.shutdown();
  return 0;
}
