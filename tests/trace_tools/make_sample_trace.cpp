// Writes a sample trace: make_sample_trace OUT.strace [--small]
// (--small: a few messages of each kind, for the fuzzing seed corpus).
#include <cstdio>
#include <cstring>

#include "sample_workload.hpp"

int main(int argc, char** argv) {
  bool small = argc == 3 && std::strcmp(argv[2], "--small") == 0;
  if (argc != 2 && !small) {
    std::fprintf(stderr, "make_sample_trace: usage: make_sample_trace OUT.strace [--small]\n");
    return 2;
  }
  strata::trace_tools::test::sample_counts counts;
  if (small) counts = {.round_trips = 3, .requests = 2, .producers = 2, .readings_per_producer = 2, .stages = 2, .micro_batches = 2};
  auto err = strata::trace_tools::test::write_sample_trace(argv[1], counts);
  if (!err.empty()) {
    std::fprintf(stderr, "make_sample_trace: %s\n", err.c_str());
    return 1;
  }
  return 0;
}
