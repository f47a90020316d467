#include "checks.hpp"

#include <climits>
#include <stdexcept>

namespace strata::kernels::common {
namespace {

void check_lstm_dims(const char* who, const lstm_dims& d) {
  require(d.batch > 0, who, "dims.batch must be at least 1");
  require(d.input > 0, who, "dims.input must be at least 1");
  require(d.hidden > 0, who, "dims.hidden must be at least 1");
}

}  // namespace

void fail(const char* who, const std::string& what) {
  throw std::invalid_argument(std::string(who) + ": " + what + ".");
}

void check_gemm(const char* who, transpose ta, transpose tb, std::size_t m, std::size_t n,
                std::size_t k, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                const float* c, std::size_t ldc) {
  constexpr auto int_max = static_cast<std::size_t>(INT_MAX);
  require(m <= int_max && n <= int_max && k <= int_max && lda <= int_max && ldb <= int_max &&
              ldc <= int_max,
          who, "m, n, k and the leading dimensions must fit in a 32-bit BLAS integer");
  const std::size_t a_cols = ta == transpose::no ? k : m;
  const std::size_t b_cols = tb == transpose::no ? n : k;
  if (m == 0 || n == 0) return;
  require(c != nullptr, who, "c must not be null when m and n are positive");
  require(ldc >= n, who, "ldc must be at least n");
  if (k == 0) return;
  require(a != nullptr && b != nullptr, who, "a and b must not be null when m, n and k are positive");
  require(lda >= a_cols, who,
          "lda must be at least the stored column count of A (k, or m when transposed)");
  require(ldb >= b_cols, who,
          "ldb must be at least the stored column count of B (n, or k when transposed)");
}

void check_gemm_strided_batched(const char* who, transpose ta, transpose tb, std::size_t m,
                                std::size_t n, std::size_t k, const float* a, std::size_t lda,
                                const float* b, std::size_t ldb, const float* c, std::size_t ldc,
                                std::size_t stride_c, std::size_t batch) {
  if (batch == 0) return;
  check_gemm(who, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  if (m == 0 || n == 0) return;
  require(batch == 1 || stride_c >= (m - 1) * ldc + n, who,
          "stride_c must be at least (m - 1) * ldc + n so that the C matrices do not overlap");
}

void check_lstm_forward(const char* who, const lstm_dims& d, const lstm_weights& w,
                        const lstm_forward_args& a) {
  check_lstm_dims(who, d);
  if (d.steps == 0) return;
  require(w.w_ih != nullptr && w.w_hh != nullptr, who, "weights.w_ih and weights.w_hh must not be null");
  require(a.x != nullptr, who, "args.x must not be null when dims.steps > 0");
  require(a.y != nullptr, who, "args.y must not be null when dims.steps > 0");
  require(a.reserve != nullptr, who, "args.reserve must not be null when dims.steps > 0");
}

void check_lstm_backward(const char* who, const lstm_dims& d, const lstm_weights& w,
                         const lstm_backward_args& a, const lstm_gradients& g) {
  check_lstm_dims(who, d);
  if (d.steps == 0) return;
  require(w.w_hh != nullptr, who, "weights.w_hh must not be null");
  require(a.dx == nullptr || w.w_ih != nullptr, who, "weights.w_ih must not be null when args.dx is wanted");
  require(a.x != nullptr || g.dw_ih == nullptr, who, "args.x must not be null when gradients.dw_ih is wanted");
  require(a.reserve != nullptr, who, "args.reserve must not be null when dims.steps > 0");
  require(a.workspace != nullptr, who, "args.workspace must not be null when dims.steps > 0");
}

void check_embedding(const char* who, std::size_t vocab, std::size_t dim, std::size_t count,
                     const std::int32_t* ids, const void* in, const void* out) {
  require(vocab > 0 && dim > 0, who, "vocab and dim must be at least 1");
  if (count == 0) return;
  require(ids != nullptr && in != nullptr && out != nullptr, who,
          "ids and the arrays must not be null when count > 0");
}

void check_ids(const char* who, const char* name, const std::int32_t* values, std::size_t count,
               std::size_t bound) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::int32_t v = values[i];
    if (v < 0 || static_cast<std::size_t>(v) >= bound) {
      fail(who, std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                    " lies outside [0, " + std::to_string(bound) + ")");
    }
  }
}

void check_linear_cross_entropy(const char* who, const linear_cross_entropy_dims& d,
                                const linear_cross_entropy_inputs& in) {
  require(d.rows > 0 && d.hidden > 0 && d.classes > 0, who,
          "dims.rows, dims.hidden and dims.classes must be at least 1");
  require(in.h != nullptr && in.w != nullptr && in.targets != nullptr, who,
          "inputs.h, inputs.w and inputs.targets must not be null");
}

void check_sgd_step(const char* who, std::size_t n, const float* param, const float* grad,
                    const float* momentum_buffer, const sgd_options& o) {
  if (n == 0) return;
  require(param != nullptr && grad != nullptr, who, "param and grad must not be null");
  require(o.momentum == 0.0 || momentum_buffer != nullptr, who,
          "momentum_buffer must not be null when momentum != 0");
}

void check_adam_step(const char* who, std::size_t n, const float* param, const float* grad,
                     const float* exp_avg, const float* exp_avg_sq, std::int64_t step) {
  require(step >= 1, who, "step must be at least 1 (steps count from 1)");
  if (n == 0) return;
  require(param != nullptr && grad != nullptr && exp_avg != nullptr && exp_avg_sq != nullptr, who,
          "param, grad, exp_avg and exp_avg_sq must not be null");
}

void check_in_place(const char* who, std::size_t n, const float* x) {
  require(n == 0 || x != nullptr, who, "x must not be null when n > 0");
}

void check_axpy(const char* who, std::size_t n, const float* x, const float* y) {
  require(n == 0 || (x != nullptr && y != nullptr), who, "x and y must not be null when n > 0");
}

void check_dropout(const char* who, const dropout_block& block, const dropout_mask& mask, const float* x,
                   const float* y) {
  require(mask.p >= 0.f && mask.p < 1.f, who, "the drop probability p must lie in [0, 1)");
  require(block.col0 + block.cols <= block.total_cols, who, "col0 + cols must not exceed total_cols");
  require(block.rows * block.cols * block.dim == 0 || (x != nullptr && y != nullptr), who,
          "x and y must not be null when the block has elements");
}

void check_sum_arrays(const char* who, std::span<const float* const> inputs, std::size_t n,
                      const float* out) {
  if (n == 0) return;
  require(out != nullptr, who, "out must not be null when n > 0");
  for (const float* in : inputs) require(in != nullptr, who, "no input may be null when n > 0");
}

void check_clip_grad_norm(const char* who, double max_norm) {
  require(max_norm >= 0.0, who, "max_norm must be a non-negative number");
}

}  // namespace strata::kernels::common
