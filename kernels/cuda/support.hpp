#pragma once

// Private helpers of the CUDA kernels (host side; compiled by g++ and nvcc alike): CUDA/cuBLAS
// status checks, launch sizes and the internal entry points shared between the kernel files.
// The argument checks, shared with the CPU kernels, are in kernels/common/checks.hpp; the CUDA
// kernels pass them the name "cuda::<fn>", so their messages start with it.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "strata/kernels/cuda.hpp"

namespace strata::kernels::cuda::detail {

/// Throws cuda_error naming `call` unless `status` is cudaSuccess.
void check(cudaError_t status, const char* call);
/// Throws cuda_error naming `call` unless `status` is CUBLAS_STATUS_SUCCESS.
void check(cublasStatus_t status, const char* call);
/// Checks that the kernel launch just made on `s` was accepted (cudaGetLastError). With
/// STRATA_CUDA_SYNC=1 it also waits for the kernel (cudaStreamSynchronize), so that a fault is
/// reported here, naming this kernel, rather than by a later call.
void check_launch(const char* kernel, cudaStream_t s);

/// The STRATA_CUDA_SYNC debug mode for a value of the variable: "1" on; "0", "" or unset off.
/// \throws std::invalid_argument for any other value.
bool parse_launch_sync(const char* value);

/// The message of the cuda_error thrown for `status` from `call`.
std::string error_message(const char* call, const char* status_name, const char* status_text);

inline cudaStream_t stream_of(const cuda_context& ctx) noexcept { return ctx.stream; }

/// ctx.blas, bound to ctx.stream (cublasSetStream only if it is bound elsewhere).
/// \throws std::invalid_argument("<who>: ctx.blas must not be null ...") if ctx.blas is null.
cublasHandle_t blas_on_stream(const cuda_context& ctx, const char* who);

/// Threads per block of the elementwise kernels.
inline constexpr unsigned block_threads = 256;

/// Blocks for a grid-stride loop over n items (at least 1, at most 8192: enough to fill an
/// H200 many times over; the loop covers the rest).
inline unsigned blocks_for(std::size_t n, unsigned threads = block_threads) noexcept {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::size_t>(b, 1, 8192));
}

/// GEMM without argument checks (callers check shapes): the cuda::gemm contract on an already
/// bound handle.
void sgemm(cublasHandle_t h, gemm_math math, cudaStream_t stream, transpose ta, transpose tb,
           std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
           std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc);

/// C[m, n] (row stride ldc) = beta * C, or zeros when beta == 0 (NaN ignored).
void scale_matrix(cudaStream_t s, std::size_t m, std::size_t n, float beta, float* c,
                  std::size_t ldc);

/// sum_a[j] += sum_r m[r, j] and the same into sum_b (either may be null) for a row-major
/// [rows, cols] matrix; accumulated in double in a fixed order.
void add_column_sums(cudaStream_t s, std::size_t rows, std::size_t cols, const float* m,
                     float* sum_a, float* sum_b);

/// dst[0, n) = src[0, n), or zeros when src is null.
void copy_or_zero(cudaStream_t s, const float* src, float* dst, std::size_t n);

}  // namespace strata::kernels::cuda::detail
