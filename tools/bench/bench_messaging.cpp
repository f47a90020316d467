// strata-bench-messaging: strata against CAF 0.17 on the same messaging workloads, same run.
//
//   strata-bench-messaging [--threads N] [--repeat R] [--json] [--no-caf] [--savina-divide D] [sizes...]
//
// Besides the four micro workloads it runs five Savina benchmarks (samples/savina, the code a
// user reads there) beside CAF twins (savina_caf.cpp); `--json` gains `savina_<name>`: CAF's time
// divided by strata's (above 1: strata ahead), and `savina_seconds` with both times.

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "messaging_workloads.hpp"
#include "savina.hpp"
#ifdef STRATA_BENCH_HAVE_CAF
#include "savina_twins.hpp"
#endif
#include "strata/stats.hpp"

namespace {

using strata::median;

using strata::bench::messaging_params;
using strata::bench::messaging_result;

messaging_result median_of(const std::vector<messaging_result>& runs) {
  auto pick = [&](double messaging_result::*field) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.*field);
    return median(v);
  };
  messaging_result m;
  m.ping_pong_ns = pick(&messaging_result::ping_pong_ns);
  m.fan_in_msgs_per_s = pick(&messaging_result::fan_in_msgs_per_s);
  m.ring_hops_per_s = pick(&messaging_result::ring_hops_per_s);
  m.spawn_per_s = pick(&messaging_result::spawn_per_s);
  m.bytes_per_idle_actor = pick(&messaging_result::bytes_per_idle_actor);
  return m;
}

struct savina_row {
  const char* name;
  double strata_s = 0;
  double caf_s = 0;
};

