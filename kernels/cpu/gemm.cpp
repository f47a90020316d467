#include "strata/kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstddef>

#include <tbb/task_arena.h>

#include "common/checks.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {
namespace {

CBLAS_TRANSPOSE to_cblas(transpose t) noexcept { return t == transpose::yes ? CblasTrans : CblasNoTrans; }

int blas_int(std::size_t v) noexcept { return static_cast<int>(v); }

void blas_call(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
               float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), blas_int(m), blas_int(n), blas_int(k),
              alpha, a, blas_int(std::max<std::size_t>(lda, 1)), b,
              blas_int(std::max<std::size_t>(ldb, 1)), beta, c,
              blas_int(std::max<std::size_t>(ldc, 1)));
}

// C = beta * C (the k == 0 product), honouring "beta == 0 ignores C".
void scale_c(std::size_t m, std::size_t n, float beta, float* c, std::size_t ldc) {
  for (std::size_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else {
      for (std::size_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

namespace detail {

// When OpenBLAS is single-threaded, large products are split into independent column (or
// row) panels run as oneTBB tasks in the caller's arena; otherwise OpenBLAS threads itself.
// Panels are at least 64 columns (or 32 rows) and the product at least ~4 MFLOP per panel,
// below which a split costs more than it gains.
void sgemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  constexpr double min_panel_flops = 4.0e6;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  std::size_t parts = 1;
  if (flops >= 2 * min_panel_flops && openblas_get_num_threads() == 1) {
    const auto concurrency = static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
    parts = std::min(concurrency, static_cast<std::size_t>(flops / min_panel_flops));
  }
  const bool split_columns = n >= m;
  const std::size_t extent = split_columns ? n : m;
  const std::size_t unit = split_columns ? 64 : 32;
  parts = std::min(parts, std::max<std::size_t>(1, extent / unit));
  if (parts <= 1) {
    blas_call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Panel boundaries rounded to multiples of 16 elements (64 bytes) keep C panels aligned.
  auto boundary = [&](std::size_t p) {
    if (p == parts) return extent;
    return std::min(extent, (extent * p / parts + 15) / 16 * 16);
  };
  parallel_indices(parts, [&](std::size_t p) {
    const std::size_t lo = boundary(p);
    const std::size_t hi = boundary(p + 1);
    if (lo >= hi) return;
    if (split_columns) {
      const float* bp = tb == transpose::no ? b + lo : b + lo * ldb;
      blas_call(ta, tb, m, hi - lo, k, alpha, a, lda, bp, ldb, beta, c + lo, ldc);
    } else {
      const float* ap = ta == transpose::no ? a + lo * lda : a + lo;
      blas_call(ta, tb, hi - lo, n, k, alpha, ap, lda, b, ldb, beta, c + lo * ldc, ldc);
    }
  });
}

}  // namespace detail

void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
          std::size_t ldc) {
  common::check_gemm("gemm", ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  detail::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_strided_batched(transpose ta, transpose tb, std::size_t m, std::size_t n,
                          std::size_t k, float alpha, const float* a, std::size_t lda,
                          std::size_t stride_a, const float* b, std::size_t ldb,
                          std::size_t stride_b, float beta, float* c, std::size_t ldc,
                          std::size_t stride_c, std::size_t batch) {
  common::check_gemm_strided_batched("gemm_strided_batched", ta, tb, m, n, k, a, lda, b, ldb, c,
                                     ldc, stride_c, batch);
  if (batch == 0 || m == 0 || n == 0) return;
  // Many small products: one task per matrix, each a single BLAS call. Large products: one
  // after another, each split by detail::sgemm.
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  auto one = [&](std::size_t i) {
    detail::sgemm(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                  c + i * stride_c, ldc);
  };
  if (flops < 4.0e6 && batch > 1 && openblas_get_num_threads() == 1) {
    const auto grain = static_cast<std::size_t>(std::max(1.0, 1.0e6 / std::max(flops, 1.0)));
    detail::parallel_blocks(batch, grain, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) one(i);
    });
  } else {
    for (std::size_t i = 0; i < batch; ++i) one(i);
  }
}

}  // namespace strata::kernels::cpu
