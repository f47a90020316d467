// dropout: the mask of strata/kernels/dropout.hpp, recomputed per element on the device.
#include "support.hpp"

#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "device_math.cuh"
#include "strata/kernels/dropout.hpp"

namespace strata::kernels::cuda {
namespace {

__global__ void dropout_kernel(dropout_block b, dropout_mask mask, float scale, const float* x, float* y) {
  const std::size_t n = b.rows * b.cols * b.dim;
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    const std::size_t rc = i / b.dim, f = i % b.dim;
    const std::size_t r = rc / b.cols, c = rc % b.cols;
    const std::uint64_t index = ((b.row0 + r) * b.total_cols + b.col0 + c) * b.dim + f;
    y[i] = dropout_keeps(mask.key, index, mask.p) ? x[i] * scale : 0.0f;
  }
}

}  // namespace

void dropout(const cuda_context& ctx, const dropout_block& b, const dropout_mask& mask, const float* x, float* y) {
  common::check_dropout("cuda::dropout", b, mask, x, y);
  const std::size_t n = b.rows * b.cols * b.dim;
  if (n == 0) return;
  dropout_kernel<<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(b, mask, 1.0f / (1.0f - mask.p), x, y);
  detail::check_launch("dropout_kernel", ctx.stream);
}

}  // namespace strata::kernels::cuda
