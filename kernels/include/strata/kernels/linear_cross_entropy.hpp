#pragma once

/// \file
/// Fused decoder: logits = h W^T + b, softmax cross-entropy against integer targets, and its
/// backward, computed in row blocks so the full [rows, classes] logits need not exist at once.

#include <cstddef>
#include <cstdint>

namespace strata::kernels {

/// How per-row losses combine (PyTorch's `reduction`).
enum class loss_reduction { mean, sum };

/// Sizes of a linear + cross-entropy call.
struct linear_cross_entropy_dims {
  std::size_t rows = 0;     ///< N: rows of h and targets (e.g. steps * batch)
  std::size_t hidden = 0;   ///< H: columns of h and W
  std::size_t classes = 0;  ///< V: rows of W, entries of b
};

/// Workspace floats for processing `block_rows` rows at a time: block_rows * classes.
/// block_rows = rows gives one GEMM per product (fastest); fewer rows save memory but
/// re-stream W and dW once per block.
[[nodiscard]] constexpr std::size_t linear_cross_entropy_workspace_size(
    const linear_cross_entropy_dims& d, std::size_t block_rows) noexcept {
  return block_rows * d.classes;
}

/// Inputs of the fused decoder. h is [N, H], w is [V, H] (PyTorch nn.Linear layout), b is [V]
/// or null, targets [N] in [0, V).
struct linear_cross_entropy_inputs {
  const float* h = nullptr;
  const float* w = nullptr;
  const float* b = nullptr;
  const std::int32_t* targets = nullptr;
  loss_reduction reduction = loss_reduction::mean;
};

/// Gradients of the fused decoder for the loss returned (mean or sum, as requested).
/// dh [N, H] is OVERWRITTEN; dw [V, H] and db [V] are ADDED into. Any may be null.
struct linear_cross_entropy_gradients {
  float* dh = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
};

}  // namespace strata::kernels

namespace strata::kernels::cpu {

/// Returns the cross-entropy loss of softmax(h W^T + b) against targets (mean or sum over rows),
/// accumulated in double; uses log-sum-exp with max subtraction, so large logits are safe.
///
/// `workspace` holds `workspace_size` floats; the kernel processes
/// workspace_size / classes rows per block (see linear_cross_entropy_workspace_size).
/// Thread-safe for concurrent calls on different workspaces.
/// \throws std::invalid_argument if a size is 0, a pointer is null, the workspace holds fewer
///         than `classes` floats, or a target lies outside [0, classes).
[[nodiscard]] double linear_cross_entropy_forward(const linear_cross_entropy_dims& d,
                                                  const linear_cross_entropy_inputs& in,
                                                  float* workspace, std::size_t workspace_size);

/// Forward and backward in one pass: returns the loss as linear_cross_entropy_forward() and
/// writes its gradients: dlogits = (softmax - onehot(target)) * (1/N for mean, 1 for sum),
/// dh = dlogits W, dw += dlogits^T h, db += column sums of dlogits.
/// \throws std::invalid_argument as linear_cross_entropy_forward().
double linear_cross_entropy_forward_backward(const linear_cross_entropy_dims& d,
                                             const linear_cross_entropy_inputs& in,
                                             const linear_cross_entropy_gradients& g,
                                             float* workspace, std::size_t workspace_size);

}  // namespace strata::kernels::cpu
