// cuda::gemm and cuda::gemm_strided_batched: row-major products on cuBLAS (column-major) by
// swapping the operands, see to_column_major().
#include "support.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>

#include "common/checks.hpp"

namespace strata::kernels::cuda {
namespace {

cublasOperation_t to_cublas(transpose t) noexcept { return t == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

cublasComputeType_t compute_type(gemm_math math) noexcept {
  switch (math) {
    case gemm_math::tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case gemm_math::bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case gemm_math::fp32: break;
  }
  return CUBLAS_COMPUTE_32F;
}

int to_int(std::size_t v) noexcept { return static_cast<int>(v); }

}  // namespace

column_major_gemm to_column_major(transpose ta, transpose tb, std::size_t m, std::size_t n,
                                  std::size_t k, std::size_t lda, std::size_t ldb,
                                  std::size_t ldc) noexcept {
  column_major_gemm g;
  g.op_first = tb;
  g.op_second = ta;
  g.m = n;
  g.n = m;
  g.k = k;
  g.ld_first = std::max<std::size_t>(ldb, 1);
  g.ld_second = std::max<std::size_t>(lda, 1);
  g.ldc = std::max<std::size_t>(ldc, 1);
  return g;
}

namespace detail {

void sgemm(cublasHandle_t h, gemm_math math, cudaStream_t stream, transpose ta, transpose tb,
           std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
           std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_matrix(stream, m, n, beta, c, ldc);
    return;
  }
  const column_major_gemm g = to_column_major(ta, tb, m, n, k, lda, ldb, ldc);
  // alpha and beta are host scalars (the handle must be in CUBLAS_POINTER_MODE_HOST, cuBLAS's
  // default); cuBLAS reads them before returning.
  check(cublasGemmEx(h, to_cublas(g.op_first), to_cublas(g.op_second), to_int(g.m), to_int(g.n),
                     to_int(g.k), &alpha, b, CUDA_R_32F, to_int(g.ld_first), a, CUDA_R_32F,
                     to_int(g.ld_second), &beta, c, CUDA_R_32F, to_int(g.ldc), compute_type(math),
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace detail

void gemm(const cuda_context& ctx, transpose ta, transpose tb, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc) {
  constexpr const char* who = "cuda::gemm";
  common::check_gemm(who, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  if (m == 0 || n == 0) return;
  cublasHandle_t h = k == 0 ? nullptr : detail::blas_on_stream(ctx, who);
  detail::sgemm(h, ctx.math, ctx.stream, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_strided_batched(const cuda_context& ctx, transpose ta, transpose tb, std::size_t m,
                          std::size_t n, std::size_t k, float alpha, const float* a,
                          std::size_t lda, std::size_t stride_a, const float* b, std::size_t ldb,
                          std::size_t stride_b, float beta, float* c, std::size_t ldc,
                          std::size_t stride_c, std::size_t batch) {
  constexpr const char* who = "cuda::gemm_strided_batched";
  common::check_gemm_strided_batched(who, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, stride_c, batch);
  if (batch == 0 || m == 0 || n == 0) return;
  common::require(batch <= static_cast<std::size_t>(INT_MAX), who,
                  "batch must fit in a 32-bit BLAS integer");
  if (k == 0) {
    for (std::size_t i = 0; i < batch; ++i) detail::scale_matrix(ctx.stream, m, n, beta, c + i * stride_c, ldc);
    return;
  }
  cublasHandle_t h = detail::blas_on_stream(ctx, who);
  const column_major_gemm g = to_column_major(ta, tb, m, n, k, lda, ldb, ldc);
  detail::check(
      cublasGemmStridedBatchedEx(h, to_cublas(g.op_first), to_cublas(g.op_second), to_int(g.m),
                                 to_int(g.n), to_int(g.k), &alpha, b, CUDA_R_32F,
                                 to_int(g.ld_first), static_cast<long long>(stride_b), a,
                                 CUDA_R_32F, to_int(g.ld_second), static_cast<long long>(stride_a),
                                 &beta, c, CUDA_R_32F, to_int(g.ldc),
                                 static_cast<long long>(stride_c), to_int(batch),
                                 compute_type(ctx.math), CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

}  // namespace strata::kernels::cuda
