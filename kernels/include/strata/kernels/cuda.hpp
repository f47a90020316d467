#pragma once

/// \file
/// The kernels of strata::kernels on CUDA streams (`strata::kernels::cuda`): cuBLAS for the
/// matrix products, strata's own fused kernels for the rest.
///
/// Same conventions as the CPU kernels (docs/kernels.md): float32, contiguous, row-major,
/// seq-major sequences, PyTorch parameter layouts, the same argument structs, the same
/// overwrite-or-accumulate rules and (except for the decoder and the norms) the same workspace
/// sizes. Every array argument is **device memory**; every call only enqueues work on
/// `cuda_context::stream` and returns without waiting for it (no host synchronisation, no
/// allocation). Results that the CPU kernels return as a `double` (losses, norms) are written
/// to a device `double` instead.
///
/// Differences from the CPU kernels, all because the data lives on the device:
/// - Ids and targets are not range-checked on the host (that would need a copy and a sync).
///   The kernels never read or write outside the arrays: an out-of-range id makes its
///   embedding row NaN (and is skipped by the backward), an out-of-range target makes the loss
///   and that row's gradients NaN, so the error shows up in the loss.
/// - `embedding_backward` scatters with atomicAdd: repeated ids sum in an unspecified order
///   (results may differ in the last bits from run to run). Everything else is deterministic.
/// - Shape and pointer checks are the same and still throw std::invalid_argument before anything
///   is enqueued. A failing CUDA or cuBLAS call throws cuda_error naming the call.
///
/// Public headers need no CUDA headers: the stream and cuBLAS handle are forward-declared
/// pointers, identical to `cudaStream_t` and `cublasHandle_t`.
///
/// Example (one LSTM layer forward on the runtime's stream):
/// \code
///   namespace kc = strata::kernels::cuda;
///   kc::cuda_context ctx{.stream = static_cast<kc::cuda_stream>(launch.stream),
///                        .blas = static_cast<kc::cublas_handle>(launch.cublas)};
///   kc::lstm_forward(ctx, dims, weights, {.x = x, .y = y, .reserve = reserve});
/// \endcode

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "strata/kernels/dropout.hpp"
#include "strata/kernels/gemm.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"
#include "strata/kernels/optimizers.hpp"

struct CUstream_st;    // cudaStream_t is CUstream_st*
struct cublasContext;  // cublasHandle_t is cublasContext*

namespace strata::kernels::cuda {

/// Same type as `cudaStream_t`; null is the legacy default stream.
using cuda_stream = CUstream_st*;
/// Same type as `cublasHandle_t`.
using cublas_handle = cublasContext*;

/// Precision of the float32 matrix products.
enum class gemm_math {
  fp32,  ///< IEEE float32 multiply-adds (the default; matches the CPU kernels to rounding)
  tf32,  ///< tensor cores with TF32 inputs (10-bit mantissa), float32 accumulation: several
         ///< times faster on Ampere/Hopper, relative error ~1e-3 per product
  bf16,  ///< tensor cores with inputs rounded to bfloat16 (7-bit mantissa), float32 accumulation
         ///< and float32 in and out (CUBLAS_COMPUTE_32F_FAST_16BF): relative error ~1e-2 per
         ///< product; nothing else changes (the tensors stay float32)
};

/// Where and how the kernels run. Cheap to copy; holds no ownership.
///
/// `blas` is needed by every call that multiplies matrices (gemm, lstm, linear_cross_entropy).
/// It is used with `stream` (rebound with cublasSetStream only if it is bound to another
/// stream), so one handle per stream — the runtime's arrangement — costs nothing. The handle's
/// math mode should stay CUBLAS_DEFAULT_MATH: the precision is chosen per call by `math`
/// (cublasGemmEx compute type), never by changing shared handle state.
///
/// Thread-safety: as cuBLAS — a handle must not be used by two host threads at once.
struct cuda_context {
  cuda_stream stream = nullptr;
  cublas_handle blas = nullptr;
  gemm_math math = gemm_math::fp32;
};

/// A CUDA runtime or cuBLAS call failed; what() names the call and the status, e.g.
/// "strata::kernels::cuda: cublasGemmEx failed: CUBLAS_STATUS_INVALID_VALUE (an invalid
/// numeric value was used as an argument)". Asynchronous kernel faults surface at the next
/// checked call on the stream (or at the runtime's event/sync), as with any CUDA code, and so
/// may name a later call; with the environment variable STRATA_CUDA_SYNC=1 every launch waits
/// for its kernel (cudaStreamSynchronize) and a fault throws cuda_error naming that kernel
/// (a debug mode: it serialises the host and the GPU; docs/devices.md).
class cuda_error : public std::runtime_error {
 public:
  cuda_error(std::string call, int status, const std::string& message)
      : std::runtime_error(message), call_(std::move(call)), status_(status) {}
  /// The failing API call or kernel, e.g. "cublasGemmEx" or "lstm_forward_pointwise".
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  /// The cudaError_t or cublasStatus_t value.
  [[nodiscard]] int status() const noexcept { return status_; }

