// The kernels' one-thread path under ThreadSanitizer (kernels/cpu/kernel_support.hpp, namespace
// serial) against oneTBB itself: the deterministic reduce gives oneTBB's sums bit for bit, and the
// blocks cover the range once, in order, no larger than the grain.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include "kernel_support.hpp"

namespace serial_blocks_test {

namespace serial = strata::kernels::cpu::detail::serial;

BOOST_AUTO_TEST_SUITE(serial_blocks)

BOOST_AUTO_TEST_CASE(the_serial_deterministic_reduce_equals_onetbbs_bit_for_bit) {
  std::mt19937 rng(20261206);
  // Magnitudes over 12 decades: a different grouping of the additions changes the sum's bits.
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (std::size_t n : {1u, 2u, 7u, 1000u, 4097u, 100003u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = std::ldexp(mantissa(rng), exponent(rng));
    for (std::size_t grain : {1u, 3u, 64u, 1000u}) {
      auto real = [&](const tbb::blocked_range<std::size_t>& r, double acc) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) acc += static_cast<double>(x[i]) * x[i] - x[i];
        return acc;
      };
      auto join = [](double a, double b) { return a + b; };
      const double ours = serial::deterministic_reduce(0, n, grain, 0.0, real, join);
      const double theirs =
          tbb::parallel_deterministic_reduce(tbb::blocked_range<std::size_t>(0, n, grain), 0.0, real, join);
      std::uint64_t a = 0, b = 0;
      std::memcpy(&a, &ours, sizeof a);
      std::memcpy(&b, &theirs, sizeof b);
      BOOST_TEST(a == b, "n " << n << " grain " << grain << ": " << ours << " against oneTBB's " << theirs);
      // The grouping matters: one left-to-right sum differs from the tree for some of these.
      if (n == 100003 && grain == 1) {
        const double flat = real(tbb::blocked_range<std::size_t>(0, n, n), 0.0);
        BOOST_TEST(flat != theirs);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(serial_blocks_cover_the_range_once_in_order_within_the_grain) {
  for (std::size_t n : {1u, 5u, 64u, 1001u}) {
    for (std::size_t grain : {1u, 2u, 16u, 5000u}) {
      std::size_t next = 0;
      bool ordered = true, within = true;
      serial::blocks(0, n, grain, [&](std::size_t b, std::size_t e) {
        ordered = ordered && b == next && e > b;
        within = within && e - b <= grain;
        next = e;
      });
      BOOST_TEST(ordered, "n " << n << " grain " << grain);
      BOOST_TEST(within, "n " << n << " grain " << grain);
      BOOST_TEST(next == n);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace serial_blocks_test
