// Two ranks exchange ROUNDS pings and pongs and one request with its response, with tracing on
// (STRATA_TRACE=FILE: each rank writes FILE.rank<r>). Run under mpirun by
// tests/trace_tools/merge_ranks.sh; trace_merge_test.cpp checks the merged trace.
//
//   rank_ping_pong ROUNDS
//
// Rank 1 publishes "ponger" (answers each ping with a pong to its sender, echoes tensors, and
// answers `add` requests); rank 0's pinger sends one ping at a time, after the last pong one
// message of three tensors (4 KiB, 1 MiB + 3 B, 3 MiB of random bytes) that comes back, then one
// request. Each rank thus sends ROUNDS + 2 messages and three tensors to the other, and both
// join one allreduce at the end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iterator>
#include <random>
#include <span>
#include <string>

#include "../net/messages.hpp"  // ping, pong and add, declared for strata::net
#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/net/endpoint.hpp"

using namespace std::chrono_literals;

using nettest::add;
using nettest::ping;
using nettest::pong;
using nettest::tensor_msg;

/// The tensor sizes rank 0 sends (tests/trace_tools/trace_merge_test.cpp expects them).
constexpr std::size_t tensor_bytes[] = {4096, (std::size_t{1} << 20) + 3, std::size_t{3} << 20};

int main(int argc, char** argv) {
  char* end = nullptr;
  const long rounds = argc == 2 ? std::strtol(argv[1], &end, 10) : 0;
  if (argc != 2 || end == argv[1] || *end != '\0' || rounds < 1 || rounds > 1'000'000) {
    std::fprintf(stderr, "rank_ping_pong: expected one argument, the number of rounds (1 to 1000000)\n");
    return 2;
  }
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::device cpu = strata::make_devices("cpu:1").front();
  strata::net::endpoint net(sys, strata::net::endpoint_config{.receive_device = cpu});
  if (net.size() != 2) {
    std::fprintf(stderr, "rank_ping_pong: run it with mpirun -np 2 (this world has %d ranks)\n", net.size());
    return 2;
  }
  std::promise<std::string> finished;
  auto result = finished.get_future();
  if (net.rank() == 1) {
    (void)net.publish(sys.spawn_fn_with(
                          strata::spawn_options{.name = "ponger"},
                          [&finished](strata::actor& self) -> strata::behavior {
                            return {[&self](const ping& p) { self.send(self.current_sender(), pong{p.seq}); },
                                    [&self](const tensor_msg& m) { self.send(self.current_sender(), m); },
                                    [&self, &finished](const add& a) {
                                      finished.set_value("rank 1 answered the request");
                                      self.quit();
                                      return a.a + a.b;
                                    }};
                          }),
                      "ponger");
  } else {
    auto ponger = net.remote(1, "ponger").value();
    sys.spawn_fn_with(
        strata::spawn_options{.name = "pinger"},
        [&finished, ponger, rounds, cpu](strata::actor& self) -> strata::behavior {
          self.send(ponger, ping{1, ""});
          return {[&self, ponger, rounds, cpu](const pong& p) mutable {
                    if (p.seq < rounds) {
                      self.send(ponger, ping{p.seq + 1, ""});
                      return;
                    }
                    auto s = cpu.create_stream();
                    std::mt19937 rng(static_cast<unsigned>(rounds));
                    tensor_msg m;
                    m.label = "echo";
                    for (std::size_t n : tensor_bytes) {
                      std::vector<std::uint8_t> bytes(n);
                      for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
                      m.tensors.push_back(strata::tensor::from_host<std::uint8_t>(bytes, cpu, s));
                    }
                    self.send(ponger, m);
                  },
                  [&self, &finished, ponger, rounds](const tensor_msg& echoed) {
            if (echoed.tensors.size() != std::size(tensor_bytes)) {
              finished.set_value("rank 0 got " + std::to_string(echoed.tensors.size()) + " tensors back");
              self.quit();
              return;
            }
            self.request<int>(ponger, 30s, add{static_cast<std::int32_t>(rounds), 1}).then(
                [&self, &finished](int sum) {
                  finished.set_value("rank 0 got " + std::to_string(sum));
                  self.quit();
                },
                [&self, &finished](const strata::error& e) {
                  finished.set_value("rank 0's request failed: " + e.message());
                  self.quit();
                });
          }};
        });
  }
  if (result.wait_for(60s) != std::future_status::ready) {
    std::fprintf(stderr, "rank_ping_pong: rank %d did not finish within 60 s\n", net.rank());
    return 1;
  }
  std::printf("%s\n", result.get().c_str());
  // Rank 1's last message, the response, leaves after its handler returned, that is after
  // `finished` was set: without this collective rank 1 could shut down before it recorded that
  // send (CI saw 200 of 201). Rank 0 joins only once it has the response.
  float one = 1;
  if (auto joined = net.allreduce_sum(std::span<float>(&one, 1)); joined.wait_for(60s) != std::future_status::ready ||
                                                                   !joined.get()) {
    std::fprintf(stderr, "rank_ping_pong: rank %d could not join the other rank at the end\n", net.rank());
    return 1;
  }
  net.shutdown();
  const auto report = sys.shutdown();
  if (!report.trace_error.empty()) {
    std::fprintf(stderr, "rank_ping_pong: %s\n", report.trace_error.c_str());
    return 1;
  }
  if (!report.trace_file.empty()) std::printf("rank %d wrote %s\n", net.rank(), report.trace_file.c_str());
  return 0;
}
