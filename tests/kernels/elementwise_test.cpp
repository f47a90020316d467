// fill, scale, axpy, sum_arrays, global_norm and clip_grad_norm against float64 loops.
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/reduce.hpp"

#include <cmath>
#include <span>
#include <stdexcept>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"

namespace elementwise_test {

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;

BOOST_AUTO_TEST_SUITE(elementwise)

BOOST_AUTO_TEST_CASE(fill_scale_and_axpy_match_float64_loops) {
  ref::random_source rng(1200);
  for (const std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1} << 20}) {
    const ref::vec x = rng.values(n);
    ref::vec y = rng.values(n);
    ref::fvec fx = ref::to_float(x), fy = ref::to_float(y);
    sk::cpu::axpy(n, -0.75f, fx.data(), fy.data());
    for (std::size_t i = 0; i < n; ++i) y[i] += -0.75 * x[i];
    BOOST_TEST(ref::relative_error(fy, y) <= ref::k_fp32_tol);
    sk::cpu::scale(n, 1.5f, fy.data());
    for (auto& v : y) v *= 1.5;
    BOOST_TEST(ref::relative_error(fy, y) <= ref::k_fp32_tol);
    sk::cpu::fill(n, 0.25f, fy.data());
    BOOST_TEST(ref::relative_error(fy, ref::vec(n, 0.25)) == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(sum_arrays_adds_k_inputs_including_into_one_of_them) {
  ref::random_source rng(1201);
  for (const std::size_t n : {std::size_t{1}, std::size_t{4099}, std::size_t{3} << 18}) {
    for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
      std::vector<ref::vec> in;
      std::vector<ref::fvec> fin;
      std::vector<const float*> ptrs;
      for (std::size_t j = 0; j < k; ++j) {
        in.push_back(rng.values(n));
        fin.push_back(ref::to_float(in.back()));
      }
      for (auto& f : fin) ptrs.push_back(f.data());
      ref::vec expect(n, 0.0);
      for (const auto& v : in)
        for (std::size_t i = 0; i < n; ++i) expect[i] += v[i];
      ref::fvec out = ref::to_float(rng.values(n));
      sk::cpu::sum_arrays(ptrs, n, out.data());
      BOOST_TEST_INFO("n=" << n << " k=" << k);
      BOOST_TEST(ref::relative_error(out, expect) <= ref::k_fp32_tol);
      if (k >= 2) {  // out is the last input
        sk::cpu::sum_arrays(ptrs, n, fin.back().data());
        BOOST_TEST(ref::relative_error(fin.back(), expect) <= ref::k_fp32_tol);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(clip_grad_norm_follows_pytorch_and_returns_the_norm_before_clipping) {
  ref::random_source rng(1202);
  const std::size_t sizes[] = {7, 1, 100000, 13};
  for (const double max_norm : {1.0, 1e6}) {
    std::vector<ref::vec> g;
    std::vector<ref::fvec> fg;
    for (const std::size_t n : sizes) {
      g.push_back(rng.values(n));
      fg.push_back(ref::to_float(g.back()));
    }
    std::vector<std::span<float>> spans(fg.begin(), fg.end());
    std::vector<std::span<const float>> cspans(fg.begin(), fg.end());
    double sq = 0.0;
    for (const auto& v : g)
      for (const double x : v) sq += x * x;
    const double total = std::sqrt(sq);
    BOOST_TEST(std::abs(sk::cpu::global_norm(cspans) - total) <= 1e-12 * total);
    const double returned = sk::cpu::clip_grad_norm(spans, max_norm);
    BOOST_TEST(std::abs(returned - total) <= 1e-12 * total);
    const double coef = std::min(1.0, max_norm / (total + 1e-6));
    for (std::size_t t = 0; t < g.size(); ++t) {
      for (auto& x : g[t]) x *= coef;
      BOOST_TEST(ref::relative_error(fg[t], g[t]) <= ref::k_fp32_tol);
    }
    if (max_norm < total) BOOST_TEST(std::abs(sk::cpu::global_norm(cspans) - max_norm) <= 1e-4 * max_norm);
  }
  BOOST_CHECK_THROW((void)sk::cpu::clip_grad_norm({}, -1.0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace elementwise_test
