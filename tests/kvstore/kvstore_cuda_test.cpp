// Contract tests of kvstores that merge on CUDA devices: every script runs once on a cpu store
// and once on a cuda store with the same seeded random data, and the pulled values must agree
// (max |cuda - cpu| <= 1e-6 max |cpu|). They need a GPU: without one every case is skipped
// (Boost.Test precondition) and the executable exits with 77, which ctest reports as "Skipped".
#define BOOST_TEST_MODULE strata_kvstore_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <unistd.h>

#include "cuda_test_support.hpp"  // tests/kernels_cuda: the GPU precondition, random data, the error measure
#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/half.hpp"
#include "strata/kvstore/checkpoint.hpp"
#include "strata/kvstore/compression.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/kernels/cpu.hpp"
#include "strata/kernels/cuda.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/half_tensors.hpp"

namespace kvstore_cuda_test {

namespace kc = strata::kernels::cuda;
namespace kct = strata::kernels::cuda::test;

constexpr double tolerance = 1e-6;

using strata::test::await;

boost::test_tools::assertion_result two_gpus(boost::unit_test::test_unit_id) {
  return strata::test::gpu_precondition(2);
}

/// Devices of one kind with a stream each, and the tensors a script makes on them.
struct side {
  std::vector<strata::device> devs;
  std::vector<strata::stream> streams;

  explicit side(std::vector<strata::device> d) : devs(std::move(d)) {
    for (auto& dev : devs) streams.push_back(dev.create_stream());
  }
  strata::tensor make(const std::vector<float>& v, std::vector<std::int64_t> shape, std::size_t dev = 0) {
    return strata::tensor::from_host<float>(std::span<const float>(v), std::move(shape), devs.at(dev), streams.at(dev));
  }
  strata::tensor zeros(std::vector<std::int64_t> shape, std::size_t dev = 0) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return make(std::vector<float>(static_cast<std::size_t>(n), 0.f), std::move(shape), dev);
  }
  std::vector<float> read(const strata::tensor& t) {
    for (std::size_t i = 0; i < devs.size(); ++i)
      if (devs[i] == t.get_device()) return t.to_host<float>(streams[i]);
    BOOST_FAIL("a pulled tensor is on a device the test did not create");
    return {};
  }
  /// A 16-bit tensor of `type` holding `v` rounded (the CPU's rounding), on device `dev`.
  strata::tensor make16(strata::dtype type, const std::vector<float>& v, std::vector<std::int64_t> shape,
                        std::size_t dev = 0) {
    return strata::test::half_tensor(type, v, std::move(shape), devs.at(dev), streams.at(dev));
  }
  /// The 16-bit words of `t`, each as a float (an exact integer), so that pulls compare as floats.
  std::vector<float> words(const strata::tensor& t) {
    for (std::size_t i = 0; i < devs.size(); ++i)
      if (devs[i] == t.get_device()) {
        const auto w = strata::test::half_words(t, streams[i]);
        return std::vector<float>(w.begin(), w.end());
      }
    BOOST_FAIL("a pulled tensor is on a device the test did not create");
    return {};
  }
};

/// What a script pulled, in order.
using pulls = std::vector<std::vector<float>>;
/// A session with a store: tensors are made on `s` (device i of the side, i < 3 or the side's size).
using script = std::function<pulls(strata::kvstore::client& kv, side& s)>;

struct fixture {
  strata::actor_system sys{strata::system_config{.worker_threads = 2}};
  strata::device_manager manager{strata::device_options{.cpu_threads_per_device = 1}};
  side cpu{manager.create("cpu:3")};
  kct::random_source rng{20240611};

  pulls run(strata::kvstore::options options, side& s, const script& f) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, std::move(options)));
    return f(kv, s);
  }
  /// The script on `cpu_options` with tensors on the cpu side and on `gpu_options` with tensors on
  /// `gpu`: the same pulls, to `tolerance` or, with `bitwise`, bit for bit.
  void same_results(const strata::kvstore::options& cpu_options, const strata::kvstore::options& gpu_options,
                    side& gpu, const script& f, bool bitwise = false) {
    const pulls want = run(cpu_options, cpu, f);
    const pulls got = run(gpu_options, gpu, f);
    BOOST_REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      BOOST_TEST_INFO("pull " << i);
      if (bitwise) {
        const std::size_t at = first_bit_difference(got[i], want[i]);
        BOOST_TEST(at == want[i].size(), "element " << at << " differs: cuda "
                                                    << (at < got[i].size() ? got[i][at] : 0.f) << ", cpu "
                                                    << (at < want[i].size() ? want[i][at] : 0.f));
      } else {
        BOOST_TEST(kct::relative_error(got[i], want[i]) <= tolerance);
      }
    }
  }
  /// The first element whose bits differ (0 when the sizes differ), or a.size() when none does.
  /// A NaN matches any NaN: x86 and CUDA make NaNs with other bits.
  static std::size_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]) &&
          !(std::isnan(a[i]) && std::isnan(b[i])))
        return i;
    return a.size();
  }
  /// `count` seeded random arrays of `n` floats.
  std::vector<std::vector<float>> arrays(std::size_t count, std::size_t n) {
    std::vector<std::vector<float>> out;
    for (std::size_t i = 0; i < count; ++i) out.push_back(rng.values(n));
    return out;
  }
  static strata::kvstore::options on(const strata::device& d) {
    return {.kind = strata::kvstore::kind::device, .merge_device = d};
  }
};

/// Three devices sharing GPU 0 (their own streams each), the merge device being the first.
struct gpu_fixture : fixture {
  side gpu{manager.create("cuda:0x3")};
};

const std::vector<std::int64_t> shape{5, 7};
constexpr std::size_t numel = 35;

/// A user updater of a cpu store: stored -= 0.5 * merged. -0.5 * g is exact, so the GPU's fused
/// multiply-add rounds as the cpu.
void half_step_on_host(const strata::kvstore::key&, const strata::tensor& merged, strata::tensor& stored) {
  const float* g = merged.data<float>();
  float* p = stored.data<float>();
  for (std::int64_t i = 0; i < stored.numel(); ++i) p[i] += -0.5f * g[i];
}

/// The same updater on a cuda store: it launches its own work, after the sum.
void half_step_on_gpu(const strata::kvstore::key&, const strata::tensor& merged, strata::tensor& stored) {
  strata::device dev = stored.get_device();
  strata::stream s = dev.create_stream();
  s.wait(merged.ready_event());
  merged.storage().record_stream(s);
  const auto n = static_cast<std::size_t>(stored.numel());
  const auto* g = merged.device_data<const float>();
  auto* p = stored.device_data<float>();
  s.launch({.name = "user_update", .cuda = [=](const strata::cuda_launch_context& c) {
              kc::axpy({.stream = static_cast<kc::cuda_stream>(c.stream)}, n, -0.5f, g, p);
            }});
  stored.set_ready_event(s.record());
}

BOOST_AUTO_TEST_SUITE(kvstore_cuda, *boost::unit_test::precondition(kct::gpu_available))

