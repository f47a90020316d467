// gemm and gemm_strided_batched against the float64 reference.
#include "strata/kernels/gemm.hpp"

#include "strata/kernels/blas.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"

namespace gemm_test {

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;
using sk::transpose;

BOOST_AUTO_TEST_SUITE(gemm)

BOOST_AUTO_TEST_CASE(gemm_matches_float64_reference_for_all_transposes_leading_dimensions_and_scalars) {
  ref::random_source rng(101);
  const std::size_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {20, 1600, 400}, {33, 17, 129}, {1, 9, 300}, {300, 64, 11}};
  for (const auto& s : shapes) {
    const std::size_t m = s[0], n = s[1], k = s[2];
    for (int mode = 0; mode < 4; ++mode) {
      const bool ta = (mode & 1) != 0, tb = (mode & 2) != 0;
      // Leading dimensions larger than the stored column counts, odd on purpose.
      const std::size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 5;
      const ref::vec a = rng.values((ta ? k : m) * lda);
      const ref::vec b = rng.values((tb ? n : k) * ldb);
      ref::vec c = rng.values(m * ldc);
      const double alpha = rng.uniform(0.5, 1.5), beta = rng.uniform(-1.0, 1.0);
      ref::fvec fc = ref::to_float(c);
      const ref::fvec fa = ref::to_float(a), fb = ref::to_float(b);
      sk::cpu::gemm(ta ? transpose::yes : transpose::no, tb ? transpose::yes : transpose::no, m, n,
                    k, static_cast<float>(alpha), fa.data(), lda, fb.data(), ldb,
                    static_cast<float>(beta), fc.data(), ldc);
      ref::gemm(ta, tb, m, n, k, static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta), c, ldc);
      BOOST_TEST_INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb);
      BOOST_TEST(ref::relative_error(fc, c) <= ref::k_fp32_tol);
    }
  }
}

BOOST_AUTO_TEST_CASE(gemm_with_beta_zero_overwrites_c_even_if_it_holds_nan) {
  ref::random_source rng(102);
  const std::size_t m = 5, n = 7, k = 3;
  const ref::vec a = rng.values(m * k), b = rng.values(k * n);
  ref::fvec c(m * n, std::numeric_limits<float>::quiet_NaN());
  const ref::fvec fa = ref::to_float(a), fb = ref::to_float(b);
  sk::cpu::gemm(transpose::no, transpose::no, m, n, k, 1.0f, fa.data(), k, fb.data(), n, 0.0f, c.data(), n);
  ref::vec rc(m * n, 0.0);
  ref::gemm(false, false, m, n, k, 1.0, a, k, b, n, 0.0, rc, n);
  BOOST_TEST(ref::relative_error(c, rc) <= ref::k_fp32_tol);
  // k == 0 is a pure scaling of C by beta.
  ref::fvec c2 = ref::to_float(rng.values(m * n));
  const ref::vec before = ref::to_double(c2);
  sk::cpu::gemm(transpose::no, transpose::no, m, n, 0, 1.0f, nullptr, 1, nullptr, n, 0.5f, c2.data(), n);
  for (std::size_t i = 0; i < c2.size(); ++i) BOOST_TEST(c2[i] == static_cast<float>(0.5 * before[i]));
}

