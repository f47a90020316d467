// Row-sparse kernels (cuda.hpp, "row-sparse"): copy_rows (float32 and 16-bit), sum_rows, sgd_rows,
// adam_rows and narrow_rows (the float32 rows of a 16-bit key's update rounded into it). One
// thread per (span, element) of a grid-stride loop over count * max_length; a span's elements
// past its length are skipped. The optimizer bodies are those of optimizers.cu with every
// operation rounded on its own (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn): nvcc would
// otherwise fuse multiply-adds, which the CPU code (-ffp-contract=off) does not.
#include "support.hpp"

#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "common/optimizer_scalars.hpp"
#include "device_math.cuh"
#include "half_bits.hpp"

namespace strata::kernels::cuda {
namespace {

// f(row, c) for every element c < row.length of the `count` rows (row_span or row_sum), a
// grid-stride loop over count * max_length.
template <class Row, class F>
__device__ __forceinline__ void each_element(std::size_t count, std::size_t max_length, const Row* __restrict__ rows, F f) {
  const std::size_t total = count * max_length;
  const std::size_t stride = detail::grid_threads();
  for (std::size_t e = detail::global_thread(); e < total; e += stride) {
    const Row r = rows[e / max_length];
    const auto c = static_cast<std::int64_t>(e % max_length);
    if (c < r.length) f(r, c);
  }
}

template <class T>  // float or the bits of a 16-bit element
__global__ void copy_rows_kernel(std::size_t count, std::size_t max_length, const row_span* spans,
                                 const T* __restrict__ from, T* __restrict__ to) {
  each_element(count, max_length, spans, [&](const row_span& s, std::int64_t c) { to[s.to + c] = from[s.from + c]; });
}

template <half_format Format>
__global__ void narrow_rows_kernel(std::size_t count, std::size_t max_length, const row_span* spans,
                                   const float* __restrict__ from, std::uint16_t* __restrict__ to) {
  each_element(count, max_length, spans, [&](const row_span& s, std::int64_t c) {
    if constexpr (Format == half_format::float16) to[s.to + c] = detail::float16_bits_of(from[s.from + c]);
    else to[s.to + c] = detail::bfloat16_bits_of(from[s.from + c]);
  });
}

__global__ void sum_rows_kernel(std::size_t rows, std::size_t max_length, const row_sum* plan,
                                const float* const* __restrict__ sources, float* __restrict__ out) {
  each_element(rows, max_length, plan, [&](const row_sum& r, std::int64_t c) {
    float acc = 0.0f;
    if (r.first < r.last) {
      acc = sources[r.first][c];
      for (std::int64_t k = r.first + 1; k < r.last; ++k) acc = __fadd_rn(acc, sources[k][c]);
    }
    out[r.to + c] = acc;
  });
}

enum class sgd_kind { plain, momentum, nesterov };

// cpu sgd_block per element: d = g + wd * p; buf = buf * mom + d; p += neg_lr * (buf, or d + mom * buf).
template <sgd_kind Kind>
__global__ void sgd_rows_kernel(std::size_t count, std::size_t max_length, const row_span* spans,
                                float* __restrict__ p, const float* __restrict__ gr, float* __restrict__ buf,
                                common::sgd_scalars k) {
  each_element(count, max_length, spans, [&](const row_span& s, std::int64_t c) {
    const std::int64_t i = s.to + c;
    const float d = __fadd_rn(gr[s.from + c], __fmul_rn(k.wd, p[i]));
    if constexpr (Kind == sgd_kind::plain) {
      p[i] = __fadd_rn(p[i], __fmul_rn(k.neg_lr, d));
    } else {
      const float b = __fadd_rn(__fmul_rn(buf[i], k.mom), d);
      buf[i] = b;
      if constexpr (Kind == sgd_kind::momentum) {
        p[i] = __fadd_rn(p[i], __fmul_rn(k.neg_lr, b));
      } else {
        p[i] = __fadd_rn(p[i], __fmul_rn(k.neg_lr, __fadd_rn(d, __fmul_rn(k.mom, b))));
      }
    }
  });
}

// cpu adam_block per element.
__global__ void adam_rows_kernel(std::size_t count, std::size_t max_length, const row_span* spans,
                                 float* __restrict__ p, const float* __restrict__ gr, float* __restrict__ m,
                                 float* __restrict__ v, common::adam_scalars k) {
  each_element(count, max_length, spans, [&](const row_span& s, std::int64_t c) {
    const std::int64_t i = s.to + c;
    const float pv = __fmul_rn(p[i], k.decay);
    const float g = __fadd_rn(gr[s.from + c], __fmul_rn(k.wd, pv));
    const float mv = __fadd_rn(m[i], __fmul_rn(k.one_minus_b1, __fsub_rn(g, m[i])));
    const float vv = __fadd_rn(__fmul_rn(v[i], k.b2), __fmul_rn(__fmul_rn(k.one_minus_b2, g), g));
    m[i] = mv;
    v[i] = vv;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), k.bc2_sqrt), k.eps);
    p[i] = __fadd_rn(pv, __fdiv_rn(__fmul_rn(k.neg_step_size, mv), denom));
  });
}

