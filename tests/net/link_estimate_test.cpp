// The link lstm_lm and strata-bench-net measure between ranks (strata::lm_net::estimate_link):
// a robust statistic of injected samples, without mpirun.
#define BOOST_TEST_MODULE strata_lm_net_link_estimate
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "strata/lm_net/link_estimate.hpp"

using strata::lm_net::estimate_link;
using strata::lm_net::link_samples;

namespace {
/// Round trips of a 100 us link with a few microseconds of jitter (random, never equal).
std::vector<double> jittered_round_trips(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> jitter(-5e-6, 5e-6);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(200e-6 + jitter(rng));
  return v;
}

/// The reference: the middle of the sorted samples (odd count), by an independent route.
double middle(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

BOOST_AUTO_TEST_CASE(one_retransmission_among_the_round_trips_does_not_move_the_latency) {
  std::mt19937 rng(38);
  auto trips = jittered_round_trips(rng, 301);
  link_samples clean{trips, {}, 0};
  const double lossless = estimate_link(clean).latency_s;
  BOOST_TEST(lossless == middle(trips) / 2, boost::test_tools::tolerance(1e-12));
  // One TCP retransmission timeout (215 ms, as seen at 1 % loss) replaces one sample: a mean of
  // 301 grows by ~0.7 ms (8x the link's latency); the estimate moves by at most one sample's jitter.
  trips[17] = 0.215;
  link_samples lossy{trips, {}, 0};
  const double mean = std::accumulate(trips.begin(), trips.end(), 0.0) / static_cast<double>(trips.size()) / 2;
  BOOST_TEST(mean > 4 * lossless);
  BOOST_TEST(std::abs(estimate_link(lossy).latency_s - lossless) <= 5e-6);
  BOOST_TEST(estimate_link(lossy).latency_s == middle(trips) / 2, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(the_bandwidth_comes_from_the_best_transfer_less_one_round_trip) {
  std::mt19937 rng(7);
  auto trips = jittered_round_trips(rng, 101);
  const std::size_t bytes = std::size_t{64} << 20;
  // 64 MiB at 0.9 GB/s is 74.6 ms; one transfer lost a segment and waited 215 ms more.
  const double payload_s = static_cast<double>(bytes) / 0.9e9;
  const double rtt = middle(trips);
  link_samples s{trips, {payload_s + rtt + 0.215, payload_s + rtt + 1e-4, payload_s + rtt}, bytes};
  const auto link = estimate_link(s);
  BOOST_TEST(link.bytes_per_s == 0.9e9, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(link.latency_s == rtt / 2, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_transfer_no_longer_than_a_round_trip_counts_whole) {
  link_samples s{{3e-3, 1e-3, 2e-3}, {1.5e-3}, 1000};
  const auto link = estimate_link(s);
  BOOST_TEST(link.latency_s == 1e-3, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(link.bytes_per_s == 1000 / 1.5e-3, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(no_transfers_leave_the_bandwidth_infinite) {
  const auto link = estimate_link(link_samples{{4e-4, 6e-4}, {}, 1 << 20});
  BOOST_TEST(link.latency_s == 2.5e-4, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(std::isinf(link.bytes_per_s));
}
