// cuda::sgd_step and cuda::adam_step: the scalars and the operation order of the CPU kernels
// (kernels/cpu/optimizers.cpp), one fused elementwise kernel each.
#include "support.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "device_math.cuh"

namespace strata::kernels::cuda {
namespace {

enum class sgd_kind { plain, momentum, nesterov };

template <sgd_kind Kind>
__global__ void sgd_kernel(std::size_t n, float* __restrict__ p, const float* __restrict__ gr,
                           float* __restrict__ buf, float wd, float mom, float neg_lr) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    if constexpr (Kind == sgd_kind::plain) {
      p[i] += neg_lr * (gr[i] + wd * p[i]);
    } else {
      const float d = gr[i] + wd * p[i];
      const float b = buf[i] * mom + d;
      buf[i] = b;
      if constexpr (Kind == sgd_kind::momentum) {
        p[i] += neg_lr * b;
      } else {
        p[i] += neg_lr * (d + mom * b);
      }
    }
  }
}

struct adam_scalars {
  float neg_step_size, bc2_sqrt, one_minus_b1, b2, one_minus_b2, eps, wd, decay;
};

__global__ void adam_kernel(std::size_t n, float* __restrict__ p, const float* __restrict__ gr,
                            float* __restrict__ m, float* __restrict__ v, adam_scalars k) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    const float pv = p[i] * k.decay;
    const float g = gr[i] + k.wd * pv;
    const float mv = m[i] + k.one_minus_b1 * (g - m[i]);
    const float vv = v[i] * k.b2 + k.one_minus_b2 * g * g;
    m[i] = mv;
    v[i] = vv;
    p[i] = pv + (k.neg_step_size * mv) / (sqrtf(vv) / k.bc2_sqrt + k.eps);
  }
}

}  // namespace

void sgd_step(const cuda_context& ctx, std::size_t n, float* param, const float* grad,
              float* momentum_buffer, const sgd_options& o) {
  constexpr const char* where = "sgd_step";
  if (n == 0) return;
  detail::require(param != nullptr && grad != nullptr, where, "param and grad must not be null");
  detail::require(o.momentum == 0.0 || momentum_buffer != nullptr, where,
                  "momentum_buffer must not be null when momentum != 0");
  const auto wd = static_cast<float>(o.weight_decay);
  const auto mom = static_cast<float>(o.momentum);
  const auto neg_lr = static_cast<float>(-o.lr);
  const unsigned blocks = detail::blocks_for(n);
  cudaStream_t s = ctx.stream;
  if (o.momentum == 0.0) {
    sgd_kernel<sgd_kind::plain><<<blocks, detail::block_threads, 0, s>>>(n, param, grad, nullptr, wd, mom, neg_lr);
  } else if (!o.nesterov) {
    sgd_kernel<sgd_kind::momentum><<<blocks, detail::block_threads, 0, s>>>(n, param, grad, momentum_buffer, wd, mom, neg_lr);
  } else {
    sgd_kernel<sgd_kind::nesterov><<<blocks, detail::block_threads, 0, s>>>(n, param, grad, momentum_buffer, wd, mom, neg_lr);
  }
  detail::check_launch("sgd_kernel");
}

void adam_step(const cuda_context& ctx, std::size_t n, float* param, const float* grad,
               float* exp_avg, float* exp_avg_sq, std::int64_t step, const adam_options& o) {
  constexpr const char* where = "adam_step";
  detail::require(step >= 1, where, "step must be at least 1 (steps count from 1)");
  if (n == 0) return;
  detail::require(param != nullptr && grad != nullptr && exp_avg != nullptr && exp_avg_sq != nullptr,
                  where, "param, grad, exp_avg and exp_avg_sq must not be null");
  const double stepd = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, stepd);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, stepd);
  adam_scalars k{};
  k.neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
  k.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.one_minus_b1 = static_cast<float>(1.0 - o.beta1);
  k.b2 = static_cast<float>(o.beta2);
  k.one_minus_b2 = static_cast<float>(1.0 - o.beta2);
  k.eps = static_cast<float>(o.eps);
  k.wd = o.decoupled_weight_decay ? 0.0f : static_cast<float>(o.weight_decay);
  k.decay = o.decoupled_weight_decay ? static_cast<float>(1.0 - o.lr * o.weight_decay) : 1.0f;
  adam_kernel<<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(n, param, grad, exp_avg, exp_avg_sq, k);
  detail::check_launch("adam_kernel");
}

}  // namespace strata::kernels::cuda
