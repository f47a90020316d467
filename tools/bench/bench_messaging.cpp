// strata-bench-messaging: strata against CAF 0.17 on the same messaging workloads, same run.
//
//   strata-bench-messaging [--threads N] [--repeat R] [--json] [--no-caf] [sizes...]

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "messaging_workloads.hpp"
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
  return 0;
}
