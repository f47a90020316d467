#pragma once
/// \file
/// One backend's kernels as an object: `cpu_ops` (`kernels::cpu` on host memory) and `cuda_ops`
/// (`kernels::cuda` enqueued on a stream) have the same member functions, so that math made of
/// several kernel calls (the language model's stage work, the kvstore's merge) is written once,
/// as a template over the ops object, and runs on either backend. `with_ops(target, run)` calls
/// `run` with the ops of a `kernels::attach` / `on_stream` target.
///
/// \code
///   strata::kernels::on_stream(s, {.name = "scaled_sum", .bytes = 12.0 * n}, [x, y, n](auto target) {
///     strata::kernels::with_ops(target, [&](const auto& ops) {
///       ops.scale(n, 0.5f, x);
///       ops.axpy(n, 1.0f, x, y);
///     });
///   });
/// \endcode
/// Every pointer is memory of the work's device. Without CUDA (STRATA_HAS_CUDA unset)
/// `with_ops` never calls `run` with `cuda_ops`, so a caller links without the CUDA kernels.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "strata/device/tensor.hpp"
#include "strata/kernels/cuda.hpp"
#include "strata/kernels/dropout.hpp"
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/embedding.hpp"
#include "strata/kernels/half.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"
#include "strata/kernels/on_stream.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kernels/reduce.hpp"

namespace strata::kernels {

/// The kernels::cuda format of the 16-bit dtype `t` (float16 or bfloat16). Declared in every
/// build: the cuda branches of generic work items name it even where they are never instantiated.
inline cuda::half_format cuda_half_format(dtype t) {
  return t == dtype::float16 ? cuda::half_format::float16 : cuda::half_format::bfloat16;
}

/// cpu devices: `kernels::cpu` on host memory, inside the device's oneTBB arena.
struct cpu_ops {
  /// True where the math runs on the calling thread (host code may read the results at once).
  static constexpr bool on_host = true;

  void lstm_forward(const lstm_dims& d, const lstm_weights& w, const lstm_forward_args& a) const {
    cpu::lstm_forward(d, w, a);
  }
  void lstm_backward(const lstm_dims& d, const lstm_weights& w, const lstm_backward_args& a,
                     const lstm_gradients& g) const {
    cpu::lstm_backward(d, w, a, g);
  }
  void embedding_forward(std::size_t vocab, std::size_t dim, const float* table, std::size_t count,
                         const std::int32_t* ids, float* out) const {
    cpu::embedding_forward(vocab, dim, table, count, ids, out);
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, std::size_t count, const std::int32_t* ids,
                          const float* d_out, float* d_table) const {
    cpu::embedding_backward(vocab, dim, count, ids, d_out, d_table);
  }
  /// Linear + softmax cross-entropy forward and backward; the summed loss goes to `*loss`
  /// (memory of the device).
  void linear_cross_entropy(const linear_cross_entropy_dims& d, const linear_cross_entropy_inputs& in,
                            const linear_cross_entropy_gradients& g, float* workspace, std::size_t workspace_size,
                            double* loss) const {
    *loss = cpu::linear_cross_entropy_forward_backward(d, in, g, workspace, workspace_size);
  }
  /// The L2 norm of all `tensors` into `*norm` (memory of the device).
  void global_norm(std::span<const std::span<const float>> tensors, float*, std::size_t, double* norm) const {
    *norm = cpu::global_norm(tensors);
  }
  void scale(std::size_t n, float alpha, float* x) const { cpu::scale(n, alpha, x); }
  void fill(std::size_t n, float value, float* x) const { cpu::fill(n, value, x); }
  void zero(std::size_t n, float* x) const { std::memset(x, 0, n * sizeof(float)); }
  void copy(std::size_t n, const float* src, float* dst) const { std::copy_n(src, n, dst); }
  void axpy(std::size_t n, float alpha, const float* x, float* y) const { cpu::axpy(n, alpha, x, y); }
  void dropout(const dropout_block& b, const dropout_mask& m, const float* x, float* y) const {
    cpu::dropout(b, m, x, y);
  }
  void sum(std::span<const float* const> inputs, std::size_t n, float* out) const { cpu::sum_arrays(inputs, n, out); }
  /// `first` (when not null) + the 16-bit inputs of dtype `t`, each widened, summed in that order.
  void sum_widened(dtype t, const float* first, std::span<const std::uint16_t* const> inputs, std::size_t n,
                   float* out) const {
    std::vector<std::vector<float>> widened;
    widened.reserve(inputs.size());
    std::vector<const float*> all;
    if (first != nullptr) all.push_back(first);
    for (const std::uint16_t* in : inputs) {
      cpu::widen(t, n, in, widened.emplace_back(n).data());
      all.push_back(widened.back().data());
    }
    cpu::sum_arrays(all, n, out);
  }
  void sgd(std::size_t n, float* param, const float* grad, float* momentum, const sgd_options& o) const {
    cpu::sgd_step(n, param, grad, momentum, o);
  }
  void adam(std::size_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t step,
            const adam_options& o) const {
    cpu::adam_step(n, param, grad, exp_avg, exp_avg_sq, step, o);
  }
  void widen(dtype t, std::size_t n, const std::uint16_t* in, float* out) const { cpu::widen(t, n, in, out); }
  void narrow(dtype t, std::size_t n, const float* in, std::uint16_t* out) const { cpu::narrow(t, n, in, out); }

