// fill, scale, axpy, copy, sum_arrays, compress_gradient and the internal matrix scaling / column sums.
#include "support.hpp"

#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "device_math.cuh"

namespace strata::kernels::cuda {
namespace {

bool aligned16(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Vectorised bodies: float4 loads and stores over n/4 groups when every pointer is 16-byte
// aligned (the caller checks), then the scalar tail in the same launch.
__global__ void fill_kernel(std::size_t n, float value, float* x, bool vec) {
  std::size_t i = detail::global_thread();
  const std::size_t stride = detail::grid_threads();
  std::size_t done = 0;
  if (vec) {
    const std::size_t n4 = n / 4;
    auto* x4 = reinterpret_cast<float4*>(x);
    for (std::size_t j = i; j < n4; j += stride) x4[j] = make_float4(value, value, value, value);
    done = n4 * 4;
  }
  for (std::size_t j = done + i; j < n; j += stride) x[j] = value;
}

__global__ void scale_kernel(std::size_t n, float alpha, float* x, bool vec) {
  const std::size_t i = detail::global_thread();
  const std::size_t stride = detail::grid_threads();
  std::size_t done = 0;
  if (vec) {
    const std::size_t n4 = n / 4;
    auto* x4 = reinterpret_cast<float4*>(x);
    for (std::size_t j = i; j < n4; j += stride) {
      float4 v = x4[j];
      v.x *= alpha; v.y *= alpha; v.z *= alpha; v.w *= alpha;
      x4[j] = v;
    }
    done = n4 * 4;
  }
  for (std::size_t j = done + i; j < n; j += stride) x[j] *= alpha;
}

__global__ void axpy_kernel(std::size_t n, float alpha, const float* __restrict__ x,
                            float* __restrict__ y, bool vec) {
  const std::size_t i = detail::global_thread();
  const std::size_t stride = detail::grid_threads();
  std::size_t done = 0;
  if (vec) {
    const std::size_t n4 = n / 4;
    const auto* x4 = reinterpret_cast<const float4*>(x);
    auto* y4 = reinterpret_cast<float4*>(y);
    for (std::size_t j = i; j < n4; j += stride) {
      const float4 a = x4[j];
      float4 b = y4[j];
      b.x += alpha * a.x; b.y += alpha * a.y; b.z += alpha * a.z; b.w += alpha * a.w;
      y4[j] = b;
    }
    done = n4 * 4;
  }
  for (std::size_t j = done + i; j < n; j += stride) y[j] += alpha * x[j];
}

// Up to sum_arrays_inputs_per_launch device pointers by value (2 KiB of kernel parameters).
struct sum_inputs {
  const float* p[sum_arrays_inputs_per_launch];
};

// out[i] = (accumulate ? out[i] : in[0][i]) + in[first..count)[i], added in order. Every input
// of element i is read before out[i] is written, so out may be one of this launch's inputs.
__global__ void sum_kernel(std::size_t n, sum_inputs in, unsigned count, bool accumulate,
                           float* out) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    float acc = accumulate ? out[i] : in.p[0][i];
    for (unsigned j = accumulate ? 0u : 1u; j < count; ++j) acc += in.p[j][i];
    out[i] = acc;
  }
}

// kvstore::compress per element. __fadd_rn / __fsub_rn are never contracted with anything, and
// without --use_fast_math nvcc keeps subnormals (-ftz=false): the CPU's float results, bitwise.
// `zero_residual` adds to 0.0f as the CPU does after zero-filling (so -0 + 0 gives +0 there too).
__global__ void compress_gradient_kernel(std::size_t n, bool two_bit, float threshold, const float* grad,
                                         float* residual, float* sent, bool zero_residual) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    const float r = __fadd_rn(zero_residual ? 0.0f : residual[i], grad[i]);
    float q;
    if (two_bit) q = r >= threshold ? threshold : (r <= -threshold ? -threshold : 0.0f);
    else q = r > threshold ? 1.0f : -1.0f;
    residual[i] = __fsub_rn(r, q);
    sent[i] = q;
  }
}

__global__ void scale_matrix_kernel(std::size_t m, std::size_t n, float beta, float* c,
                                    std::size_t ldc) {
  const std::size_t total = m * n;
  const std::size_t stride = detail::grid_threads();
  for (std::size_t e = detail::global_thread(); e < total; e += stride) {
    float& v = c[(e / n) * ldc + e % n];
    v = beta == 0.0f ? 0.0f : v * beta;
  }
}

// 32 columns per block, 8 row lanes; each lane sums its rows in double, then lane 0 combines
// the 8 partials in order: a fixed order, so deterministic.
constexpr unsigned colsum_cols = 32, colsum_lanes = 8;

