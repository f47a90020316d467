// Gradient compression in the distributed stores: every worker quantizes its push with its own
// residual per key and sends packed codes. The reference applies MXNet's rule again here, once
// per worker with that worker's residual, and sums the workers' values in rank order.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "support/dist_world.hpp"

using namespace strata::test::dist;

namespace kvstore_dist_compression_test {

/// MXNet's rules (gradient_compression-inl.h), written again: r += g, then the value sent.
float two_bit_rule(float g, float& r, float t) {
  r = r + g;
  if (r >= t) return r = r - t, t;
  if (r <= -t) return r = r + t, -t;
  return 0.0f;
}
float one_bit_rule(float g, float& r, float t) {
  r = r + g;
  if (r > t) return r = r - 1.0f, 1.0f;
  return r = r + 1.0f, -1.0f;
}

/// The workers of a job, replayed in one process: each with its residual of each key.
struct workers_reference {
  std::string type;
  float threshold = 0.5f;
  std::map<std::pair<int, int>, std::vector<float>> residuals;  // (rank, key) -> residual

  /// What worker `r` sends for key `k` when its local sum is `g`.
  std::vector<float> sent(int r, int k, const std::vector<float>& g) {
    auto& res = residuals[{r, k}];
    if (res.size() != g.size()) res.assign(g.size(), 0.0f);
    std::vector<float> out(g.size());
    for (std::size_t i = 0; i < g.size(); ++i)
      out[i] = type == "2bit" ? two_bit_rule(g[i], res[i], threshold) : one_bit_rule(g[i], res[i], threshold);
    return out;
  }
};

std::size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i] ? 1 : 0;
  return n;
}

/// Rank `r`'s local sum for key `k` in round `t`: two values in round 3 (summed on the worker).
std::vector<float> local_sum(std::uint32_t seed, int r, int k, int t, std::size_t n) {
  auto g = gradient(seed, r, k, t, n);
  if (t == 3) {
    auto h = gradient(seed, r, k + 100, t, n);
    for (std::size_t i = 0; i < n; ++i) g[i] += h[i];
  }
  return g;
}

BOOST_AUTO_TEST_SUITE(kvstore_dist_compression)

BOOST_AUTO_TEST_CASE(compressed_dist_sync_equals_the_rule_applied_per_worker_and_summed_in_rank_order_bit_for_bit) {
  world& w = *the_world;
  struct setting {
    std::string type;
    float threshold;
    bool momentum;
  };
  for (const setting& set : {setting{"2bit", 0.5f, false}, setting{"2bit", 0.7f, true}, setting{"1bit", 0.0f, true}}) {
    BOOST_TEST_CONTEXT(set.type << " threshold " << set.threshold << (set.momentum ? " sgd momentum" : " no optimizer")) {
      kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
      const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
      const int n = kv.num_workers();
      const strata::kernels::sgd_options sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
      // One process: a local store gets every worker's compressed values of a round in rank order.
      strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
      if (set.momentum) {
        BOOST_REQUIRE(kv.set_optimizer(sgd));
        BOOST_REQUIRE(ref.set_optimizer(sgd).get());
      }
      BOOST_REQUIRE(kv.set_gradient_compression(set.type, set.threshold));
      workers_reference workers{set.type, set.threshold, {}};
      auto keys = some_keys(seed);
      for (std::size_t k = 0; k < keys.size(); ++k) {
        auto w0 = gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel());
        BOOST_REQUIRE(kv.init(keys[k].key, w.make(w0, keys[k].shape)));
        BOOST_REQUIRE(ref.init(keys[k].key, w.make(w0, keys[k].shape)).get());
      }
      for (int t = 1; t <= 4; ++t)
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const int ki = static_cast<int>(k);
          const std::size_t len = keys[k].numel();
          std::vector<strata::tensor> mine{w.make(gradient(seed, kv.rank(), ki, t, len), keys[k].shape)};
          if (t == 3) mine.push_back(w.make(gradient(seed, kv.rank(), ki + 100, t, len), keys[k].shape));
          auto got = kv.pushpull(keys[k].key, mine);
          BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
          std::vector<strata::kvstore::key> ks(static_cast<std::size_t>(n), keys[k].key);
          std::vector<strata::tensor> vs;
          std::vector<float> sum;
          for (int r = 0; r < n; ++r) {
            auto sent = workers.sent(r, ki, local_sum(seed, r, ki, t, len));
            if (r == 0) sum = sent;
            else
              for (std::size_t i = 0; i < len; ++i) sum[i] += sent[i];
            vs.push_back(w.make(sent, keys[k].shape));
          }
          std::vector<float> expected = sum;  // without an optimizer the value is the round's sum
          if (set.momentum) {
            BOOST_REQUIRE(ref.push(ks, vs).get());
            auto pulled = ref.pull(keys[k].key, w.make(std::vector<float>(len), keys[k].shape)).get();
            BOOST_REQUIRE(pulled);
            expected = w.host(pulled->front());
          }
          const std::size_t differ = differing(w.host(*got), expected);
          BOOST_TEST(differ == 0u, "key " << ki << " round " << t << ": " << differ << " of " << len << " differ");
        }
      BOOST_REQUIRE(kv.barrier());
    }
  }
}