  /// Workspace floats of linear_cross_entropy for blocks of `block` rows.
  static std::size_t linear_cross_entropy_workspace(const linear_cross_entropy_dims& d, std::size_t block) {
    return linear_cross_entropy_workspace_size(d, block);
  }
  /// Workspace floats of global_norm over `tensors` tensors.
  static std::size_t global_norm_workspace(std::size_t) { return 0; }
};

/// cuda devices: `kernels::cuda` on device memory, enqueued on the work's stream with its cuBLAS
/// handle (nothing waits on the host). `ctx.math` picks the matrix products' precision.
struct cuda_ops {
  static constexpr bool on_host = false;
  cuda::cuda_context ctx;

  void lstm_forward(const lstm_dims& d, const lstm_weights& w, const lstm_forward_args& a) const {
    cuda::lstm_forward(ctx, d, w, a);
  }
  void lstm_backward(const lstm_dims& d, const lstm_weights& w, const lstm_backward_args& a,
                     const lstm_gradients& g) const {
    cuda::lstm_backward(ctx, d, w, a, g);
  }
  void embedding_forward(std::size_t vocab, std::size_t dim, const float* table, std::size_t count,
                         const std::int32_t* ids, float* out) const {
    cuda::embedding_forward(ctx, vocab, dim, table, count, ids, out);
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, std::size_t count, const std::int32_t* ids,
                          const float* d_out, float* d_table) const {
    cuda::embedding_backward(ctx, vocab, dim, count, ids, d_out, d_table);
  }
  void linear_cross_entropy(const linear_cross_entropy_dims& d, const linear_cross_entropy_inputs& in,
                            const linear_cross_entropy_gradients& g, float* workspace, std::size_t workspace_size,
                            double* loss) const {
    cuda::linear_cross_entropy_forward_backward(ctx, d, in, g, workspace, workspace_size, loss);
  }
  void global_norm(std::span<const std::span<const float>> tensors, float* workspace, std::size_t workspace_size,
                   double* norm) const {
    cuda::global_norm(ctx, tensors, workspace, workspace_size, norm);
  }
  void scale(std::size_t n, float alpha, float* x) const { cuda::scale(ctx, n, alpha, x); }
  void fill(std::size_t n, float value, float* x) const { cuda::fill(ctx, n, value, x); }
  void zero(std::size_t n, float* x) const { cuda::fill(ctx, n, 0.0f, x); }
  void copy(std::size_t n, const float* src, float* dst) const { cuda::copy(ctx, n, src, dst); }
  void axpy(std::size_t n, float alpha, const float* x, float* y) const { cuda::axpy(ctx, n, alpha, x, y); }
  void dropout(const dropout_block& b, const dropout_mask& m, const float* x, float* y) const {
    cuda::dropout(ctx, b, m, x, y);
  }
  void sum(std::span<const float* const> inputs, std::size_t n, float* out) const {
    cuda::sum_arrays(ctx, inputs, n, out);
  }
  void sum_widened(dtype t, const float* first, std::span<const std::uint16_t* const> inputs, std::size_t n,
                   float* out) const {
    cuda::sum_widened(ctx, cuda_half_format(t), first, inputs, n, out);
  }
  void sgd(std::size_t n, float* param, const float* grad, float* momentum, const sgd_options& o) const {
    cuda::sgd_step(ctx, n, param, grad, momentum, o);
  }
  void adam(std::size_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t step,
            const adam_options& o) const {
    cuda::adam_step(ctx, n, param, grad, exp_avg, exp_avg_sq, step, o);
  }
  void widen(dtype t, std::size_t n, const std::uint16_t* in, float* out) const {
    cuda::widen(ctx, cuda_half_format(t), n, in, out);
  }
  void narrow(dtype t, std::size_t n, const float* in, std::uint16_t* out) const {
    cuda::narrow(ctx, cuda_half_format(t), n, in, out);
  }

  static std::size_t linear_cross_entropy_workspace(const linear_cross_entropy_dims& d, std::size_t block) {
    return cuda::linear_cross_entropy_device_workspace_size(d, block);
  }
  static std::size_t global_norm_workspace(std::size_t tensors) { return cuda::global_norm_workspace_size(tensors); }
};

/// Calls `run(cpu_ops{})` for a `cpu_target` and `run(cuda_ops{target.context})` for a
/// `cuda_target` (CUDA builds only; without CUDA a cuda target runs nothing).
template <class Target, class Run>
void with_ops([[maybe_unused]] const Target& target, Run&& run) {
  if constexpr (is_cuda_target<Target>) {
#if STRATA_HAS_CUDA
    run(cuda_ops{target.context});
#endif
  } else {
    run(cpu_ops{});
  }
}

}  // namespace strata::kernels
