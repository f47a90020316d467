// ping_pong: two actors pass a counter back and forth N times and report the round-trip time.
//
//   ping_pong [--round-trips N] [--threads T]

#include <chrono>
#include <cstdio>
#include <future>
#include <string>

#include <CLI/CLI.hpp>

#include "strata/strata.hpp"

namespace {

struct ping {
  std::uint64_t remaining;
};
struct pong {
  std::uint64_t remaining;
};

/// Answers every ping with a pong carrying the same count.
class ponger : public strata::actor {
public:
  using protocol = strata::protocol<ping>;
  strata::behavior make_behavior() override {
    return {[this](const ping& p) { send(current_sender(), pong{p.remaining}); }};
  }
};

/// Starts the exchange and fulfils `done` after the last round trip.
class pinger : public strata::actor {
public:
  pinger(strata::actor_ref peer, std::uint64_t round_trips, std::promise<void>* done)
      : peer_(std::move(peer)), round_trips_(round_trips), done_(done) {}

  strata::behavior make_behavior() override {
    send(peer_, ping{round_trips_});
    return {[this](const pong& p) {
      if (p.remaining <= 1) {
        done_->set_value();
        quit();
        return;
      }
      send(peer_, ping{p.remaining - 1});
    }};
  }

private:
  strata::actor_ref peer_;
  std::uint64_t round_trips_;
  std::promise<void>* done_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ping_pong: two strata actors exchange a message N times and report the round-trip time"};
  std::uint64_t round_trips = 1'000'000;
  std::size_t threads = 0;
  app.add_option("--round-trips", round_trips, "number of round trips")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  app.add_option("--threads", threads, "scheduler threads (0: one per hardware thread)")->check(CLI::Range(0, 1024));
  CLI11_PARSE(app, argc, argv);

  strata::actor_system system(strata::system_config{.worker_threads = threads});
  std::promise<void> done;
  auto finished = done.get_future();
  auto ponger_ref = system.spawn<ponger>();
  auto start = std::chrono::steady_clock::now();
  system.spawn<pinger>(ponger_ref.ref(), round_trips, &done);
  finished.wait();
  auto elapsed = std::chrono::steady_clock::now() - start;
  double ns = std::chrono::duration<double, std::nano>(elapsed).count();
  std::printf("ping_pong: %llu round trips on %zu threads in %.3f s: %.1f ns per round trip\n",
              static_cast<unsigned long long>(round_trips), system.worker_count(), ns / 1e9,
              ns / static_cast<double>(round_trips));
  auto report = system.shutdown();
  if (!report.trace_file.empty())
    std::printf("trace: %zu events written to %s\n", report.trace_events, report.trace_file.c_str());
  return 0;
}
