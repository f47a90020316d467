#pragma once
// The kernels the LSTM language model's device work calls, one struct per backend with the same
// member functions, so that the math (lm_stage's forward/backward/norm, lm_costs' layer timings)
// is written once as a template over them, and attach() to give a work item the implementation
// of its device (through strata/kernels/on_stream.hpp, the one adapter from kernels to streams).
// Every pointer is memory of the work's device. Private to strata::lm.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "strata/device/kind.hpp"
#include "strata/device/tensor.hpp"
#include "strata/device/work.hpp"
#include "strata/kernels/dropout.hpp"
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/embedding.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"
#include "strata/kernels/on_stream.hpp"
#include "strata/kernels/reduce.hpp"
#include "strata/lm/config.hpp"
#if STRATA_HAS_CUDA
#include "strata/kernels/cuda.hpp"
#endif

namespace strata::lm::ops {

namespace k = strata::kernels;

/// The element pointers of a tensor for the kernels (host memory on cpu, device memory on cuda),
/// dtype-checked: fp for float32 tensors, ip for int32 ones.
inline float* fp(const tensor& t) { return t.device_data<float>(); }
inline const std::int32_t* ip(const tensor& t) { return t.device_data<const std::int32_t>(); }

/// cpu devices: strata::kernels::cpu on host memory, inside the device's oneTBB arena.
struct host_ops {
  void lstm_forward(const k::lstm_dims& d, const k::lstm_weights& w, const k::lstm_forward_args& a) const {
    k::cpu::lstm_forward(d, w, a);
  }
  void lstm_backward(const k::lstm_dims& d, const k::lstm_weights& w, const k::lstm_backward_args& a,
                     const k::lstm_gradients& g) const {
    k::cpu::lstm_backward(d, w, a, g);
  }
  void embedding_forward(std::size_t vocab, std::size_t dim, const float* table, std::size_t count,
                         const std::int32_t* ids, float* out) const {
    k::cpu::embedding_forward(vocab, dim, table, count, ids, out);
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, std::size_t count, const std::int32_t* ids,
                          const float* d_out, float* d_table) const {
    k::cpu::embedding_backward(vocab, dim, count, ids, d_out, d_table);
  }
  /// Decoder forward and backward; the summed loss goes to `*loss` (memory of the device).
  void decoder(const k::linear_cross_entropy_dims& d, const k::linear_cross_entropy_inputs& in,
               const k::linear_cross_entropy_gradients& g, float* workspace, std::size_t workspace_size,
               double* loss) const {
    *loss = k::cpu::linear_cross_entropy_forward_backward(d, in, g, workspace, workspace_size);
  }
  /// The L2 norm of all `tensors` into `*norm`.
  void global_norm(std::span<const std::span<const float>> tensors, float*, std::size_t, double* norm) const {
    *norm = k::cpu::global_norm(tensors);
  }
  void scale(std::size_t n, float alpha, float* x) const { k::cpu::scale(n, alpha, x); }
  void fill(std::size_t n, float value, float* x) const { k::cpu::fill(n, value, x); }
  void copy(std::size_t n, const float* src, float* dst) const { std::copy_n(src, n, dst); }
  void axpy(std::size_t n, float alpha, const float* x, float* y) const { k::cpu::axpy(n, alpha, x, y); }
  void dropout(const k::dropout_block& b, const k::dropout_mask& m, const float* x, float* y) const {
    k::cpu::dropout(b, m, x, y);
  }
  static std::size_t decoder_workspace(const k::linear_cross_entropy_dims& d, std::size_t block) {
    return k::linear_cross_entropy_workspace_size(d, block);
  }
  static std::size_t norm_workspace(std::size_t) { return 0; }
};

#if STRATA_HAS_CUDA
/// cuda devices: strata::kernels::cuda on device memory, enqueued on the stage's stream with the
/// stream's cuBLAS handle (nothing waits on the host).
struct gpu_ops {
  k::cuda::cuda_context ctx;
  gpu_ops(const k::cuda_target& target, precision math) : ctx(target.context) {
    ctx.math = math == precision::tf32   ? k::cuda::gemm_math::tf32
               : math == precision::bf16 ? k::cuda::gemm_math::bf16
                                         : k::cuda::gemm_math::fp32;
  }

  void lstm_forward(const k::lstm_dims& d, const k::lstm_weights& w, const k::lstm_forward_args& a) const {
    k::cuda::lstm_forward(ctx, d, w, a);
  }
  void lstm_backward(const k::lstm_dims& d, const k::lstm_weights& w, const k::lstm_backward_args& a,
                     const k::lstm_gradients& g) const {
    k::cuda::lstm_backward(ctx, d, w, a, g);
  }
  void embedding_forward(std::size_t vocab, std::size_t dim, const float* table, std::size_t count,
                         const std::int32_t* ids, float* out) const {
    k::cuda::embedding_forward(ctx, vocab, dim, table, count, ids, out);
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, std::size_t count, const std::int32_t* ids,
                          const float* d_out, float* d_table) const {
    k::cuda::embedding_backward(ctx, vocab, dim, count, ids, d_out, d_table);
  }
  void decoder(const k::linear_cross_entropy_dims& d, const k::linear_cross_entropy_inputs& in,
               const k::linear_cross_entropy_gradients& g, float* workspace, std::size_t workspace_size,
               double* loss) const {
    k::cuda::linear_cross_entropy_forward_backward(ctx, d, in, g, workspace, workspace_size, loss);
  }
  void global_norm(std::span<const std::span<const float>> tensors, float* workspace, std::size_t workspace_size,
                   double* norm) const {
    k::cuda::global_norm(ctx, tensors, workspace, workspace_size, norm);
  }
  void scale(std::size_t n, float alpha, float* x) const { k::cuda::scale(ctx, n, alpha, x); }
  void fill(std::size_t n, float value, float* x) const { k::cuda::fill(ctx, n, value, x); }
  void copy(std::size_t n, const float* src, float* dst) const { k::cuda::copy(ctx, n, src, dst); }
  void axpy(std::size_t n, float alpha, const float* x, float* y) const { k::cuda::axpy(ctx, n, alpha, x, y); }
  void dropout(const k::dropout_block& b, const k::dropout_mask& m, const float* x, float* y) const {
    k::cuda::dropout(ctx, b, m, x, y);
  }
  static std::size_t decoder_workspace(const k::linear_cross_entropy_dims& d, std::size_t block) {
    return k::cuda::linear_cross_entropy_device_workspace_size(d, block);
  }
  static std::size_t norm_workspace(std::size_t tensors) { return k::cuda::global_norm_workspace_size(tensors); }
};
#endif

/// Gives `w` the host implementation on cpu devices and the CUDA one on cuda devices (its matrix
/// products in `math`), both from the same templated math `run(ops)`; sim devices run neither
/// (they model the cost).
template <class Run>
void attach(kernel_work& w, device_kind kind, precision math, Run run) {
  k::attach(w, kind, [run, math](auto target) {
    if constexpr (k::is_cuda_target<decltype(target)>) {
#if STRATA_HAS_CUDA
      run(gpu_ops{target, math});
#else
      (void)math;
#endif
    } else {
      run(host_ops{});
    }
  });
}

}  // namespace strata::lm::ops