// Tensors of the other kind are copied (kvstore_crossing_cuda_test.cpp tests them at length).
BOOST_FIXTURE_TEST_CASE(a_cuda_merge_device_is_accepted_and_takes_tensors_of_either_kind, gpu_fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, on(gpu.devs[0])));
  const auto w0 = rng.values(numel), w1 = rng.values(numel);
  BOOST_TEST(await(kv.init(0, cpu.make(w0, shape))).has_value());
  BOOST_TEST(await(kv.init(1, gpu.make(w1, shape))).has_value());
  auto outs = await(kv.pull({0, 1}, {gpu.zeros(shape), cpu.zeros(shape)})).value();
  BOOST_TEST(gpu.read(outs.at(0)) == w0, boost::test_tools::per_element());
  BOOST_TEST(cpu.read(outs.at(1)) == w1, boost::test_tools::per_element());

  strata::kvstore::client host(sys, strata::kvstore::spawn(sys));
  BOOST_TEST(await(host.init(0, gpu.make(w1, shape, 1))).has_value());
  BOOST_TEST(cpu.read(await(host.pull(0, cpu.zeros(shape))).value().at(0)) == w1, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(values_pushed_from_several_devices_are_summed_as_on_the_cpu, gpu_fixture) {
  auto a = rng.values(numel), b = rng.values(1000);
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < 9; ++i) grads.push_back(rng.values(i % 3 == 2 ? 1000 : numel));
  same_results({}, on(gpu.devs[0]), gpu, [&](strata::kvstore::client& kv, side& s) {
    pulls out;
    BOOST_TEST(await(kv.init({1, 2}, {s.make(a, shape), s.make(b, {1000}, 1)})).has_value());
    for (int round = 0; round < 3; ++round) {
      const std::size_t o = static_cast<std::size_t>(3 * round);
      BOOST_TEST(await(kv.push({1, 1, 2}, {s.make(grads[o], shape, 0), s.make(grads[o + 1], shape, 1),
                                           s.make(grads[o + 2], {1000}, 2)}))
                     .has_value());
      auto outs = await(kv.pull({1, 2, 1}, {s.zeros(shape, 1), s.zeros({1000}, 2), s.zeros(shape, 0)})).value();
      for (const auto& t : outs) out.push_back(s.read(t));
    }
    auto both = await(kv.pushpull(1, {s.make(grads[0], shape, 2), s.make(grads[1], shape, 0)}, {s.zeros(shape, 1)}))
                    .value();
    out.push_back(s.read(both.at(0)));
    return out;
  });
}

BOOST_FIXTURE_TEST_CASE(sgd_with_nesterov_momentum_and_weight_decay_updates_as_on_the_cpu, gpu_fixture) {
  const std::size_t n = 1000;
  auto w = rng.values(n);
  auto grads = arrays(8, n);
  same_results({}, on(gpu.devs[0]), gpu, [&](strata::kvstore::client& kv, side& s) {
    pulls out;
    BOOST_TEST(await(kv.init("w", s.make(w, {10, 100}))).has_value());
    BOOST_TEST(await(kv.set_optimizer(strata::kernels::sgd_options{
                         .lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}))
                   .has_value());
    for (std::size_t step = 0; step < 4; ++step) {
      BOOST_TEST(await(kv.push("w", {s.make(grads[2 * step], {10, 100}, 1), s.make(grads[2 * step + 1], {10, 100}, 2)}))
                     .has_value());
      out.push_back(s.read(await(kv.pull("w", s.zeros({10, 100}, 1))).value().at(0)));
    }
    return out;
  });
}

BOOST_FIXTURE_TEST_CASE(adam_and_adamw_update_as_on_the_cpu_and_a_new_optimizer_starts_fresh, gpu_fixture) {
  const std::size_t n = 777;
  const std::vector<std::int64_t> flat{static_cast<std::int64_t>(n)};
  auto w = rng.values(n);
  auto grads = arrays(6, n);
  same_results({}, on(gpu.devs[0]), gpu, [&](strata::kvstore::client& kv, side& s) {
    pulls out;
    BOOST_TEST(await(kv.init(4, s.make(w, flat))).has_value());
    BOOST_TEST(await(kv.set_optimizer(strata::kernels::adam_options{.lr = 0.01, .weight_decay = 0.02})).has_value());
    for (std::size_t step = 0; step < 3; ++step) {
      BOOST_TEST(await(kv.push(4, s.make(grads[step], flat, step % 3))).has_value());
      out.push_back(s.read(await(kv.pull(4, s.zeros(flat, 2))).value().at(0)));
    }
    // AdamW: state and step start again from zero.
    BOOST_TEST(await(kv.set_optimizer(strata::kernels::adam_options{
                         .lr = 0.02, .weight_decay = 0.1, .decoupled_weight_decay = true}))
                   .has_value());
    for (std::size_t step = 3; step < 6; ++step) {
      BOOST_TEST(await(kv.push({4, 4}, {s.make(grads[step], flat, 0), s.make(grads[step - 3], flat, 1)})).has_value());
      out.push_back(s.read(await(kv.pull(4, s.zeros(flat, 0))).value().at(0)));
    }
    return out;
  });
}

BOOST_FIXTURE_TEST_CASE(a_synchronous_cuda_store_accumulates_values_across_pushes_as_on_the_cpu, gpu_fixture) {
  auto w = rng.values(numel);
  auto grads = arrays(6, numel);
  auto cpu_options = strata::kvstore::options{.contributions_per_version = 3};
  auto gpu_options = on(gpu.devs[0]);
  gpu_options.contributions_per_version = 3;
  same_results(cpu_options, gpu_options, gpu, [&](strata::kvstore::client& kv, side& s) {
    pulls out;
    BOOST_TEST(await(kv.init("w", s.make(w, shape))).has_value());
    BOOST_TEST(await(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.5})).has_value());
    BOOST_TEST(await(kv.push("w", {s.make(grads[0], shape, 0), s.make(grads[1], shape, 1)})).has_value());
    BOOST_TEST(await(kv.push("w", {s.make(grads[2], shape, 2), s.make(grads[3], shape, 0)})).has_value());
    out.push_back(s.read(await(kv.pull("w", s.zeros(shape, 1), 1)).value().at(0)));
    BOOST_TEST(await(kv.push("w", {s.make(grads[4], shape, 1), s.make(grads[5], shape, 2)})).has_value());
    out.push_back(s.read(await(kv.pull("w", s.zeros(shape, 2), 2)).value().at(0)));
    BOOST_TEST(await(kv.version("w")).value() == 2u);
    return out;
  });
}

BOOST_FIXTURE_TEST_CASE(a_sharded_cuda_store_with_split_keys_updates_as_a_sharded_cpu_store, gpu_fixture) {
  // 1000 floats at 1 KiB chunks: four chunks over three shards, read and written through slices.
  const std::size_t n = 1000;
  auto big = rng.values(n), small = rng.values(numel);
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < 6; ++i) grads.push_back(rng.values(i % 2 == 0 ? n : numel));
  const strata::kvstore::options cpu_options{.shards = 3, .chunk_bytes = 1024, .shard_devices = cpu.devs};
  const strata::kvstore::options gpu_options{.shards = 3, .chunk_bytes = 1024, .shard_devices = gpu.devs};
  same_results(cpu_options, gpu_options, gpu, [&](strata::kvstore::client& kv, side& s) {
    pulls out;
    BOOST_TEST(await(kv.init({"big", "small"}, {s.make(big, {8, 125}), s.make(small, shape, 2)})).has_value());
    BOOST_TEST(await(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.05, .momentum = 0.9})).has_value());
    for (std::size_t step = 0; step < 3; ++step) {
      BOOST_TEST(await(kv.push({"big", "small", "big"}, {s.make(grads[2 * step], {8, 125}, 0),
                                                        s.make(grads[2 * step + 1], shape, 1),
                                                        s.make(grads[(2 * step + 2) % 6], {8, 125}, 2)}))
                     .has_value());
      auto outs = await(kv.pull({"big", "small", "big"}, {s.zeros({8, 125}, 1), s.zeros(shape, 0), s.zeros({8, 125}, 2)}))
                      .value();
      for (const auto& t : outs) out.push_back(s.read(t));
    }
    return out;
  });
}

