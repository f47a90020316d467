#pragma once
// float16 and bfloat16 tensors for kvstore tests: made from floats (rounded by the cpu's rule) on
// any device, and their 16-bit words read back.

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "strata/device/tensor.hpp"
#include "strata/kernels/half.hpp"

namespace strata::test {

/// A tensor of `type` (float16 or bfloat16) of `shape` holding `values` rounded, on `d`, made in
/// `s`'s order.
inline tensor half_tensor(dtype type, const std::vector<float>& values, std::vector<std::int64_t> shape, device& d,
                          const stream& s) {
  std::vector<std::uint8_t> bytes(values.size() * 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t b = kernels::half_bits(type, values[i]);
    std::memcpy(bytes.data() + 2 * i, &b, 2);
  }
  auto raw = tensor::from_host<std::uint8_t>(std::span<const std::uint8_t>(bytes), d, s);
  return tensor(std::move(shape), type, raw.storage(), raw.ready_event());
}

/// The 16-bit words of `t`, read on `s` (a stream of its device, after its ready event).
inline std::vector<std::uint16_t> half_words(const tensor& t, const stream& s) {
  tensor raw({static_cast<std::int64_t>(t.bytes())}, dtype::uint8, t.storage(), t.ready_event());
  const auto bytes = raw.to_host<std::uint8_t>(s);
  std::vector<std::uint16_t> out(bytes.size() / 2);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace strata::test
