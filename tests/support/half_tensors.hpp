#pragma once
// float16 and bfloat16 tensors for kvstore tests: made from floats (rounded by the cpu's rule) on
// any device, and their 16-bit words read back.

#include <cstdint>
#include <span>
#include <vector>

#include "strata/device/tensor.hpp"
#include "strata/kernels/half.hpp"

namespace strata::test {

/// A tensor of `type` (float16 or bfloat16) of `shape` holding `values` rounded, on `d`, made in
/// `s`'s order.
inline tensor half_tensor(dtype type, const std::vector<float>& values, std::vector<std::int64_t> shape, device& d,
                          const stream& s) {
  std::vector<std::uint16_t> words(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) words[i] = kernels::half_bits(type, values[i]);
  return tensor::from_host_words(words, std::move(shape), type, d, s);
}

/// The 16-bit words of `t`, read on `s` (a stream of its device, after its ready event).
inline std::vector<std::uint16_t> half_words(const tensor& t, const stream& s) { return t.to_host_words(s); }

}  // namespace strata::test
