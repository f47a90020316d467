#pragma once
/// \file
/// What the LSTM language model's kernels cost: FLOPs and bytes moved per call, the one place
/// these formulas are written. Sim devices time work items from them, the partitioner's nominal
/// estimate divides them by rates, and the kernels benchmark turns step times into GFLOP/s.
///
/// Counting rules: a matrix product of m x k by k x n is 2·m·n·k FLOPs; bytes are float32 reads
/// plus writes, with weights read once per timestep where the recurrence re-reads them. Pointwise
/// work (gates, activations) is left out of the FLOPs.
///
/// Example:
/// \code
///   auto f = strata::kernels::lstm_forward_cost({35, 20, 400, 400});
///   double seconds = f.flops / 60e9 + f.bytes / 20e9;
/// \endcode

#include <cstddef>

#include "strata/kernels/lstm.hpp"

namespace strata::kernels {

/// FLOPs and bytes (read plus written) of one kernel call.
struct work_cost {
  double flops = 0;
  double bytes = 0;

  work_cost& operator+=(const work_cost& o) noexcept {
    flops += o.flops;
    bytes += o.bytes;
    return *this;
  }
};

namespace detail {
inline double as_double(std::size_t n) noexcept { return static_cast<double>(n); }
/// Matrix-product FLOPs of one LSTM layer's forward: x·W_ihᵀ and h·W_hhᵀ per timestep.
inline double lstm_forward_flops(const lstm_dims& d) noexcept {
  return 2.0 * as_double(d.steps * d.batch * 4 * d.hidden) * as_double(d.input + d.hidden);
}
/// Bytes of one LSTM layer's forward: W_hh per timestep, W_ih once, per row x in and 8 H of
/// gates, states and outputs.
inline double lstm_forward_bytes(const lstm_dims& d) noexcept {
  return 4.0 * as_double(d.steps * 4 * d.hidden * d.hidden + 4 * d.hidden * d.input +
                         d.steps * d.batch * (d.input + 8 * d.hidden));
}
}  // namespace detail

/// lstm_forward over `d` (one layer, all d.steps timesteps).
inline work_cost lstm_forward_cost(const lstm_dims& d) noexcept {
  return {detail::lstm_forward_flops(d), detail::lstm_forward_bytes(d)};
}

/// lstm_backward over `d`: dgates·W_hh per timestep, dx, dW_ih and dW_hh (twice the forward's
/// products), reading and writing twice the forward's bytes.
inline work_cost lstm_backward_cost(const lstm_dims& d) noexcept {
  return {2.0 * detail::lstm_forward_flops(d), 2.0 * detail::lstm_forward_bytes(d)};
}

/// The fused linear decoder + softmax cross-entropy, forward and backward, over `rows` rows of
/// `hidden` into `vocab` classes: logits, dh and dW (three products).
inline work_cost decoder_cost(std::size_t rows, std::size_t hidden, std::size_t vocab) noexcept {
  return {3.0 * 2.0 * detail::as_double(rows * hidden * vocab), 4.0 * detail::as_double(3 * vocab * hidden + 2 * rows * vocab)};
}

/// embedding_forward of `rows` ids into `embed` columns: a gather (reads and writes each row,
/// reads each id).
inline work_cost embedding_forward_cost(std::size_t rows, std::size_t embed) noexcept {
  return {0, 4.0 * 2.0 * detail::as_double(rows * embed) + 4.0 * detail::as_double(rows)};
}

/// embedding_backward: a scatter-add of `rows` gradient rows (one add per element).
inline work_cost embedding_backward_cost(std::size_t rows, std::size_t embed) noexcept {
  return {detail::as_double(rows * embed), 4.0 * 3.0 * detail::as_double(rows * embed) + 4.0 * detail::as_double(rows)};
}

/// Sizes of a stacked-LSTM language model's training step, for step_matmul_flops.
struct lm_step_dims {
  std::size_t vocab = 0;   ///< V
  std::size_t embed = 0;   ///< E (layer 0's input)
  std::size_t layers = 0;  ///< L
  std::size_t hidden = 0;  ///< H
  std::size_t rows = 0;    ///< timesteps x batch columns of the step
};

/// FLOPs of every matrix product of one training step of embedding -> L LSTM layers -> decoder +
/// cross-entropy: per layer the forward's and backward's products (lstm_forward_cost,
/// lstm_backward_cost), the decoder's three. Pointwise work, reductions and the optimiser are not
/// counted. The step's split into timesteps and batch does not change the count.
inline double step_matmul_flops(const lm_step_dims& d) noexcept {
  double flops = 0;
  for (std::size_t l = 0; l < d.layers; ++l) {
    const lstm_dims layer{d.rows, 1, l == 0 ? d.embed : d.hidden, d.hidden};
    flops += lstm_forward_cost(layer).flops + lstm_backward_cost(layer).flops;
  }
  return flops + decoder_cost(d.rows, d.hidden, d.vocab).flops;
}

}  // namespace strata::kernels
