// cuda::lstm_forward / cuda::lstm_backward: the algorithm of kernels/cpu/lstm.cpp with the
// pointwise work of each step fused into one kernel and the GEMMs on cuBLAS.
#include "support.hpp"

#include <cstddef>

#include "common/checks.hpp"
#include "common/lstm_layout.hpp"
#include "device_math.cuh"

namespace strata::kernels::cuda {
namespace {

__global__ void lstm_bias_kernel(std::size_t n, const float* b_ih, const float* b_hh, float* bias) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t j = detail::global_thread(); j < n; j += stride) {
    bias[j] = (b_ih != nullptr ? b_ih[j] : 0.0f) + (b_hh != nullptr ? b_hh[j] : 0.0f);
  }
}

// One step's gates -> activations (in place), c_t, tanh(c_t), y_t and h_t; one thread per
// (batch row, hidden unit).
__global__ void lstm_forward_pointwise(std::size_t batch, std::size_t hidden,
                                       float* __restrict__ gates, const float* __restrict__ bias,
                                       const float* __restrict__ c_prev, float* __restrict__ c_next,
                                       float* __restrict__ tanh_c, float* __restrict__ y,
                                       float* __restrict__ h_next) {
  const std::size_t bh = batch * hidden;
  const std::size_t stride = detail::grid_threads();
  for (std::size_t e = detail::global_thread(); e < bh; e += stride) {
    const std::size_t b = e / hidden, j = e % hidden;
    float* g = gates + b * 4 * hidden;
    const float i = detail::sigmoid(g[j] + bias[j]);
    const float f = detail::sigmoid(g[hidden + j] + bias[hidden + j]);
    const float gg = tanhf(g[2 * hidden + j] + bias[2 * hidden + j]);
    const float o = detail::sigmoid(g[3 * hidden + j] + bias[3 * hidden + j]);
    const float c = f * c_prev[e] + i * gg;
    const float tc = tanhf(c);
    const float hv = o * tc;
    g[j] = i;
    g[hidden + j] = f;
    g[2 * hidden + j] = gg;
    g[3 * hidden + j] = o;
    c_next[e] = c;
    tanh_c[e] = tc;
    y[e] = hv;
    h_next[e] = hv;
  }
}

// One step backward: dh = dy_t + dh_rec, the carried dc -> pre-activation gate gradients;
// dc becomes dc_{t-1}.
template <bool HasDy>
__global__ void lstm_backward_pointwise(std::size_t batch, std::size_t hidden,
                                        const float* __restrict__ act, const float* __restrict__ c_prev,
                                        const float* __restrict__ tanh_c, const float* __restrict__ dy,
                                        const float* __restrict__ dh_rec, float* __restrict__ dc,
                                        float* __restrict__ dgates) {
  const std::size_t bh = batch * hidden;
  const std::size_t stride = detail::grid_threads();
  for (std::size_t e = detail::global_thread(); e < bh; e += stride) {
    const std::size_t b = e / hidden, j = e % hidden;
    const float* a = act + b * 4 * hidden;
    float* dg = dgates + b * 4 * hidden;
    float dh = dh_rec[e];
    if constexpr (HasDy) dh += dy[e];
    const float i = a[j], f = a[hidden + j], g = a[2 * hidden + j], o = a[3 * hidden + j];
    const float tc = tanh_c[e];
    const float dcv = dc[e] + dh * o * (1.0f - tc * tc);
    dg[j] = dcv * g * i * (1.0f - i);
    dg[hidden + j] = dcv * c_prev[e] * f * (1.0f - f);
    dg[2 * hidden + j] = dcv * i * (1.0f - g * g);
    dg[3 * hidden + j] = dh * tc * o * (1.0f - o);
    dc[e] = dcv * f;
  }
}

}  // namespace

