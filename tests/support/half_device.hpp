#pragma once
// A test fixture's base for float16 and bfloat16 kvstore keys: one_device plus 16-bit tensors
// made from floats (rounded), their 16-bit words read back, and a key's value pulled as words.

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <vector>

#include "strata/kernels/half.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "support/await.hpp"
#include "support/half_tensors.hpp"
#include "support/one_device.hpp"

namespace strata::test {

struct half_device : one_device {
  /// A 16-bit tensor of `type` holding `values` rounded.
  tensor make16(dtype type, const std::vector<float>& values, const std::vector<std::int64_t>& shape) {
    return half_tensor(type, values, shape, dev, strm);
  }
  /// The 16-bit words of `t`.
  std::vector<std::uint16_t> bits_of(const tensor& t) { return half_words(t, strm); }
  /// The value of `key`, `n` 16-bit words of shape `shape` ({n} when empty).
  std::vector<std::uint16_t> pulled_bits(kvstore::client& store, const kvstore::key& key, dtype type, std::size_t n,
                                         std::vector<std::int64_t> shape = {}) {
    if (shape.empty()) shape = {static_cast<std::int64_t>(n)};
    auto pulled = await(store.pull(key, make16(type, std::vector<float>(n, 0.f), shape)));
    BOOST_REQUIRE_MESSAGE(pulled.has_value(), (pulled.has_value() ? "" : pulled.error().message()));
    return bits_of(pulled->at(0));
  }
  std::vector<float> pulled_values(kvstore::client& store, const kvstore::key& key, dtype type, std::size_t n) {
    std::vector<float> out;
    for (auto b : pulled_bits(store, key, type, n)) out.push_back(kernels::half_value(type, b));
    return out;
  }
  /// `values` rounded to `type` and widened back.
  static std::vector<float> representable(dtype type, std::vector<float> values) {
    for (auto& v : values) v = kernels::half_value(type, kernels::half_bits(type, v));
    return values;
  }
};

}  // namespace strata::test