BOOST_AUTO_TEST_CASE(gemm_strided_batched_matches_a_reference_per_matrix) {
  ref::random_source rng(103);
  struct shape { std::size_t m, n, k, batch; };
  for (const shape s : {shape{3, 5, 7, 9}, shape{1, 1, 1, 1}, shape{64, 96, 80, 3}, shape{13, 7, 20, 40}}) {
    for (int mode = 0; mode < 4; ++mode) {
      const bool ta = (mode & 1) != 0, tb = (mode & 2) != 0;
      const std::size_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n, ldc = s.n;
      const std::size_t sa = (ta ? s.k : s.m) * lda + 2, sb = (tb ? s.n : s.k) * ldb + 1, sc = s.m * ldc + 3;
      const ref::vec a = rng.values(sa * s.batch), b = rng.values(sb * s.batch);
      ref::vec c = rng.values(sc * s.batch);
      ref::fvec fc = ref::to_float(c);
      const ref::fvec fa = ref::to_float(a), fb = ref::to_float(b);
      sk::cpu::gemm_strided_batched(ta ? transpose::yes : transpose::no, tb ? transpose::yes : transpose::no,
                                    s.m, s.n, s.k, 0.75f, fa.data(), lda, sa, fb.data(), ldb, sb, -0.5f,
                                    fc.data(), ldc, sc, s.batch);
      for (std::size_t i = 0; i < s.batch; ++i) {
        const ref::vec ai(a.begin() + static_cast<std::ptrdiff_t>(i * sa), a.begin() + static_cast<std::ptrdiff_t>((i + 1) * sa));
        const ref::vec bi(b.begin() + static_cast<std::ptrdiff_t>(i * sb), b.begin() + static_cast<std::ptrdiff_t>((i + 1) * sb));
        ref::vec ci(c.begin() + static_cast<std::ptrdiff_t>(i * sc), c.begin() + static_cast<std::ptrdiff_t>((i + 1) * sc));
        ref::gemm(ta, tb, s.m, s.n, s.k, 0.75, ai, lda, bi, ldb, -0.5, ci, ldc);
        std::copy(ci.begin(), ci.end(), c.begin() + static_cast<std::ptrdiff_t>(i * sc));
      }
      BOOST_TEST_INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " batch=" << s.batch << " mode=" << mode);
      BOOST_TEST(ref::relative_error(fc, c) <= ref::k_fp32_tol);
    }
  }
}

BOOST_AUTO_TEST_CASE(gemm_rejects_leading_dimensions_smaller_than_the_matrix) {
  ref::fvec a(12, 1.0f), b(12, 1.0f), c(12, 0.0f);
  BOOST_CHECK_THROW(sk::cpu::gemm(transpose::no, transpose::no, 3, 4, 3, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4),
                    std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::gemm(transpose::no, transpose::yes, 3, 4, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f, c.data(), 4),
                    std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::gemm(transpose::no, transpose::no, 3, 4, 3, 1.0f, a.data(), 3, b.data(), 4, 0.0f, c.data(), 3),
                    std::invalid_argument);
  BOOST_CHECK_THROW(sk::cpu::gemm_strided_batched(transpose::no, transpose::no, 3, 4, 3, 1.0f, a.data(), 3, 0, b.data(), 4, 0,
                                                  0.0f, c.data(), 4, 4, 2),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gemm_threading)

BOOST_AUTO_TEST_CASE(gemm_gives_the_same_products_whether_onetbb_or_openblas_parallelises) {
  ref::random_source rng(104);
  const std::size_t m = 70, n = 1600, k = 400;  // large enough to be split into oneTBB panels
  const ref::vec a = rng.values(m * k), b = rng.values(n * k);
  const ref::fvec fa = ref::to_float(a), fb = ref::to_float(b);
  ref::vec c(m * n, 0.0);
  ref::gemm(false, true, m, n, k, 1.0, a, k, b, k, 0.0, c, n);
  const int before = sk::cpu::blas_threads();
  for (const int threads : {1, 2}) {
    sk::cpu::set_blas_threads(threads);
    ref::fvec fc(m * n, 0.0f);
    sk::cpu::gemm(transpose::no, transpose::yes, m, n, k, 1.0f, fa.data(), k, fb.data(), k, 0.0f, fc.data(), n);
    BOOST_TEST_INFO("openblas threads " << threads);
    BOOST_TEST(ref::relative_error(fc, c) <= ref::k_fp32_tol);
  }
  sk::cpu::set_blas_threads(before);
  BOOST_CHECK_THROW(sk::cpu::set_blas_threads(0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace gemm_test
