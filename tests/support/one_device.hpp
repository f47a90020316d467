#pragma once
// A test fixture's base: an actor system, one cpu device with a stream, seeded random data, and
// the value of a kvstore key read back to the host.

#include <boost/test/unit_test.hpp>

#include <random>
#include <span>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"

namespace strata::test {

struct one_device {
  actor_system sys{system_config{.worker_threads = 2}};
  device_manager manager{device_options{.cpu_threads_per_device = 1}};
  device dev = manager.create("cpu:1").at(0);
  stream strm = dev.create_stream();
  std::mt19937 rng{20261203};

  static std::size_t count(const std::vector<std::int64_t>& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
  std::vector<float> random(std::size_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
  tensor make(const std::vector<float>& v, const std::vector<std::int64_t>& shape) {
    return tensor::from_host<float>(std::span<const float>(v), shape, dev, strm);
  }
  tensor filled(const std::vector<std::int64_t>& shape, float v) { return make(std::vector<float>(count(shape), v), shape); }
  /// The value of `key`, pulled into a fresh tensor and copied to the host.
  std::vector<float> value_of(kvstore::client& store, const kvstore::key& key, const std::vector<std::int64_t>& shape) {
    auto pulled = await(store.pull(key, filled(shape, 0.f)));
    BOOST_REQUIRE(pulled.has_value());
    return pulled->at(0).to_host<float>(strm);
  }
};

}  // namespace strata::test