__global__ void column_sums_kernel(std::size_t rows, std::size_t cols, const float* __restrict__ m,
                                   float* sum_a, float* sum_b) {
  __shared__ double part[colsum_lanes][colsum_cols + 1];
  const std::size_t col = static_cast<std::size_t>(blockIdx.x) * colsum_cols + threadIdx.x;
  double s = 0.0;
  if (col < cols) {
    for (std::size_t r = threadIdx.y; r < rows; r += colsum_lanes) s += static_cast<double>(m[r * cols + col]);
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    double total = 0.0;
    for (unsigned l = 0; l < colsum_lanes; ++l) total += part[l][threadIdx.x];
    const auto f = static_cast<float>(total);
    if (sum_a != nullptr) sum_a[col] += f;
    if (sum_b != nullptr) sum_b[col] += f;
  }
}

}  // namespace

namespace detail {

void scale_matrix(cudaStream_t s, std::size_t m, std::size_t n, float beta, float* c,
                  std::size_t ldc) {
  if (m == 0 || n == 0 || beta == 1.0f) return;
  scale_matrix_kernel<<<blocks_for(m * n), block_threads, 0, s>>>(m, n, beta, c, ldc);
  check_launch("scale_matrix_kernel", s);
}

void add_column_sums(cudaStream_t s, std::size_t rows, std::size_t cols, const float* m,
                     float* sum_a, float* sum_b) {
  if (cols == 0 || (sum_a == nullptr && sum_b == nullptr)) return;
  const auto blocks = static_cast<unsigned>((cols + colsum_cols - 1) / colsum_cols);
  column_sums_kernel<<<blocks, dim3(colsum_cols, colsum_lanes), 0, s>>>(rows, cols, m, sum_a, sum_b);
  check_launch("column_sums_kernel", s);
}

}  // namespace detail

void fill(const cuda_context& ctx, std::size_t n, float value, float* x) {
  common::check_in_place("cuda::fill", n, x);
  if (n == 0) return;
  const bool vec = aligned16(x);
  fill_kernel<<<detail::blocks_for(vec ? n / 4 : n), detail::block_threads, 0, ctx.stream>>>(n, value, x, vec);
  detail::check_launch("fill_kernel", ctx.stream);
}

void scale(const cuda_context& ctx, std::size_t n, float alpha, float* x) {
  common::check_in_place("cuda::scale", n, x);
  if (n == 0) return;
  const bool vec = aligned16(x);
  scale_kernel<<<detail::blocks_for(vec ? n / 4 : n), detail::block_threads, 0, ctx.stream>>>(n, alpha, x, vec);
  detail::check_launch("scale_kernel", ctx.stream);
}

void axpy(const cuda_context& ctx, std::size_t n, float alpha, const float* x, float* y) {
  common::check_axpy("cuda::axpy", n, x, y);
  if (n == 0) return;
  const bool vec = aligned16(x) && aligned16(y);
  axpy_kernel<<<detail::blocks_for(vec ? n / 4 : n), detail::block_threads, 0, ctx.stream>>>(n, alpha, x, y, vec);
  detail::check_launch("axpy_kernel", ctx.stream);
}

void copy(const cuda_context& ctx, std::size_t n, const float* src, float* dst) {
  if (n == 0 || src == dst) return;
  common::require(src != nullptr && dst != nullptr, "cuda::copy", "src and dst must not be null when n > 0");
  detail::check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream),
                "cudaMemcpyAsync");
}

void compress_gradient(const cuda_context& ctx, std::size_t n, gradient_quantizer type, float threshold,
                       const float* grad, float* residual, float* sent, bool zero_residual) {
  common::require(n == 0 || (grad != nullptr && residual != nullptr && sent != nullptr), "cuda::compress_gradient",
                  "grad, residual and sent must not be null when n > 0");
  if (n == 0) return;
  compress_gradient_kernel<<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(
      n, type == gradient_quantizer::two_bit, threshold, grad, residual, sent, zero_residual);
  detail::check_launch("compress_gradient_kernel", ctx.stream);
}

void sum_arrays(const cuda_context& ctx, std::span<const float* const> inputs, std::size_t n,
                float* out) {
  constexpr const char* who = "cuda::sum_arrays";
  common::check_sum_arrays(who, inputs, n, out);
  if (n == 0) return;
  for (std::size_t j = sum_arrays_inputs_per_launch; j < inputs.size(); ++j) {
    common::require(inputs[j] != out, who,
                    "out may be one of the first 256 inputs only (later launches read out as the partial sum)");
  }
  if (inputs.empty()) {
    fill(ctx, n, 0.0f, out);
    return;
  }
  for (std::size_t first = 0; first < inputs.size(); first += sum_arrays_inputs_per_launch) {
    const std::size_t count = std::min(sum_arrays_inputs_per_launch, inputs.size() - first);
    sum_inputs in{};
    for (std::size_t j = 0; j < count; ++j) in.p[j] = inputs[first + j];
    sum_kernel<<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(
        n, in, static_cast<unsigned>(count), first > 0, out);
    detail::check_launch("sum_kernel", ctx.stream);
  }
}

}  // namespace strata::kernels::cuda
