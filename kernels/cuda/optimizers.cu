// cuda::sgd_step and cuda::adam_step: the scalars and the operation order of the CPU kernels
// (kernels/cpu/optimizers.cpp), one fused elementwise kernel each. Every operation is an
// IEEE-rounded intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn), which nvcc never contracts
// into fused multiply-adds, so the results are bitwise those of the CPU kernels (built with
// -ffp-contract=off): a kvstore's 16-bit keys, rounded from them, match a cpu store's exactly.
#include "support.hpp"

#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "common/optimizer_scalars.hpp"
#include "device_math.cuh"

namespace strata::kernels::cuda {
namespace {

enum class sgd_kind { plain, momentum, nesterov };

template <sgd_kind Kind>
__global__ void sgd_kernel(std::size_t n, float* __restrict__ p, const float* __restrict__ gr,
                           float* __restrict__ buf, float wd, float mom, float neg_lr) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    const float d = __fadd_rn(gr[i], __fmul_rn(wd, p[i]));
    if constexpr (Kind == sgd_kind::plain) {
      p[i] = __fadd_rn(p[i], __fmul_rn(neg_lr, d));
    } else {
      const float b = __fadd_rn(__fmul_rn(buf[i], mom), d);
      buf[i] = b;
      if constexpr (Kind == sgd_kind::momentum) {
        p[i] = __fadd_rn(p[i], __fmul_rn(neg_lr, b));
      } else {
        p[i] = __fadd_rn(p[i], __fmul_rn(neg_lr, __fadd_rn(d, __fmul_rn(mom, b))));
      }
    }
  }
}

__global__ void adam_kernel(std::size_t n, float* __restrict__ p, const float* __restrict__ gr,
                            float* __restrict__ m, float* __restrict__ v, common::adam_scalars k) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    const float pv = __fmul_rn(p[i], k.decay);
    const float g = __fadd_rn(gr[i], __fmul_rn(k.wd, pv));
    const float mv = __fadd_rn(m[i], __fmul_rn(k.one_minus_b1, __fsub_rn(g, m[i])));
    const float vv = __fadd_rn(__fmul_rn(v[i], k.b2), __fmul_rn(__fmul_rn(k.one_minus_b2, g), g));
    m[i] = mv;
    v[i] = vv;
    p[i] = __fadd_rn(pv, __fdiv_rn(__fmul_rn(k.neg_step_size, mv),
                                   __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), k.bc2_sqrt), k.eps)));
  }
}

}  // namespace

void sgd_step(const cuda_context& ctx, std::size_t n, float* param, const float* grad,
              float* momentum_buffer, const sgd_options& o) {
  common::check_sgd_step("cuda::sgd_step", n, param, grad, momentum_buffer, o);
  if (n == 0) return;
  const common::sgd_scalars k = common::sgd_step_scalars(o);
  const float wd = k.wd, mom = k.mom, neg_lr = k.neg_lr;
  const unsigned blocks = detail::blocks_for(n);
  cudaStream_t s = ctx.stream;
  if (o.momentum == 0.0) {
    sgd_kernel<sgd_kind::plain><<<blocks, detail::block_threads, 0, s>>>(n, param, grad, nullptr, wd, mom, neg_lr);
  } else if (!o.nesterov) {
    sgd_kernel<sgd_kind::momentum><<<blocks, detail::block_threads, 0, s>>>(n, param, grad, momentum_buffer, wd, mom, neg_lr);
  } else {
    sgd_kernel<sgd_kind::nesterov><<<blocks, detail::block_threads, 0, s>>>(n, param, grad, momentum_buffer, wd, mom, neg_lr);
  }
  detail::check_launch("sgd_kernel", s);
}

void adam_step(const cuda_context& ctx, std::size_t n, float* param, const float* grad,
               float* exp_avg, float* exp_avg_sq, std::int64_t step, const adam_options& o) {
  common::check_adam_step("cuda::adam_step", n, param, grad, exp_avg, exp_avg_sq, step);
  if (n == 0) return;
  const common::adam_scalars k = common::adam_step_scalars(step, o);
  adam_kernel<<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(n, param, grad, exp_avg, exp_avg_sq, k);
  detail::check_launch("adam_kernel", ctx.stream);
}

}  // namespace strata::kernels::cuda
