#pragma once
// A real traced run for the strata-trace tests: ping-pong, request/response, fan-in, a
// three-stage pipeline with pipeline tags and (simulated) device stream work, a message to a
// terminated actor and an unhandled message.

#include <string>

namespace strata::trace_tools::test {

/// What the sample run did, for the tests to compare against.
struct sample_counts {
  int round_trips = 200;
  int requests = 50;
  int producers = 4;
  int readings_per_producer = 100;
  int stages = 3;
  int micro_batches = 4;
};

/// Runs the workload with tracing into `path`; returns an error sentence, empty on success.
std::string write_sample_trace(const std::string& path, const sample_counts& counts = {});

}  // namespace strata::trace_tools::test
