#include "strata/kernels/optimizers.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "common/optimizer_scalars.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {

namespace {

// Scalars by value and restrict-qualified arrays: the loops vectorise (GCC does not trust
// restrict on locals captured by a lambda). Both run through detail::isa_call.

enum class sgd_variant { plain, momentum, nesterov };

void sgd_block(std::size_t n, float* __restrict p, const float* __restrict gr, float* __restrict buf,
               const common::sgd_scalars k, sgd_variant variant) noexcept {
  const float wd = k.wd;
  const float mom = k.mom;
  const float neg_lr = k.neg_lr;
  if (variant == sgd_variant::plain) {
    for (std::size_t i = 0; i < n; ++i) p[i] += neg_lr * (gr[i] + wd * p[i]);
  } else if (variant == sgd_variant::momentum) {
    for (std::size_t i = 0; i < n; ++i) {
      const float d = gr[i] + wd * p[i];
      buf[i] = buf[i] * mom + d;
      p[i] += neg_lr * buf[i];
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const float d = gr[i] + wd * p[i];
      buf[i] = buf[i] * mom + d;
      p[i] += neg_lr * (d + mom * buf[i]);
    }
  }
}

void adam_block(std::size_t n, float* __restrict p, const float* __restrict gr, float* __restrict m,
                float* __restrict v, const common::adam_scalars k) noexcept {
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
// float scalars, common::*_step_scalars, same order), so results agree to rounding.

void sgd_step(std::size_t n, float* param, const float* grad, float* momentum_buffer,
              const sgd_options& o) {
  common::check_sgd_step("sgd_step", n, param, grad, momentum_buffer, o);
  if (n == 0) return;
  const cpu_isa isa = active_isa();
  const common::sgd_scalars k = common::sgd_step_scalars(o);
  const sgd_variant variant = o.momentum == 0.0 ? sgd_variant::plain
                              : o.nesterov      ? sgd_variant::nesterov
                                                : sgd_variant::momentum;
  detail::parallel_blocks(n, detail::memory_grain, [&](std::size_t lo, std::size_t hi) {
    float* buf = variant == sgd_variant::plain ? nullptr : momentum_buffer + lo;
    detail::isa_call<&sgd_block>(isa, hi - lo, param + lo, grad + lo, buf, k, variant);
  });
}

void adam_step(std::size_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               std::int64_t step, const adam_options& o) {
  common::check_adam_step("adam_step", n, param, grad, exp_avg, exp_avg_sq, step);
  if (n == 0) return;
  const cpu_isa isa = active_isa();
  const common::adam_scalars k = common::adam_step_scalars(step, o);
  detail::parallel_blocks(n, detail::memory_grain, [&](std::size_t lo, std::size_t hi) {
    detail::isa_call<&adam_block>(isa, hi - lo, param + lo, grad + lo, exp_avg + lo,
                                  exp_avg_sq + lo, k);
  });
}

}  // namespace strata::kernels::cpu
