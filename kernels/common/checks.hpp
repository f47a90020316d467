#pragma once

// The argument checks of the strata::kernels API, one copy for both backends: kernels/cpu and
// kernels/cuda call these, so cpu::f and cuda::f reject the same arguments with the same
// sentence. Each function takes `who`, the name the message starts with ("lstm_forward" for
// cpu::lstm_forward, "cuda::lstm_forward" for cuda::lstm_forward), and throws
// std::invalid_argument("<who>: <what>.") for the first violated rule, in the order listed.
//
// Plain C++ (no TBB, BLAS or CUDA headers), so nvcc compiles it into the .cu files; the
// definitions live in checks.cpp, built by the host compiler.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/kernels/dropout.hpp"
#include "strata/kernels/gemm.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"
#include "strata/kernels/optimizers.hpp"

namespace strata::kernels::common {

/// Throws std::invalid_argument("<who>: <what>.") — the one error path of the API edge.
[[noreturn]] void fail(const char* who, const std::string& what);

/// fail(who, what) unless `ok`; for checks only one backend makes.
inline void require(bool ok, const char* who, const char* what) {
  if (!ok) fail(who, what);
}

/// gemm: m, n, k and the leading dimensions fit in a 32-bit BLAS integer; when m and n are
/// positive, c is set and ldc >= n; when k is positive too, a and b are set and lda, ldb cover
/// the stored columns of A and B.
void check_gemm(const char* who, transpose ta, transpose tb, std::size_t m, std::size_t n,
                std::size_t k, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                const float* c, std::size_t ldc);

/// gemm_strided_batched: nothing when batch == 0; otherwise check_gemm() and, when m and n are
/// positive, C matrices that do not overlap (stride_c >= (m - 1) * ldc + n unless batch == 1).
void check_gemm_strided_batched(const char* who, transpose ta, transpose tb, std::size_t m,
                                std::size_t n, std::size_t k, const float* a, std::size_t lda,
                                const float* b, std::size_t ldb, const float* c, std::size_t ldc,
                                std::size_t stride_c, std::size_t batch);

/// lstm_forward: batch, input and hidden >= 1; when steps > 0, w_ih, w_hh, x, y and reserve set.
void check_lstm_forward(const char* who, const lstm_dims& d, const lstm_weights& w,
                        const lstm_forward_args& a);

/// lstm_backward: batch, input and hidden >= 1; when steps > 0, w_hh, w_ih (if dx is wanted),
/// x (if dw_ih is wanted), reserve and workspace set.
void check_lstm_backward(const char* who, const lstm_dims& d, const lstm_weights& w,
                         const lstm_backward_args& a, const lstm_gradients& g);

/// embedding_forward / embedding_backward: vocab and dim >= 1; when count > 0, ids and both
/// arrays (`in`: table or d_out, `out`: out or d_table) set. Ids are not read (see check_ids).
void check_embedding(const char* who, std::size_t vocab, std::size_t dim, std::size_t count,
                     const std::int32_t* ids, const void* in, const void* out);

/// Every values[i], i < count, lies in [0, bound), else "<name>[i] = v lies outside [0, bound)".
/// Reads `values`: host memory only, so only the CPU kernels range-check ids and targets (the
/// CUDA ones would need a copy and a sync; their kernels turn bad ids into NaN instead).
void check_ids(const char* who, const char* name, const std::int32_t* values, std::size_t count,
               std::size_t bound);

/// linear_cross_entropy_forward(_backward): rows, hidden and classes >= 1; h, w and targets set.
/// (The workspace rules differ between the backends and are checked by each.)
void check_linear_cross_entropy(const char* who, const linear_cross_entropy_dims& d,
                                const linear_cross_entropy_inputs& in);

/// sgd_step: when n > 0, param and grad set, and momentum_buffer when momentum != 0.
void check_sgd_step(const char* who, std::size_t n, const float* param, const float* grad,
                    const float* momentum_buffer, const sgd_options& o);

/// adam_step: step >= 1; when n > 0, param, grad, exp_avg and exp_avg_sq set.
void check_adam_step(const char* who, std::size_t n, const float* param, const float* grad,
                     const float* exp_avg, const float* exp_avg_sq, std::int64_t step);

/// fill and scale (in place on x): x set when n > 0.
void check_in_place(const char* who, std::size_t n, const float* x);

/// axpy: x and y set when n > 0.
void check_axpy(const char* who, std::size_t n, const float* x, const float* y);

/// sum_arrays: when n > 0, out and every input set.
void check_sum_arrays(const char* who, std::span<const float* const> inputs, std::size_t n,
                      const float* out);

/// dropout: p in [0, 1), the block inside its activation's columns, x and y set when it has elements.
void check_dropout(const char* who, const dropout_block& block, const dropout_mask& mask, const float* x,
                   const float* y);

/// clip_grad_norm: max_norm >= 0 (NaN fails).
void check_clip_grad_norm(const char* who, double max_norm);

}  // namespace strata::kernels::common
