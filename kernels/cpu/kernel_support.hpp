#pragma once

// Private helpers shared by the CPU kernels: vectorisable activation functions, the run-time
// ISA dispatch of the vector loops, the oneTBB blocking helper and the internal GEMM entry
// point. (The argument checks, shared with the CUDA kernels, are in kernels/common/checks.hpp.)

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include "strata/kernels/gemm.hpp"
#include "strata/kernels/isa.hpp"

namespace strata::kernels::cpu::detail {

// ---- Run-time ISA dispatch (strata/kernels/isa.hpp) -------------------------------------------
// isa_call<&f>(isa, args...) runs f(args...) compiled for `isa`: the baseline path calls f
// itself; the AVX2 and AVX-512 paths call a wrapper whose target attribute enables the wider
// vectors and which inlines f and everything f calls (flatten), so the loops in f are
// vectorised again for that target. f must be a leaf loop: inline helpers only, no oneTBB.
//
// The paths agree bitwise because nothing in them may differ: the kernels are built with
// -ffp-contract=off (kernels/CMakeLists.txt; GCC's C++ default "fast" fuses a*b + c into an
// FMA once a target has one, AVX-512F does), the AVX2 clone does not enable FMA at all, and
// reductions use fixed lane arrays that each path reduces in the same order.
#if defined(__x86_64__) && defined(__GNUC__)
template <auto F, class... A>
[[gnu::target("avx2"), gnu::flatten]] auto call_avx2(A... a) {
  return F(a...);
}

// 512-bit vectors: the compilers' generic tuning would otherwise keep AVX-512 code at 256 bits
// (GCC takes prefer-vector-width in the target string, Clang has its own attribute).
#if defined(__clang__)
#define STRATA_KERNELS_AVX512_TARGET \
  gnu::target("avx512f,avx512bw,avx512dq,avx512vl"), clang::min_vector_width(512)
#else
#define STRATA_KERNELS_AVX512_TARGET \
  gnu::target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")
#endif
template <auto F, class... A>
[[STRATA_KERNELS_AVX512_TARGET, gnu::flatten]] auto call_avx512(A... a) {
  return F(a...);
}
#undef STRATA_KERNELS_AVX512_TARGET
#endif

template <auto F, class... A>
inline auto isa_call([[maybe_unused]] cpu_isa isa, A... a) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == cpu_isa::avx512) return call_avx512<F>(a...);
  if (isa == cpu_isa::avx2) return call_avx2<F>(a...);
#endif
  return F(a...);
}

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

// ---- oneTBB, or one thread under ThreadSanitizer -------------------------------------------------
// Debian's libtbb is not built with -fsanitize=thread, so ThreadSanitizer cannot see its
// hand-offs (a task made on one thread and run on another) and would report each of them. Under
// TSan the kernels therefore run their blocks one after another on the calling thread, cut as
// oneTBB cuts them where that fixes the result (the deterministic reduce's halving): results stay
// bitwise those of a release build, and what TSan checks is the device work against the threads
// around it (docs/reliability.md). No other build changes.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kernels_in_parallel = false;
#else
inline constexpr bool kernels_in_parallel = true;
#endif

namespace serial {
// body(begin, end) on the leaves of halving [b, e) until a piece has at most `grain` elements,
// left to right.
template <class Body>
void blocks(std::size_t b, std::size_t e, std::size_t grain, const Body& body) {
  if (e - b > grain) {
    const std::size_t m = b + (e - b) / 2;
    blocks(b, m, grain, body);
    blocks(m, e, grain, body);
    return;
  }
  body(b, e);
}

// tbb::parallel_deterministic_reduce's tree: a range is halved while it has more than `grain`
// elements, each leaf reduced from `identity`, and the halves joined left with right.
template <class Value, class Real, class Join>
Value deterministic_reduce(std::size_t b, std::size_t e, std::size_t grain, const Value& identity,
                           const Real& real, const Join& join) {
  if (e - b > grain) {
    const std::size_t m = b + (e - b) / 2;
    Value left = deterministic_reduce(b, m, grain, identity, real, join);
    Value right = deterministic_reduce(m, e, grain, identity, real, join);
    return join(left, right);
  }
  return real(tbb::blocked_range<std::size_t>(b, e, grain), identity);
}
}  // namespace serial

/// Calls body(begin, end) over [0, n) in blocks of at least `grain`, in parallel in the
/// caller's oneTBB arena when n > grain, inline otherwise.
template <class Body>
void parallel_blocks(std::size_t n, std::size_t grain, const Body& body) {
  if (n == 0) return;
  if (n <= grain) {
    body(std::size_t{0}, n);
    return;
  }
  if constexpr (!kernels_in_parallel) {
    serial::blocks(0, n, std::max<std::size_t>(grain, 1), body);
  } else {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain),
                      [&](const tbb::blocked_range<std::size_t>& r) { body(r.begin(), r.end()); });
  }
}

/// f(i) for i in [0, n), in parallel in the caller's oneTBB arena.
template <class F>
void parallel_indices(std::size_t n, const F& f) {
  if constexpr (!kernels_in_parallel) {
    for (std::size_t i = 0; i < n; ++i) f(i);
  } else {
    tbb::parallel_for(std::size_t{0}, n, f);
  }
}

/// tbb::parallel_deterministic_reduce over [0, n) in blocks of at least `grain`: the same sum
/// for the same data on every run and every build.
template <class Value, class Real, class Join>
Value deterministic_reduce(std::size_t n, std::size_t grain, const Value& identity, const Real& real,
                           const Join& join) {
  if constexpr (!kernels_in_parallel) {
    return serial::deterministic_reduce(0, n, std::max<std::size_t>(grain, 1), identity, real, join);
  } else {
    return tbb::parallel_deterministic_reduce(tbb::blocked_range<std::size_t>(0, n, grain), identity,
                                              real, join);
  }
}

/// acc[j] += sum_r m[r * cols + j] for j < w, in the order of r.
inline void add_column_block(std::size_t rows, std::size_t cols, const float* __restrict m,
                             std::size_t w, double* __restrict acc) noexcept {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* __restrict row = m + r * cols;
    for (std::size_t j = 0; j < w; ++j) acc[j] += static_cast<double>(row[j]);
  }
}

/// sum_a[j] += sum_r m[r, j] and the same into sum_b (either may be null), for a row-major
/// [rows, cols] matrix; accumulated in double, parallel over column blocks.
inline void add_column_sums(cpu_isa isa, std::size_t rows, std::size_t cols, const float* m,
                            float* sum_a, float* sum_b) {
  constexpr std::size_t block = 256;
  parallel_blocks(cols, block, [&](std::size_t lo, std::size_t hi) {
    double acc[block] = {};
    const std::size_t w = hi - lo;
    isa_call<&add_column_block>(isa, rows, cols, m + lo, w, +acc);
    for (std::size_t j = 0; j < w; ++j) {
      if (sum_a != nullptr) sum_a[lo + j] += static_cast<float>(acc[j]);
      if (sum_b != nullptr) sum_b[lo + j] += static_cast<float>(acc[j]);
    }
  });
}

/// x[i] *= alpha for i < n.
inline void scale_block(std::size_t n, float alpha, float* x) noexcept {
  for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
}

/// Elements below which a memory-bound loop stays on the calling thread.
inline constexpr std::size_t memory_grain = std::size_t{1} << 15;

/// GEMM without argument checks (callers check shapes); see cpu::gemm for the contract.
void sgemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc);

}  // namespace strata::kernels::cpu::detail
