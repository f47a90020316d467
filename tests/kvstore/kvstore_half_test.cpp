// float16 and bfloat16 keys in the kvstore: the conversions against round-to-nearest-even computed
// in double, exact sums rounded once, multi_precision (MXNet's fp32 master copy) against float64
// references, sharded stores bit for bit, refusals, and checkpoints that keep dtype and bits.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "strata/kernels/half.hpp"
#include "strata/kvstore/checkpoint.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "support/await.hpp"
#include "support/half_device.hpp"
#include "support/sim_stores.hpp"

namespace kvstore_half_test {

using strata::dtype;
using strata::test::await;
namespace kv = strata::kvstore;
namespace sk = strata::kernels;

/// The value of 16-bit `bits` of `type`, from the format's definition (sign, exponent, mantissa).
double defined_value(dtype type, std::uint16_t bits) {
  const int mantissa_bits = type == dtype::float16 ? 10 : 7;
  const int exponent_bits = 15 - mantissa_bits;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const double sign = (bits >> 15) ? -1.0 : 1.0;
  const int exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  if (exponent == (1 << exponent_bits) - 1)
    return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - mantissa_bits);
  return sign * std::ldexp(mantissa + (1 << mantissa_bits), exponent - bias - mantissa_bits);
}

/// `x` rounded to `type` by round-to-nearest-even's definition, in double: the nearest multiple
/// of the ulp at x's binade (ties to an even multiple), infinity beyond the largest finite value.
double defined_rounding(dtype type, double x) {
  const int mantissa_bits = type == dtype::float16 ? 10 : 7;
  const int min_exponent = type == dtype::float16 ? -14 : -126;
  const double largest = type == dtype::float16 ? 65504.0 : defined_value(dtype::bfloat16, 0x7f7f);
  if (x == 0 || std::isinf(x)) return x;
  const int e = std::max(static_cast<int>(std::floor(std::log2(std::abs(x)))), min_exponent);
  const double ulp = std::ldexp(1.0, e - mantissa_bits);
  const double q = x / ulp;  // exact: a power-of-two scaling of a float
  double r = std::floor(q);
  if (q - r > 0.5 || (q - r == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
  const double rounded = r * ulp;
  if (std::abs(rounded) > largest) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return rounded == 0 ? std::copysign(0.0, x) : rounded;
}

/// Checks `bits` = `x` rounded to `type`, by value and sign.
bool rounds_as_defined(dtype type, float x, std::uint16_t bits) {
  const double want = defined_rounding(type, x);
  const double got = defined_value(type, bits);
  return got == want && std::signbit(got) == std::signbit(want);
}

using fixture = strata::test::half_device;

const dtype half_types[] = {dtype::float16, dtype::bfloat16};

/// Half an ulp of `type` at `x` (for |x| in its normal range).
double half_ulp(dtype type, double x) {
  const int mantissa_bits = type == dtype::float16 ? 10 : 7;
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::abs(x)))) - mantissa_bits - 1);
}

BOOST_AUTO_TEST_SUITE(kvstore_half)