BOOST_FIXTURE_TEST_CASE(a_user_updater_on_a_cuda_store_launches_its_own_work_after_the_sum, gpu_fixture) {
  auto w = rng.values(numel);
  auto grads = arrays(4, numel);
  auto session = [&](strata::kvstore::updater rule) {
    return [&, rule](strata::kvstore::client& kv, side& s) {
      pulls out;
      BOOST_TEST(await(kv.init("w", s.make(w, shape))).has_value());
      BOOST_TEST(await(kv.set_updater(rule)).has_value());
      BOOST_TEST(await(kv.push("w", {s.make(grads[0], shape, 1), s.make(grads[1], shape, 2)})).has_value());
      BOOST_TEST(await(kv.push("w", s.make(grads[2], shape, 0))).has_value());  // one value, read in place
      out.push_back(s.read(await(kv.pull("w", s.zeros(shape, 1))).value().at(0)));
      return out;
    };
  };
  const pulls want = run({}, cpu, session(half_step_on_host));
  const pulls got = run(on(gpu.devs[0]), gpu, session(half_step_on_gpu));
  BOOST_REQUIRE(got.size() == want.size());
  BOOST_TEST(kct::relative_error(got[0], want[0]) <= tolerance);
}

BOOST_FIXTURE_TEST_CASE(a_throwing_updater_fails_that_push_only_on_a_cuda_store, gpu_fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, on(gpu.devs[0])));
  BOOST_TEST(await(kv.init(1, gpu.make(rng.values(numel), shape))).has_value());
  BOOST_TEST(await(kv.set_updater([](const strata::kvstore::key&, const strata::tensor&, strata::tensor&) {
               throw std::runtime_error("boom");
             })).has_value());
  auto r = await(kv.push(1, gpu.make(rng.values(numel), shape, 1)));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore push: the update of key 1 failed: boom");
  BOOST_TEST(await(kv.set_updater({})).has_value());  // back to assign; the store still works
  auto g = rng.values(numel);
  BOOST_TEST(await(kv.push(1, gpu.make(g, shape, 2))).has_value());
  BOOST_TEST(gpu.read(await(kv.pull(1, gpu.zeros(shape, 1))).value().at(0)) == g, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_cuda_store_saves_values_and_adam_state_that_a_sharded_store_loads_to_go_on, gpu_fixture) {
  const std::vector<std::int64_t> big{8, 125};
  auto w = rng.values(1000), small = rng.values(numel);
  auto grads = arrays(4, 1000), small_grads = arrays(4, numel);
  int run = 0;
  same_results({}, on(gpu.devs[0]), gpu, [&](strata::kvstore::client& kv, side& s) {
    pulls out;
    const std::string path = "/tmp/strata_kvstore_cuda_" + std::to_string(::getpid()) + "_" + std::to_string(run++);
    const strata::kernels::adam_options adam{.lr = 0.01, .weight_decay = 0.01};
    BOOST_TEST(await(kv.init({1, 2}, {s.make(w, big), s.make(small, shape, 1)})).has_value());
    BOOST_TEST(await(kv.set_optimizer(adam)).has_value());
    for (std::size_t step = 0; step < 2; ++step)
      BOOST_TEST(await(kv.push({1, 2}, {s.make(grads[step], big, 1), s.make(small_grads[step], shape, 2)})).has_value());
    BOOST_REQUIRE(await(kv.save(path)).has_value());  // on the gpu side: copied to the host after the pushes
    // Shards on the side's devices (1 KiB chunks: key 1 is split) load it and take two more steps.
    strata::kvstore::client next(sys,
                                strata::kvstore::spawn(sys, {.shards = 3, .chunk_bytes = 1024, .shard_devices = s.devs}));
    BOOST_TEST(await(next.set_optimizer(adam)).has_value());
    BOOST_REQUIRE(await(next.load(path)).has_value());
    BOOST_TEST(await(next.version(1)).value() == 2u);
    BOOST_REQUIRE(await(next.save(path + ".again")).has_value());  // chunks copied back and joined: the same bytes
    auto bytes = [](const std::string& p) {
      std::ifstream f(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    };
    BOOST_TEST((bytes(path + ".again") == bytes(path)));
    for (std::size_t step = 2; step < 4; ++step)
      BOOST_TEST(await(next.push({1, 2}, {s.make(grads[step], big, 2), s.make(small_grads[step], shape, 0)})).has_value());
    auto outs = await(next.pull({1, 2}, {s.zeros(big, 1), s.zeros(shape, 2)})).value();
    for (const auto& t : outs) out.push_back(s.read(t));
    std::remove(path.c_str());
    std::remove((path + ".again").c_str());
    return out;
  });
}

// The kernel against kvstore::compress, the cpu rule, bit for bit where a slip would show: exactly
// +-threshold and one ulp either side, subnormals (flushed to zero they would differ), -0 (a fresh
// residual adds it to +0), infinities, huge values; a fresh residual (the device's holds NaNs, which
// must not be read), a carried one, sent written over grad; 2^21 + 5 elements, more than one pass
// of the grid.
BOOST_FIXTURE_TEST_CASE(compress_gradient_equals_the_cpu_rule_bit_for_bit_on_edge_values, fixture) {
  namespace kv = strata::kvstore;
  struct setting {
    kv::compression_type type;
    kc::gradient_quantizer quantizer;
    float threshold;
  };
  const std::size_t n = (std::size_t{1} << 21) + 5;
  kct::gpu_session session;
  for (const setting& c : {setting{kv::compression_type::two_bit, kc::gradient_quantizer::two_bit, 0.5f},
                           setting{kv::compression_type::two_bit, kc::gradient_quantizer::two_bit, 1.7f},
                           setting{kv::compression_type::one_bit, kc::gradient_quantizer::one_bit, 0.0f},
                           setting{kv::compression_type::one_bit, kc::gradient_quantizer::one_bit, 0.25f}}) {
    BOOST_TEST_CONTEXT((c.type == kv::compression_type::two_bit ? "2bit" : "1bit") << " at " << c.threshold) {
      const float t = c.threshold, inf = std::numeric_limits<float>::infinity();
      const std::vector<float> edges{t, -t, std::nextafter(t, 0.f), std::nextafter(t, inf), -std::nextafter(t, 0.f),
                                     -std::nextafter(t, inf), 0.f, -0.f, 1e-40f, -1e-40f,
                                     std::numeric_limits<float>::denorm_min(), inf, -inf, 3e38f, -3e38f, 1.f, -1.f};
      std::vector<float> residual(n, 0.f), sent(n);  // the cpu's, zero before the first round
      kct::dfloats device_residual(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
      kct::dfloats device_sent(n);
      for (int round = 0; round < 3; ++round) {
        BOOST_TEST_CONTEXT("round " << round) {
          auto grad = rng.values(n, -2.f * t - 1.f, 2.f * t + 1.f);
          for (std::size_t i = 0; i < edges.size() * edges.size(); ++i)  // every edge after every edge
            grad[static_cast<std::size_t>(round) * 7 + i] = edges[(round == 1 ? i / edges.size() : i) % edges.size()];
          kv::compress(c.type, t, grad.data(), residual.data(), sent.data(), n);
          kct::dfloats device_grad(grad);
          // Round 2 writes what is sent over the gradient.
          float* out = round == 2 ? device_grad.get() : device_sent.get();
          kc::compress_gradient(session.ctx(), n, c.quantizer, t, device_grad.get(), device_residual.get(), out,
                                round == 0);
          session.sync();
          const auto got_sent = round == 2 ? device_grad.download() : device_sent.download();
          const auto got_residual = device_residual.download();
          const std::size_t sent_at = first_bit_difference(got_sent, sent);
          const std::size_t residual_at = first_bit_difference(got_residual, residual);
          BOOST_TEST(sent_at == n, "sent differs at " << sent_at << ": cuda " << got_sent[sent_at % n] << ", cpu "
                                                      << sent[sent_at % n] << " (grad " << grad[sent_at % n] << ")");
          BOOST_TEST(residual_at == n, "residual differs at " << residual_at << ": cuda " << got_residual[residual_at % n]
                                                              << ", cpu " << residual[residual_at % n]);
        }
      }
    }
  }
}

// Gradient compression: the cuda kernel against the cpu rule (kvstore::compress), bit for bit.
// Random gradients in [-1, 1), 2bit at 0.5 (all of +t, 0 and -t occur) and 1bit at 0.25; several
// values per key, each with its residual, a new value slot joining in a later round (its residual
// starts at zero), sizes off multiples of 16 and 32 and one of a million floats; on one store and
// on shards that split keys into slices (read at offsets).
BOOST_FIXTURE_TEST_CASE(compressed_random_gradients_on_a_cuda_store_equal_a_cpu_store_bit_for_bit, gpu_fixture) {
  struct setting {
    const char* type;
    float threshold;
  };
  const std::vector<std::size_t> values_per_round{2, 3, 1, 3};  // round 2 shows each value's quantization alone
  auto session = [&](const setting& c, const std::vector<std::size_t>& sizes) {
    // Drawn once per session: both stores get the same gradients.
    auto grads = std::make_shared<std::vector<std::vector<std::vector<float>>>>();  // [round][size * slot]
    for (const std::size_t values : values_per_round) {
      grads->emplace_back();
      for (const std::size_t n : sizes)
        for (std::size_t slot = 0; slot < values; ++slot) grads->back().push_back(rng.values(n));
    }
    return [c, sizes, grads, &values_per_round](strata::kvstore::client& kv, side& s) {
      pulls out;
      std::vector<strata::kvstore::key> keys;
      std::vector<strata::tensor> inits;
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        keys.emplace_back(static_cast<int>(k));
        inits.push_back(s.zeros({static_cast<std::int64_t>(sizes[k])}, k % 3));
      }
      BOOST_REQUIRE(await(kv.init(keys, inits)).has_value());
      BOOST_REQUIRE(await(kv.set_gradient_compression(c.type, c.threshold)).has_value());
      for (std::size_t round = 0; round < values_per_round.size(); ++round) {
        std::vector<strata::kvstore::key> pushed;
        std::vector<strata::tensor> values;
        for (std::size_t k = 0; k < sizes.size(); ++k)
          for (std::size_t slot = 0; slot < values_per_round[round]; ++slot) {
            pushed.push_back(keys[k]);
            const auto& g = (*grads)[round][k * values_per_round[round] + slot];
            values.push_back(s.make(g, {static_cast<std::int64_t>(sizes[k])}, slot % 3));
          }
        BOOST_REQUIRE(await(kv.push(pushed, values)).has_value());
        std::vector<strata::tensor> outs;
        for (std::size_t k = 0; k < sizes.size(); ++k)
          outs.push_back(s.zeros({static_cast<std::int64_t>(sizes[k])}, (k + round) % 3));
        const auto pulled = await(kv.pull(keys, outs)).value();  // a named copy: value() of a temporary would dangle
        for (const auto& t : pulled) out.push_back(s.read(t));
      }
      return out;
    };
  };
  const setting two_bit{"2bit", 0.5f}, one_bit{"1bit", 0.25f};
  const std::vector<std::size_t> sizes{35, 1001, (std::size_t{1} << 20) + 3};
  const std::vector<std::size_t> split_sizes{35, 1001};  // 1 KiB chunks: 1001 floats in four slices
  const strata::kvstore::options cpu_shards{.shards = 3, .chunk_bytes = 1024, .shard_devices = cpu.devs};
  const strata::kvstore::options gpu_shards{.shards = 3, .chunk_bytes = 1024, .shard_devices = gpu.devs};
  for (const setting& c : {two_bit, one_bit}) {
    BOOST_TEST_CONTEXT(c.type << " at " << c.threshold) {
      same_results({}, on(gpu.devs[0]), gpu, session(c, sizes), true);
      same_results(cpu_shards, gpu_shards, gpu, session(c, split_sizes), true);
    }
  }
  // All three outcomes of 2bit occur: a round of one value per key pulls its quantization itself.
  const pulls pulled = run({}, cpu, session(two_bit, {1001}));
  const std::vector<float>& alone = pulled.at(2);
  for (const float q : {0.5f, 0.0f, -0.5f}) BOOST_TEST(std::count(alone.begin(), alone.end(), q) > 0, "no " << q);
}

// MXNet's nightly verify-residual and negative-threshold sequences (kvstore_compression_test.cpp)
// on a cuda store, with the default rule (the pulled value is the merged one): exact values.
BOOST_FIXTURE_TEST_CASE(a_cuda_store_carries_each_values_compression_residual_over_pushes_as_mxnet, gpu_fixture) {
  const float threshold = 0.5f;
  constexpr std::size_t values = 3;  // each with its residual
  const float passed = threshold * static_cast<float>(values);
  for (const std::size_t n : {numel, std::size_t{1001}}) {
    const std::vector<std::int64_t> at{static_cast<std::int64_t>(n)};
    auto each_value = [&](float g) {
      std::vector<strata::tensor> out;
      for (std::size_t v = 0; v < values; ++v) out.push_back(gpu.make(std::vector<float>(n, g), at, v));
      return out;
    };
    BOOST_TEST_CONTEXT(n << " floats") {
      strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, on(gpu.devs[0])));
      BOOST_REQUIRE(await(kv.init(3, gpu.zeros(at))).has_value());
      BOOST_REQUIRE(await(kv.set_gradient_compression("2bit", threshold)).has_value());
      auto expect = [&](float g, float merged) {
        BOOST_REQUIRE(await(kv.push(3, each_value(g))).has_value());
        const auto got = gpu.read(await(kv.pull(3, gpu.zeros(at, 1))).value().at(0));
        BOOST_TEST(got == std::vector<float>(got.size(), merged), boost::test_tools::per_element());
      };
      expect(0.0f, 0.0f);
      // 0.4 is held back; 0.4 + 0.2 passes as 0.5 with 0.1 left; 0.1 + 0.2 is held; 0.3 + 0.2
      // passes as 0.5 with nothing left.
      expect(0.4f, 0.0f);
      expect(threshold - 0.3f, passed);
      expect(0.2f, 0.0f);
      expect(threshold - 0.3f, passed);
      for (int r = 0; r < 3; ++r) expect(-threshold, -passed);  // -threshold passes whole
    }
  }
}

