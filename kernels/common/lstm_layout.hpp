#pragma once

// How lstm_forward's reserve and lstm_backward's workspace are divided, one copy for the CPU
// and CUDA kernels (the CUDA reserve has the CPU layout). Plain C++: nvcc compiles it into the
// .cu files. The sizes are the public lstm_reserve_size / lstm_backward_workspace_size.

#include <cstddef>

#include "strata/kernels/lstm.hpp"

namespace strata::kernels::common {

/// Views of an lstm_reserve_size(d) reserve; F is float (forward writes) or const float
/// (backward reads).
template <class F>
struct lstm_reserve_regions {
  F* gates;   ///< [steps, B, 4H] post-activation i, f, g, o
  F* c;       ///< [steps+1, B, H] c_0 .. c_steps
  F* tanh_c;  ///< [steps, B, H] tanh(c_t), t = 1..steps
  F* h;       ///< [steps+1, B, H] h_0 .. h_steps (h[t] is step t's h_{t-1})
  F* bias;    ///< [4H] b_ih + b_hh
};

/// The regions of `reserve`, in the order above.
template <class F>
[[nodiscard]] lstm_reserve_regions<F> split_lstm_reserve(const lstm_dims& d, F* reserve) noexcept {
  const std::size_t bh = d.batch * d.hidden;
  lstm_reserve_regions<F> r{};
  r.gates = reserve;
  r.c = r.gates + d.steps * bh * 4;
  r.tanh_c = r.c + (d.steps + 1) * bh;
  r.h = r.tanh_c + d.steps * bh;
  r.bias = r.h + (d.steps + 1) * bh;
  return r;
}

/// Views of an lstm_backward_workspace_size(d) workspace.
struct lstm_backward_scratch {
  float* dgates;  ///< [steps, B, 4H] pre-activation gate gradients of every step
  float* dh_rec;  ///< [B, H] dh arriving from step t+1
  float* dc;      ///< [B, H] carried cell gradient
};

/// The regions of `workspace`, in the order above.
[[nodiscard]] inline lstm_backward_scratch split_lstm_backward_workspace(const lstm_dims& d,
                                                                         float* workspace) noexcept {
  const std::size_t bh = d.batch * d.hidden;
  lstm_backward_scratch s{};
  s.dgates = workspace;
  s.dh_rec = s.dgates + d.steps * bh * 4;
  s.dc = s.dh_rec + bh;
  return s;
}

}  // namespace strata::kernels::common
