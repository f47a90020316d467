#pragma once

/// \file
/// Single-precision matrix products on host memory (row-major, BLAS conventions).

#include <cstddef>

namespace strata::kernels {

/// Whether a GEMM operand is used as stored or transposed.
enum class transpose : bool { no = false, yes = true };

}  // namespace strata::kernels

namespace strata::kernels::cpu {

/// C = alpha * op(A) * op(B) + beta * C for row-major float32 matrices.
///
/// op(A) is [m, k], op(B) is [k, n], C is [m, n]. A stored matrix is row-major with leading
/// dimension (row stride, in elements) `lda`/`ldb`/`ldc`: A is stored [m, k] (lda >= k) when
/// `ta == transpose::no` and [k, m] (lda >= m) when `ta == transpose::yes`; likewise B.
/// When beta == 0, C is overwritten and its previous contents (even NaN) are ignored.
/// m, n or k may be 0 (k == 0 scales C by beta).
///
/// Thread-safe for concurrent calls whose C do not overlap. Parallel in the caller's oneTBB
/// arena for large products when OpenBLAS is single-threaded (see blas.hpp).
/// \throws std::invalid_argument if a leading dimension is too small, a needed pointer is
///         null, or a size exceeds the BLAS integer range.
void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
          std::size_t ldc);

/// `batch` independent GEMMs: C_i = alpha * op(A_i) * op(B_i) + beta * C_i with
/// A_i = a + i * stride_a, B_i = b + i * stride_b, C_i = c + i * stride_c (strides in elements).
///
/// Same per-matrix conventions as gemm(). The C_i must not overlap each other (stride_c of 0 is
/// rejected when batch > 1); A_i and B_i may (e.g. stride 0 broadcasts one matrix).
/// \throws std::invalid_argument as gemm(), or if the C_i would overlap.
void gemm_strided_batched(transpose ta, transpose tb, std::size_t m, std::size_t n,
                          std::size_t k, float alpha, const float* a, std::size_t lda,
                          std::size_t stride_a, const float* b, std::size_t ldb,
                          std::size_t stride_b, float beta, float* c, std::size_t ldc,
                          std::size_t stride_c, std::size_t batch);

}  // namespace strata::kernels::cpu
