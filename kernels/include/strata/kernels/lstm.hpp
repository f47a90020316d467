#pragma once

/// \file
/// One LSTM layer over a sequence (or a chunk of one), PyTorch nn.LSTM semantics and layout.
///
/// Gates in the order i, f, g, o:
///   gates_t = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh        ([batch, 4*hidden])
///   i = sigmoid, f = sigmoid, g = tanh, o = sigmoid of their slices
///   c_t = f * c_{t-1} + i * g,  h_t = o * tanh(c_t),  y_t = h_t
///
/// A chunk is a sequence: running steps [t0, t1) that continue from (h, c) is a call with
/// x + t0*batch*input, steps = t1 - t0 and h_in/c_in = the previous chunk's h_out/c_out. Each
/// chunk keeps its own reserve until its backward. Backward by chunks runs in reverse order,
/// feeding one chunk's dh_in/dc_in as the previous chunk's dh_out/dc_out; weight gradients
/// accumulate, so the sum over chunks equals the full-sequence gradient.
///
/// Example (one layer, whole sequence, zero initial state):
/// \code
///   strata::kernels::lstm_dims d{.steps = 35, .batch = 20, .input = 400, .hidden = 400};
///   std::vector<float> reserve(strata::kernels::lstm_reserve_size(d));
///   std::vector<float> work(strata::kernels::lstm_backward_workspace_size(d));
///   cpu::lstm_forward(d, weights, {.x = x, .y = y, .h_out = hT, .c_out = cT, .reserve = reserve.data()});
///   cpu::lstm_backward(d, weights, {.x = x, .reserve = reserve.data(), .dy = dy, .dx = dx,
///                                   .workspace = work.data()}, grads);
/// \endcode

#include <cstddef>

namespace strata::kernels {

/// Sizes of one LSTM layer call (all counts, not bytes).
struct lstm_dims {
  std::size_t steps = 0;   ///< timesteps in this call (a chunk or the whole sequence); may be 0
  std::size_t batch = 0;   ///< B >= 1
  std::size_t input = 0;   ///< I >= 1
  std::size_t hidden = 0;  ///< H >= 1
};

/// Parameters of one layer, PyTorch layout: w_ih [4H, I], w_hh [4H, H], b_ih [4H], b_hh [4H]
/// (rows in gate order i, f, g, o). Either bias may be null (treated as zeros).
struct lstm_weights {
  const float* w_ih = nullptr;
  const float* w_hh = nullptr;
  const float* b_ih = nullptr;
  const float* b_hh = nullptr;
};

/// Parameter gradients of one layer, same shapes as lstm_weights. lstm_backward ADDS into them
/// (+=); zero them before the first micro-batch. Any of them may be null (not computed).
struct lstm_gradients {
  float* dw_ih = nullptr;
  float* dw_hh = nullptr;
  float* db_ih = nullptr;
  float* db_hh = nullptr;
};

/// Arguments of lstm_forward. Arrays are contiguous float32, seq-major.
struct lstm_forward_args {
  const float* x = nullptr;     ///< [steps, B, I], required when steps > 0
  const float* h_in = nullptr;  ///< [B, H] initial h; null means zeros
  const float* c_in = nullptr;  ///< [B, H] initial c; null means zeros
  float* y = nullptr;           ///< [steps, B, H] output, overwritten; required when steps > 0
  float* h_out = nullptr;       ///< [B, H] final h, overwritten; may be null
  float* c_out = nullptr;       ///< [B, H] final c, overwritten; may be null
  float* reserve = nullptr;     ///< lstm_reserve_size(dims) floats, overwritten; kept for backward
};

/// Arguments of lstm_backward.
struct lstm_backward_args {
  const float* x = nullptr;        ///< [steps, B, I], the forward's input
  const float* reserve = nullptr;  ///< the forward's reserve (read only)
  const float* dy = nullptr;       ///< [steps, B, H] gradient of y; null means zeros
  const float* dh_out = nullptr;   ///< [B, H] gradient of h_out; null means zeros
  const float* dc_out = nullptr;   ///< [B, H] gradient of c_out; null means zeros
  float* dx = nullptr;             ///< [steps, B, I] overwritten; null: not computed
  float* dh_in = nullptr;          ///< [B, H] gradient of h_in, overwritten; null: not computed
  float* dc_in = nullptr;          ///< [B, H] gradient of c_in, overwritten; null: not computed
  float* workspace = nullptr;      ///< lstm_backward_workspace_size(dims) floats, scratch
};

/// Floats the forward saves for backward: B*H*(7*steps + 2) + 4*H — post-activation gates
/// [steps, B, 4H], cell states c_0..c_steps [steps+1, B, H], tanh(c_t) [steps, B, H],
/// hidden states h_0..h_steps [steps+1, B, H] and the summed bias [4H]. The layout is private
/// to the implementation.
[[nodiscard]] constexpr std::size_t lstm_reserve_size(const lstm_dims& d) noexcept {
  return d.batch * d.hidden * (7 * d.steps + 2) + 4 * d.hidden;
}

/// Scratch floats lstm_backward needs: B*H*(4*steps + 2) — gate gradients for all steps (for
/// the one-GEMM weight gradients) plus the carried dh and dc.
[[nodiscard]] constexpr std::size_t lstm_backward_workspace_size(const lstm_dims& d) noexcept {
  return d.batch * d.hidden * (4 * d.steps + 2);
}

}  // namespace strata::kernels

namespace strata::kernels::cpu {

/// Runs one LSTM layer forward over `d.steps` timesteps.
///
/// One GEMM projects all timesteps' inputs (x[steps*B, I] * W_ih^T), then one GEMM per step
/// adds h_{t-1} W_hh^T and a fused pointwise pass applies the gates and the cell update.
/// Writes y, h_out, c_out and the reserve; allocates nothing. With steps == 0 it copies
/// h_in/c_in (or zeros) to h_out/c_out.
///
/// Thread-safe for concurrent calls on different outputs and reserves; parallel in the
/// caller's oneTBB arena.
/// \throws std::invalid_argument if batch, input or hidden is 0, or a required pointer is null.
void lstm_forward(const lstm_dims& d, const lstm_weights& w, const lstm_forward_args& a);

/// Back-propagates through the `d.steps` timesteps of a forward call (same dims and weights).
///
/// Overwrites dx, dh_in, dc_in (those not null); ADDS the parameter gradients into `g`
/// (dW_ih += dgates^T x and dW_hh += dgates^T h_prev as one GEMM each over all steps; db_ih and
/// db_hh each += the column sums of dgates). One GEMM per step carries dh back in time.
/// The reserve is only read, so backward may be repeated.
///
/// Thread-safe for concurrent calls on different outputs, gradients and workspaces.
/// \throws std::invalid_argument if batch, input or hidden is 0, or a required pointer is null
///         (w.w_hh, w.w_ih if dx is wanted, and x, reserve, workspace when steps > 0).
void lstm_backward(const lstm_dims& d, const lstm_weights& w, const lstm_backward_args& a,
                   const lstm_gradients& g);

}  // namespace strata::kernels::cpu
