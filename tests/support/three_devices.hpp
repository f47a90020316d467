#pragma once
// A kvstore test fixture's base: an actor system, three cpu devices with a stream each, seeded
// random data, and tensors made on and read from any of the three.

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"

namespace strata::test {

/// Derive with the seed of your suite's data: `struct fixture : three_devices { fixture() :
/// three_devices(20240601) {} };`.
struct three_devices {
  actor_system sys{system_config{.worker_threads = 2}};
  device_manager manager{device_options{.cpu_threads_per_device = 1}};
  std::vector<device> devs = manager.create("cpu:3");
  std::vector<stream> streams = {devs[0].create_stream(), devs[1].create_stream(), devs[2].create_stream()};
  std::mt19937 rng;

  explicit three_devices(std::mt19937::result_type seed) : rng(seed) {}

  /// `n` floats uniform in [-1, 1).
  std::vector<float> random(std::size_t n) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
  /// `v` of `shape` on device `dev`, made in its stream's order.
  tensor make(const std::vector<float>& v, std::vector<std::int64_t> shape, std::size_t dev = 0) {
    return tensor::from_host<float>(std::span<const float>(v), std::move(shape), devs[dev], streams[dev]);
  }
  tensor zeros(std::vector<std::int64_t> shape, std::size_t dev = 0) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return make(std::vector<float>(static_cast<std::size_t>(n), 0.f), std::move(shape), dev);
  }
  /// `t`'s values, read on its device's stream.
  std::vector<float> read(const tensor& t) { return t.to_host<float>(streams[static_cast<std::size_t>(t.get_device().index())]); }
  /// The stored value of `key`, pulled into a fresh tensor.
  std::vector<float> value_of(kvstore::client& kv, const kvstore::key& key, std::vector<std::int64_t> shape) {
    return read(await(kv.pull(key, zeros(std::move(shape)))).value().at(0));
  }
};

}  // namespace strata::test
