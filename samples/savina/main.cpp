// savina: five of the Savina actor benchmarks on strata, each checking its own result.
//
//   savina [counting|fork_join|thread_ring|chameneos|big|all] [--threads T] [--divide D]
//
// Prints one line per workload, "NAME: SECONDS s, CHECK (ok|WRONG)", and exits non-zero when a
// result is wrong. --divide D divides every size by D (a quick run). strata-bench-messaging runs
// the same workloads beside CAF 0.17 (docs/perf.md, "Savina").

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "savina.hpp"

int main(int argc, char** argv) {
  CLI::App app{"savina: the Savina actor benchmarks counting, fork_join, thread_ring, chameneos and big on strata"};
  std::string which = "all";
  savina::params p;
  std::size_t divide = 1;
  app.add_option("workload", which, "which workload to run")
      ->check(CLI::IsMember({"counting", "fork_join", "thread_ring", "chameneos", "big", "all"}));
  app.add_option("--threads", p.threads, "scheduler threads")->check(CLI::Range(1, 256));
  app.add_option("--divide", divide, "divide every size by this (a quick run)")->check(CLI::Range(1, 1'000'000));
  CLI11_PARSE(app, argc, argv);
  p = p.scaled_down(divide);

  const std::vector<std::pair<const char*, savina::result (*)(const savina::params&)>> workloads = {
      {"counting", savina::counting},   {"fork_join", savina::fork_join}, {"thread_ring", savina::thread_ring},
      {"chameneos", savina::chameneos}, {"big", savina::big}};
  int wrong = 0;
  for (const auto& [name, run] : workloads) {
    if (which != "all" && which != name) continue;
    const savina::result r = run(p);
    std::printf("%s: %.3f s, %s (%s)\n", name, r.seconds, r.detail.c_str(), r.ok ? "ok" : "WRONG");
    std::fflush(stdout);
    if (!r.ok) ++wrong;
  }
  if (wrong > 0) {
    std::fprintf(stderr, "savina: %d workload%s gave a wrong result.\n", wrong, wrong == 1 ? "" : "s");
    return 1;
  }
  return 0;
}
