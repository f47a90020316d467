// cuda::linear_cross_entropy_forward(_backward): logits by cuBLAS per block of rows, one
// thread block per row for bias, max, log-sum-exp and the gradient, a fixed-order reduction of
// the row losses.
#include "support.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "device_math.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr unsigned row_threads = 256;

// Row `blockIdx.x` of logits [rows, V]: adds the bias, loss = max + log(sum exp(x - max)) -
// x[target] in double into row_loss; with Backward the row becomes
// dlogits = softmax * grad_scale - onehot(target) * grad_scale. Only the thread that owns
// column `target` (j % blockDim == target % blockDim) touches it, so no extra barrier is needed.
template <bool Backward>
__global__ void __launch_bounds__(row_threads)
    xent_rows(std::size_t classes, float* __restrict__ logits, const float* __restrict__ bias,
              const std::int32_t* __restrict__ targets, float grad_scale, double* __restrict__ row_loss) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  __shared__ float target_logit;
  float* x = logits + static_cast<std::size_t>(blockIdx.x) * classes;
  const std::int32_t t = targets[blockIdx.x];
  const bool valid = t >= 0 && static_cast<std::size_t>(t) < classes;
  float m = -INFINITY;
  for (std::size_t j = threadIdx.x; j < classes; j += blockDim.x) {
    const float v = x[j] + (bias != nullptr ? bias[j] : 0.0f);
    x[j] = v;
    m = fmaxf(m, v);
    if (valid && j == static_cast<std::size_t>(t)) target_logit = v;
  }
  m = detail::block_max(m, fscratch);  // its barriers also publish target_logit
  float s = 0.0f;
  for (std::size_t j = threadIdx.x; j < classes; j += blockDim.x) {
    const float e = expf(x[j] - m);
    if constexpr (Backward) x[j] = e;
    s += e;
  }
  const double sum = detail::block_sum(static_cast<double>(s), dscratch);
  if (threadIdx.x == 0) {
    row_loss[blockIdx.x] = valid ? static_cast<double>(m) + log(sum) - static_cast<double>(target_logit) : NAN;
  }
  if constexpr (Backward) {
    const auto scale = static_cast<float>(static_cast<double>(grad_scale) / sum);
    for (std::size_t j = threadIdx.x; j < classes; j += blockDim.x) {
      float v = valid ? x[j] * scale : NAN;
      if (valid && j == static_cast<std::size_t>(t)) v -= grad_scale;
      x[j] = v;
    }
  }
}

// *loss = sum(row_loss) (times 1/rows for the mean), one block, fixed order.
__global__ void __launch_bounds__(1024)
    xent_total(std::size_t rows, const double* __restrict__ row_loss, bool mean, double* loss) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (std::size_t i = threadIdx.x; i < rows; i += blockDim.x) s += row_loss[i];
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) *loss = mean ? s / static_cast<double>(rows) : s;
}

// Targets are not range-checked here (device memory): a bad one makes its row's loss NaN.
void run(const char* who, const cuda_context& ctx, const linear_cross_entropy_dims& d,
         const linear_cross_entropy_inputs& in, const linear_cross_entropy_gradients* g,
         float* workspace, std::size_t workspace_size, double* loss) {
  common::check_linear_cross_entropy(who, d, in);
  common::require(d.rows <= static_cast<std::size_t>(INT_MAX), who,
                  "dims.rows must fit in a 32-bit grid dimension (one thread block per row)");
  common::require(g != nullptr || loss != nullptr, who, "loss must not be null");
  common::require(workspace != nullptr && workspace_size >= linear_cross_entropy_device_workspace_size(d, 1), who,
                  "the workspace must hold at least cuda::linear_cross_entropy_device_workspace_size(dims, 1) floats");
  common::require(reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) == 0, who,
                  "the workspace must be 8-byte aligned");
  cublasHandle_t h = detail::blas_on_stream(ctx, who);
  cudaStream_t s = ctx.stream;
  const std::size_t v = d.classes, hs = d.hidden;
  auto* row_loss = reinterpret_cast<double*>(workspace);  // [rows]
  float* logits = workspace + 2 * d.rows;                 // [block_rows, V]
  const std::size_t block_rows = std::min(d.rows, (workspace_size - 2 * d.rows) / v);
  const bool mean = in.reduction == loss_reduction::mean;
  const float grad_scale = mean ? static_cast<float>(1.0 / static_cast<double>(d.rows)) : 1.0f;
  for (std::size_t r0 = 0; r0 < d.rows; r0 += block_rows) {
    const std::size_t nb = std::min(block_rows, d.rows - r0);
    const float* h_blk = in.h + r0 * hs;
    detail::sgemm(h, ctx.math, s, transpose::no, transpose::yes, nb, v, hs, 1.0f, h_blk, hs, in.w,
                  hs, 0.0f, logits, v);
    if (g == nullptr) {
      xent_rows<false><<<static_cast<unsigned>(nb), row_threads, 0, s>>>(v, logits, in.b, in.targets + r0,
                                                                       grad_scale, row_loss + r0);
    } else {
      xent_rows<true><<<static_cast<unsigned>(nb), row_threads, 0, s>>>(v, logits, in.b, in.targets + r0,
                                                                      grad_scale, row_loss + r0);
    }
    detail::check_launch("xent_rows", s);
    if (g == nullptr) continue;
    if (g->dh != nullptr) {
      detail::sgemm(h, ctx.math, s, transpose::no, transpose::no, nb, hs, v, 1.0f, logits, v, in.w,
                    hs, 0.0f, g->dh + r0 * hs, hs);
    }
    if (g->dw != nullptr) {
      detail::sgemm(h, ctx.math, s, transpose::yes, transpose::no, v, hs, nb, 1.0f, logits, v,
                    h_blk, hs, 1.0f, g->dw, hs);
    }
    detail::add_column_sums(s, nb, v, logits, g->db, nullptr);
  }
  if (loss != nullptr) {
    xent_total<<<1, 1024, 0, s>>>(d.rows, row_loss, mean, loss);
    detail::check_launch("xent_total", s);
  }
}

}  // namespace

void linear_cross_entropy_forward(const cuda_context& ctx, const linear_cross_entropy_dims& d,
                                  const linear_cross_entropy_inputs& in, float* workspace,
                                  std::size_t workspace_size, double* loss) {
  run("cuda::linear_cross_entropy_forward", ctx, d, in, nullptr, workspace, workspace_size, loss);
}

void linear_cross_entropy_forward_backward(const cuda_context& ctx,
                                           const linear_cross_entropy_dims& d,
                                           const linear_cross_entropy_inputs& in,
                                           const linear_cross_entropy_gradients& g,
                                           float* workspace, std::size_t workspace_size,
                                           double* loss) {
  run("cuda::linear_cross_entropy_forward_backward", ctx, d, in, &g, workspace, workspace_size, loss);
}

}  // namespace strata::kernels::cuda
