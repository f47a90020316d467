// ping_pong: two actors pass a counter back and forth N times and report the round-trip time.
//
//   ping_pong [--round-trips N] [--threads T] [--metrics-port PORT [--linger-ms MS]]
//
// With --metrics-port the run serves its counters at http://127.0.0.1:PORT/metrics (PORT 0: a
// free port, printed first as "metrics: http://127.0.0.1:PORT/metrics") for strata-top or
// Prometheus, and keeps serving for --linger-ms after the last round trip.

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "strata/metrics/server.hpp"
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
  int metrics_port = -1;
  int linger_ms = 0;
  auto* port_option = app.add_option("--metrics-port", metrics_port, "serve GET /metrics on 127.0.0.1:PORT (0: any free port)")
                          ->check(CLI::Range(0, 65535));
  app.add_option("--linger-ms", linger_ms, "with --metrics-port: keep serving this long after the last round trip")
      ->check(CLI::Range(0, 3'600'000))
      ->needs(port_option);
  CLI11_PARSE(app, argc, argv);

  strata::actor_system system(strata::system_config{.worker_threads = threads});
  std::unique_ptr<strata::metrics::server> metrics;  // declared after the system: stops before it
  if (metrics_port >= 0) {
    auto server = strata::metrics::server::start(system, static_cast<std::uint16_t>(metrics_port));
    if (!server) {
      std::fprintf(stderr, "ping_pong: %s\n", server.error().message().c_str());
      return 1;
    }
    metrics = std::move(*server);
    std::printf("metrics: http://%s:%u/metrics\n", metrics->bind_address().c_str(), unsigned{metrics->port()});
    std::fflush(stdout);
  }
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
  if (metrics) {
    metrics->set_gauge("ping_pong_round_trips_done", static_cast<double>(round_trips));
    metrics->set_gauge("ping_pong_round_trip_ns", ns / static_cast<double>(round_trips));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(linger_ms));
    metrics.reset();
  }
  auto report = system.shutdown();
  if (!report.trace_error.empty()) {  // STRATA_TRACE named a place that cannot be written
    std::fprintf(stderr, "ping_pong: %s\n", report.trace_error.c_str());
    return 1;
  }
  if (!report.trace_file.empty())
    std::printf("trace: %zu events written to %s\n", report.trace_events, report.trace_file.c_str());
  return 0;
}
