#pragma once

// The conversions of kernels/cuda/half.cu between 16-bit values and float32, one element at a
// time, in integer operations only: host and device code alike (nvcc and g++ compile this header),
// so that test_cuda_host checks on the host, without a GPU, that they give exactly the bits of the
// CPU conversions (strata/kernels/half.hpp: GCC's _Float16 and the bfloat16 rule), NaNs included.
// cuda_fp16.h's __float2half_rn would round the same, but its NaNs are not specified to keep the
// payload as the CPU's do; hence our own bits.

#include <cstdint>
#ifndef __CUDA_ARCH__
#include <cstring>
#endif

#ifdef __CUDACC__
#define STRATA_KERNELS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define STRATA_KERNELS_HOST_DEVICE inline
#endif

namespace strata::kernels::cuda::detail {

STRATA_KERNELS_HOST_DEVICE std::uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

STRATA_KERNELS_HOST_DEVICE float float_of_bits(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x = 0;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// The float16 bits nearest to `x`, ties to even: 65520 and beyond (where the tie with 65504 goes
/// to the even 65536) become infinity, tiny values subnormals or zero (2^-25, a tie with zero,
/// becomes zero); a NaN stays a NaN of its sign with its payload's upper 9 bits and the quiet bit
/// set (what x86's F16C and libgcc's __truncsfhf2 give).
STRATA_KERNELS_HOST_DEVICE std::uint16_t float16_bits_of(float x) {
  const std::uint32_t u = float_bits(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65520 and beyond, infinity
  if (a >= 0x38800000u) {  // a normal float16: rebias the exponent (127 -> 15), round off 13 bits
    const std::uint32_t r = a - 0x38000000u;
    return static_cast<std::uint16_t>(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // at most 2^-25: zero
  // A subnormal float16: the 24-bit significand shifted right by 14 to 24 places, rounded (the
  // carry out of the top makes the smallest normal, which is right).
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - (a >> 23);
  std::uint32_t h = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u) != 0)) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// The float32 of float16 `bits`, exact; a NaN keeps its sign and payload and becomes quiet.
STRATA_KERNELS_HOST_DEVICE float float16_value_of(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
  if (e == 0x1fu) return float_of_bits(sign | 0x7f800000u | (m << 13) | (m != 0 ? 0x400000u : 0u));
  if (e == 0) {
    if (m == 0) return float_of_bits(sign);
    e = 113;  // a subnormal m * 2^-24: normalised
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return float_of_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  return float_of_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/// The bfloat16 bits nearest to `x`, ties to even; a NaN stays a quiet NaN of its sign (the CPU
/// rule of strata/kernels/half.hpp, the same integer operations).
STRATA_KERNELS_HOST_DEVICE std::uint16_t bfloat16_bits_of(float x) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// The float32 of bfloat16 `bits`, exact.
STRATA_KERNELS_HOST_DEVICE float bfloat16_value_of(std::uint16_t bits) {
  return float_of_bits(static_cast<std::uint32_t>(bits) << 16);
}

}  // namespace strata::kernels::cuda::detail
