// cuda::widen, cuda::narrow, cuda::sum_widened and the 16-bit cuda::copy: float16 and bfloat16 values stored on the
// device, converted with the integer operations of half_bits.hpp (bitwise the CPU conversions)
// and summed in float32 in the CPU merge's order.
#include "support.hpp"

#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "device_math.cuh"
#include "half_bits.hpp"

namespace strata::kernels::cuda {
namespace {

template <half_format Format>
__device__ __forceinline__ float widened(std::uint16_t bits) {
  if constexpr (Format == half_format::float16) return detail::float16_value_of(bits);
  else return detail::bfloat16_value_of(bits);
}

template <half_format Format>
__global__ void widen_kernel(std::size_t n, const std::uint16_t* __restrict__ in, float* __restrict__ out) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) out[i] = widened<Format>(in[i]);
}

template <half_format Format>
__global__ void narrow_kernel(std::size_t n, const float* __restrict__ in, std::uint16_t* __restrict__ out) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    if constexpr (Format == half_format::float16) out[i] = detail::float16_bits_of(in[i]);
    else out[i] = detail::bfloat16_bits_of(in[i]);
  }
}

// Up to sum_arrays_inputs_per_launch device pointers by value, as sum_arrays.
struct half_inputs {
  const std::uint16_t* p[sum_arrays_inputs_per_launch];
};

// out[i] = (first ? first[i] : widened in[0][i]) + the other inputs widened, added in order with
// __fadd_rn (never contracted). first[i] is read before out[i] is written, so out may be first.
template <half_format Format>
__global__ void sum_widened_kernel(std::size_t n, const float* first, half_inputs in, unsigned count, float* out) {
  const std::size_t stride = detail::grid_threads();
  for (std::size_t i = detail::global_thread(); i < n; i += stride) {
    unsigned j = 0;
    float acc = first != nullptr ? first[i] : widened<Format>(in.p[j++][i]);
    for (; j < count; ++j) acc = __fadd_rn(acc, widened<Format>(in.p[j][i]));
    out[i] = acc;
  }
}

}  // namespace

void widen(const cuda_context& ctx, half_format format, std::size_t n, const std::uint16_t* in, float* out) {
  common::require(n == 0 || (in != nullptr && out != nullptr), "cuda::widen", "in and out must not be null when n > 0");
  if (n == 0) return;
  if (format == half_format::float16)
    widen_kernel<half_format::float16><<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(n, in, out);
  else
    widen_kernel<half_format::bfloat16><<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(n, in, out);
  detail::check_launch("widen_kernel", ctx.stream);
}

void narrow(const cuda_context& ctx, half_format format, std::size_t n, const float* in, std::uint16_t* out) {
  common::require(n == 0 || (in != nullptr && out != nullptr), "cuda::narrow", "in and out must not be null when n > 0");
  if (n == 0) return;
  if (format == half_format::float16)
    narrow_kernel<half_format::float16><<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(n, in, out);
  else
    narrow_kernel<half_format::bfloat16><<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(n, in, out);
  detail::check_launch("narrow_kernel", ctx.stream);
}

void sum_widened(const cuda_context& ctx, half_format format, const float* first,
                 std::span<const std::uint16_t* const> inputs, std::size_t n, float* out) {
  constexpr const char* who = "cuda::sum_widened";
  if (n == 0) return;
  common::require(out != nullptr, who, "out must not be null when n > 0");
  for (const std::uint16_t* in : inputs) common::require(in != nullptr, who, "no input may be null when n > 0");
  if (first == nullptr && inputs.empty()) {
    fill(ctx, n, 0.0f, out);
    return;
  }
  // Later launches add into out, the partial sum.
  for (std::size_t at = 0; at == 0 || at < inputs.size(); at += sum_arrays_inputs_per_launch) {
    const std::size_t count = std::min(sum_arrays_inputs_per_launch, inputs.size() - at);
    half_inputs in{};
    for (std::size_t j = 0; j < count; ++j) in.p[j] = inputs[at + j];
    const float* start = at == 0 ? first : out;
    if (format == half_format::float16)
      sum_widened_kernel<half_format::float16><<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(
          n, start, in, static_cast<unsigned>(count), out);
    else
      sum_widened_kernel<half_format::bfloat16><<<detail::blocks_for(n), detail::block_threads, 0, ctx.stream>>>(
          n, start, in, static_cast<unsigned>(count), out);
    detail::check_launch("sum_widened_kernel", ctx.stream);
  }
}

void copy(const cuda_context& ctx, std::size_t n, const std::uint16_t* src, std::uint16_t* dst) {
  if (n == 0 || src == dst) return;
  common::require(src != nullptr && dst != nullptr, "cuda::copy", "src and dst must not be null when n > 0");
  detail::check(cudaMemcpyAsync(dst, src, n * sizeof(std::uint16_t), cudaMemcpyDeviceToDevice, ctx.stream),
                "cudaMemcpyAsync");
}

}  // namespace strata::kernels::cuda