 private:
  std::string call_;
  int status_;
};

// ---- matrix products -----------------------------------------------------------------------

/// One column-major cuBLAS product equivalent to a row-major one.
///
/// A row-major [m, n] matrix with row stride ldc is, read column-major, its transpose [n, m]
/// with leading dimension ldc. So row-major C = op(A) op(B) is column-major
/// C^T = op(B)^T op(A)^T: cuBLAS gets the operands swapped (B first), the same transpose flags,
/// m and n swapped, and the leading dimensions unchanged.
struct column_major_gemm {
  transpose op_first = transpose::no;   ///< cuBLAS transa, applied to the row-major B
  transpose op_second = transpose::no;  ///< cuBLAS transb, applied to the row-major A
  std::size_t m = 0, n = 0, k = 0;      ///< cuBLAS m, n, k (= row-major n, m, k)
  std::size_t ld_first = 0;             ///< cuBLAS lda (= ldb)
  std::size_t ld_second = 0;            ///< cuBLAS ldb (= lda)
  std::size_t ldc = 0;                  ///< cuBLAS ldc (= ldc)
};

/// The cuBLAS (column-major) arguments for the row-major product of cuda::gemm (pure host
/// logic). Leading dimensions of 0 (allowed when a matrix is empty) become 1, as cuBLAS wants.
[[nodiscard]] column_major_gemm to_column_major(transpose ta, transpose tb, std::size_t m,
                                                std::size_t n, std::size_t k, std::size_t lda,
                                                std::size_t ldb, std::size_t ldc) noexcept;

/// C = alpha * op(A) op(B) + beta * C, row-major, exactly the contract of cpu::gemm
/// (beta == 0 ignores C's contents; k == 0 scales C by beta; m or n == 0 does nothing).
/// cublasGemmEx with compute type CUBLAS_COMPUTE_32F, or ..._FAST_TF32 / ..._FAST_16BF when
/// ctx.math is tf32 / bf16.
/// \throws std::invalid_argument as cpu::gemm (checked before anything is enqueued), also if
///         ctx.blas is null; cuda_error if cuBLAS fails.
void gemm(const cuda_context& ctx, transpose ta, transpose tb, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc);

/// `batch` independent products (cublasGemmStridedBatchedEx), the contract of
/// cpu::gemm_strided_batched (strides in elements; C_i must not overlap; A_i, B_i may).
void gemm_strided_batched(const cuda_context& ctx, transpose ta, transpose tb, std::size_t m,
                          std::size_t n, std::size_t k, float alpha, const float* a,
                          std::size_t lda, std::size_t stride_a, const float* b, std::size_t ldb,
                          std::size_t stride_b, float beta, float* c, std::size_t ldc,
                          std::size_t stride_c, std::size_t batch);

// ---- LSTM ----------------------------------------------------------------------------------

/// Same reserve and workspace sizes as the CPU kernels (the reserve layout is the CPU one too,
/// though callers must not rely on it).
using strata::kernels::lstm_backward_workspace_size;
using strata::kernels::lstm_reserve_size;

/// cpu::lstm_forward on the device: one GEMM for all steps' input projections, then per step
/// one `h W_hh^T` GEMM (beta = 1) and one fused pointwise kernel (bias, activations, cell
/// update, y, h and the reserve). 2 + 2·steps launches. Same arguments and checks.
void lstm_forward(const cuda_context& ctx, const lstm_dims& d, const lstm_weights& w,
                  const lstm_forward_args& a);

/// cpu::lstm_backward on the device: per step (in reverse) one fused pointwise kernel and one
/// `dgates W_hh` GEMM; then dx, dW_ih and dW_hh as one GEMM each over all steps (gradients
/// ADDED, beta = 1) and both bias gradients from one column-sum kernel (double accumulation).
void lstm_backward(const cuda_context& ctx, const lstm_dims& d, const lstm_weights& w,
                   const lstm_backward_args& a, const lstm_gradients& g);

// ---- embedding -----------------------------------------------------------------------------

/// out[n, :] = table[ids[n], :] (overwritten); an out-of-range id gives a NaN row.
/// \throws std::invalid_argument if vocab or dim is 0, or a pointer is null while count > 0.
void embedding_forward(const cuda_context& ctx, std::size_t vocab, std::size_t dim,
                       const float* table, std::size_t count, const std::int32_t* ids, float* out);

/// d_table[ids[n], :] += d_out[n, :] with atomicAdd (order of repeated ids unspecified);
/// out-of-range ids are skipped. \throws std::invalid_argument as embedding_forward().
void embedding_backward(const cuda_context& ctx, std::size_t vocab, std::size_t dim,
                        std::size_t count, const std::int32_t* ids, const float* d_out,
                        float* d_table);

// ---- fused decoder -------------------------------------------------------------------------

/// Workspace floats of the CUDA decoder for `block_rows` rows per block:
/// 2·rows (one double per row's loss, at the start) + block_rows·classes (logits), i.e. the
/// CPU size plus 2·rows. (A different name from the CPU function on purpose: both take a
/// strata::kernels type, so one name would be ambiguous by argument-dependent lookup.)
/// The workspace must be 8-byte aligned (cudaMalloc memory is).
[[nodiscard]] constexpr std::size_t linear_cross_entropy_device_workspace_size(
    const linear_cross_entropy_dims& d, std::size_t block_rows) noexcept {
  return 2 * d.rows + block_rows * d.classes;
}

/// cpu::linear_cross_entropy_forward on the device; the loss (mean or sum, double) goes to
/// `*loss` (device memory) instead of being returned. Per block of rows: one GEMM for the
/// logits, one row kernel (bias, max, log-sum-exp); then one kernel sums the row losses in a
/// fixed order (deterministic).
/// \throws std::invalid_argument if a size is 0, a pointer (loss included) is null, or the
///         workspace holds less than linear_cross_entropy_device_workspace_size(d, 1).
void linear_cross_entropy_forward(const cuda_context& ctx, const linear_cross_entropy_dims& d,
                                  const linear_cross_entropy_inputs& in, float* workspace,
                                  std::size_t workspace_size, double* loss);

/// Forward and backward (cpu::linear_cross_entropy_forward_backward on the device): dh is
/// overwritten, dw and db are ADDED into; `loss` may be null here (not computed).
void linear_cross_entropy_forward_backward(const cuda_context& ctx,
                                           const linear_cross_entropy_dims& d,
                                           const linear_cross_entropy_inputs& in,
                                           const linear_cross_entropy_gradients& g,
                                           float* workspace, std::size_t workspace_size,
                                           double* loss);

// ---- optimisers ----------------------------------------------------------------------------

/// cpu::sgd_step on the device (same float scalars, same operation order).
void sgd_step(const cuda_context& ctx, std::size_t n, float* param, const float* grad,
              float* momentum_buffer, const sgd_options& o);

/// cpu::adam_step on the device (same float scalars, same operation order); `step` >= 1.
void adam_step(const cuda_context& ctx, std::size_t n, float* param, const float* grad,
               float* exp_avg, float* exp_avg_sq, std::int64_t step, const adam_options& o);

// ---- elementwise ---------------------------------------------------------------------------

/// x[i] = value.
void fill(const cuda_context& ctx, std::size_t n, float value, float* x);
/// x[i] *= alpha.
void scale(const cuda_context& ctx, std::size_t n, float alpha, float* x);
/// y[i] += alpha * x[i].
void axpy(const cuda_context& ctx, std::size_t n, float alpha, const float* x, float* y);
/// dst[i] = src[i] (cudaMemcpyAsync device to device on ctx.stream). The arrays must not overlap
/// unless they are the same (then nothing is enqueued). With unified addressing (every 64-bit
/// platform) src and dst may be on different GPUs: CUDA copies between them peer to peer.
void copy(const cuda_context& ctx, std::size_t n, const float* src, float* dst);

/// cpu::dropout on the device (the same mask and the same float products, bitwise).
void dropout(const cuda_context& ctx, const dropout_block& block, const dropout_mask& mask, const float* x, float* y);

/// Most inputs one sum_arrays launch reads; more take several launches.
inline constexpr std::size_t sum_arrays_inputs_per_launch = 256;

/// out = inputs[0] + ... + inputs[K-1], summed in that order (bitwise equal to cpu::sum_arrays
/// when no FMA is involved, which there is not). `inputs` is a host span of device pointers.
/// `out` may be exactly one of the first sum_arrays_inputs_per_launch inputs.
/// \throws std::invalid_argument as cpu::sum_arrays, or if out is a later input.
void sum_arrays(const cuda_context& ctx, std::span<const float* const> inputs, std::size_t n,
                float* out);

// ---- gradient compression ------------------------------------------------------------------

/// The quantizations of MXNet's gradient compression (`kvstore::compression_type` less "none").
enum class gradient_quantizer {
  two_bit,  ///< sends +threshold, +0 or -threshold
  one_bit,  ///< sends +1 or -1
};

/// kvstore::compress (2bit or 1bit) on the device, per element: r = residual[i] + grad[i]; two_bit:
/// q = threshold if r >= threshold, else -threshold if r <= -threshold, else +0; one_bit: q = 1 if
/// r > threshold, else -1; then residual[i] = r - q and sent[i] = q. With `zero_residual` the
/// residual is taken as 0 (r = 0 + grad[i], as the store's first push of a slot) and only written.
/// Only adds, subtracts and comparisons, never contracted and without flushing subnormals: the
/// results are bitwise those of the CPU code (a NaN gradient gives NaN on both, its payload may
/// differ). `sent` may be `grad` (each element is read before it is written); otherwise the arrays
/// must not overlap. `threshold` is not checked here (kvstore::parse_compression checks it).
/// \throws std::invalid_argument if a pointer is null while n > 0.
void compress_gradient(const cuda_context& ctx, std::size_t n, gradient_quantizer type, float threshold,
                       const float* grad, float* residual, float* sent, bool zero_residual);

// ---- row-sparse ----------------------------------------------------------------------------
//
// The device side of a kvstore's row-sparse values (MXNet's row_sparse tensors): a value is rows
// by id, and a row of a stored key is a run of contiguous elements. The caller (the store) turns
// row ids into element ranges on the host, where it checks them, and copies the ranges to the
// device; the kernels only read and write the ranges they are given. One thread per (row,
// element): no atomics, every sum in a fixed order, so results are deterministic and bitwise
// those of the CPU code that adds the same floats in the same order.

/// A run of `length` elements copied or updated from element `from` of one array to element `to`
/// of another (device arrays of these are read by the kernels below; 3 int64 each).
struct row_span {
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::int64_t length = 0;
};

/// One row of a row-sparse sum: elements [to, to + length) of the output get the sum of the
/// contributions `sources[first]`, ..., `sources[last - 1]` (each `length` elements), added in
/// that order: out = s[first] + s[first + 1] + ... (4 int64 each).
struct row_sum {
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::int64_t to = 0;
  std::int64_t length = 0;
};

/// to[s.to + c] = from[s.from + c] for each of the `count` spans s of `spans` and c < s.length.
/// `max_length` is at least every span's length (it sizes the grid; elements past it are left
/// alone). Spans must not write overlapping elements, nor write what another span reads.
/// \throws std::invalid_argument if spans, from or to is null while count > 0.
void copy_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
               const float* from, float* to);

