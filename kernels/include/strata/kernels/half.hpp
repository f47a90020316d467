#pragma once
/// \file
/// float16 and bfloat16 as storage types: conversions between their bits and float32, and whole
/// arrays widened to float32 or rounded from it. Math runs in float32; 16-bit values are only
/// stored. Rounding is IEEE 754 round to nearest, ties to even, in both directions' sense:
/// - float16 is IEEE binary16: values above its range round to infinity (65520 and beyond, as
///   IEEE and numpy's `astype(float16)`), tiny values to subnormals or zero; NaN stays NaN.
/// - bfloat16 is the upper 16 bits of a float32 rounded to nearest even on the lower 16 (what
///   PyTorch and TensorFlow do); NaN stays a (quiet) NaN.
/// Widening (16-bit to float32) is exact.

#include <bit>
#include <cstddef>
#include <cstdint>

#include "strata/device/tensor.hpp"

namespace strata::kernels {

/// The float16 (IEEE binary16) bits nearest to `x`, ties to even.
inline std::uint16_t float16_bits(float x) noexcept {
  // GCC 12 and Clang have _Float16 on x86-64 and AArch64: its conversion is the IEEE one (F16C
  // when enabled, else libgcc's __truncsfhf2), rounding to nearest even.
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
}
/// The float32 of float16 `bits` (exact).
inline float float16_value(std::uint16_t bits) noexcept { return static_cast<float>(std::bit_cast<_Float16>(bits)); }

/// The bfloat16 bits nearest to `x`, ties to even (a NaN stays a quiet NaN of its sign).
inline std::uint16_t bfloat16_bits(float x) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
}
/// The float32 of bfloat16 `bits` (exact).
inline float bfloat16_value(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// Whether `t` is a 16-bit floating-point storage type.
constexpr bool is_half(dtype t) noexcept { return t == dtype::float16 || t == dtype::bfloat16; }

/// `x` rounded to 16-bit type `t` (nearest, ties to even).
inline std::uint16_t half_bits(dtype t, float x) noexcept {
  return t == dtype::float16 ? float16_bits(x) : bfloat16_bits(x);
}
/// The float32 of the 16-bit type `t`'s `bits`.
inline float half_value(dtype t, std::uint16_t bits) noexcept {
  return t == dtype::float16 ? float16_value(bits) : bfloat16_value(bits);
}

namespace cpu {

/// `out[i]` = `in[i]` (16-bit elements of type `t`) widened to float32, exactly.
inline void widen(dtype t, std::size_t n, const std::uint16_t* in, float* out) noexcept {
  if (t == dtype::float16)
    for (std::size_t i = 0; i < n; ++i) out[i] = float16_value(in[i]);
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = bfloat16_value(in[i]);
}
/// `out[i]` = `in[i]` rounded to the 16-bit type `t`, to nearest even.
inline void narrow(dtype t, std::size_t n, const float* in, std::uint16_t* out) noexcept {
  if (t == dtype::float16)
    for (std::size_t i = 0; i < n; ++i) out[i] = float16_bits(in[i]);
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = bfloat16_bits(in[i]);
}

}  // namespace cpu
}  // namespace strata::kernels
