#include "strata/kernels/dropout.hpp"

#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {

void dropout(const dropout_block& b, const dropout_mask& mask, const float* x, float* y) {
  common::check_dropout("dropout", b, mask, x, y);
  const std::size_t rows = b.rows * b.cols, n = rows * b.dim;
  if (n == 0) return;
  const float scale = 1.0f / (1.0f - mask.p);
  // One task per block of (row, column) pairs; each pair's dim features are contiguous in the
  // block and in the global index.
  detail::parallel_blocks(rows, std::max<std::size_t>(1, detail::memory_grain / b.dim), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t rc = lo; rc < hi; ++rc) {
      const std::size_t r = rc / b.cols, c = rc % b.cols;
      const std::uint64_t first = ((b.row0 + r) * b.total_cols + b.col0 + c) * b.dim;
      const float* in = x + rc * b.dim;
      float* out = y + rc * b.dim;
      for (std::size_t f = 0; f < b.dim; ++f)
        out[f] = dropout_keeps(mask.key, first + f, mask.p) ? in[f] * scale : 0.0f;
    }
  });
}

}  // namespace strata::kernels::cpu