/// copy_rows for 16-bit elements (float16 or bfloat16 bits, copied as they are): the rows a pull
/// gathers from a 16-bit key.
/// \throws std::invalid_argument if spans, from or to is null while count > 0.
void copy_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
               const std::uint16_t* from, std::uint16_t* to);

/// The `rows` sums of `plan` (device array of row_sum) written into `out`: for each row, its
/// contributions (device pointers in the device array `sources`) added in order, as the CPU adds
/// repeated row ids in the order they were pushed. A row with no contributions (first == last) is
/// written as zeros. Rows must not overlap in `out`, nor `out` any contribution. `max_length` as
/// for copy_rows.
/// \throws std::invalid_argument if plan, sources or out is null while rows > 0.
void sum_rows(const cuda_context& ctx, std::size_t rows, std::size_t max_length, const row_sum* plan,
              const float* const* sources, float* out);

/// cpu::sgd_step on the `count` spans of `spans` (device array): for each span s,
/// sgd_step(s.length, param + s.to, grad + s.from, momentum_buffer + s.to, o), one launch for
/// all. Each operation rounded on its own (no fused multiply-add), so the results are bitwise
/// those of cpu::sgd_step on the same rows. Spans must not overlap in param.
/// \throws std::invalid_argument as cuda::sgd_step, or if spans is null while count > 0.
void sgd_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
              float* param, const float* grad, float* momentum_buffer, const sgd_options& o);

