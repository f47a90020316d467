#pragma once

/// \file
/// Reductions over lists of tensors: global L2 norm and gradient clipping.

#include <cstddef>
#include <span>

namespace strata::kernels::cpu {

/// Euclidean norm of all elements of all `tensors` together, accumulated in double.
/// Thread-safe; parallel in the caller's oneTBB arena for large tensors.
[[nodiscard]] double global_norm(std::span<const std::span<const float>> tensors);

/// torch.nn.utils.clip_grad_norm_ (L2): total = global_norm(grads); if
/// max_norm / (total + 1e-6) < 1, every element is multiplied by that factor. Returns `total`
/// (the norm before clipping). A non-finite total is returned and propagates into the grads,
/// as PyTorch does with error_if_nonfinite = false.
/// \throws std::invalid_argument if max_norm is negative or NaN.
double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm);

}  // namespace strata::kernels::cpu