void lstm_forward(const cuda_context& ctx, const lstm_dims& d, const lstm_weights& w,
                  const lstm_forward_args& a) {
  constexpr const char* who = "cuda::lstm_forward";
  common::check_lstm_forward(who, d, w, a);
  const std::size_t n = d.steps, bsz = d.batch, hs = d.hidden, bh = bsz * hs, g4 = 4 * hs;
  cudaStream_t s = ctx.stream;
  if (n == 0) {
    if (a.h_out != nullptr) detail::copy_or_zero(s, a.h_in, a.h_out, bh);
    if (a.c_out != nullptr) detail::copy_or_zero(s, a.c_in, a.c_out, bh);
    return;
  }
  cublasHandle_t h = detail::blas_on_stream(ctx, who);

  // The CPU kernel's reserve layout.
  const common::lstm_reserve_regions<float> r = common::split_lstm_reserve(d, a.reserve);
  lstm_bias_kernel<<<detail::blocks_for(g4), detail::block_threads, 0, s>>>(g4, w.b_ih, w.b_hh, r.bias);
  detail::check_launch("lstm_bias_kernel", s);
  detail::copy_or_zero(s, a.h_in, r.h, bh);
  detail::copy_or_zero(s, a.c_in, r.c, bh);

  // All timesteps' input projections in one GEMM: gates[n*B, 4H] = x[n*B, I] * W_ih^T.
  detail::sgemm(h, ctx.math, s, transpose::no, transpose::yes, n * bsz, g4, d.input, 1.0f, a.x,
                d.input, w.w_ih, d.input, 0.0f, r.gates, g4);
  const unsigned blocks = detail::blocks_for(bh);
  for (std::size_t t = 0; t < n; ++t) {
    float* gates_t = r.gates + t * bsz * g4;
    if (t > 0 || a.h_in != nullptr) {
      detail::sgemm(h, ctx.math, s, transpose::no, transpose::yes, bsz, g4, hs, 1.0f, r.h + t * bh,
                    hs, w.w_hh, hs, 1.0f, gates_t, g4);
    }
    lstm_forward_pointwise<<<blocks, detail::block_threads, 0, s>>>(
        bsz, hs, gates_t, r.bias, r.c + t * bh, r.c + (t + 1) * bh, r.tanh_c + t * bh,
        a.y + t * bh, r.h + (t + 1) * bh);
    detail::check_launch("lstm_forward_pointwise", s);
  }
  if (a.h_out != nullptr) detail::copy_or_zero(s, r.h + n * bh, a.h_out, bh);
  if (a.c_out != nullptr) detail::copy_or_zero(s, r.c + n * bh, a.c_out, bh);
}

void lstm_backward(const cuda_context& ctx, const lstm_dims& d, const lstm_weights& w,
                   const lstm_backward_args& a, const lstm_gradients& g) {
  constexpr const char* who = "cuda::lstm_backward";
  common::check_lstm_backward(who, d, w, a, g);
  const std::size_t n = d.steps, bsz = d.batch, hs = d.hidden, bh = bsz * hs, g4 = 4 * hs;
  cudaStream_t s = ctx.stream;
  if (n == 0) {
    if (a.dh_in != nullptr) detail::copy_or_zero(s, a.dh_out, a.dh_in, bh);
    if (a.dc_in != nullptr) detail::copy_or_zero(s, a.dc_out, a.dc_in, bh);
    return;
  }
  cublasHandle_t h = detail::blas_on_stream(ctx, who);

  const common::lstm_reserve_regions<const float> r = common::split_lstm_reserve(d, a.reserve);
  const common::lstm_backward_scratch ws = common::split_lstm_backward_workspace(d, a.workspace);
  float* dgates = ws.dgates;
  float* dh_rec = ws.dh_rec;
  float* dc = ws.dc;
  detail::copy_or_zero(s, a.dh_out, dh_rec, bh);
  detail::copy_or_zero(s, a.dc_out, dc, bh);

  const unsigned blocks = detail::blocks_for(bh);
  for (std::size_t t = n; t-- > 0;) {
    const std::size_t o = t * bh;
    float* dg_t = dgates + t * bsz * g4;
    const float* act = r.gates + t * bsz * g4;
    if (a.dy != nullptr) {
      lstm_backward_pointwise<true><<<blocks, detail::block_threads, 0, s>>>(
          bsz, hs, act, r.c + o, r.tanh_c + o, a.dy + o, dh_rec, dc, dg_t);
    } else {
      lstm_backward_pointwise<false><<<blocks, detail::block_threads, 0, s>>>(
          bsz, hs, act, r.c + o, r.tanh_c + o, nullptr, dh_rec, dc, dg_t);
    }
    detail::check_launch("lstm_backward_pointwise", s);
    // dh_{t-1} = dgates_t * W_hh (stream order: the pointwise kernel has read dh_rec).
    float* dh_target = t > 0 ? dh_rec : a.dh_in;
    if (dh_target != nullptr) {
      detail::sgemm(h, ctx.math, s, transpose::no, transpose::no, bsz, hs, g4, 1.0f, dg_t, g4,
                    w.w_hh, hs, 0.0f, dh_target, hs);
    }
  }
  if (a.dc_in != nullptr) detail::copy_or_zero(s, dc, a.dc_in, bh);

  const std::size_t rows = n * bsz;
  if (a.dx != nullptr) {
    detail::sgemm(h, ctx.math, s, transpose::no, transpose::no, rows, d.input, g4, 1.0f, dgates,
                  g4, w.w_ih, d.input, 0.0f, a.dx, d.input);
  }
  if (g.dw_ih != nullptr) {
    detail::sgemm(h, ctx.math, s, transpose::yes, transpose::no, g4, d.input, rows, 1.0f, dgates,
                  g4, a.x, d.input, 1.0f, g.dw_ih, d.input);
  }
  if (g.dw_hh != nullptr) {
    detail::sgemm(h, ctx.math, s, transpose::yes, transpose::no, g4, hs, rows, 1.0f, dgates, g4,
                  r.h, hs, 1.0f, g.dw_hh, hs);
  }
  detail::add_column_sums(s, rows, g4, dgates, g.db_ih, g.db_hh);
}

}  // namespace strata::kernels::cuda
