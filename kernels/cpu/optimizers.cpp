#include "strata/kernels/optimizers.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernel_support.hpp"

namespace strata::kernels::cpu {

namespace {

struct adam_scalars {
  float neg_step_size, bc2_sqrt, one_minus_b1, b2, one_minus_b2, eps, wd, decay;
};

// Scalars by value and restrict-qualified arrays: the loop vectorises (GCC does not trust
// restrict on locals captured by a lambda).
void adam_block(std::size_t n, float* __restrict p, const float* __restrict gr, float* __restrict m,
                float* __restrict v, const adam_scalars k) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const float pv = p[i] * k.decay;
    const float g = gr[i] + k.wd * pv;
    const float mv = m[i] + k.one_minus_b1 * (g - m[i]);
    const float vv = v[i] * k.b2 + k.one_minus_b2 * g * g;
    m[i] = mv;
    v[i] = vv;
    p[i] = pv + (k.neg_step_size * mv) / (std::sqrt(vv) / k.bc2_sqrt + k.eps);
  }
}

}  // namespace

// The arithmetic mirrors PyTorch's single-tensor CPU path operation by operation (same
// float scalars, same order), so results agree to rounding.

void sgd_step(std::size_t n, float* param, const float* grad, float* momentum_buffer,
              const sgd_options& o) {
  constexpr const char* where = "sgd_step";
  if (n == 0) return;
  detail::require(param != nullptr && grad != nullptr, where, "param and grad must not be null");
  detail::require(o.momentum == 0.0 || momentum_buffer != nullptr, where,
                  "momentum_buffer must not be null when momentum != 0");
  const auto wd = static_cast<float>(o.weight_decay);
  const auto mom = static_cast<float>(o.momentum);
  const auto neg_lr = static_cast<float>(-o.lr);
  const bool use_momentum = o.momentum != 0.0;
  const bool nesterov = o.nesterov;
  detail::parallel_blocks(n, detail::memory_grain, [&](std::size_t lo, std::size_t hi) {
    float* __restrict p = param;
    const float* __restrict gr = grad;
    float* __restrict buf = momentum_buffer;
    if (!use_momentum) {
      for (std::size_t i = lo; i < hi; ++i) p[i] += neg_lr * (gr[i] + wd * p[i]);
    } else if (!nesterov) {
      for (std::size_t i = lo; i < hi; ++i) {
        const float d = gr[i] + wd * p[i];
        buf[i] = buf[i] * mom + d;
        p[i] += neg_lr * buf[i];
      }
    } else {
      for (std::size_t i = lo; i < hi; ++i) {
        const float d = gr[i] + wd * p[i];
        buf[i] = buf[i] * mom + d;
        p[i] += neg_lr * (d + mom * buf[i]);
      }
    }
  });
}

void adam_step(std::size_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               std::int64_t step, const adam_options& o) {
  constexpr const char* where = "adam_step";
  detail::require(step >= 1, where, "step must be at least 1 (steps count from 1)");
  if (n == 0) return;
  detail::require(param != nullptr && grad != nullptr && exp_avg != nullptr && exp_avg_sq != nullptr,
                  where, "param, grad, exp_avg and exp_avg_sq must not be null");
  const double stepd = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, stepd);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, stepd);
  const auto neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
  const auto bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const auto one_minus_b1 = static_cast<float>(1.0 - o.beta1);
  const auto b2 = static_cast<float>(o.beta2);
  const auto one_minus_b2 = static_cast<float>(1.0 - o.beta2);
  const auto eps = static_cast<float>(o.eps);
  const auto wd = o.decoupled_weight_decay ? 0.0f : static_cast<float>(o.weight_decay);
  const auto decay = o.decoupled_weight_decay ? static_cast<float>(1.0 - o.lr * o.weight_decay) : 1.0f;
  const adam_scalars k{neg_step_size, bc2_sqrt, one_minus_b1, b2, one_minus_b2, eps, wd, decay};
  detail::parallel_blocks(n, detail::memory_grain, [&](std::size_t lo, std::size_t hi) {
    adam_block(hi - lo, param + lo, grad + lo, exp_avg + lo, exp_avg_sq + lo, k);
  });
}

}  // namespace strata::kernels::cpu
