// cuda::gemm and cuda::gemm_strided_batched against cpu::gemm on the same data.
#include "strata/kernels/cuda.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cuda_test_support.hpp"
#include "strata/kernels/cpu.hpp"

namespace sk = strata::kernels;
namespace kc = strata::kernels::cuda;
using namespace kc::test;
using sk::transpose;

BOOST_AUTO_TEST_SUITE(cuda_gemm)

STRATA_GPU_TEST_CASE(gemm_matches_the_cpu_kernel_for_all_transposes_leading_dimensions_and_scalars) {
  gpu_session gpu;
  random_source rng(201);
  const std::size_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {20, 1600, 400}, {33, 17, 129}, {1, 9, 300}, {300, 64, 11}};
  for (const auto& s : shapes) {
    const std::size_t m = s[0], n = s[1], k = s[2];
    for (int mode = 0; mode < 4; ++mode) {
      const transpose ta = (mode & 1) != 0 ? transpose::yes : transpose::no;
      const transpose tb = (mode & 2) != 0 ? transpose::yes : transpose::no;
      const std::size_t lda = (ta == transpose::yes ? m : k) + 3, ldb = (tb == transpose::yes ? k : n) + 1, ldc = n + 5;
      const auto a = rng.values((ta == transpose::yes ? k : m) * lda);
      const auto b = rng.values((tb == transpose::yes ? n : k) * ldb);
      auto c = rng.values(m * ldc);
      const float alpha = rng.uniform(0.5f, 1.5f), beta = rng.uniform(-1.0f, 1.0f);
      const dfloats da(a), db(b), dc(c);
      kc::gemm(gpu.ctx(), ta, tb, m, n, k, alpha, da.get(), lda, db.get(), ldb, beta, dc.get(), ldc);
      sk::cpu::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
      BOOST_TEST_INFO("m=" << m << " n=" << n << " k=" << k << " mode=" << mode);
      BOOST_TEST(relative_error(dc.download(), c) <= k_fp32_tol);
    }
  }
}

STRATA_GPU_TEST_CASE(gemm_with_beta_zero_ignores_nan_in_c_and_k_zero_scales_c) {
  gpu_session gpu;
  random_source rng(202);
  const std::size_t m = 5, n = 7, k = 3;
  const auto a = rng.values(m * k), b = rng.values(k * n);
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  const dfloats da(a), db(b), dc(c);
  kc::gemm(gpu.ctx(), transpose::no, transpose::no, m, n, k, 1.0f, da.get(), k, db.get(), n, 0.0f, dc.get(), n);
  sk::cpu::gemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  BOOST_TEST(relative_error(dc.download(), c) <= k_fp32_tol);

  const auto c2 = rng.values(m * n);
  const dfloats dc2(c2);
  kc::gemm(gpu.ctx(), transpose::no, transpose::no, m, n, 0, 1.0f, nullptr, 1, nullptr, n, 0.5f, dc2.get(), n);
  const auto got = dc2.download();
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == 0.5f * c2[i]);
  kc::gemm(gpu.ctx(), transpose::no, transpose::no, m, n, 0, 1.0f, nullptr, 1, nullptr, n, 0.0f, dc.get(), n);
  for (const float v : dc.download()) BOOST_TEST(v == 0.0f);
}

STRATA_GPU_TEST_CASE(gemm_strided_batched_matches_the_cpu_kernel_including_broadcast_operands) {
  gpu_session gpu;
  random_source rng(203);
  struct shape { std::size_t m, n, k, batch; bool broadcast_a; };
  for (const shape s : {shape{3, 5, 7, 9, false}, shape{1, 1, 1, 1, false}, shape{64, 96, 80, 3, false},
                        shape{13, 7, 20, 40, true}}) {
    for (int mode = 0; mode < 4; ++mode) {
      const transpose ta = (mode & 1) != 0 ? transpose::yes : transpose::no;
      const transpose tb = (mode & 2) != 0 ? transpose::yes : transpose::no;
      const std::size_t lda = ta == transpose::yes ? s.m : s.k, ldb = tb == transpose::yes ? s.k : s.n, ldc = s.n;
      const std::size_t sa = s.broadcast_a ? 0 : (ta == transpose::yes ? s.k : s.m) * lda + 2;
      const std::size_t sb = (tb == transpose::yes ? s.n : s.k) * ldb + 1, sc = s.m * ldc + 3;
      const auto a = rng.values(s.broadcast_a ? (ta == transpose::yes ? s.k : s.m) * lda : sa * s.batch);
      const auto b = rng.values(sb * s.batch);
      auto c = rng.values(sc * s.batch);
      const dfloats da(a), db(b), dc(c);
      kc::gemm_strided_batched(gpu.ctx(), ta, tb, s.m, s.n, s.k, 0.75f, da.get(), lda, sa, db.get(), ldb, sb,
                               -0.5f, dc.get(), ldc, sc, s.batch);
      sk::cpu::gemm_strided_batched(ta, tb, s.m, s.n, s.k, 0.75f, a.data(), lda, sa, b.data(), ldb, sb, -0.5f,
                                    c.data(), ldc, sc, s.batch);
      BOOST_TEST_INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " batch=" << s.batch << " mode=" << mode);
      BOOST_TEST(relative_error(dc.download(), c) <= k_fp32_tol);
    }
  }
}

namespace gemm_test {
// A 128x256x512 product in `math` against the fp32 cpu product: max relative error. Sizes that
// are multiples of 16, so that cuBLAS, which the FAST compute types only allow to use tensor
// cores, has no reason to fall back to fp32 kernels.
double reduced_math_error(kc::gemm_math math, std::uint64_t seed) {
  gpu_session gpu(math);
  random_source rng(seed);
  const std::size_t m = 128, n = 256, k = 512;
  const auto a = rng.values(m * k), b = rng.values(k * n);
  std::vector<float> c(m * n, 0.0f);
  const dfloats da(a), db(b), dc(c);
  kc::gemm(gpu.ctx(), transpose::no, transpose::yes, m, n, k, 1.0f, da.get(), k, db.get(), k, 0.0f, dc.get(), n);
  sk::cpu::gemm(transpose::no, transpose::yes, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
  return relative_error(dc.download(), c);
}

STRATA_GPU_TEST_CASE(tf32_gemm_stays_within_tf32_rounding_of_the_fp32_result) {
  BOOST_TEST(reduced_math_error(kc::gemm_math::tf32, 204) <= 1e-2);
}

// bf16 math: the inputs rounded to bfloat16 (8 significant bits), accumulated in float32. Within
// bf16 rounding of the fp32 product (~3e-3 expected), and visibly not the fp32 product (fp32 here
// is ~1e-7 off): a failure of the lower bound means cuBLAS chose an fp32 kernel for this shape,
// i.e. --precision bf16 would change nothing.
STRATA_GPU_TEST_CASE(bf16_gemm_stays_within_bf16_rounding_and_differs_from_fp32) {
  const double err = reduced_math_error(kc::gemm_math::bf16, 205);
  BOOST_TEST_INFO("relative error of the bf16 product: " << err);
  BOOST_TEST(err <= 3e-2);
  BOOST_TEST(err >= 1e-4);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace gemm_test