// The 16-bit kernels against the CPU conversions (strata/kernels/half.hpp), bit for bit, NaNs
// included: narrow on edge values (float16 subnormals and the tie with zero at 2^-25, ties to even
// in both formats, 65504, 65520 and beyond to infinity, infinities, quiet and signalling NaNs of
// both signs, -0, float32 subnormals) then random bit patterns, 2^21 + 5 elements (more than one
// pass of the grid); widen on every 16-bit pattern (40 times over); sum_widened of 300 inputs (two
// launches) with and without a float32 first term, into that first term.
BOOST_FIXTURE_TEST_CASE(widen_narrow_and_sum_widened_equal_the_cpu_conversions_bit_for_bit_on_edge_values, fixture) {
  namespace sk = strata::kernels;
  using strata::dtype;
  const std::size_t n = (std::size_t{1} << 21) + 5;
  kct::gpu_session session;
  const float inf = std::numeric_limits<float>::infinity();
  auto of_bits = [](std::uint32_t u) { return std::bit_cast<float>(u); };
  const std::vector<float> edges{
      0.f, -0.f, 1.f, -1.f, 65504.f, -65504.f, std::nextafter(65520.f, 0.f), 65520.f, -65520.f, 65536.f, 1e6f, -3e38f,
      inf, -inf, std::ldexp(1.f, -14), std::nextafter(std::ldexp(1.f, -14), 0.f), std::ldexp(1.f, -24), std::ldexp(1.f, -25),
      std::nextafter(std::ldexp(1.f, -25), 1.f), std::nextafter(std::ldexp(1.f, -25), 0.f), 3 * std::ldexp(1.f, -25),
      5 * std::ldexp(1.f, -25), -3 * std::ldexp(1.f, -25), 1e-40f, -1e-40f, std::numeric_limits<float>::denorm_min(),
      1.f + std::ldexp(1.f, -11), 1.f + 3 * std::ldexp(1.f, -11), -(1.f + 3 * std::ldexp(1.f, -11)),
      std::nextafter(1.f + std::ldexp(1.f, -11), 2.f), 1.f + std::ldexp(1.f, -8), 1.f + 3 * std::ldexp(1.f, -8),
      std::nextafter(1.f + std::ldexp(1.f, -8), 0.f), std::numeric_limits<float>::max(), of_bits(0x7f7f8000u),
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::signaling_NaN(), of_bits(0x7f800001u), of_bits(0xff801234u), of_bits(0x7fc00001u),
      of_bits(0x7fffe000u), of_bits(0xffbfffffu)};
  std::mt19937 bits(31);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = i < edges.size() ? edges[i] : of_bits(static_cast<std::uint32_t>(bits()));
  kct::dfloats device_x(x);
  std::vector<std::uint16_t> patterns(40 * 0x10000);
  for (std::size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<std::uint16_t>(i);
  kct::device_array<std::uint16_t> device_patterns(patterns);
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (const auto type : {dtype::float16, dtype::bfloat16}) {
    BOOST_TEST_CONTEXT(strata::to_string(type)) {
      const auto format = type == dtype::float16 ? kc::half_format::float16 : kc::half_format::bfloat16;
      std::vector<std::uint16_t> want(n);
      sk::cpu::narrow(type, n, x.data(), want.data());
      kct::device_array<std::uint16_t> narrowed(n);
      kc::narrow(session.ctx(), format, n, device_x.get(), narrowed.get());
      session.sync();
      const auto got = narrowed.download();
      const auto at = static_cast<std::size_t>(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
      BOOST_TEST(at == n, "narrow differs at " << at << " (float bits " << std::hex
                                               << std::bit_cast<std::uint32_t>(x[at % n]) << "): cuda " << got[at % n]
                                               << ", cpu " << want[at % n]);

      std::vector<float> widened_want(patterns.size());
      sk::cpu::widen(type, patterns.size(), patterns.data(), widened_want.data());
      kct::dfloats widened(patterns.size());
      kc::widen(session.ctx(), format, patterns.size(), device_patterns.get(), widened.get());
      session.sync();
      BOOST_TEST(same_bits(widened.download(), widened_want));

      const std::size_t m = 4099, count = 300;
      std::vector<std::vector<std::uint16_t>> inputs(count, std::vector<std::uint16_t>(m));
      std::vector<std::unique_ptr<kct::device_array<std::uint16_t>>> device_inputs;
      std::vector<const std::uint16_t*> pointers;
      for (auto& in : inputs) {
        sk::cpu::narrow(type, m, rng.values(m).data(), in.data());
        device_inputs.push_back(std::make_unique<kct::device_array<std::uint16_t>>(in));
        pointers.push_back(device_inputs.back()->get());
      }
      const auto first = rng.values(m);
      for (const bool with_first : {false, true}) {
        std::vector<std::vector<float>> wide;
        std::vector<const float*> terms;
        if (with_first) terms.push_back(first.data());
        for (const auto& in : inputs) {
          sk::cpu::widen(type, m, in.data(), wide.emplace_back(m).data());
          terms.push_back(wide.back().data());
        }
        std::vector<float> sum_want(m);
        sk::cpu::sum_arrays(terms, m, sum_want.data());
        kct::dfloats out(first);  // with_first: summed into the first term itself
        kc::sum_widened(session.ctx(), format, with_first ? out.get() : nullptr, pointers, m, out.get());
        session.sync();
        BOOST_TEST(same_bits(out.download(), sum_want), (with_first ? "with" : "without") << " a first term");
      }
    }
  }
}

/// A script of 16-bit keys (sizes `sizes`, each once as float16 and once as bfloat16): two assign
/// rounds, three of SGD with Nesterov momentum and weight decay, two of Adam, each round three
/// values a key from three devices and a pull of every key (its 16-bit words); then a save whose
/// float32 master copies (multi_precision) and optimizer states are pulled too, a load of it into
/// the same store and one more round. Random values in [-1, 1), drawn once for both stores.
script half_keys_session(kct::random_source& rng, const std::vector<std::size_t>& sizes, bool multi_precision) {
  constexpr std::size_t rounds = 8, values = 3;
  auto grads = std::make_shared<std::vector<std::vector<float>>>();  // [round][key][value], then the inits
  const std::size_t keys = 2 * sizes.size();
  for (std::size_t r = 0; r <= rounds; ++r)
    for (std::size_t k = 0; k < keys; ++k)
      for (std::size_t v = 0; v < (r == rounds ? 1 : values); ++v) grads->push_back(rng.values(sizes[k / 2]));
  const auto id = static_cast<unsigned>(rng.uniform(0.f, 1e6f));
  return [=](strata::kvstore::client& kv, side& s) {
    namespace kvs = strata::kvstore;
    pulls out;
    std::vector<kvs::key> names;
    std::vector<strata::dtype> types;
    std::vector<std::vector<std::int64_t>> shapes;
    for (std::size_t k = 0; k < keys; ++k) {
      names.emplace_back(static_cast<int>(k));
      types.push_back(k % 2 == 0 ? strata::dtype::float16 : strata::dtype::bfloat16);
      shapes.push_back({static_cast<std::int64_t>(sizes[k / 2])});
    }
    auto grad = [&](std::size_t r, std::size_t k, std::size_t v) -> const std::vector<float>& {
      return (*grads)[(r * keys + k) * values + v];
    };
    std::vector<strata::tensor> inits;
    for (std::size_t k = 0; k < keys; ++k) inits.push_back(s.make16(types[k], (*grads)[rounds * keys * values + k], shapes[k], k % 3));
    BOOST_REQUIRE(await(kv.init(names, inits)).has_value());
    auto round = [&](std::size_t r) {
      std::vector<kvs::key> pushed;
      std::vector<strata::tensor> tensors;
      for (std::size_t k = 0; k < keys; ++k)
        for (std::size_t v = 0; v < values; ++v) {
          pushed.push_back(names[k]);
          tensors.push_back(s.make16(types[k], grad(r, k, v), shapes[k], v % 3));
        }
      BOOST_REQUIRE(await(kv.push(pushed, tensors)).has_value());
      std::vector<strata::tensor> outs;
      for (std::size_t k = 0; k < keys; ++k)
        outs.push_back(s.make16(types[k], std::vector<float>(sizes[k / 2], 0.f), shapes[k], (k + r) % 3));
      const auto pulled = await(kv.pull(names, outs)).value();
      for (const auto& t : pulled) out.push_back(s.words(t));
    };
    round(0);
    round(1);
    BOOST_REQUIRE(await(kv.send(kvs::set_optimizer{
                            .options = strata::kernels::sgd_options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
                            .multi_precision = multi_precision}))
                      .has_value());
    for (std::size_t r = 2; r < 5; ++r) round(r);
    BOOST_REQUIRE(await(kv.send(kvs::set_optimizer{.options = strata::kernels::adam_options{.lr = 0.01, .weight_decay = 0.02},
                                                   .multi_precision = multi_precision}))
                      .has_value());
    for (std::size_t r = 5; r < 7; ++r) round(r);
    const std::string path = "/tmp/strata_kvstore_cuda_half_" + std::to_string(::getpid()) + "_" + std::to_string(id);
    BOOST_REQUIRE(await(kv.save(path)).has_value());
    auto file = kvs::read_checkpoint(path);
    BOOST_REQUIRE(file.has_value());
    for (const auto& e : file->entries) {
      BOOST_TEST(e.master.empty() == !multi_precision);
      if (!e.master.empty()) out.push_back(e.master);
      for (const auto& a : e.arrays) out.push_back(a);  // the value widened, then Adam's moments
    }
    BOOST_REQUIRE(await(kv.load(path)).has_value());
    round(7);
    std::remove(path.c_str());
    return out;
  };
}

// float16 and bfloat16 keys on a cuda store (one store, and shards that split keys into slices)
// against a cpu store fed the same random values: every pull's 16-bit words, the float32 master
// copies (multi_precision) and the optimizer states in a checkpoint, bit for bit. Sizes off
// multiples of the block size (256) and one of a million elements.
BOOST_FIXTURE_TEST_CASE(random_16_bit_keys_on_a_cuda_store_equal_a_cpu_store_bit_for_bit, gpu_fixture) {
  const std::vector<std::size_t> sizes{35, 1001, (std::size_t{1} << 20) + 3};
  const std::vector<std::size_t> split_sizes{35, 1001};  // 600-byte chunks: 1001 words in four slices
  const strata::kvstore::options cpu_shards{.shards = 3, .chunk_bytes = 600, .shard_devices = cpu.devs};
  const strata::kvstore::options gpu_shards{.shards = 3, .chunk_bytes = 600, .shard_devices = gpu.devs};
  for (const bool multi_precision : {false, true}) {
    BOOST_TEST_CONTEXT((multi_precision ? "with" : "without") << " multi_precision") {
      same_results({}, on(gpu.devs[0]), gpu, half_keys_session(rng, sizes, multi_precision), true);
      same_results(cpu_shards, gpu_shards, gpu, half_keys_session(rng, split_sizes, multi_precision), true);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(values_and_outputs_on_another_gpu_are_copied_peer_to_peer, fixture,
                        *boost::unit_test::precondition(two_gpus)) {
  side gpus{manager.create("cuda:0,1")};
  const std::size_t n = 1000;
  auto w = rng.values(n);
  auto grads = arrays(6, n);
  auto session = [&](strata::kvstore::client& kv, side& s) {
    pulls out;
    const std::size_t last = s.devs.size() - 1;  // the cpu side has three devices, the gpu side two
    BOOST_TEST(await(kv.init("w", s.make(w, {8, 125}, 0))).has_value());
    BOOST_TEST(await(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.05, .momentum = 0.9})).has_value());
    for (std::size_t step = 0; step < 3; ++step) {
      BOOST_TEST(await(kv.push("w", {s.make(grads[2 * step], {8, 125}, 0), s.make(grads[2 * step + 1], {8, 125}, last)}))
                     .has_value());
      auto outs = await(kv.pull("w", std::vector<strata::tensor>{s.zeros({8, 125}, 0), s.zeros({8, 125}, last)})).value();
      for (const auto& t : outs) out.push_back(s.read(t));
    }
    return out;
  };
  // One store on GPU 1 (values and outputs of GPU 0 are staged or copied peer to peer) ...
  same_results({}, on(gpus.devs[1]), gpus, session);
  // ... and shards on both GPUs, where slices of a split key cross GPUs.
  same_results({.shards = 2, .chunk_bytes = 1024, .shard_devices = cpu.devs},
               {.shards = 2, .chunk_bytes = 1024, .shard_devices = gpus.devs}, gpus, session);
}

// ---- row-sparse values ------------------------------------------------------------------------

// The row-sparse kernels against the host code they stand for, bit for bit: copy_rows against a
// copy, sum_rows against in-order float sums (repeated contributions, an empty row), sgd_rows and
// adam_rows against cpu::sgd_step / cpu::adam_step on the same rows; spans shorter than the
// longest (a shard's cut rows) and more elements than one pass of the grid.
BOOST_FIXTURE_TEST_CASE(row_sparse_kernels_equal_the_host_code_bit_for_bit, fixture) {
  namespace sk = strata::kernels;
  kct::gpu_session session;
  std::mt19937_64 draw(7);
  const std::size_t rows = 3000, cols = 1100, n = rows * cols;  // 3.3M elements: several grid passes
  // Spans of distinct rows (as a store's: updated rows do not overlap), some cut short.
  std::vector<std::int64_t> ids(rows);
  for (std::size_t r = 0; r < rows; ++r) ids[r] = static_cast<std::int64_t>(r);
  std::shuffle(ids.begin(), ids.end(), draw);
  const std::size_t count = 700;
  std::vector<sk::cuda::row_span> spans;  // from: packed place, to: the row in the value
  std::size_t packed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t length = i % 5 == 0 ? 1 + (i * 37) % cols : cols;
    const std::size_t skip = i % 7 == 0 ? cols - length : 0;  // a cut row's piece may start inside it
    spans.push_back({static_cast<std::int64_t>(packed), ids[i] * static_cast<std::int64_t>(cols) + static_cast<std::int64_t>(skip),
                     static_cast<std::int64_t>(length)});
    packed += length;
  }
  kct::device_array<sk::cuda::row_span> d_spans(spans);
  const auto value = rng.values(n), grad = rng.values(packed);
  kct::dfloats d_value(value), d_grad(grad);

  // copy_rows: the value's rows gathered into packed order.
  std::vector<sk::cuda::row_span> gather;
  for (const auto& s : spans) gather.push_back({s.to, s.from, s.length});
  kct::device_array<sk::cuda::row_span> d_gather(gather);
  kct::dfloats d_packed(std::vector<float>(packed, -7.f));
  kc::copy_rows(session.ctx(), count, cols, d_gather.get(), d_value.get(), d_packed.get());
  std::vector<float> want_packed(packed);
  for (const auto& s : spans) std::copy_n(value.begin() + s.to, s.length, want_packed.begin() + s.from);
  BOOST_TEST(first_bit_difference(d_packed.download(), want_packed) == packed);

  // sum_rows: contributions from several arrays, 0 to 4 per row, in the order listed.
  const auto parts = rng.values(4 * packed);
  kct::dfloats d_parts(parts);
  std::vector<sk::cuda::row_sum> plan;
  std::vector<const float*> sources;
  std::vector<float> want_sums(n, -3.f);
  kct::dfloats d_sums(want_sums);
  for (std::size_t i = 0; i < count; ++i) {
    const auto& s = spans[i];
    const std::size_t k = i % 9 == 4 ? 0 : 1 + (i * 13) % 4;
    plan.push_back({static_cast<std::int64_t>(sources.size()), static_cast<std::int64_t>(sources.size() + k), s.to, s.length});
    for (std::size_t c = 0; c < static_cast<std::size_t>(s.length); ++c) {
      float acc = 0.f;
      for (std::size_t j = 0; j < k; ++j) {
        const float x = parts[((j + i) % 4) * packed + static_cast<std::size_t>(s.from) + c];
        acc = j == 0 ? x : acc + x;
      }
      want_sums[static_cast<std::size_t>(s.to) + c] = acc;
    }
    for (std::size_t j = 0; j < k; ++j) sources.push_back(d_parts.get() + ((j + i) % 4) * packed + s.from);
  }
  kct::device_array<sk::cuda::row_sum> d_plan(plan);
  kct::device_array<const float*> d_sources(sources);
  kc::sum_rows(session.ctx(), count, cols, d_plan.get(), d_sources.get(), d_sums.get());
  BOOST_TEST(first_bit_difference(d_sums.download(), want_sums) == n);

  // sgd_rows and adam_rows: the cpu kernels per row.
  for (const sk::sgd_options& o : {sk::sgd_options{.lr = 0.1}, sk::sgd_options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01},
                                   sk::sgd_options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}}) {
    BOOST_TEST_CONTEXT("sgd momentum " << o.momentum << " nesterov " << o.nesterov) {
      std::vector<float> p = value, m = rng.values(n);
      kct::dfloats d_p(p), d_m(m);
      kc::sgd_rows(session.ctx(), count, cols, d_spans.get(), d_p.get(), d_grad.get(), d_m.get(), o);
      for (const auto& s : spans)
        sk::cpu::sgd_step(static_cast<std::size_t>(s.length), p.data() + s.to, grad.data() + s.from, m.data() + s.to, o);
      BOOST_TEST(first_bit_difference(d_p.download(), p) == n);
      BOOST_TEST(first_bit_difference(d_m.download(), m) == n);
    }
  }
  for (const std::int64_t step : {1, 5}) {
    const sk::adam_options o{.lr = 0.01, .weight_decay = 0.02, .decoupled_weight_decay = step == 5};
    std::vector<float> p = value, m = rng.values(n), v = rng.values(n, 0.f, 1.f);
    kct::dfloats d_p(p), d_m(m), d_v(v);
    kc::adam_rows(session.ctx(), count, cols, d_spans.get(), d_p.get(), d_grad.get(), d_m.get(), d_v.get(), step, o);
    for (const auto& s : spans)
      sk::cpu::adam_step(static_cast<std::size_t>(s.length), p.data() + s.to, grad.data() + s.from, m.data() + s.to,
                         v.data() + s.to, step, o);
    BOOST_TEST(first_bit_difference(d_p.download(), p) == n, "step " << step);
    BOOST_TEST(first_bit_difference(d_m.download(), m) == n, "step " << step);
    BOOST_TEST(first_bit_difference(d_v.download(), v) == n, "step " << step);
  }
}

