// strata-bench-trace: what recording a trace costs.
//
//   (a) per recorded event: ping-pong round trips with tracing off and on in the same run (the
//       time difference divided by the events the shutdown report counts), and a micro loop of
//       trace::emit calls (on: into the per-thread buffers; off: the one-branch record site);
//   (b) tracing compiled out: build with -DSTRATA_TRACING=OFF and run this binary; it then
//       reports its "off" figures as compiled out (docs/perf.md has the comparison);
//   (c) the LM pipeline step (seed configuration on cpu:2) with and without a trace file.
//
//   strata-bench-trace [--round-trips N] [--emit-calls N] [--repeat R] [--lm-steps S]
//                      [--lm-config seed|tiny] [--no-lm] [--trace-dir DIR] [--json]
//
//   --trace-dir (default: the temporary directory) must be a directory this process can create
//   files in; that is checked before the first run (one sentence, exit status 2).

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "strata/files.hpp"
#include "strata/stats.hpp"
#include "strata/strata.hpp"
#include "strata/trace.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/kernels/blas.hpp"

namespace {

using strata::median;
using clock_type = std::chrono::steady_clock;

#ifdef STRATA_TRACE_COMPILED_OUT
constexpr bool compiled_out = true;
#else
constexpr bool compiled_out = false;
#endif

struct ping { std::uint64_t left; };
struct pong { std::uint64_t left; };

struct run_result {
  double ns = 0;            // the exchange, start to last pong (shutdown and file writing excluded)
  std::size_t events = 0;   // recorded (from the shutdown report)
  std::size_t dropped = 0;
};

/// N ping-pong round trips on a fresh actor system; traced into `trace_file` when not empty.
run_result ping_pong(std::uint64_t round_trips, std::size_t threads, const std::string& trace_file) {
  strata::actor_system sys(strata::system_config{.worker_threads = threads, .trace_file = trace_file});
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  auto ponger = sys.spawn([](strata::actor& self) -> strata::behavior {
    return {[&self](const ping& p) { self.send(self.current_sender(), pong{p.left}); }};
  });
  const auto start = clock_type::now();
  sys.spawn([ponger, round_trips, done](strata::actor& self) -> strata::behavior {
    self.send(ponger, ping{round_trips});
    return {[&self, ponger, done](const pong& p) {
      if (p.left <= 1) {
        done->set_value();
        self.quit();
        return;
      }
      self.send(ponger, ping{p.left - 1});
    }};
  });
  finished.wait();
  run_result r;
  r.ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  auto report = sys.shutdown();
  r.events = report.trace_events;
  r.dropped = report.trace_events_dropped;
  if (!report.trace_error.empty()) throw std::runtime_error("the trace could not be written: " + report.trace_error);
  if (!trace_file.empty()) std::filesystem::remove(trace_file);
  return r;
}

/// ns per trace::emit call over `calls` calls, recording into `trace_file` when not empty.
double emit_loop(std::size_t calls, const std::string& trace_file) {
  if (!trace_file.empty() && !strata::trace::start({trace_file, 0})) return -1;  // compiled out (or busy)
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < calls; ++i)
    strata::trace::emit(strata::trace::event_kind::tag, 1, 0, i, 0, static_cast<std::uint32_t>(i));
  const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  if (!trace_file.empty()) {
    auto s = strata::trace::stop();
    if (!s.error.empty()) throw std::runtime_error("the trace could not be written: " + s.error);
    std::filesystem::remove(trace_file);
  }
  return ns / static_cast<double>(calls);
}

/// ns per steady_clock::now() call: every recorded event reads the clock once.
double clock_loop(std::size_t calls) {
  std::int64_t sink = 0;
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < calls; ++i) sink += clock_type::now().time_since_epoch().count() & 1;
  const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  if (sink == -1) std::printf("%lld", static_cast<long long>(sink));  // keeps the loop
  return ns / static_cast<double>(calls);
}

struct lm_result {
  double step_ms = 0;      // median of the measured steps
  std::size_t events = 0;  // recorded over the whole run (construction, warm-up and steps)
};

/// One warm-up step, then `steps` measured steps of the LM pipeline on cpu:2.
lm_result lm_steps(const std::string& config, int steps, const std::string& trace_file) {
  strata::lm::config c;  // the seed configuration
  if (config == "tiny") {
    c.vocab = 17, c.embed = 6, c.hidden = 7, c.layers = 2, c.seq = 6, c.batch = 4;
  }
  c.micro_batches = 2;
  strata::actor_system sys(strata::system_config{.worker_threads = 2, .trace_file = trace_file});
  std::vector<double> ms;
  {
    const std::size_t half = c.layers / 2;
    strata::lm::lm_pipeline p(sys, strata::make_devices("cpu:2"), c, strata::pipeline::schedule_kind::one_f_one_b,
                              {c.layers - half, half});
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab) - 1);
    std::vector<std::int32_t> tokens(c.seq * c.batch), targets(c.seq * c.batch);
    for (int s = 0; s < steps + 1; ++s) {
      for (auto& t : tokens) t = id(rng);
      for (auto& t : targets) t = id(rng);
      const auto start = clock_type::now();
      auto r = p.train_step(tokens, targets);
      if (!r) throw std::runtime_error(r.error().message());
      if (s > 0) ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - start).count());
    }
  }
  auto report = sys.shutdown();
  if (!report.trace_error.empty()) throw std::runtime_error("the trace could not be written: " + report.trace_error);
  if (!trace_file.empty()) std::filesystem::remove(trace_file);
  return {median(ms), report.trace_events};
}