BOOST_AUTO_TEST_CASE(compressed_dist_async_with_sgd_applies_every_workers_quantized_pushes) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::async, .value_device = w.cpu});
  const std::uint32_t seed = w.shared_seed(kv);
  const int n = kv.num_workers();
  const std::size_t len = 1001;
  const std::vector<std::int64_t> shape{7, 143};
  const double lr = 0.1;
  BOOST_REQUIRE(kv.set_optimizer(strata::kernels::sgd_options{.lr = lr}));
  BOOST_REQUIRE(kv.set_gradient_compression("2bit", 0.3f));
  auto w0 = gradient(seed, 99, 0, 0, len);
  BOOST_REQUIRE(kv.init("w", w.make(w0, shape)));
  const int pushes = 6;
  for (int t = 1; t <= pushes; ++t) BOOST_REQUIRE(kv.push("w", {w.make(gradient(seed, kv.rank(), 0, t, len), shape)}));
  BOOST_REQUIRE(kv.barrier());
  auto got = kv.pull("w");
  BOOST_REQUIRE(got);
  // Every push was applied once, in some order: w = w0 - lr * (every worker's sent values), in
  // float64; each worker's sent values come from its own residual, push after push.
  workers_reference workers{"2bit", 0.3f, {}};
  std::vector<double> expected(w0.begin(), w0.end());
  for (int r = 0; r < n; ++r)
    for (int t = 1; t <= pushes; ++t) {
      auto sent = workers.sent(r, 0, gradient(seed, r, 0, t, len));
      for (std::size_t i = 0; i < len; ++i) expected[i] -= lr * sent[i];
    }
  auto a = w.host(*got);
  double worst = 0;
  for (std::size_t i = 0; i < len; ++i) worst = std::max(worst, std::abs(a[i] - expected[i]));
  BOOST_TEST(worst < 1e-5, "max |diff| " << worst);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(bytes_pushed_is_a_sixteenth_for_2bit_and_a_thirty_second_for_1bit_and_none_drops_the_residuals) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
  const std::uint32_t seed = w.shared_seed(kv);
  const int n = kv.num_workers();
  const std::size_t len = 1000;  // not a multiple of 16: the last word is partly used
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(len)};
  BOOST_REQUIRE(kv.init("g", w.make(std::vector<float>(len, 0.0f), shape)));
  // One round with `type` ("none": uncompressed); answers the bytes it added and checks the value.
  workers_reference workers{"2bit", 0.5f, {}};
  auto round = [&](const std::string& type, float threshold, int t) {
    BOOST_REQUIRE(kv.set_gradient_compression(type, threshold));
    workers.type = type;
    workers.threshold = threshold;
    workers.residuals.clear();  // every setting starts from zero residuals
    const std::uint64_t before = kv.bytes_pushed();
    auto got = kv.pushpull("g", {w.make(gradient(seed, kv.rank(), 0, t, len), shape)});
    BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
    std::vector<float> sum(len, 0.0f);
    for (int r = 0; r < n; ++r) {
      auto g = gradient(seed, r, 0, t, len);
      auto sent = type == "none" ? g : workers.sent(r, 0, g);
      for (std::size_t i = 0; i < len; ++i) sum[i] = r == 0 ? sent[i] : sum[i] + sent[i];
    }
    BOOST_TEST(differing(w.host(*got), sum) == 0u, type << " round " << t);
    return kv.bytes_pushed() - before;
  };
  const std::uint64_t plain = round("none", 0.5f, 1);
  BOOST_TEST(plain == len * 4);
  const std::uint64_t two = round("2bit", 0.5f, 2);
  BOOST_TEST(two == (len + 15) / 16 * 4 + 4);  // 63 words and the threshold: 1/16 of 4000, rounded up
  const std::uint64_t one = round("1bit", 0.0f, 3);
  BOOST_TEST(one == (len + 31) / 32 * 4 + 4);  // 32 words and the threshold
  // "none" drops the residuals: the next round is the plain sum again, bit for bit.
  BOOST_TEST(round("none", 0.0f, 4) == len * 4);
  // And 2bit again starts from zero residuals.
  BOOST_TEST(round("2bit", 0.25f, 5) == two);
  BOOST_TEST(kv.bytes_pushed() == 2 * len * 4 + 2 * two + one);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(bad_compression_settings_and_refused_compressed_pushes_get_one_sentence_and_change_nothing) {
  world& w = *the_world;
  {
    kvd::store all(w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .value_device = w.cpu});
    auto refused = all.set_gradient_compression("2bit", 0.5f);
    BOOST_REQUIRE(!refused);
    BOOST_TEST(refused.error().message().find("dist_sync_allreduce") != std::string::npos);
    BOOST_REQUIRE(all.barrier());
  }
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
  const std::uint32_t seed = w.shared_seed(kv);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct bad {
    std::string type;
    float threshold;
    std::string says;
  };
  for (const bad& b : {bad{"3bit", 0.5f, "unknown type \"3bit\""}, bad{"2bit", 0.0f, "is not above 0"},
                       bad{"2bit", -1.0f, "is not above 0"}, bad{"2bit", nan, "is not above 0"},
                       bad{"1bit", inf, "is not finite"}}) {
    auto refused = kv.set_gradient_compression(b.type, b.threshold);
    BOOST_REQUIRE(!refused);
    BOOST_TEST(refused.error().message().find(b.says) != std::string::npos, refused.error().message());
  }
  if (kv.num_workers() > 1) {
    // One rank's bad setting is refused on every rank: nobody compresses alone.
    auto mixed = kv.rank() == 0 ? kv.set_gradient_compression("2bit", 0.5f) : kv.set_gradient_compression("4bit", 0.5f);
    BOOST_REQUIRE(!mixed);
    if (kv.rank() == 0) BOOST_TEST(mixed.error().message().find("another rank refused") != std::string::npos);
  }
  const std::size_t len = 100;
  const std::vector<std::int64_t> shape{10, 10};
  BOOST_REQUIRE(kv.init("x", w.make(std::vector<float>(len, 0.0f), shape)));
  BOOST_REQUIRE(kv.push("x", {w.make(gradient(seed, kv.rank(), 0, 1, len), shape)}));
  BOOST_TEST(kv.bytes_pushed() == len * 4);  // the refusals left compression off
  // A compressed push of the wrong shape is refused and leaves the residual as it was.
  BOOST_REQUIRE(kv.set_gradient_compression("2bit", 0.5f));
  workers_reference workers{"2bit", 0.5f, {}};
  auto wrong = kv.push("x", {w.make(gradient(seed, kv.rank(), 0, 2, 50), {50})});
  BOOST_REQUIRE(!wrong);
  BOOST_TEST(wrong.error().message().find("expected float32 [10, 10]") != std::string::npos, wrong.error().message());
  auto empty = kv.push("x", {});
  BOOST_REQUIRE(!empty);
  for (int t = 2; t <= 3; ++t) {
    auto got = kv.pushpull("x", {w.make(gradient(seed, kv.rank(), 0, t, len), shape)});
    BOOST_REQUIRE(got);
    std::vector<float> sum(len, 0.0f);
    for (int r = 0; r < kv.num_workers(); ++r) {
      auto sent = workers.sent(r, 0, gradient(seed, r, 0, t, len));
      for (std::size_t i = 0; i < len; ++i) sum[i] = r == 0 ? sent[i] : sum[i] + sent[i];
    }
    BOOST_TEST(differing(w.host(*got), sum) == 0u, "round " << t);
  }
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_dist_compression_test
