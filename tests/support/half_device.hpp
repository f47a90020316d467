#pragma once
// A test fixture's base for float16 and bfloat16 kvstore keys: one_device plus 16-bit tensors
// made from floats (rounded), their 16-bit words read back, and a key's value pulled as words.

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "strata/kernels/half.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "support/await.hpp"
#include "support/one_device.hpp"

namespace strata::test {

struct half_device : one_device {
  /// A 16-bit tensor of `type` holding `values` rounded.
  tensor make16(dtype type, const std::vector<float>& values, const std::vector<std::int64_t>& shape) {
    std::vector<std::uint8_t> bytes(values.size() * 2);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::uint16_t b = kernels::half_bits(type, values[i]);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
    auto raw = tensor::from_host<std::uint8_t>(std::span<const std::uint8_t>(bytes), dev, strm);
    return tensor(shape, type, raw.storage(), raw.ready_event());
  }
  /// The 16-bit words of `t`.
  std::vector<std::uint16_t> bits_of(const tensor& t) {
    tensor raw({static_cast<std::int64_t>(t.bytes())}, dtype::uint8, t.storage(), t.ready_event());
    auto bytes = raw.to_host<std::uint8_t>(strm);
    std::vector<std::uint16_t> out(bytes.size() / 2);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
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
