#include "strata/kernels/elementwise.hpp"

#include <algorithm>
#include <cstddef>
#include <span>

#include "common/checks.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {

void fill(std::size_t n, float value, float* x) {
  common::check_in_place("fill", n, x);
  if (n == 0) return;
  detail::parallel_blocks(n, detail::memory_grain,
                          [&](std::size_t lo, std::size_t hi) { std::fill(x + lo, x + hi, value); });
}

void scale(std::size_t n, float alpha, float* x) {
  common::check_in_place("scale", n, x);
  if (n == 0) return;
  const cpu_isa isa = active_isa();
  detail::parallel_blocks(n, detail::memory_grain, [&](std::size_t lo, std::size_t hi) {
    detail::isa_call<&detail::scale_block>(isa, hi - lo, alpha, x + lo);
  });
}

namespace {

// The vector loops, run through detail::isa_call.

void axpy_block(std::size_t n, float alpha, const float* x, float* y) noexcept {
  for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Elements per block of sum_arrays: the partial sum lives in a 16 KiB stack buffer (L1), so
// each input streams through once and out is written once, whatever K is.
constexpr std::size_t sum_block = 4096;

void add_into(float* __restrict acc, const float* __restrict x, std::size_t w) noexcept {
  for (std::size_t i = 0; i < w; ++i) acc[i] += x[i];
}

void add_pair(float* __restrict acc, const float* __restrict x, const float* __restrict y,
              std::size_t w) noexcept {
  for (std::size_t i = 0; i < w; ++i) acc[i] = x[i] + y[i];
}

}  // namespace

void axpy(std::size_t n, float alpha, const float* x, float* y) {
  common::check_axpy("axpy", n, x, y);
  if (n == 0) return;
  const cpu_isa isa = active_isa();
  detail::parallel_blocks(n, detail::memory_grain, [&](std::size_t lo, std::size_t hi) {
    detail::isa_call<&axpy_block>(isa, hi - lo, alpha, x + lo, y + lo);
  });
}

void sum_arrays(std::span<const float* const> inputs, std::size_t n, float* out) {
  common::check_sum_arrays("sum_arrays", inputs, n, out);
  if (n == 0) return;
  const std::size_t k = inputs.size();
  if (k == 0) {
    fill(n, 0.0f, out);
    return;
  }
  const cpu_isa isa = active_isa();
  const std::size_t blocks = (n + sum_block - 1) / sum_block;
  // At least 16 blocks (256 KiB of out) per task keeps oneTBB's overhead negligible.
  detail::parallel_blocks(blocks, 16, [&](std::size_t b_lo, std::size_t b_hi) {
    alignas(64) float acc[sum_block];
    for (std::size_t blk = b_lo; blk < b_hi; ++blk) {
      const std::size_t lo = blk * sum_block;
      const std::size_t w = std::min(sum_block, n - lo);
      if (k == 1) {
        std::copy(inputs[0] + lo, inputs[0] + lo + w, acc);
      } else {
        detail::isa_call<&add_pair>(isa, +acc, inputs[0] + lo, inputs[1] + lo, w);
        for (std::size_t j = 2; j < k; ++j) detail::isa_call<&add_into>(isa, +acc, inputs[j] + lo, w);
      }
      // Every input of this block is read before out is written, so out may be an input.
      std::copy(acc, acc + w, out + lo);
    }
  });
}

}  // namespace strata::kernels::cpu