/// Median seconds of each Savina workload on strata and on CAF; throws on a wrong result.
std::vector<savina_row> run_savina(const savina::params& p, int repeat, bool with_caf) {
  using runner = savina::result (*)(const savina::params&);
  struct entry {
    const char* name;
    runner on_strata;
    runner on_caf;
  };
#ifdef STRATA_BENCH_HAVE_CAF
  namespace twin = strata::bench;
  const entry entries[] = {{"counting", savina::counting, twin::caf_counting},
                           {"fork_join", savina::fork_join, twin::caf_fork_join},
                           {"thread_ring", savina::thread_ring, twin::caf_thread_ring},
                           {"chameneos", savina::chameneos, twin::caf_chameneos},
                           {"big", savina::big, twin::caf_big}};
#else
  (void)with_caf;
  const entry entries[] = {{"counting", savina::counting, nullptr},
                           {"fork_join", savina::fork_join, nullptr},
                           {"thread_ring", savina::thread_ring, nullptr},
                           {"chameneos", savina::chameneos, nullptr},
                           {"big", savina::big, nullptr}};
#endif
  std::vector<savina_row> rows;
  for (const auto& e : entries) {
    std::vector<double> s, c;
    for (int i = 0; i < repeat; ++i) {
      auto check = [&](const savina::result& r, const char* who) {
        if (!r.ok)
          throw std::runtime_error(std::string("savina ") + e.name + " on " + who + " gave a wrong result: " + r.detail);
        return r.seconds;
      };
      s.push_back(check(e.on_strata(p), "strata"));
      if (with_caf && e.on_caf != nullptr) c.push_back(check(e.on_caf(p), "CAF"));
    }
    rows.push_back({e.name, median(s), c.empty() ? 0.0 : median(c)});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-bench-messaging: strata and CAF 0.17 on the same messaging workloads, in the same run"};
  messaging_params p;
  int repeat = 3;
  bool json = false;
  bool no_caf = false;
  app.add_option("--threads", p.threads, "scheduler threads for both runtimes")->check(CLI::Range(1, 256));
  app.add_option("--repeat", repeat, "runs of each workload; the median is reported")->check(CLI::Range(1, 100));
  app.add_option("--round-trips", p.ping_pong_round_trips, "ping-pong round trips")->check(CLI::Range(1, 1'000'000'000));
  app.add_option("--fan-in-messages", p.fan_in_messages_per_sender, "messages per fan-in sender")
      ->check(CLI::Range(1, 1'000'000'000));
  app.add_option("--ring-actors", p.ring_actors, "actors in the ring")->check(CLI::Range(2, 10'000'000));
  app.add_option("--ring-hops", p.ring_hops, "token hops around the ring")->check(CLI::Range(1, 1'000'000'000));
  app.add_option("--spawn-count", p.spawn_count, "idle actors spawned")->check(CLI::Range(1, 100'000'000));
  app.add_flag("--json", json, "print one JSON object on one line");
  app.add_flag("--no-caf", no_caf, "measure strata only");
  std::size_t savina_divide = 1;
  app.add_option("--savina-divide", savina_divide, "divide every Savina size by this (a quick run)")
      ->check(CLI::Range(1, 1'000'000));
  CLI11_PARSE(app, argc, argv);

#ifndef STRATA_BENCH_HAVE_CAF
  no_caf = true;
#endif
  std::vector<messaging_result> strata_runs, caf_runs;
  for (int i = 0; i < repeat; ++i) {
    strata_runs.push_back(strata::bench::run_strata_workloads(p));
#ifdef STRATA_BENCH_HAVE_CAF
    if (!no_caf) caf_runs.push_back(strata::bench::run_caf_workloads(p));
#endif
  }
  messaging_result s = median_of(strata_runs);
  messaging_result c = median_of(caf_runs);
  savina::params sp;
  sp.threads = p.threads;
  sp = sp.scaled_down(savina_divide);
  std::vector<savina_row> savina_rows;
  try {
    savina_rows = run_savina(sp, repeat, !no_caf);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench-messaging: %s\n", e.what());
    return 1;
  }

  if (json) {
    nlohmann::json out = {
        {"threads", p.threads},
        {"repeat", repeat},
        {"ping_pong_ns", s.ping_pong_ns},
        {"fan_in_msgs_per_s", s.fan_in_msgs_per_s},
        {"ring_hops_per_s", s.ring_hops_per_s},
        {"spawn_per_s", s.spawn_per_s},
        {"bytes_per_idle_actor", s.bytes_per_idle_actor},
    };
    if (!no_caf) {
      out["caf"] = {{"ping_pong_ns", c.ping_pong_ns},
                    {"fan_in_msgs_per_s", c.fan_in_msgs_per_s},
                    {"ring_hops_per_s", c.ring_hops_per_s},
                    {"spawn_per_s", c.spawn_per_s},
                    {"bytes_per_idle_actor", c.bytes_per_idle_actor}};
    }
    nlohmann::json seconds = nlohmann::json::object();
    for (const auto& r : savina_rows) {
      seconds[r.name] = no_caf ? nlohmann::json{{"strata", r.strata_s}}
                               : nlohmann::json{{"strata", r.strata_s}, {"caf", r.caf_s}};
      out[std::string("savina_") + r.name] = no_caf ? nlohmann::json(nullptr) : nlohmann::json(r.caf_s / r.strata_s);
    }
    out["savina_seconds"] = seconds;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("strata-bench-messaging: %zu threads, median of %d runs\n\n", p.threads, repeat);
  std::printf("| workload | strata | CAF 0.17 | strata advantage |\n|---|---:|---:|---:|\n");
  auto row = [&](const char* name, double sv, double cv, const char* unit, bool lower_is_better) {
    if (no_caf) {
      std::printf("| %s | %.1f %s | n/a | n/a |\n", name, sv, unit);
      return;
    }
    double adv = lower_is_better ? cv / sv : sv / cv;
    std::printf("| %s | %.1f %s | %.1f %s | %.2fx |\n", name, sv, unit, cv, unit, adv);
  };
  row("ping-pong round trip", s.ping_pong_ns, c.ping_pong_ns, "ns", true);
  row("fan-in (2 senders)", s.fan_in_msgs_per_s / 1e6, c.fan_in_msgs_per_s / 1e6, "M msg/s", false);
  row("ring (token hops)", s.ring_hops_per_s / 1e6, c.ring_hops_per_s / 1e6, "M hop/s", false);
  row("spawn rate", s.spawn_per_s / 1e3, c.spawn_per_s / 1e3, "k actors/s", false);
  row("memory per idle actor", s.bytes_per_idle_actor, c.bytes_per_idle_actor, "B", true);
  for (const auto& r : savina_rows) {
    const std::string name = std::string("Savina ") + r.name;
    row(name.c_str(), r.strata_s * 1e3, r.caf_s * 1e3, "ms", true);
  }
  return 0;
}