/// cpu::adam_step on the spans (step `step` >= 1), likewise bitwise, exp_avg and exp_avg_sq at
/// s.to as param.
/// \throws std::invalid_argument as cuda::adam_step, or if spans is null while count > 0.
void adam_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
               float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t step,
               const adam_options& o);
// ---- 16-bit values -------------------------------------------------------------------------

/// The 16-bit storage formats of strata/kernels/half.hpp; their elements are `std::uint16_t` bits.
/// Math runs in float32: these calls only convert and sum.
enum class half_format {
  float16,   ///< IEEE binary16
  bfloat16,  ///< the upper 16 bits of a float32
};

/// out[i] = in[i] widened to float32, exactly; bitwise cpu::widen (a NaN keeps its sign and
/// payload and becomes quiet, as on the CPU). The arrays must not overlap.
/// \throws std::invalid_argument if a pointer is null while n > 0.
void widen(const cuda_context& ctx, half_format format, std::size_t n, const std::uint16_t* in, float* out);

/// out[i] = in[i] rounded to `format`, to nearest, ties to even; bitwise cpu::narrow, in integer
/// operations (no cuda_fp16.h conversion): float16 overflows to infinity from 65520 on, keeps
/// subnormals (2^-25 rounds to zero), a NaN keeps its sign and its payload's upper bits and is
/// quiet; bfloat16 is the CPU's rule. The arrays must not overlap.
/// \throws std::invalid_argument if a pointer is null while n > 0.
void narrow(const cuda_context& ctx, half_format format, std::size_t n, const float* in, std::uint16_t* out);

