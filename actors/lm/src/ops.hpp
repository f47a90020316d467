#pragma once
// The language model's side of strata/kernels/ops.hpp: attach() gives a work item the kernels of
// its device (kernels::cpu_ops or kernels::cuda_ops, with the stage's matrix-product precision),
// so that the math (lm_stage's forward/backward/norm, lm_costs' layer timings) is written once as
// a template over them. Every pointer is memory of the work's device. Private to strata::lm.

#include <cstdint>

#include "strata/device/kind.hpp"
#include "strata/device/tensor.hpp"
#include "strata/device/work.hpp"
#include "strata/kernels/ops.hpp"
#include "strata/lm/config.hpp"

namespace strata::lm::ops {

namespace k = strata::kernels;

/// The element pointers of a tensor for the kernels (host memory on cpu, device memory on cuda),
/// dtype-checked: fp for float32 tensors, ip for int32 ones.
inline float* fp(const tensor& t) { return t.device_data<float>(); }
inline const std::int32_t* ip(const tensor& t) { return t.device_data<const std::int32_t>(); }

/// The cuBLAS math of `math`.
inline k::cuda::gemm_math gemm_math_of(precision math) {
  return math == precision::tf32   ? k::cuda::gemm_math::tf32
         : math == precision::bf16 ? k::cuda::gemm_math::bf16
                                   : k::cuda::gemm_math::fp32;
}

/// Gives `w` the host implementation on cpu devices and the CUDA one on cuda devices (its matrix
/// products in `math`), both from the same templated math `run(ops)`; sim devices run neither
/// (they model the cost).
template <class Run>
void attach(kernel_work& w, device_kind kind, precision math, Run run) {
  k::attach(w, kind, [run, math](auto target) {
    if constexpr (k::is_cuda_target<decltype(target)>) target.context.math = gemm_math_of(math);
    k::with_ops(target, run);
  });
}

}  // namespace strata::lm::ops