/// One row-sparse value of a push: rows `ids` of key `key` (several per push, ids unsorted and
/// repeated, maybe none).
struct sparse_value {
  std::size_t key;
  std::vector<std::int64_t> ids;
  std::vector<float> rows;
};

/// A random row-sparse session, drawn once so that the cpu and the cuda store get the same data:
/// rounds of one push request each (several keys, several values per key), after each a
/// row_sparse_pull of random ids (repeated) per key and a dense pull of every key.
struct sparse_session {
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::vector<float>> inits;
  std::vector<std::vector<sparse_value>> rounds;
  std::vector<std::vector<std::vector<std::int64_t>>> pulled_ids;  // [round][key]

  static std::size_t row_length(const std::vector<std::int64_t>& shape) {
    std::size_t n = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) n *= static_cast<std::size_t>(shape[d]);
    return n;
  }
  static std::vector<std::int64_t> rows_shape(std::size_t ids, const std::vector<std::int64_t>& shape) {
    std::vector<std::int64_t> s{static_cast<std::int64_t>(ids)};
    s.insert(s.end(), shape.begin() + 1, shape.end());
    return s;
  }

  sparse_session(kct::random_source& rng, std::uint64_t seed, std::size_t round_count) {
    std::mt19937_64 draw(seed);
    // 300 floats, 1320 with 33-float rows (1 KiB chunks cut rows), a rank-1 key of 1-float rows.
    shapes = {{50, 6}, {40, 33}, {64}};
    auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(draw); };
    auto ids_of = [&](std::size_t key, std::size_t k) {
      std::vector<std::int64_t> ids(k);
      for (auto& id : ids) id = static_cast<std::int64_t>(pick(0, static_cast<std::size_t>(shapes[key][0]) - 1));
      if (k >= 3) ids[k - 1] = ids[0];  // a repeated id for sure
      return ids;
    };
    for (const auto& shape : shapes) inits.push_back(rng.values(static_cast<std::size_t>(shape[0]) * row_length(shape)));
    for (std::size_t r = 0; r < round_count; ++r) {
      auto& round = rounds.emplace_back();
      for (std::size_t v = pick(2, 6); v > 0; --v) {
        const std::size_t key = pick(0, shapes.size() - 1);
        const std::size_t k = v == 1 ? 0 : pick(0, 14);  // the last value of a round names no row
        auto ids = ids_of(key, k);
        round.push_back({key, ids, rng.values(ids.size() * row_length(shapes[key]))});
      }
      auto& pulls = pulled_ids.emplace_back();
      for (std::size_t key = 0; key < shapes.size(); ++key) pulls.push_back(ids_of(key, pick(1, 20)));
    }
  }

  /// The session on `kv`: dense tensors on `s`, rows and row_sparse_pull outputs on `host`, all
  /// of `type` (16-bit: the random floats rounded, pulls compared word for word).
  pulls run(strata::kvstore::client& kv, side& s, side& host, strata::dtype type = strata::dtype::float32) const {
    namespace kv_ns = strata::kvstore;
    const bool half = type != strata::dtype::float32;
    auto make = [&](side& on, const std::vector<float>& v, std::vector<std::int64_t> shape, std::size_t dev) {
      return half ? on.make16(type, v, std::move(shape), dev) : on.make(v, std::move(shape), dev);
    };
    auto zeros = [&](side& on, std::vector<std::int64_t> shape, std::size_t dev) {
      std::size_t n = 1;
      for (auto d : shape) n *= static_cast<std::size_t>(d);
      return make(on, std::vector<float>(n, 0.f), std::move(shape), dev);
    };
    auto read = [&](side& on, const strata::tensor& t) { return half ? on.words(t) : on.read(t); };
    pulls out;
    std::vector<kv_ns::key> keys;
    std::vector<strata::tensor> values;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      keys.emplace_back(static_cast<int>(k));
      values.push_back(make(s, inits[k], shapes[k], k % s.devs.size()));
    }
    BOOST_REQUIRE(await(kv.init(keys, values)).has_value());
    for (std::size_t r = 0; r < rounds.size(); ++r) {
      kv_ns::push_row_sparse push;
      for (const auto& v : rounds[r]) {
        push.keys.emplace_back(static_cast<int>(v.key));
        push.values.push_back({make(host, v.rows, rows_shape(v.ids.size(), shapes[v.key]), r % host.devs.size()), v.ids,
                               shapes[v.key]});
      }
      auto pushed = await(kv.send(std::move(push)));
      BOOST_REQUIRE_MESSAGE(pushed.has_value(), (pushed ? std::string() : pushed.error().message()));
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        const auto& ids = pulled_ids[r][k];
        auto got = await(kv.row_sparse_pull(keys[k], zeros(host, rows_shape(ids.size(), shapes[k]), k % host.devs.size()), ids));
        BOOST_REQUIRE_MESSAGE(got.has_value(), (got ? std::string() : got.error().message()));
        out.push_back(read(host, got->at(0)));
      }
      for (const auto& t : await(kv.pull(keys, [&] {
             std::vector<strata::tensor> outs;
             for (std::size_t k = 0; k < shapes.size(); ++k) outs.push_back(zeros(s, shapes[k], (k + r) % s.devs.size()));
             return outs;
           }())).value())
        out.push_back(read(s, t));
    }
    return out;
  }
};