/// out = first + widen(inputs[0]) + ... + widen(inputs[K-1]), added in float32 in that order,
/// `first` left out when null (then out = widen(inputs[0]) + ...): bitwise the CPU merge of
/// 16-bit values (each widened, then cpu::sum_arrays). `inputs` is a host span of device
/// pointers; more than sum_arrays_inputs_per_launch take several launches. `out` may be `first`.
/// With neither `first` nor inputs, out is zeroed.
/// \throws std::invalid_argument if out or an input is null while n > 0.
void sum_widened(const cuda_context& ctx, half_format format, const float* first,
                 std::span<const std::uint16_t* const> inputs, std::size_t n, float* out);

/// to[s.to + c] = from[s.from + c] rounded to `format` (as cuda::narrow, bitwise cpu::narrow) for
/// each of the `count` spans s of `spans` (device array of row_span) and c < s.length: the rows
/// of a 16-bit key that a row-sparse update wrote in float32. `max_length` as for copy_rows.
/// \throws std::invalid_argument if spans, from or to is null while count > 0.
void narrow_rows(const cuda_context& ctx, half_format format, std::size_t count, std::size_t max_length,
                 const row_span* spans, const float* from, std::uint16_t* to);

/// dst[i] = src[i] for 16-bit elements (either format): the contract of the float32 cuda::copy.
/// \throws std::invalid_argument if a pointer is null while n > 0.
void copy(const cuda_context& ctx, std::size_t n, const std::uint16_t* src, std::uint16_t* dst);

// ---- norms ---------------------------------------------------------------------------------

/// Partial sums each tensor's norm uses (fixed, so that results are deterministic).
inline constexpr std::size_t norm_partials_per_tensor = 128;

/// Workspace floats global_norm and clip_grad_norm need for `tensor_count` tensors:
/// 2·(norm_partials_per_tensor·tensor_count + 1) (doubles; 8-byte alignment required).
[[nodiscard]] constexpr std::size_t global_norm_workspace_size(std::size_t tensor_count) noexcept {
  return 2 * (norm_partials_per_tensor * tensor_count + 1);
}

/// Writes the L2 norm of all elements of all `tensors` (a host span of device arrays) to
/// `*norm` (device memory), accumulated in double in a fixed order (deterministic).
/// \throws std::invalid_argument if norm or the workspace is null or the workspace is too
///         small, or a tensor with elements has a null pointer.
void global_norm(const cuda_context& ctx, std::span<const std::span<const float>> tensors,
                 float* workspace, std::size_t workspace_size, double* norm);

/// torch.nn.utils.clip_grad_norm_ on the device, without a host sync: computes the norm as
/// global_norm(), then a kernel reads it on the device and multiplies every element by
/// max_norm / (total + 1e-6) when that is < 1 or the total is not finite. The norm before
/// clipping goes to `*total_norm` (device) when that is not null.
/// \throws std::invalid_argument as global_norm(), or if max_norm is negative or NaN.
void clip_grad_norm(const cuda_context& ctx, std::span<const std::span<float>> grads,
                    double max_norm, float* workspace, std::size_t workspace_size,
                    double* total_norm);

}  // namespace strata::kernels::cuda
