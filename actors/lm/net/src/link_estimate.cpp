#include "strata/lm_net/link_estimate.hpp"

#include <algorithm>
#include <limits>

#include "strata/stats.hpp"

namespace strata::lm_net {

pipeline::link_model estimate_link(const link_samples& samples) {
  const double round_trip = median(samples.round_trip_s);
  pipeline::link_model link{round_trip / 2, std::numeric_limits<double>::infinity()};
  if (samples.transfer_s.empty() || samples.bytes == 0) return link;
  const double best = *std::min_element(samples.transfer_s.begin(), samples.transfer_s.end());
  const double payload_s = best - round_trip;
  const double seconds = payload_s > 0 ? payload_s : best;
  if (seconds > 0) link.bytes_per_s = static_cast<double>(samples.bytes) / seconds;
  return link;
}

}  // namespace strata::lm_net
