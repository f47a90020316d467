#pragma once
// What every kvstore_dist test case shares (tests/kvstore_dist): the one world of the process (actor system, cpu
// device, endpoint), a seed every rank agrees on, and reproducible random gradients and keys.

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/kernels/half.hpp"
#include "strata/kvstore_dist/store.hpp"

namespace strata::test::dist {

namespace kvd = strata::kvstore_dist;

struct world {
  strata::actor_system sys{strata::system_config{.worker_threads = 1}};
  strata::device cpu = strata::make_devices("cpu:1").front();
  strata::stream s = cpu.create_stream();
  strata::net::endpoint net{sys, strata::net::endpoint_config{.receive_device = cpu}};
  ~world() {
    net.shutdown();
    sys.shutdown();
  }

  strata::tensor make(const std::vector<float>& v, std::vector<std::int64_t> shape) {
    return strata::tensor::from_host<float>(std::span<const float>(v), std::move(shape), cpu, s);
  }
  std::vector<float> host(const strata::tensor& t) { return t.to_host<float>(s); }

  /// A seed every rank agrees on: rank 0 draws it, the others pull it.
  std::uint32_t shared_seed(kvd::store& kv, const strata::kvstore::key& key = "seed") {
    float drawn = static_cast<float>(std::random_device{}() % (1u << 20));
    BOOST_REQUIRE(kv.init(key, make({drawn}, {1})));
    auto got = kv.pull(key);
    BOOST_REQUIRE(got);
    auto seed = static_cast<std::uint32_t>(host(*got).front());
    BOOST_TEST_MESSAGE("rank " << kv.rank() << " seed " << seed);
    return seed;
  }
};

/// A tensor of `type` (float32, float16 or bfloat16) holding `values`, rounded to nearest even
/// for a 16-bit type.
inline strata::tensor make_as(world& w, strata::dtype type, const std::vector<float>& values,
                              const std::vector<std::int64_t>& shape) {
  if (type == strata::dtype::float32) return w.make(values, shape);
  std::vector<std::uint16_t> words(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) words[i] = strata::kernels::half_bits(type, values[i]);
  return strata::tensor::from_host_words(words, shape, type, w.cpu, w.s);
}

/// One endpoint per process (MPI starts once): every case shares the world, made by the global
/// fixture (`BOOST_TEST_GLOBAL_FIXTURE(world_fixture)` in the program's main file); each case
/// makes its own store (a collective), so the cases run in the same order on every rank.
inline world* the_world = nullptr;
struct world_fixture {
  world_fixture() { the_world = new world; }
  ~world_fixture() { delete the_world; }
};

/// The gradient rank `r` pushes for key `k` in round `t`: reproducible on every rank.
inline std::vector<float> gradient(std::uint32_t seed, int r, int k, int t, std::size_t n) {
  std::mt19937 rng(seed * 7919u + static_cast<std::uint32_t>(r) * 104729u + static_cast<std::uint32_t>(k) * 1299709u +
                   static_cast<std::uint32_t>(t));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

struct key_spec {
  strata::kvstore::key key;
  std::vector<std::int64_t> shape;
  std::size_t numel() const {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
};

/// Integer keys (MXNet's) with random shapes; a store holds keys of one kind.
inline std::vector<key_spec> some_keys(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<key_spec> keys;
  for (int i = 0; i < 6; ++i) {
    std::vector<std::int64_t> shape{1 + static_cast<std::int64_t>(rng() % 7), 1 + static_cast<std::int64_t>(rng() % 300)};
    keys.push_back({strata::kvstore::key(std::int64_t{i}), shape});
  }
  return keys;
}

}  // namespace strata::test::dist
