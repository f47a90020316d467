// Gradient compression (MXNet's set_gradient_compression), ported from MXNet's nightly kvstore
// test as a user would write it against strata: four values per push (MXNet's four devices),
// the "test" optimizer (stored += rate * merged) as a user updater, each case on one store and on
// a sharded store whose keys are split in chunks. The random case checks against the rule
// written again here, independently of the store's code.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/one_device.hpp"

namespace kvstore_compression_test {

constexpr std::size_t workers = 4;  // values per push, each with its own residual
constexpr float rate = 2.0f;        // the "test" optimizer's rescale_grad

using strata::test::await;

struct fixture : strata::test::one_device {
  const std::vector<std::vector<std::int64_t>> shapes{{4, 4}, {10, 10}, {30, 30}};

  std::vector<strata::tensor> each_worker(const std::vector<std::int64_t>& shape, float v) {
    std::vector<strata::tensor> out;
    for (std::size_t w = 0; w < workers; ++w) out.push_back(filled(shape, v));
    return out;
  }
  void expect_everywhere(strata::kvstore::client& kv, const strata::kvstore::key& key,
                         const std::vector<std::int64_t>& shape, float expected) {
    const auto got = value_of(kv, key, shape);
    BOOST_TEST(got == std::vector<float>(count(shape), expected), boost::test_tools::per_element());
  }
  /// MXNet's "test" optimizer: stored += rate * merged.
  static void test_optimizer(const strata::kvstore::key&, const strata::tensor& merged, strata::tensor& stored) {
    const float* g = merged.data<float>();
    float* p = stored.data<float>();
    for (std::int64_t i = 0; i < stored.numel(); ++i) p[i] += rate * g[i];
  }
  /// One store, and three shards splitting every key of more than 8 floats in chunks.
  static std::vector<strata::kvstore::options> stores() {
    strata::kvstore::options sharded;
    sharded.shards = 3;
    sharded.chunk_bytes = 32;
    return {strata::kvstore::options{}, sharded};
  }
};

/// The reference: MXNet's 2bit rule on one worker's gradient, in float like the store.
float two_bit(float g, float& residual, float threshold) {
  const float r = residual + g;
  if (r >= threshold) return residual = r - threshold, threshold;
  if (r <= -threshold) return residual = r + threshold, -threshold;
  residual = r;
  return 0.0f;
}
float one_bit(float g, float& residual, float threshold) {
  const float r = residual + g;
  if (r > threshold) return residual = r - 1.0f, 1.0f;
  residual = r + 1.0f;
  return -1.0f;
}

BOOST_AUTO_TEST_SUITE(kvstore_compression)

BOOST_FIXTURE_TEST_CASE(two_bit_compression_holds_small_gradients_back_until_they_reach_the_threshold, fixture) {
  const float threshold = 0.5f;
  for (const auto& o : stores()) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    BOOST_REQUIRE(await(kv.set_gradient_compression("2bit", threshold)).has_value());
    BOOST_REQUIRE(await(kv.set_updater(test_optimizer)).has_value());
    const std::vector<int> keys{3, 5, 7};
    for (std::size_t j = 0; j < keys.size(); ++j) BOOST_REQUIRE(await(kv.init(keys[j], filled(shapes[j], 0))).has_value());
    BOOST_REQUIRE(await(kv.init(9, filled(shapes[0], 1))).has_value());
    expect_everywhere(kv, 9, shapes[0], 1.0f);  // an init is not compressed
    for (std::size_t j = 0; j < keys.size(); ++j) {
      BOOST_TEST_CONTEXT("key " << keys[j] << (o.shards > 1 ? ", sharded" : "")) {
        expect_everywhere(kv, keys[j], shapes[j], 0.0f);  // a pull before any push
        BOOST_REQUIRE(await(kv.push(keys[j], each_worker(shapes[j], 0.0f))).has_value());
        expect_everywhere(kv, keys[j], shapes[j], 0.0f);
        // MXNet's verify_residual: 0.4 is held back; 0.4 + 0.2 passes as 0.5 with 0.1 left;
        // 0.1 + 0.2 is held; 0.3 + 0.2 passes as 0.5 with nothing left.
        BOOST_REQUIRE(await(kv.push(keys[j], each_worker(shapes[j], 0.4f))).has_value());
        expect_everywhere(kv, keys[j], shapes[j], 0.0f);
        BOOST_REQUIRE(await(kv.push(keys[j], each_worker(shapes[j], threshold - 0.3f))).has_value());
        float current = threshold * rate * workers;
        expect_everywhere(kv, keys[j], shapes[j], current);
        BOOST_REQUIRE(await(kv.push(keys[j], each_worker(shapes[j], 0.2f))).has_value());
        expect_everywhere(kv, keys[j], shapes[j], current);
        BOOST_REQUIRE(await(kv.push(keys[j], each_worker(shapes[j], threshold - 0.3f))).has_value());
        current += threshold * rate * workers;
        expect_everywhere(kv, keys[j], shapes[j], current);
        // MXNet's check_neg: -threshold passes whole each time.
        for (int r = 0; r < 3; ++r) {
          current += rate * workers * -threshold;
          BOOST_REQUIRE(await(kv.push(keys[j], each_worker(shapes[j], -threshold))).has_value());
          expect_everywhere(kv, keys[j], shapes[j], current);
        }
      }
    }
  }
}

