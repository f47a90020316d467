#include "strata/kernels/lstm.hpp"

#include <algorithm>
#include <cstddef>

#include "common/checks.hpp"
#include "common/lstm_layout.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {
namespace {

void copy_or_zero(const float* src, float* dst, std::size_t n) {
  if (src != nullptr) {
    std::copy(src, src + n, dst);
  } else {
    std::fill(dst, dst + n, 0.0f);
  }
}

// Rows of one step handled per task: a few thousand elements, below which oneTBB's fork
// costs more than the pointwise work.
std::size_t row_grain(const lstm_dims& d) noexcept {
  return std::max<std::size_t>(1, 4096 / d.hidden);
}

// One batch row of the fused forward pointwise step. The restrict-qualified slices let GCC
// vectorise the loop with the inlined exp approximation; run through detail::isa_call.
void forward_row(std::size_t h, float* __restrict gi, float* __restrict gf, float* __restrict gg,
                 float* __restrict go, const float* __restrict bias, const float* __restrict c_prev,
                 float* __restrict c_next, float* __restrict tanh_c, float* __restrict y,
                 float* __restrict h_next) {
  const float* __restrict bi = bias;
  const float* __restrict bf = bias + h;
  const float* __restrict bg = bias + 2 * h;
  const float* __restrict bo = bias + 3 * h;
  for (std::size_t j = 0; j < h; ++j) {
    const float i = detail::sigmoid(gi[j] + bi[j]);
    const float f = detail::sigmoid(gf[j] + bf[j]);
    const float g = detail::tanh_approx(gg[j] + bg[j]);
    const float o = detail::sigmoid(go[j] + bo[j]);
    const float c = f * c_prev[j] + i * g;
    const float tc = detail::tanh_approx(c);
    const float hv = o * tc;
    gi[j] = i;
    gf[j] = f;
    gg[j] = g;
    go[j] = o;
    c_next[j] = c;
    tanh_c[j] = tc;
    y[j] = hv;
    h_next[j] = hv;
  }
}

// One batch row of the backward pointwise step: from dh (dy + recurrent) and the carried dc to
// the pre-activation gate gradients; dc becomes dc_{t-1}. Run through detail::isa_call.
template <bool HasDy>
void backward_row(std::size_t h, const float* __restrict act, const float* __restrict c_prev,
                  const float* __restrict tanh_c, const float* __restrict dy,
                  const float* __restrict dh_rec, float* __restrict dc,
                  float* __restrict dgi, float* __restrict dgf, float* __restrict dgg,
                  float* __restrict dgo) {
  const float* __restrict ai = act;
  const float* __restrict af = act + h;
  const float* __restrict ag = act + 2 * h;
  const float* __restrict ao = act + 3 * h;
  for (std::size_t j = 0; j < h; ++j) {
    float dh = dh_rec[j];
    if constexpr (HasDy) dh += dy[j];
    const float i = ai[j];
    const float f = af[j];
    const float g = ag[j];
    const float o = ao[j];
    const float tc = tanh_c[j];
    const float dcv = dc[j] + dh * o * (1.0f - tc * tc);
    dgi[j] = dcv * g * i * (1.0f - i);
    dgf[j] = dcv * c_prev[j] * f * (1.0f - f);
    dgg[j] = dcv * i * (1.0f - g * g);
    dgo[j] = dh * tc * o * (1.0f - o);
    dc[j] = dcv * f;
  }
}

}  // namespace

void lstm_forward(const lstm_dims& d, const lstm_weights& w, const lstm_forward_args& a) {
  common::check_lstm_forward("lstm_forward", d, w, a);
  const cpu_isa isa = active_isa();
  const std::size_t n = d.steps;
  const std::size_t bsz = d.batch;
  const std::size_t hs = d.hidden;
  const std::size_t bh = bsz * hs;
  const std::size_t g4 = 4 * hs;
  if (n == 0) {
    if (a.h_out != nullptr) copy_or_zero(a.h_in, a.h_out, bh);
    if (a.c_out != nullptr) copy_or_zero(a.c_in, a.c_out, bh);
    return;
  }

  const common::lstm_reserve_regions<float> r = common::split_lstm_reserve(d, a.reserve);
  for (std::size_t j = 0; j < g4; ++j) {
    r.bias[j] = (w.b_ih != nullptr ? w.b_ih[j] : 0.0f) + (w.b_hh != nullptr ? w.b_hh[j] : 0.0f);
  }
  copy_or_zero(a.h_in, r.h, bh);
  copy_or_zero(a.c_in, r.c, bh);

  // All timesteps' input projections in one GEMM: gates[n*B, 4H] = x[n*B, I] * W_ih^T.
  detail::sgemm(transpose::no, transpose::yes, n * bsz, g4, d.input, 1.0f, a.x, d.input, w.w_ih,
                d.input, 0.0f, r.gates, g4);

  const std::size_t grain = row_grain(d);
  for (std::size_t t = 0; t < n; ++t) {
    float* gates_t = r.gates + t * bsz * g4;
    const float* h_prev_t = r.h + t * bh;
    if (t > 0 || a.h_in != nullptr) {
      detail::sgemm(transpose::no, transpose::yes, bsz, g4, hs, 1.0f, h_prev_t, hs, w.w_hh, hs,
                    1.0f, gates_t, g4);
    }
    // h_t goes to y and, for the next step's GEMM and for backward, to h[t+1].
    float* y_t = a.y + t * bh;
    float* h_next = r.h + (t + 1) * bh;
    detail::parallel_blocks(bsz, grain, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t b = lo; b < hi; ++b) {
        float* gb = gates_t + b * g4;
        const std::size_t o = t * bh + b * hs;
        detail::isa_call<&forward_row>(isa, hs, gb, gb + hs, gb + 2 * hs, gb + 3 * hs, r.bias,
                                       r.c + o, r.c + o + bh, r.tanh_c + o, y_t + b * hs,
                                       h_next + b * hs);
      }
    });
  }
  if (a.h_out != nullptr) std::copy(r.h + n * bh, r.h + (n + 1) * bh, a.h_out);
  if (a.c_out != nullptr) std::copy(r.c + n * bh, r.c + (n + 1) * bh, a.c_out);
}