// Launches `kernel` over count * max_length elements on ctx.stream, unless there are none.
template <class... Params, class... Args>
void launch_rows(void (*kernel)(std::size_t, std::size_t, Params...), const char* name, const cuda_context& ctx,
                 std::size_t count, std::size_t max_length, Args... args) {
  if (count == 0 || max_length == 0) return;
  kernel<<<detail::blocks_for(count * max_length), detail::block_threads, 0, ctx.stream>>>(count, max_length, args...);
  detail::check_launch(name, ctx.stream);
}

}  // namespace

void copy_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
               const float* from, float* to) {
  common::require(count == 0 || (spans != nullptr && from != nullptr && to != nullptr), "cuda::copy_rows",
                  "spans, from and to must not be null when count > 0");
  launch_rows(copy_rows_kernel<float>, "copy_rows_kernel", ctx, count, max_length, spans, from, to);
}

void copy_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
               const std::uint16_t* from, std::uint16_t* to) {
  common::require(count == 0 || (spans != nullptr && from != nullptr && to != nullptr), "cuda::copy_rows",
                  "spans, from and to must not be null when count > 0");
  launch_rows(copy_rows_kernel<std::uint16_t>, "copy_rows_kernel", ctx, count, max_length, spans, from, to);
}

void narrow_rows(const cuda_context& ctx, half_format format, std::size_t count, std::size_t max_length,
                 const row_span* spans, const float* from, std::uint16_t* to) {
  common::require(count == 0 || (spans != nullptr && from != nullptr && to != nullptr), "cuda::narrow_rows",
                  "spans, from and to must not be null when count > 0");
  if (format == half_format::float16)
    launch_rows(narrow_rows_kernel<half_format::float16>, "narrow_rows_kernel", ctx, count, max_length, spans, from, to);
  else
    launch_rows(narrow_rows_kernel<half_format::bfloat16>, "narrow_rows_kernel", ctx, count, max_length, spans, from,
                to);
}

void sum_rows(const cuda_context& ctx, std::size_t rows, std::size_t max_length, const row_sum* plan,
              const float* const* sources, float* out) {
  common::require(rows == 0 || (plan != nullptr && sources != nullptr && out != nullptr), "cuda::sum_rows",
                  "plan, sources and out must not be null when rows > 0");
  launch_rows(sum_rows_kernel, "sum_rows_kernel", ctx, rows, max_length, plan, sources, out);
}

void sgd_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
              float* param, const float* grad, float* momentum_buffer, const sgd_options& o) {
  common::check_sgd_step("cuda::sgd_rows", count, param, grad, momentum_buffer, o);
  common::require(count == 0 || spans != nullptr, "cuda::sgd_rows", "spans must not be null when count > 0");
  const common::sgd_scalars k = common::sgd_step_scalars(o);
  if (o.momentum == 0.0)
    launch_rows(sgd_rows_kernel<sgd_kind::plain>, "sgd_rows_kernel", ctx, count, max_length, spans, param, grad,
                static_cast<float*>(nullptr), k);
  else if (!o.nesterov)
    launch_rows(sgd_rows_kernel<sgd_kind::momentum>, "sgd_rows_kernel", ctx, count, max_length, spans, param, grad,
                momentum_buffer, k);
  else
    launch_rows(sgd_rows_kernel<sgd_kind::nesterov>, "sgd_rows_kernel", ctx, count, max_length, spans, param, grad,
                momentum_buffer, k);
}

void adam_rows(const cuda_context& ctx, std::size_t count, std::size_t max_length, const row_span* spans,
               float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t step,
               const adam_options& o) {
  common::check_adam_step("cuda::adam_rows", count, param, grad, exp_avg, exp_avg_sq, step);
  common::require(count == 0 || spans != nullptr, "cuda::adam_rows", "spans must not be null when count > 0");
  launch_rows(adam_rows_kernel, "adam_rows_kernel", ctx, count, max_length, spans, param, grad, exp_avg, exp_avg_sq,
              common::adam_step_scalars(step, o));
}

}  // namespace strata::kernels::cuda