BOOST_AUTO_TEST_CASE(conversions_match_a_table_of_hand_known_values) {
  const std::pair<float, std::uint16_t> f16[] = {
      {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.1f, 0x2e66}, {65504.0f, 0x7bff}, {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},  // the tie above the largest value rounds to infinity (IEEE, numpy)
      {std::ldexp(1.0f, -24), 0x0001}, {std::ldexp(1.0f, -25), 0x0000},  // tie to even: zero
      {std::ldexp(1.5f, -25), 0x0001}, {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie to even
      {1.0f + std::ldexp(3.0f, -11), 0x3c02}, {-0.0f, 0x8000}, {-INFINITY, 0xfc00}};
  for (auto [x, bits] : f16) {
    BOOST_TEST(sk::float16_bits(x) == bits, "float16 of " << x);
    BOOST_TEST(std::bit_cast<std::uint32_t>(sk::float16_value(bits)) == std::bit_cast<std::uint32_t>(static_cast<float>(defined_value(dtype::float16, bits))));
  }
  const std::pair<float, std::uint16_t> bf16[] = {
      {1.0f, 0x3f80}, {0.1f, 0x3dcd}, {1.0f + std::ldexp(1.0f, -8), 0x3f80},  // tie to even
      {1.0f + std::ldexp(3.0f, -8), 0x3f82}, {-INFINITY, 0xff80}, {-0.0f, 0x8000},
      {std::bit_cast<float>(0x7f7fffffu), 0x7f80}};  // the largest float rounds up to infinity
  for (auto [x, bits] : bf16) BOOST_TEST(sk::bfloat16_bits(x) == bits, "bfloat16 of " << x);
  BOOST_TEST(std::isnan(sk::float16_value(sk::float16_bits(NAN))));
  BOOST_TEST(std::isnan(sk::bfloat16_value(sk::bfloat16_bits(NAN))));
}

BOOST_AUTO_TEST_CASE(widening_is_exact_and_rounding_matches_round_to_nearest_even_on_random_floats) {
  for (auto type : half_types) {
    for (std::uint32_t b = 0; b < 0x10000; ++b) {  // every 16-bit pattern widens as the format defines
      const auto bits = static_cast<std::uint16_t>(b);
      const double want = defined_value(type, bits);
      if (std::isnan(want)) continue;
      BOOST_TEST_REQUIRE(static_cast<double>(sk::half_value(type, bits)) == want);
      BOOST_TEST_REQUIRE(sk::half_bits(type, sk::half_value(type, bits)) == bits);
    }
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::uint32_t> any;
    std::uniform_real_distribution<float> in_range(-70000.f, 70000.f);
    for (int i = 0; i < 200000; ++i) {
      // random bit patterns (every exponent), values near the 16-bit range, and exact ties
      float x = std::bit_cast<float>(any(rng));
      if (std::isnan(x)) continue;
      BOOST_TEST_REQUIRE(rounds_as_defined(type, x, sk::half_bits(type, x)), "x = " << x);
      x = in_range(rng) * std::ldexp(1.0f, -static_cast<int>(any(rng) % 30));
      BOOST_TEST_REQUIRE(rounds_as_defined(type, x, sk::half_bits(type, x)), "x = " << x);
      const auto lo = static_cast<std::uint16_t>(any(rng) & 0x7bfe);  // a tie between two neighbours
      const float tie = static_cast<float>(
          (defined_value(type, lo) + defined_value(type, static_cast<std::uint16_t>(lo + 1))) / 2);
      if (std::isfinite(tie)) BOOST_TEST_REQUIRE(rounds_as_defined(type, tie, sk::half_bits(type, tie)), "tie " << tie);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(pushes_to_a_16_bit_key_are_summed_in_float32_and_rounded_once, fixture) {
  for (auto type : half_types) {
    kv::client store(sys, kv::spawn(sys));
    // 1 + e + e rounds to 1 + 2e once; rounding after each addition would stay at 1 (two ties to even).
    const float e = std::ldexp(1.0f, type == dtype::float16 ? -11 : -8);
    BOOST_TEST_REQUIRE(await(store.init("w", make16(type, {0.f, 3.f}, {2}))).has_value());
    BOOST_TEST(pulled_values(store, "w", type, 2) == std::vector<float>({0.f, 3.f}), boost::test_tools::per_element());
    BOOST_TEST_REQUIRE(await(store.push("w", {make16(type, {1.f, 1.f}, {2}), make16(type, {e, -e}, {2}),
                                              make16(type, {e, -e}, {2})})).has_value());
    const auto got = pulled_bits(store, "w", type, 2);
    BOOST_TEST(got[0] == sk::half_bits(type, 1.0f + 2 * e));
    BOOST_TEST(got[1] == sk::half_bits(type, 1.0f - 2 * e));
    // random values: the float32 sum in push order, rounded once
    const std::size_t n = 257;
    std::vector<std::vector<float>> pushed;
    std::vector<strata::tensor> values;
    for (int k = 0; k < 4; ++k) {
      pushed.push_back(representable(type, random(n, -4.f, 4.f)));
      values.push_back(make16(type, pushed.back(), {static_cast<std::int64_t>(n)}));
    }
    BOOST_TEST_REQUIRE(await(store.init("r", make16(type, random(n), {static_cast<std::int64_t>(n)}))).has_value());
    BOOST_TEST_REQUIRE(await(store.push("r", values)).has_value());
    const auto sums = pulled_bits(store, "r", type, n);
    for (std::size_t i = 0; i < n; ++i) {
      float s = pushed[0][i];
      for (int k = 1; k < 4; ++k) s += pushed[static_cast<std::size_t>(k)][i];
      BOOST_TEST_REQUIRE(sums[i] == sk::half_bits(type, s));
    }
  }
}

BOOST_FIXTURE_TEST_CASE(compressed_pushes_to_a_16_bit_key_quantize_the_widened_value_and_round_the_sum_once, fixture) {
  // Each worker's value widened to float32 (exact) is quantized by MXNet's 2bit rule with a
  // float32 residual of its own; the sent values are summed in float32 in push order and the
  // sum rounded once into the key (assign). 0.3 is not a 16-bit value: only the sums are rounded.
  const float threshold = 0.3f;
  const std::size_t n = 101, workers = 2;
  for (auto type : half_types)
    for (std::size_t shards : {1, 3}) {
      BOOST_TEST_CONTEXT(strata::to_string(type) << ", " << shards << " shards") {
        kv::client store(sys, kv::spawn(sys, kv::options{.shards = shards, .chunk_bytes = 64}));
        BOOST_TEST_REQUIRE(await(store.init("g", make16(type, std::vector<float>(n, 0.f), {std::int64_t{n}}))).has_value());
        BOOST_TEST_REQUIRE(await(store.set_gradient_compression("2bit", threshold)).has_value());
        std::vector<std::vector<float>> residual(workers, std::vector<float>(n, 0.f));
        for (int round = 0; round < 4; ++round) {
          std::vector<std::vector<float>> grads;
          std::vector<strata::tensor> values;
          for (std::size_t w = 0; w < workers; ++w) {
            grads.push_back(representable(type, random(n, -0.4f, 0.4f)));
            values.push_back(make16(type, grads.back(), {std::int64_t{n}}));
          }
          BOOST_TEST_REQUIRE(await(store.push("g", values)).has_value());
          const auto got = pulled_bits(store, "g", type, n);
          for (std::size_t i = 0; i < n; ++i) {
            float sum = 0.f;
            for (std::size_t w = 0; w < workers; ++w) {
              const float r = residual[w][i] + grads[w][i];
              const float sent = r >= threshold ? threshold : r <= -threshold ? -threshold : 0.f;
              residual[w][i] = r - sent;
              sum = w == 0 ? sent : sum + sent;
            }
            BOOST_TEST_REQUIRE(got[i] == sk::half_bits(type, sum), "round " << round << ", element " << i);
          }
        }
      }
    }
}

BOOST_FIXTURE_TEST_CASE(a_push_or_pull_of_another_dtype_is_refused_with_one_sentence_and_changes_nothing, fixture) {
  kv::client store(sys, kv::spawn(sys));
  BOOST_TEST_REQUIRE(await(store.init("h", make16(dtype::float16, {1.f, 2.f}, {2}))).has_value());
  auto pushed = await(store.push("h", filled({2}, 5.f)));
  BOOST_TEST_REQUIRE(!pushed.has_value());
  BOOST_TEST(pushed.error().message() ==
             "kvstore push: the value for key \"h\" has dtype float32, expected float16.");
  auto pulled = await(store.pull("h", make16(dtype::bfloat16, {0.f, 0.f}, {2})));
  BOOST_TEST_REQUIRE(!pulled.has_value());
  BOOST_TEST(pulled.error().message() ==
             "kvstore pull: the output for key \"h\" has dtype bfloat16, expected float16.");
  BOOST_TEST(pulled_values(store, "h", dtype::float16, 2) == std::vector<float>({1.f, 2.f}), boost::test_tools::per_element());
  BOOST_TEST(await(store.version("h")).value() == 0u);
  auto sparse = await(store.push("h", std::vector<kv::row_sparse>{kv::row_sparse{filled({1}, 1.f), {0}, {2}}}));
  BOOST_TEST_REQUIRE(!sparse.has_value());
  BOOST_TEST(sparse.error().message() ==
             "kvstore push: the row-sparse value for key \"h\" has dtype float32, expected float16.");
  auto int_init = await(store.init("i", strata::tensor::from_host<std::int32_t>(std::vector<std::int32_t>{1, 2}, dev, strm)));
  BOOST_TEST_REQUIRE(!int_init.has_value());
  BOOST_TEST(int_init.error().message() ==
             "kvstore init: the value for key \"i\" has dtype int32, expected float32, float16 or bfloat16.");
}

// cpu and cuda stores keep 16-bit keys (kvstore_cuda_test.cpp compares a cuda store's bits with a cpu
// store's); sim stores hold no data and refuse them, at init and at the load of a checkpoint.
BOOST_FIXTURE_TEST_CASE(a_sim_store_refuses_16_bit_keys_at_init_and_load_with_one_sentence, fixture) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_kvstore_half_sim_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "half.ckpt").string();
  kv::client host(sys, kv::spawn(sys));
  BOOST_TEST_REQUIRE(await(host.init("f", make16(dtype::float16, random(4), {4}))).has_value());
  BOOST_TEST_REQUIRE(await(host.save(path)).has_value());

  strata::test::sim_stores sims(sys);
  for (auto* store : sims.both()) {
    for (auto type : half_types) {
      auto r = await(store->init("h", strata::tensor::empty({4}, type, sims.sim[0], sims.sim_stream)));
      BOOST_TEST_REQUIRE(!r.has_value());
      BOOST_TEST(r.error().message() == "kvstore init: the value for key \"h\" has dtype " +
                                            std::string(strata::to_string(type)) +
                                            ", which only cpu and cuda stores keep (this one is on sim:0); expected "
                                            "float32.");
    }
    auto loaded = await(store->load(path));
    BOOST_TEST_REQUIRE(!loaded.has_value());
    BOOST_TEST(loaded.error().message() ==
               "kvstore load: key \"f\" of the checkpoint holds float16 values, which only cpu and cuda stores keep "
               "(this one is on sim:0).");
  }
  std::filesystem::remove_all(dir);
}

BOOST_FIXTURE_TEST_CASE(tiny_sgd_steps_are_lost_without_multi_precision_and_add_up_with_it, fixture) {
  const std::size_t n = 64, steps = 200;
  const double lr = 1e-4;  // lr * grad < half an ulp of every value in [0.5, 1) in both dtypes
  for (auto type : half_types) {
    const auto w = representable(type, random(n, 0.5f, 0.99f));
    const auto g = representable(type, random(n, 0.5f, 1.f));
    for (bool multi : {false, true}) {
      for (double momentum : {0.0, 0.9}) {
        kv::client store(sys, kv::spawn(sys));
        BOOST_TEST_REQUIRE(await(store.init("w", make16(type, w, {64}))).has_value());
        BOOST_TEST_REQUIRE(await(store.send(kv::set_optimizer{.options = sk::sgd_options{.lr = lr, .momentum = momentum},
                                                              .multi_precision = multi})).has_value());
        std::vector<double> master(w.begin(), w.end()), velocity(n);
        for (std::size_t s = 0; s < steps; ++s) {
          BOOST_TEST_REQUIRE(await(store.push("w", make16(type, g, {64}))).has_value());
          for (std::size_t i = 0; i < n; ++i) {
            velocity[i] = momentum * velocity[i] + g[i];
            master[i] -= lr * velocity[i];
          }
        }
        const auto got = pulled_values(store, "w", type, n);
        for (std::size_t i = 0; i < n; ++i) {
          if (!multi && momentum == 0.0) {
            BOOST_TEST_REQUIRE(got[i] == w[i]);  // every step rounds back to the value
          } else if (multi) {
            // the fp32 master follows the float64 reference (1e-5), the value is it rounded
            BOOST_TEST_REQUIRE(std::abs(got[i] - master[i]) <= half_ulp(type, master[i]) + 1e-5);
            BOOST_TEST_REQUIRE(got[i] != w[i]);
          }
        }
      }
    }
  }
}

BOOST_FIXTURE_TEST_CASE(adam_with_multi_precision_follows_a_float64_reference, fixture) {
  const std::size_t n = 50;
  for (auto type : half_types) {
    kv::client store(sys, kv::spawn(sys));
    const auto w = representable(type, random(n));
    BOOST_TEST_REQUIRE(await(store.init(3, make16(type, w, {5, 10}))).has_value());
    const sk::adam_options o{.lr = 1e-3, .weight_decay = 0.01};
    BOOST_TEST_REQUIRE(await(store.send(kv::set_optimizer{.options = o, .multi_precision = true})).has_value());
    std::vector<double> p(w.begin(), w.end()), m(n), v(n);
    for (int step = 1; step <= 30; ++step) {
      const auto g = representable(type, random(n));
      BOOST_TEST_REQUIRE(await(store.push(3, make16(type, g, {5, 10}))).has_value());
      for (std::size_t i = 0; i < n; ++i) {
        const double gi = g[i] + o.weight_decay * p[i];
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
        const double mhat = m[i] / (1 - std::pow(o.beta1, step)), vhat = v[i] / (1 - std::pow(o.beta2, step));
        p[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
      }
    }
    auto pulled = await(store.pull(3, make16(type, std::vector<float>(n), {5, 10})));
    BOOST_TEST_REQUIRE(pulled.has_value());
    const auto got = bits_of(pulled->at(0));
    for (std::size_t i = 0; i < n; ++i)
      BOOST_TEST_REQUIRE(std::abs(sk::half_value(type, got[i]) - p[i]) <= half_ulp(type, p[i]) + 1e-5);
  }
}

/// One script on a store: 16-bit keys (some split in chunks on a sharded store), assign pushes,
/// then SGD with momentum and multi_precision, then Adam without it; the keys' bits at the end.
std::vector<std::vector<std::uint16_t>> half_script(fixture& f, kv::options options) {
  kv::client store(f.sys, kv::spawn(f.sys, std::move(options)));
  f.rng.seed(99);
  const std::vector<std::pair<std::string, dtype>> keys = {{"a", dtype::float16}, {"b", dtype::bfloat16}, {"c", dtype::float16}};
  const std::size_t n = 1000;
  for (const auto& [key, type] : keys)
    BOOST_TEST_REQUIRE(await(store.init(key, f.make16(type, f.random(n), {1000}))).has_value());
  auto push_all = [&] {
    for (const auto& [key, type] : keys)
      BOOST_TEST_REQUIRE(await(store.push(key, {f.make16(type, f.random(n), {1000}), f.make16(type, f.random(n), {1000})})).has_value());
  };
  push_all();
  BOOST_TEST_REQUIRE(await(store.send(kv::set_optimizer{.options = sk::sgd_options{.lr = 0.01, .momentum = 0.9},
                                                        .multi_precision = true})).has_value());
  for (int s = 0; s < 3; ++s) push_all();
  BOOST_TEST_REQUIRE(await(store.set_optimizer(sk::adam_options{.lr = 0.01})).has_value());
  for (int s = 0; s < 2; ++s) push_all();
  std::vector<std::vector<std::uint16_t>> out;
  for (const auto& [key, type] : keys) out.push_back(f.pulled_bits(store, key, type, n));
  return out;
}

BOOST_FIXTURE_TEST_CASE(a_sharded_store_holds_the_same_16_bit_values_as_one_store_bit_for_bit, fixture) {
  const auto one = half_script(*this, {});
  for (std::size_t shards : {2u, 3u}) {
    const auto sharded = half_script(*this, {.shards = shards, .chunk_bytes = 600});  // 2000-byte keys: 4 chunks
    BOOST_TEST(sharded == one);
  }
}

BOOST_FIXTURE_TEST_CASE(a_checkpoint_keeps_16_bit_dtypes_bits_and_master_copies, fixture) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_kvstore_half_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "half.ckpt").string();
  const std::size_t n = 300;
  const sk::sgd_options sgd{.lr = 1e-4, .momentum = 0.5};
  const auto g16 = random(n), gbf = random(n);
  auto step = [&](kv::client& store) {
    BOOST_TEST_REQUIRE(await(store.push({"f", "b"}, {make16(dtype::float16, g16, {300}), make16(dtype::bfloat16, gbf, {300})})).has_value());
  };
  auto optimizer = [&](kv::client& store) {
    BOOST_TEST_REQUIRE(await(store.send(kv::set_optimizer{.options = sgd, .multi_precision = true})).has_value());
  };
  kv::client first(sys, kv::spawn(sys));
  BOOST_TEST_REQUIRE(await(first.init({"f", "b"}, {make16(dtype::float16, random(n), {300}), make16(dtype::bfloat16, random(n), {300})})).has_value());
  optimizer(first);
  for (int s = 0; s < 3; ++s) step(first);
  BOOST_TEST_REQUIRE(await(first.save(path)).has_value());
  auto file = kv::read_checkpoint(path);
  BOOST_TEST_REQUIRE(file.has_value());
  BOOST_TEST((file->entries.at(0).type == dtype::bfloat16 && file->entries.at(1).type == dtype::float16));
  BOOST_TEST(file->entries.at(0).master.size() == n);
  for (int s = 0; s < 5; ++s) step(first);  // tiny steps: only the master copies carry them
  const auto want_f = pulled_bits(first, "f", dtype::float16, n), want_b = pulled_bits(first, "b", dtype::bfloat16, n);
  for (std::size_t shards : {1u, 3u}) {
    kv::client second(sys, kv::spawn(sys, {.shards = shards, .chunk_bytes = 200}));
    optimizer(second);
    BOOST_TEST_REQUIRE(await(second.load(path)).has_value());
    auto wrong = await(second.push("f", filled({300}, 1.f)));
    BOOST_TEST_REQUIRE(!wrong.has_value());  // the loaded key is float16 again
    for (int s = 0; s < 5; ++s) step(second);
    BOOST_TEST(pulled_bits(second, "f", dtype::float16, n) == want_f);
    BOOST_TEST(pulled_bits(second, "b", dtype::bfloat16, n) == want_b);
    BOOST_TEST_REQUIRE(await(second.save(path + ".again")).has_value());
  }
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_half_test