BOOST_FIXTURE_TEST_CASE(compressed_random_gradients_match_the_rule_applied_per_worker_with_its_residual, fixture) {
  struct setting {
    const char* type;
    float threshold;
    float (*rule)(float, float&, float);
  };
  for (const setting& s : {setting{"2bit", 0.5f, two_bit}, setting{"1bit", 0.0f, one_bit}}) {
    for (const auto& o : stores()) {
      BOOST_TEST_CONTEXT(s.type << (o.shards > 1 ? ", sharded" : "")) {
        strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
        BOOST_REQUIRE(await(kv.set_gradient_compression(s.type, s.threshold)).has_value());
        BOOST_REQUIRE(await(kv.set_updater(test_optimizer)).has_value());
        const auto& shape = shapes[2];
        const std::size_t n = count(shape);
        BOOST_REQUIRE(await(kv.init(13, filled(shape, 0))).has_value());
        std::vector<std::vector<float>> residual(workers, std::vector<float>(n, 0.0f));
        std::vector<float> expected(n, 0.0f);
        std::uniform_real_distribution<float> d(-0.6f, 0.6f);
        for (int round = 0; round < 4; ++round) {  // residuals carry over between rounds
          std::vector<strata::tensor> grads;
          std::vector<float> merged(n, 0.0f);
          for (std::size_t w = 0; w < workers; ++w) {
            std::vector<float> g(n);
            for (auto& x : g) x = d(rng);
            grads.push_back(make(g, shape));
            for (std::size_t i = 0; i < n; ++i) merged[i] += s.rule(g[i], residual[w][i], s.threshold);
          }
          for (std::size_t i = 0; i < n; ++i) expected[i] += rate * merged[i];
          BOOST_REQUIRE(await(kv.push(13, grads)).has_value());
          BOOST_TEST(value_of(kv, 13, shape) == expected, boost::test_tools::per_element());
        }
      }
    }
  }
}

BOOST_FIXTURE_TEST_CASE(none_turns_compression_off_and_drops_the_residuals, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_REQUIRE(await(kv.set_updater(test_optimizer)).has_value());
  BOOST_REQUIRE(await(kv.init(1, filled(shapes[0], 0))).has_value());
  BOOST_REQUIRE(await(kv.set_gradient_compression("2bit", 0.5f)).has_value());
  BOOST_REQUIRE(await(kv.push(1, each_worker(shapes[0], 0.4f))).has_value());  // all held back
  expect_everywhere(kv, 1, shapes[0], 0.0f);
  BOOST_REQUIRE(await(kv.set_gradient_compression("none", 0.5f)).has_value());
  BOOST_REQUIRE(await(kv.push(1, each_worker(shapes[0], 0.25f))).has_value());  // merged as pushed
  expect_everywhere(kv, 1, shapes[0], rate * 0.25f * workers);
  BOOST_REQUIRE(await(kv.set_gradient_compression("2bit", 0.5f)).has_value());
  BOOST_REQUIRE(await(kv.push(1, each_worker(shapes[0], 0.25f))).has_value());  // 0.4 was dropped
  expect_everywhere(kv, 1, shapes[0], rate * 0.25f * workers);
}

BOOST_FIXTURE_TEST_CASE(bad_compression_settings_are_refused_with_one_sentence, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto refused = [&](const std::string& type, float threshold, const std::string& expected) {
    auto r = await(kv.set_gradient_compression(type, threshold));
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message().find(expected) != std::string::npos, r.error().message());
    BOOST_TEST(r.error().message().find('\n') == std::string::npos);
  };
  refused("3bit", 0.5f, "unknown type \"3bit\"; the known types are \"2bit\", \"1bit\" and \"none\".");
  refused("2bit", 0.0f, "threshold 0.000000 is not above 0");
  refused("2bit", -1.0f, "is not above 0");
  refused("1bit", std::numeric_limits<float>::quiet_NaN(), "is not finite");
  // A refused setting changes nothing: pushes stay uncompressed.
  BOOST_REQUIRE(await(kv.init(1, filled(shapes[0], 0))).has_value());
  BOOST_REQUIRE(await(kv.push(1, each_worker(shapes[0], 0.25f))).has_value());
  expect_everywhere(kv, 1, shapes[0], 0.25f * workers);

  strata::kvstore::options synchronous;
  synchronous.contributions_per_version = 2;
  strata::kvstore::client sync_kv(sys, strata::kvstore::spawn(sys, synchronous));
  auto r = await(sync_kv.set_gradient_compression("2bit", 0.5f));
  BOOST_TEST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message().find("collect the pushes of 2 workers") != std::string::npos, r.error().message());
}

// cpu and cuda stores compress (kvstore_cuda_test.cpp checks cuda against cpu); a sim store's work
// computes nothing, so it refuses.
BOOST_FIXTURE_TEST_CASE(a_sim_store_refuses_compression_with_one_sentence_and_takes_none, fixture) {
  strata::device_manager sims(strata::device_options{.sim_time_scale = 0});
  auto sim = sims.create("sim:1");
  for (const auto& o : {strata::kvstore::options{.kind = strata::kvstore::kind::device, .merge_device = sim[0]},
                        strata::kvstore::options{.shards = 2, .shard_devices = sim}}) {
    BOOST_TEST_CONTEXT((o.shards > 1 ? "sharded" : "one store")) {
      strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
      auto r = await(kv.set_gradient_compression("1bit", 0.0f));
      BOOST_TEST_REQUIRE(!r.has_value());
      BOOST_TEST(r.error().message() ==
                 "kvstore set_gradient_compression: compression runs on cpu and cuda stores only (this store merges "
                 "on sim:0).");
      BOOST_TEST(await(kv.set_gradient_compression("none", 0.5f)).has_value());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_compression_test
