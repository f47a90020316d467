// dropout: the kept fraction, the scaling, masks of blocks that tile one activation, and bad input.
#include "strata/kernels/dropout.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"

namespace dropout_test {

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;

BOOST_AUTO_TEST_SUITE(dropout)

BOOST_AUTO_TEST_CASE(dropout_keeps_a_fraction_1_minus_p_and_scales_what_it_keeps) {
  ref::random_source rng(1300);
  const std::size_t T = 40, B = 16, D = 64, n = T * B * D;
  const ref::fvec x = ref::to_float(rng.values(n, 0.5, 1.5));  // never 0: a 0 in y means dropped
  for (const float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
    ref::fvec y(n);
    const sk::dropout_mask mask{sk::dropout_key(3, 17, 2), p};
    sk::cpu::dropout({T, B, D, 0, 0, B}, mask, x.data(), y.data());
    std::size_t kept = 0;
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (y[i] == 0.0f) continue;
      ++kept;
      const double want = static_cast<double>(x[i]) / (1.0 - p);
      worst = std::max(worst, std::abs(static_cast<double>(y[i]) - want) / want);
    }
    BOOST_TEST_INFO("p=" << p);
    // 40 960 draws: the kept fraction's standard deviation is at most 0.0025.
    BOOST_TEST(std::abs(static_cast<double>(kept) / n - (1.0 - p)) <= 0.01);
    BOOST_TEST(worst <= 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(blocks_that_tile_an_activation_draw_its_mask_in_place_and_masks_differ_by_key) {
  ref::random_source rng(1301);
  const std::size_t T = 6, B = 8, D = 5, n = T * B * D;
  ref::fvec x = ref::to_float(rng.values(n, 0.5, 1.5));
  const sk::dropout_mask mask{sk::dropout_key(1, 2, 3), 0.4f};
  ref::fvec whole(n);
  sk::cpu::dropout({T, B, D, 0, 0, B}, mask, x.data(), whole.data());
  // Time chunks of 2 rows times micro-batches of 4 columns, each a contiguous [2, 4, D] block.
  for (std::size_t r0 = 0; r0 < T; r0 += 2)
    for (std::size_t c0 = 0; c0 < B; c0 += 4) {
      ref::fvec in, out(2 * 4 * D);
      for (std::size_t r = r0; r < r0 + 2; ++r)
        for (std::size_t c = c0; c < c0 + 4; ++c)
          for (std::size_t f = 0; f < D; ++f) in.push_back(x[(r * B + c) * D + f]);
      sk::cpu::dropout({2, 4, D, r0, c0, B}, mask, in.data(), in.data());  // in place
      for (std::size_t r = 0; r < 2; ++r)
        for (std::size_t c = 0; c < 4; ++c)
          for (std::size_t f = 0; f < D; ++f)
            BOOST_TEST(in[(r * 4 + c) * D + f] == whole[((r0 + r) * B + c0 + c) * D + f]);
    }
  ref::fvec other(n);
  sk::cpu::dropout({T, B, D, 0, 0, B}, {sk::dropout_key(1, 3, 3), 0.4f}, x.data(), other.data());
  BOOST_TEST(other != whole);
}

BOOST_AUTO_TEST_CASE(dropout_refuses_a_probability_outside_0_to_1_and_a_block_past_the_columns) {
  float x[4] = {1, 2, 3, 4};
  BOOST_CHECK_THROW(sk::cpu::dropout({1, 1, 4, 0, 0, 1}, {1, 1.0f}, x, x), std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::dropout({1, 1, 4, 0, 0, 1}, {1, -0.5f}, x, x), std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::dropout({1, 1, 4, 0, 0, 1}, {1, std::nanf("")}, x, x), std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::dropout({1, 2, 2, 0, 1, 2}, {1, 0.5f}, x, x), std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::dropout({1, 1, 4, 0, 0, 1}, {1, 0.5f}, nullptr, x), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace dropout_test