/// Why `dir` cannot take the trace files (empty when it can): it must be a directory in which
/// this process can create a file. Checked before any run, so a bad --trace-dir does not fail
/// only after the warm-up.
std::string trace_dir_problem(const std::string& dir) {
  std::error_code ec;
  const auto st = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(st)) return "does not exist";
  if (!std::filesystem::is_directory(st)) return "is not a directory";
  if (auto creatable = strata::check_file_creatable_in(dir); !creatable)
    return "is not writable: " + creatable.error().message();
  return {};
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-bench-trace: the cost of recording a trace (per event, and on the LM pipeline step)"};
  std::uint64_t round_trips = 200'000;
  std::size_t emit_calls = 2'000'000;
  std::size_t threads = 2;
  int repeat = 5;
  int lm_steps_n = 2;
  std::string lm_config = "seed";
  bool no_lm = false, json = false;
  std::string trace_dir = std::filesystem::temp_directory_path().string();
  app.add_option("--round-trips", round_trips, "ping-pong round trips per run")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  app.add_option("--emit-calls", emit_calls, "trace::emit calls in the micro loop")->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32));
  app.add_option("--threads", threads, "scheduler threads of the ping-pong system")->check(CLI::Range(1, 1024));
  app.add_option("--repeat", repeat, "runs per side (off and on alternate; medians are reported)")->check(CLI::Range(1, 1000));
  app.add_option("--lm-steps", lm_steps_n, "measured LM steps per side (after one warm-up)")->check(CLI::Range(1, 1000));
  app.add_option("--lm-config", lm_config, "seed (V=10000 E=200 L=8 H=400 B=20 T=35) or tiny")->check(CLI::IsMember({"seed", "tiny"}));
  app.add_flag("--no-lm", no_lm, "skip the LM step");
  app.add_option("--trace-dir", trace_dir, "where the traced runs write (and then delete) their trace files");
  app.add_flag("--json", json, "print one JSON object on one line");
  CLI11_PARSE(app, argc, argv);
  if (auto problem = trace_dir_problem(trace_dir); !problem.empty()) {
    std::fprintf(stderr, "strata-bench-trace: --trace-dir %s %s (expected a writable directory)\n", trace_dir.c_str(),
                 problem.c_str());
    return 2;
  }

  try {
    const std::string tag = std::to_string(::getpid());
    const std::string pp_file = trace_dir + "/strata-bench-trace-" + tag + "-pp.strace";
    const std::string emit_file = trace_dir + "/strata-bench-trace-" + tag + "-emit.strace";
    const std::string lm_file = trace_dir + "/strata-bench-trace-" + tag + "-lm.strace";

    // (a) ping-pong, off and on alternating; one warm-up run first.
    (void)ping_pong(std::min<std::uint64_t>(round_trips, 20'000), threads, "");
    std::vector<double> off_ns, on_ns, per_event;
    std::size_t events = 0, dropped = 0;
    for (int i = 0; i < repeat; ++i) {
      auto off = ping_pong(round_trips, threads, "");
      auto on = ping_pong(round_trips, threads, compiled_out ? "" : pp_file);
      off_ns.push_back(off.ns / static_cast<double>(round_trips));
      on_ns.push_back(on.ns / static_cast<double>(round_trips));
      events = on.events;
      dropped = on.dropped;
      if (on.events > 0) per_event.push_back((on.ns - off.ns) / static_cast<double>(on.events));
    }
    const double rt_off = median(off_ns), rt_on = median(on_ns);
    const double ns_per_event = per_event.empty() ? 0 : median(per_event);

    std::vector<double> emit_off_v, emit_on_v;
    for (int i = 0; i < repeat; ++i) {
      emit_off_v.push_back(emit_loop(emit_calls, ""));
      if (!compiled_out) emit_on_v.push_back(emit_loop(emit_calls, emit_file));
    }
    const double emit_off = median(emit_off_v), emit_on = compiled_out ? 0 : median(emit_on_v);
    const double clock_ns = clock_loop(std::min<std::size_t>(emit_calls, 1'000'000));

    // (c) the LM step.
    bool have_lm = false;
    double lm_off = 0, lm_on = 0;
    std::size_t lm_events = 0;
    if (!no_lm) {
      strata::kernels::cpu::set_blas_threads(1);
      auto off = lm_steps(lm_config, lm_steps_n, "");
      auto on = lm_steps(lm_config, lm_steps_n, compiled_out ? "" : lm_file);
      // Second pair in the opposite order, so that drift does not favour one side.
      auto on2 = lm_steps(lm_config, lm_steps_n, compiled_out ? "" : lm_file);
      auto off2 = lm_steps(lm_config, lm_steps_n, "");
      lm_off = (off.step_ms + off2.step_ms) / 2;
      lm_on = (on.step_ms + on2.step_ms) / 2;
      lm_events = on.events;
      have_lm = true;
    }

    const bool event_bar = compiled_out || ns_per_event <= 30.0;
    const double lm_ratio = have_lm && lm_off > 0 ? lm_on / lm_off : 0;
    const bool lm_bar = !have_lm || compiled_out || lm_ratio <= 1.10;
    if (json) {
      nlohmann::json j = {{"tracing", compiled_out ? "compiled_out" : "compiled_in"},
                          {"round_trips", round_trips},
                          {"repeat", repeat},
                          {"ping_pong_off_ns", rt_off},
                          {"ping_pong_on_ns", compiled_out ? nlohmann::json(nullptr) : nlohmann::json(rt_on)},
                          {"ping_pong_events", events},
                          {"ping_pong_events_dropped", dropped},
                          {"ns_per_event", compiled_out ? nlohmann::json(nullptr) : nlohmann::json(ns_per_event)},
                          {"emit_off_ns", emit_off},
                          {"emit_on_ns", compiled_out ? nlohmann::json(nullptr) : nlohmann::json(emit_on)},
                          {"steady_clock_now_ns", clock_ns},
                          {"lm_config", have_lm ? nlohmann::json(lm_config) : nlohmann::json(nullptr)},
                          {"lm_step_off_ms", have_lm ? nlohmann::json(lm_off) : nlohmann::json(nullptr)},
                          {"lm_step_on_ms", have_lm && !compiled_out ? nlohmann::json(lm_on) : nlohmann::json(nullptr)},
                          {"lm_step_ratio", have_lm && !compiled_out ? nlohmann::json(lm_ratio) : nlohmann::json(nullptr)},
                          {"lm_events", lm_events},
                          {"bar_ns_per_event_met", event_bar},
                          {"bar_lm_slowdown_met", lm_bar}};
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("strata-bench-trace: tracing %s; %llu round trips x %d runs per side (medians), %zu threads\n\n",
                compiled_out ? "COMPILED OUT (-DSTRATA_TRACING=OFF): the 'off' column is the compiled-out figure"
                             : "compiled in",
                static_cast<unsigned long long>(round_trips), repeat, threads);
    std::printf("  %-36s %14s %14s %9s %14s\n", "", "tracing off", "tracing on", "on / off", "per event");
    if (compiled_out) {
      std::printf("  %-36s %11s ns %14s %9s %14s\n", "ping-pong round trip", fixed(rt_off, 1).c_str(), "-", "-", "-");
      std::printf("  %-36s %11s ns %14s %9s %14s\n", "trace::emit call (micro loop)", fixed(emit_off, 2).c_str(), "-", "-", "-");
    } else {
      std::printf("  %-36s %11s ns %11s ns %8sx %11s ns  (%zu events per run)\n", "ping-pong round trip",
                  fixed(rt_off, 1).c_str(), fixed(rt_on, 1).c_str(), fixed(rt_on / rt_off, 2).c_str(),
                  fixed(ns_per_event, 1).c_str(), events);
      std::printf("  %-36s %11s ns %11s ns %8sx %11s ns\n", "trace::emit call (micro loop)", fixed(emit_off, 2).c_str(),
                  fixed(emit_on, 2).c_str(), fixed(emit_off > 0 ? emit_on / emit_off : 0, 1).c_str(),
                  fixed(emit_on - emit_off, 1).c_str());
    }
    std::printf("  %-36s %11s ns  (read once per recorded event)\n", "steady_clock::now() call", fixed(clock_ns, 1).c_str());
    if (have_lm) {
      const std::string label = "LM step (" + lm_config + ", cpu:2, 1F1B M=2)";
      if (compiled_out)
        std::printf("  %-36s %11s ms %14s %9s\n", label.c_str(), fixed(lm_off, 1).c_str(), "-", "-");
      else
        std::printf("  %-36s %11s ms %11s ms %8sx %14s  (%zu events per run)\n", label.c_str(), fixed(lm_off, 1).c_str(),
                    fixed(lm_on, 1).c_str(), fixed(lm_ratio, 3).c_str(), "", lm_events);
    }
    if (dropped > 0) std::printf("\n  note: %zu events were dropped by the recorder in the traced ping-pong run\n", dropped);
    if (!compiled_out) {
      std::printf("\nbars: recorded event <= 30 ns: %s (%s ns)", event_bar ? "met" : "NOT MET", fixed(ns_per_event, 1).c_str());
      if (have_lm) std::printf("; LM step slowdown <= 10 %%: %s (%+.1f %%)", lm_bar ? "met" : "NOT MET", 100.0 * (lm_ratio - 1));
      std::printf("; tracing off: %s ns per record site (build with -DSTRATA_TRACING=OFF to compare)\n",
                  fixed(emit_off, 2).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench-trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