void lstm_backward(const lstm_dims& d, const lstm_weights& w, const lstm_backward_args& a,
                   const lstm_gradients& g) {
  common::check_lstm_backward("lstm_backward", d, w, a, g);
  const cpu_isa isa = active_isa();
  const std::size_t n = d.steps;
  const std::size_t bsz = d.batch;
  const std::size_t hs = d.hidden;
  const std::size_t bh = bsz * hs;
  const std::size_t g4 = 4 * hs;
  if (n == 0) {
    if (a.dh_in != nullptr) copy_or_zero(a.dh_out, a.dh_in, bh);
    if (a.dc_in != nullptr) copy_or_zero(a.dc_out, a.dc_in, bh);
    return;
  }

  const common::lstm_reserve_regions<const float> r = common::split_lstm_reserve(d, a.reserve);
  const common::lstm_backward_scratch ws = common::split_lstm_backward_workspace(d, a.workspace);
  float* dgates = ws.dgates;
  float* dh_rec = ws.dh_rec;
  float* dc = ws.dc;
  copy_or_zero(a.dh_out, dh_rec, bh);
  copy_or_zero(a.dc_out, dc, bh);

  const std::size_t grain = row_grain(d);
  for (std::size_t t = n; t-- > 0;) {
    const float* dy_t = a.dy != nullptr ? a.dy + t * bh : nullptr;
    float* dg_t = dgates + t * bsz * g4;
    detail::parallel_blocks(bsz, grain, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t b = lo; b < hi; ++b) {
        const std::size_t o = t * bh + b * hs;
        const float* act = r.gates + t * bsz * g4 + b * g4;
        float* dgb = dg_t + b * g4;
        if (dy_t != nullptr) {
          detail::isa_call<&backward_row<true>>(isa, hs, act, r.c + o, r.tanh_c + o, dy_t + b * hs,
                                                dh_rec + b * hs, dc + b * hs, dgb, dgb + hs,
                                                dgb + 2 * hs, dgb + 3 * hs);
        } else {
          detail::isa_call<&backward_row<false>>(isa, hs, act, r.c + o, r.tanh_c + o,
                                                 static_cast<const float*>(nullptr), dh_rec + b * hs,
                                                 dc + b * hs, dgb, dgb + hs, dgb + 2 * hs,
                                                 dgb + 3 * hs);
        }
      }
    });
    // dh_{t-1} = dgates_t * W_hh.
    float* dh_target = t > 0 ? dh_rec : a.dh_in;
    if (dh_target != nullptr) {
      detail::sgemm(transpose::no, transpose::no, bsz, hs, g4, 1.0f, dg_t, g4, w.w_hh, hs, 0.0f,
                    dh_target, hs);
    }
  }
  if (a.dc_in != nullptr) std::copy(dc, dc + bh, a.dc_in);

  const std::size_t rows = n * bsz;
  if (a.dx != nullptr) {
    detail::sgemm(transpose::no, transpose::no, rows, d.input, g4, 1.0f, dgates, g4, w.w_ih,
                  d.input, 0.0f, a.dx, d.input);
  }
  if (g.dw_ih != nullptr) {
    detail::sgemm(transpose::yes, transpose::no, g4, d.input, rows, 1.0f, dgates, g4, a.x,
                  d.input, 1.0f, g.dw_ih, d.input);
  }
  if (g.dw_hh != nullptr) {
    detail::sgemm(transpose::yes, transpose::no, g4, hs, rows, 1.0f, dgates, g4, r.h, hs,
                  1.0f, g.dw_hh, hs);
  }
  if (g.db_ih != nullptr || g.db_hh != nullptr) detail::add_column_sums(isa, rows, g4, dgates, g.db_ih, g.db_hh);
}

}  // namespace strata::kernels::cpu
