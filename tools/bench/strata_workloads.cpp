// strata side of the messaging benchmark: the same workloads as caf_workloads.cpp.

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "messaging_workloads.hpp"
#include "strata/strata.hpp"

namespace strata::bench {

namespace {

using clock_type = std::chrono::steady_clock;

double rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

struct ball {
  std::uint64_t remaining;
};

double ping_pong(const messaging_params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::promise<void> done;
  auto finished = done.get_future();
  auto ponger = sys.spawn([](actor& self) -> behavior {
    return {[&self](const ball& b) { self.send(self.current_sender(), b); }};
  });
  auto start = clock_type::now();
  sys.spawn([ponger, n = p.ping_pong_round_trips, &done](actor& self) -> behavior {
    self.send(ponger, ball{n});
    return {[&self, ponger, &done](const ball& b) {
      if (b.remaining <= 1) {
        done.set_value();
        self.quit();
        return;
      }
      self.send(ponger, ball{b.remaining - 1});
    }};
  });
  finished.wait();
  auto ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  return ns / static_cast<double>(p.ping_pong_round_trips);
}

struct keep_sending {};

double fan_in(const messaging_params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  const std::uint64_t total = p.fan_in_senders * p.fan_in_messages_per_sender;
  std::promise<void> done;
  auto finished = done.get_future();
  auto receiver = sys.spawn([total, &done](actor& self) -> behavior {
    auto count = std::make_shared<std::uint64_t>(0);
    return {[&self, count, total, &done](int) {
      if (++*count == total) {
        done.set_value();
        self.quit();
      }
    }};
  });
  std::vector<actor_ref> senders;
  for (std::size_t s = 0; s < p.fan_in_senders; ++s) {
    senders.push_back(sys.spawn([receiver, n = p.fan_in_messages_per_sender](actor& self) -> behavior {
      auto left = std::make_shared<std::uint64_t>(n);
      return {[&self, receiver, left](const keep_sending&) {
        // Bursts of 1000, then yield, so the receiver runs meanwhile.
        for (int i = 0; i < 1000 && *left > 0; ++i, --*left) self.send(receiver, static_cast<int>(*left));
        if (*left > 0) self.send(self.self(), keep_sending{});
        else self.quit();
      }};
    }));
  }
  auto start = clock_type::now();
  for (auto& s : senders) sys.send(s, keep_sending{});
  finished.wait();
  double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>(total) / secs;
}

struct hop {
  std::uint64_t remaining;
};
struct next_node {
  actor_ref next;
};

double ring(const messaging_params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::promise<void> done;
  auto finished = done.get_future();
  auto make_node = [&done](actor& self) -> behavior {
    auto next = std::make_shared<actor_ref>();
    return {[next](next_node& n) { *next = std::move(n.next); },
            [&self, next, &done](const hop& h) {
              if (h.remaining == 0) {
                done.set_value();
                return;
              }
              self.send(*next, hop{h.remaining - 1});
            }};
  };
  std::vector<actor_ref> nodes;
  for (std::size_t i = 0; i < p.ring_actors; ++i) nodes.push_back(sys.spawn(make_node));
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto r = sys.request<void>(nodes[i], std::chrono::seconds(10), next_node{nodes[(i + 1) % nodes.size()]});
    r.get().value();  // every node knows its successor before the token starts
  }
  auto start = clock_type::now();
  sys.send(nodes[0], hop{p.ring_hops});
  finished.wait();
  double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  for (auto& n : nodes) sys.stop(n);  // breaks the ring's cycle of handles
  return static_cast<double>(p.ring_hops) / secs;
}

void spawn_idle(const messaging_params& p, double& per_s, double& bytes_per_actor) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::vector<actor_ref> actors;
  actors.reserve(p.spawn_count);
  ::malloc_trim(0);
  double before = rss_bytes();
  auto start = clock_type::now();
  for (std::size_t i = 0; i < p.spawn_count; ++i)
    actors.push_back(sys.spawn([](actor&) -> behavior { return {[](int) {}}; }));
  double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  double after = rss_bytes();
  per_s = static_cast<double>(p.spawn_count) / secs;
  bytes_per_actor = (after - before) / static_cast<double>(p.spawn_count);
  sys.shutdown(shutdown_mode::discard);
}

}  // namespace

messaging_result run_strata_workloads(const messaging_params& params) {
  messaging_result r;
  spawn_idle(params, r.spawn_per_s, r.bytes_per_idle_actor);
  r.ping_pong_ns = ping_pong(params);
  r.fan_in_msgs_per_s = fan_in(params);
  r.ring_hops_per_s = ring(params);
  return r;
}

}  // namespace strata::bench