using rule_setting = std::variant<std::monostate, strata::kernels::sgd_options, strata::kernels::adam_options>;

const char* name_of(const rule_setting& rule) {
  if (std::holds_alternative<std::monostate>(rule)) return "assign";
  if (const auto* sgd = std::get_if<strata::kernels::sgd_options>(&rule))
    return sgd->momentum == 0.0 ? "sgd" : sgd->nesterov ? "sgd with nesterov momentum" : "sgd with momentum";
  return "adam";
}

// Row-sparse pushes and row_sparse_pull on a cuda store against a cpu store, bit for bit: random
// sessions over three keys (one of rank 1), pushes of several values per key with unsorted and
// repeated ids and values naming no row, pulls of random ids with repeats; assign, SGD (plain,
// momentum, Nesterov) and Adam; one store, asynchronous and synchronous (a version's
// contributions spread over pushes), and three shards with 1 KiB chunks (rows cut between
// shards).
BOOST_FIXTURE_TEST_CASE(row_sparse_values_on_a_cuda_store_equal_a_cpu_store_bit_for_bit, gpu_fixture) {
  namespace sk = strata::kernels;
  const std::vector<rule_setting> rules{std::monostate{}, sk::sgd_options{.lr = 0.1},
                                        sk::sgd_options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01},
                                        sk::sgd_options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
                                        sk::adam_options{.lr = 0.01, .weight_decay = 0.02}};
  struct layout {
    const char* name;
    strata::kvstore::options cpu, gpu;
  };
  strata::kvstore::options cpu_sync{.contributions_per_version = 3}, gpu_sync = on(gpu.devs[0]);
  gpu_sync.contributions_per_version = 3;
  const std::vector<layout> layouts{
      {"one store", {}, on(gpu.devs[0])},
      {"one synchronous store", cpu_sync, gpu_sync},
      {"three shards", {.shards = 3, .chunk_bytes = 1024, .shard_devices = cpu.devs},
       {.shards = 3, .chunk_bytes = 1024, .shard_devices = gpu.devs}},
      {"three synchronous shards",
       {.contributions_per_version = 3, .shards = 3, .chunk_bytes = 1024, .shard_devices = cpu.devs},
       {.contributions_per_version = 3, .shards = 3, .chunk_bytes = 1024, .shard_devices = gpu.devs}}};
  std::uint64_t seed = 1;
  for (const layout& l : layouts) {
    for (const rule_setting& rule : rules) {
      BOOST_TEST_CONTEXT(l.name << ", " << name_of(rule)) {
        const sparse_session data(rng, seed++, 5);
        same_results(l.cpu, l.gpu, gpu,
                     [&](strata::kvstore::client& kv, side& s) {
                       if (!std::holds_alternative<std::monostate>(rule))
                         std::visit(
                             [&](const auto& o) {
                               if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
                                 BOOST_REQUIRE(await(kv.set_optimizer(o)).has_value());
                             },
                             rule);
                       return data.run(kv, s, cpu);
                     },
                     true);
      }
    }
  }
}

