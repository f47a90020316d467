// Contract tests: strata/stats.hpp (median, percentile), strata/checksum.hpp (FNV-1a) and
// strata/device/shape.hpp (shape text).

#include "strata/stats.hpp"  // first: the public headers compile on their own
#include "strata/checksum.hpp"
#include "strata/device/shape.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace stats_test {

BOOST_AUTO_TEST_SUITE(stats_contract)

BOOST_AUTO_TEST_CASE(median_of_random_samples_matches_the_middle_of_a_full_sort) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> value(-1e3, 1e3);
  for (std::size_t n = 1; n <= 41; ++n) {
    std::vector<double> v(n);
    for (auto& x : v) x = value(rng);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    const double expected = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    BOOST_TEST_CONTEXT("n = " << n) { BOOST_TEST(strata::median(v) == expected); }
  }
  BOOST_TEST(strata::median({}) == 0.0);
  BOOST_TEST(strata::median({3, 1, 2, 10}) == 2.5);
}

BOOST_AUTO_TEST_CASE(percentile_is_the_smallest_value_with_at_least_p_of_them_at_or_below) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> value(0, 1);
  for (std::size_t n : {1u, 2u, 7u, 100u, 101u}) {
    std::vector<double> v(n);
    for (auto& x : v) x = value(rng);
    for (double p : {0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0}) {
      // Independent reference: scan the values for the smallest one that has enough at or below.
      double expected = 2;
      for (double candidate : v) {
        const auto at_or_below = std::count_if(v.begin(), v.end(), [&](double x) { return x <= candidate; });
        if (static_cast<double>(at_or_below) >= p * static_cast<double>(n) && candidate < expected) expected = candidate;
      }
      BOOST_TEST_CONTEXT("n = " << n << ", p = " << p) { BOOST_TEST(strata::percentile(v, p) == expected); }
    }
  }
  BOOST_TEST(strata::percentile({3, 1, 2}, 7.0) == 3.0);   // p clamped to 1: the maximum
  BOOST_TEST(strata::percentile({3, 1, 2}, -1.0) == 1.0);  // p clamped to 0: the minimum
  BOOST_TEST(strata::percentile({}, 0.5) == 0.0);
}

BOOST_AUTO_TEST_CASE(fnv1a64_matches_the_published_vectors_and_the_kvstore_legacy_basis) {
  // The standard basis: the values in the FNV authors' test suite.
  BOOST_TEST(strata::fnv1a64("") == 0xcbf29ce484222325ull);
  BOOST_TEST(strata::fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  BOOST_TEST(strata::fnv1a64("foobar") == 0x85944171f73967e8ull);
  // The kvstore's basis: computed by an independent implementation (Python) of the loop the
  // kvstore's checkpoint files were written with.
  BOOST_TEST(strata::fnv1a64("STRKV checkpoint", strata::fnv1a64_kvstore_basis) == 0x8258247b783405c7ull);
  static_assert(strata::fnv1a64("a") == 0xaf63dc4c8601ec8cull, "usable at compile time");
}

BOOST_AUTO_TEST_CASE(shape_text_writes_dimensions_in_brackets) {
  BOOST_TEST(strata::shape_text(std::vector<std::int64_t>{2, 3, 4}) == "[2, 3, 4]");
  BOOST_TEST(strata::shape_text(std::vector<std::int64_t>{7}) == "[7]");
  BOOST_TEST(strata::shape_text(std::vector<std::int64_t>{}) == "[]");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace stats_test
