#pragma once
/// \file
/// The link between two ranks from timed samples, robust to the few slow ones of a lossy
/// network (lm::rank_group::measure_link; docs/lstm_lm.md, "Under mpirun").

#include <cstddef>
#include <vector>

#include "strata/pipeline/simulator.hpp"

namespace strata::lm_net {

/// What rank 0 timed against rank 1: small round trips, and transfers of `bytes` each answered
/// by a small reply (so each takes one round trip besides its bytes).
struct link_samples {
  std::vector<double> round_trip_s{};
  std::vector<double> transfer_s{};
  std::size_t bytes = 0;
};

/// The link the pipeline's cost model takes: half the **median** round trip as the latency, and
/// the bytes over the **shortest** transfer less that round trip as the bandwidth (the whole
/// transfer's time when the round trip is not shorter). A TCP retransmission (200 ms or more)
/// makes a few samples far slower; the median ignores them where a mean of 300 pings grew 14x
/// at 1 % loss, and the best transfer is the one no loss slowed.
/// \returns a latency of 0 without round trips, and an infinite bandwidth without transfers or bytes.
pipeline::link_model estimate_link(const link_samples& samples);

}  // namespace strata::lm_net