// Row-sparse values of float16 and bfloat16 keys on a cuda store against a cpu store, bit for bit:
// the rows widened on the GPU and summed by id in float32, assign rounding the sums into the key
// once, SGD with momentum and Adam on the multi_precision master or on the value widened, the
// touched rows rounded back; pulls gather 16-bit rows. Random sessions (unsorted and repeated ids,
// values naming no row), one store and three shards with 1 KiB chunks (rows cut between shards).
BOOST_FIXTURE_TEST_CASE(row_sparse_values_of_16_bit_keys_on_a_cuda_store_equal_a_cpu_store_bit_for_bit, gpu_fixture) {
  namespace sk = strata::kernels;
  const std::vector<rule_setting> rules{std::monostate{},
                                        sk::sgd_options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01},
                                        sk::adam_options{.lr = 0.01, .weight_decay = 0.02}};
  struct layout {
    const char* name;
    strata::kvstore::options cpu, gpu;
  };
  const std::vector<layout> layouts{
      {"one store", {}, on(gpu.devs[0])},
      {"three shards", {.shards = 3, .chunk_bytes = 1024, .shard_devices = cpu.devs},
       {.shards = 3, .chunk_bytes = 1024, .shard_devices = gpu.devs}}};
  std::uint64_t seed = 101;
  for (const auto type : {strata::dtype::float16, strata::dtype::bfloat16})
    for (const bool multi_precision : {false, true})
      for (const layout& l : layouts)
        for (const rule_setting& rule : rules) {
          if (multi_precision && std::holds_alternative<std::monostate>(rule)) continue;  // no optimizer, no master
          BOOST_TEST_CONTEXT(to_string(type) << ", " << (multi_precision ? "with" : "without") << " multi_precision, "
                                             << l.name << ", " << name_of(rule)) {
            const sparse_session data(rng, seed++, 5);
            same_results(l.cpu, l.gpu, gpu,
                         [&](strata::kvstore::client& kv, side& s) {
                           std::visit(
                               [&](const auto& o) {
                                 if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
                                   BOOST_REQUIRE(await(kv.send(strata::kvstore::set_optimizer{
                                                           .options = o, .multi_precision = multi_precision}))
                                                     .has_value());
                               },
                               rule);
                           return data.run(kv, s, cpu, type);
                         },
                         true);
          }
        }
}

// A user updater on a cuda store gets the row-sparse sum as a dense tensor of the store (zeros
// off the pushed rows), after the sum, as on a cpu store.
BOOST_FIXTURE_TEST_CASE(a_user_updater_on_a_cuda_store_gets_the_row_sparse_sum_as_a_dense_tensor, gpu_fixture) {
  const sparse_session data(rng, 99, 4);
  auto session = [&](strata::kvstore::updater rule) {
    return [&, rule](strata::kvstore::client& kv, side& s) {
      BOOST_REQUIRE(await(kv.set_updater(rule)).has_value());
      return data.run(kv, s, cpu);
    };
  };
  const pulls want = run({}, cpu, session(half_step_on_host));
  const pulls got = run(on(gpu.devs[0]), gpu, session(half_step_on_gpu));
  BOOST_REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(first_bit_difference(got[i], want[i]) == want[i].size(), "pull " << i);
}

BOOST_AUTO_TEST_SUITE_END()


}  // namespace kvstore_cuda_test

int main(int argc, char* argv[]) {
  return strata::test::run_gpu_tests("test_kvstore_cuda", &init_unit_test, argc, argv);
}
