#pragma once

// The float scalars of sgd_step and adam_step, derived once from the double hyper-parameters
// as PyTorch's single-tensor CPU path does; one copy for the CPU and CUDA kernels, so both
// round them identically. Plain C++: nvcc compiles it into the .cu files (the structs are
// passed to kernels by value); the definitions live in optimizer_scalars.cpp.

#include <cstdint>

#include "strata/kernels/optimizers.hpp"

namespace strata::kernels::common {

/// SGD: d = g + wd * p; buf = buf * mom + d; p += neg_lr * (buf, or d + mom * buf for Nesterov).
struct sgd_scalars {
  float wd, mom, neg_lr;
};

[[nodiscard]] sgd_scalars sgd_step_scalars(const sgd_options& o) noexcept;

/// Adam(W) for one step: p' = p * decay; g' = g + wd * p'; m += one_minus_b1 * (g' - m);
/// v = v * b2 + one_minus_b2 * g'^2; p = p' + neg_step_size * m / (sqrt(v) / bc2_sqrt + eps).
struct adam_scalars {
  float neg_step_size, bc2_sqrt, one_minus_b1, b2, one_minus_b2, eps, wd, decay;
};

/// The scalars of step `step` (>= 1, checked by the caller).
[[nodiscard]] adam_scalars adam_step_scalars(std::int64_t step, const adam_options& o) noexcept;

}  // namespace strata::kernels::common
