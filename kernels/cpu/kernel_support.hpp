#pragma once

// Private helpers shared by the CPU kernels: vectorisable activation functions, the oneTBB
// blocking helper and the internal GEMM entry point. (The argument checks, shared with the CUDA
// kernels, are in kernels/common/checks.hpp.)

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "strata/kernels/gemm.hpp"

namespace strata::kernels::cpu::detail {

// exp(x) for float with ~2 ulp error, written so GCC vectorises loops that call it (no libm
// call, no branches): Cody-Waite range reduction and the Cephes expf polynomial. Inputs are
// clamped to [-87, 88], where the result is a normal float.
inline float exp_approx(float x) noexcept {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // Round x*log2(e) to nearest with the 1.5*2^23 trick (exact for |t| < 2^22, no libm).
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t e = static_cast<std::int32_t>(n) + 127;
  return p * std::bit_cast<float>(static_cast<std::uint32_t>(e) << 23);
}

inline float sigmoid(float x) noexcept { return 1.0f / (1.0f + exp_approx(-x)); }

// tanh(x) = 2*sigmoid(2x) - 1: absolute error ~1e-7 (relative error grows only where
// |tanh(x)| < 1e-3, harmless for activations).
inline float tanh_approx(float x) noexcept { return 2.0f / (1.0f + exp_approx(-2.0f * x)) - 1.0f; }

/// Calls body(begin, end) over [0, n) in blocks of at least `grain`, in parallel in the
/// caller's oneTBB arena when n > grain, inline otherwise.
template <class Body>
void parallel_blocks(std::size_t n, std::size_t grain, const Body& body) {
  if (n == 0) return;
  if (n <= grain) {
    body(std::size_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::size_t>& r) { body(r.begin(), r.end()); });
}

/// sum_a[j] += sum_r m[r, j] and the same into sum_b (either may be null), for a row-major
/// [rows, cols] matrix; accumulated in double, parallel over column blocks.
inline void add_column_sums(std::size_t rows, std::size_t cols, const float* m, float* sum_a,
                            float* sum_b) {
  constexpr std::size_t block = 256;
  parallel_blocks(cols, block, [&](std::size_t lo, std::size_t hi) {
    double acc[block] = {};
    const std::size_t w = hi - lo;
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = m + r * cols + lo;
      for (std::size_t j = 0; j < w; ++j) acc[j] += static_cast<double>(row[j]);
    }
    for (std::size_t j = 0; j < w; ++j) {
      if (sum_a != nullptr) sum_a[lo + j] += static_cast<float>(acc[j]);
      if (sum_b != nullptr) sum_b[lo + j] += static_cast<float>(acc[j]);
    }
  });
}

/// Elements below which a memory-bound loop stays on the calling thread.
inline constexpr std::size_t memory_grain = std::size_t{1} << 15;

/// GEMM without argument checks (callers check shapes); see cpu::gemm for the contract.
void sgemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc);

}  // namespace strata::kernels::cpu::detail
