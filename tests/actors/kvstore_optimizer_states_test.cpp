// MXNet's save_optimizer_states / load_optimizer_states: the optimizer (hyper-parameters and
// scheduler) and every key's state in a file of their own, apart from the values checkpoint. A
// store that loads both continues exactly (bit for bit) where the saving store went on, across
// one store and a sharded one in both directions; bad files are refused with one sentence and
// change nothing.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/one_device.hpp"

namespace {

namespace kv = strata::kvstore;
using strata::test::await;

struct fixture : strata::test::one_device {
  const std::vector<std::int64_t> shape_a{3, 7};
  const std::vector<std::int64_t> shape_b{40};

  /// Pushes `grads` (one pair per step) to keys 1 and 2.
  void train(kv::client& store, const std::vector<std::pair<std::vector<float>, std::vector<float>>>& grads) {
    for (const auto& [ga, gb] : grads) BOOST_REQUIRE(await(store.push({1, 2}, {make(ga, shape_a), make(gb, shape_b)})).has_value());
  }
  std::vector<std::pair<std::vector<float>, std::vector<float>>> steps(int n) {
    std::vector<std::pair<std::vector<float>, std::vector<float>>> out;
    for (int i = 0; i < n; ++i) out.emplace_back(random(21), random(40));
    return out;
  }
  static std::vector<kv::options> stores() {
    kv::options sharded;
    sharded.shards = 3;
    sharded.chunk_bytes = 24;
    return {kv::options{}, sharded};
  }
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("strata_kvopt_" + std::to_string(::getpid()) + "_" + name)).string();
}

using optimizer = std::variant<strata::kernels::sgd_options, strata::kernels::adam_options>;

}  // namespace

BOOST_AUTO_TEST_SUITE(kvstore_optimizer_states)

BOOST_FIXTURE_TEST_CASE(a_store_that_loads_values_and_optimizer_states_continues_bit_for_bit, fixture) {
  const std::vector<std::pair<optimizer, kv::lr_scheduler>> settings{
      {strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
       kv::factor_scheduler{.step = 2, .factor = 0.5, .base_lr = 0.2}},
      {strata::kernels::adam_options{.lr = 0.01, .weight_decay = 0.1, .decoupled_weight_decay = true},
       kv::cosine_scheduler{.max_update = 9, .base_lr = 0.05, .final_lr = 0.001, .warmup = {.steps = 2, .begin_lr = 0.0}}},
      {strata::kernels::adam_options{.lr = 0.02, .beta1 = 0.8}, kv::multi_factor_scheduler{.steps = {2, 4}, .factor = 0.3, .base_lr = 0.03}},
  };
  const auto values = temp_path("values.ckpt");
  const auto states = temp_path("states.opt");
  for (const auto& [opt, schedule] : settings)
    for (const auto& saver : stores())
      for (const auto& loader : stores()) {
        BOOST_TEST_CONTEXT(opt.index() << ", " << saver.shards << " -> " << loader.shards << " shards") {
          kv::client a(sys, kv::spawn(sys, saver));
          BOOST_REQUIRE(await(a.init({1, 2}, {make(random(21), shape_a), make(random(40), shape_b)})).has_value());
          BOOST_REQUIRE(std::visit([&](const auto& o) { return await(a.set_optimizer(o, schedule)); }, opt).has_value());
          train(a, steps(3));
          BOOST_REQUIRE(await(a.save(values)).has_value());
          BOOST_REQUIRE(await(a.save_optimizer_states(states)).has_value());
          const auto later = steps(3);
          train(a, later);

          kv::client b(sys, kv::spawn(sys, loader));  // no set_optimizer: the file brings it
          BOOST_REQUIRE(await(b.load(values)).has_value());
          BOOST_REQUIRE(await(b.load_optimizer_states(states)).has_value());
          train(b, later);
          BOOST_TEST(value_of(b, 1, shape_a) == value_of(a, 1, shape_a), boost::test_tools::per_element());
          BOOST_TEST(value_of(b, 2, shape_b) == value_of(a, 2, shape_b), boost::test_tools::per_element());

          // Without the states (a fresh optimizer of the same settings) the run departs.
          kv::client c(sys, kv::spawn(sys, loader));
          BOOST_REQUIRE(await(c.load(values)).has_value());
          BOOST_REQUIRE(std::visit([&](const auto& o) { return await(c.set_optimizer(o, schedule)); }, opt).has_value());
          train(c, later);
          BOOST_TEST(value_of(c, 2, shape_b) != value_of(a, 2, shape_b));
        }
      }
  std::filesystem::remove(values);
  std::filesystem::remove(states);
}

BOOST_FIXTURE_TEST_CASE(bad_optimizer_states_requests_fail_with_one_sentence_and_change_nothing, fixture) {
  const auto values = temp_path("bad_values.ckpt");
  const auto states = temp_path("bad_states.opt");
  for (const auto& o : stores()) {
    BOOST_TEST_CONTEXT(o.shards << " shards") {
      kv::client store(sys, kv::spawn(sys, o));
      BOOST_REQUIRE(await(store.init({1, 2}, {make(random(21), shape_a), make(random(40), shape_b)})).has_value());
      auto refused = [&](strata::expected<strata::unit_t> r, const std::string& expected) {
        BOOST_TEST_REQUIRE(!r.has_value());
        BOOST_TEST(r.error().message().find(expected) != std::string::npos, r.error().message());
        BOOST_TEST(r.error().message().find('\n') == std::string::npos);
      };
      refused(await(store.save_optimizer_states(states)), "the store has no optimizer (set_optimizer)");
      BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::sgd_options{.lr = 0.5, .momentum = 0.5})).has_value());
      train(store, steps(1));
      BOOST_REQUIRE(await(store.save(values)).has_value());
      BOOST_REQUIRE(await(store.save_optimizer_states(states)).has_value());
      refused(await(store.load_optimizer_states(values)), "is not an optimizer states file: it is a values checkpoint; load it with load.");
      refused(await(store.load(states)), "is not a checkpoint: it holds optimizer states only; load it with load_optimizer_states.");
      refused(await(store.load_optimizer_states(temp_path("missing.opt"))), "cannot open optimizer states file");

      // A file of other keys or shapes, and a truncated one: refused, and the store's own
      // momentum stays (its next step equals a twin's that never saw the bad files).
      kv::client other(sys, kv::spawn(sys));
      BOOST_REQUIRE(await(other.init({1, 3}, {make(random(21), shape_a), make(random(5), {5})})).has_value());
      BOOST_REQUIRE(await(other.set_optimizer(strata::kernels::adam_options{})).has_value());
      const auto foreign = temp_path("foreign.opt");
      BOOST_REQUIRE(await(other.save_optimizer_states(foreign)).has_value());
      refused(await(store.load_optimizer_states(foreign)), "has key 3, which the store does not hold.");
      kv::client reshaped(sys, kv::spawn(sys));
      BOOST_REQUIRE(await(reshaped.init({1}, {make(random(21), {7, 3})})).has_value());
      BOOST_REQUIRE(await(reshaped.set_optimizer(strata::kernels::adam_options{})).has_value());
      BOOST_REQUIRE(await(reshaped.save_optimizer_states(foreign)).has_value());
      refused(await(store.load_optimizer_states(foreign)), "has key 1 of shape [7, 3]; the store holds it with shape [3, 7].");
      {
        std::ifstream in(states, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(foreign, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
      }
      refused(await(store.load_optimizer_states(foreign)), "is truncated or corrupt");
      std::filesystem::remove(foreign);

      kv::client twin(sys, kv::spawn(sys, o));
      BOOST_REQUIRE(await(twin.load(values)).has_value());
      BOOST_REQUIRE(await(twin.load_optimizer_states(states)).has_value());
      const auto next = steps(1);
      train(store, next);
      train(twin, next);
      BOOST_TEST(value_of(store, 2, shape_b) == value_of(twin, 2, shape_b), boost::test_tools::per_element());
    }
  }
  std::filesystem::remove(values);
  std::filesystem::remove(states);
}


namespace {

/// torch.optim's Adam (no weight decay) and SGD with momentum in float64: the reference the
/// store's float32 updates are checked against, with the rate of each step given.
struct reference_optimizer {
  bool adam = true;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, momentum = 0.9;
  std::vector<double> p, m, v;
  int t = 0;
  void step(const std::vector<float>& g, double lr) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (!adam) {  // buf = momentum * buf + g (the first step: buf = g), p -= lr * buf
        m[i] = t == 1 ? g[i] : momentum * m[i] + g[i];
        p[i] -= lr * m[i];
        continue;
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * double(g[i]) * g[i];
      const double mhat = m[i] / (1 - std::pow(beta1, t)), vhat = v[i] / (1 - std::pow(beta2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(set_learning_rate_changes_the_rate_and_keeps_every_keys_state, fixture) {
  for (const bool adam : {true, false})
    for (const auto& opts : stores()) {
      BOOST_TEST_CONTEXT((adam ? "adam" : "sgd momentum") << ", " << opts.shards << " shards") {
        const auto initial = random(40);
        kv::client store(sys, kv::spawn(sys, opts));
        BOOST_REQUIRE(await(store.init(2, make(initial, shape_b))).has_value());
        if (adam) BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::adam_options{.lr = 0.01})).has_value());
        else BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9})).has_value());
        reference_optimizer ref{.adam = adam};
        ref.p.assign(initial.begin(), initial.end());
        double lr = adam ? 0.01 : 0.1;
        for (int step = 0; step < 9; ++step) {
          if (step == 3 || step == 6) {  // two changes of rate, the state kept across both
            lr = step == 3 ? lr * 0.3 : lr * 2.5;
            BOOST_REQUIRE(await(store.set_learning_rate(lr)).has_value());
            // Refused rates change nothing: the next push still runs at `lr`.
            BOOST_TEST(!await(store.set_learning_rate(-1.0)).has_value());
            BOOST_TEST(!await(store.set_learning_rate(std::nan(""))).has_value());
          }
          const auto g = random(40);
          BOOST_REQUIRE(await(store.push(2, make(g, shape_b))).has_value());
          ref.step(g, lr);
        }
        const auto got = value_of(store, 2, shape_b);
        for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == ref.p[i], boost::test_tools::tolerance(1e-4));
      }
    }
}

BOOST_FIXTURE_TEST_CASE(set_learning_rate_without_an_optimizer_or_beside_a_scheduler_fails_with_one_sentence, fixture) {
  for (const auto& opts : stores()) {
    BOOST_TEST_CONTEXT(opts.shards << " shards") {
      kv::client store(sys, kv::spawn(sys, opts));
      BOOST_REQUIRE(await(store.init(2, make(random(40), shape_b))).has_value());
      auto none = await(store.set_learning_rate(0.1));  // the default rule (assign) has no rate
      BOOST_REQUIRE(!none.has_value());
      BOOST_TEST(none.error().message().find("has no optimizer") != std::string::npos, none.error().message());
      BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::adam_options{.lr = 0.01},
                                              kv::factor_scheduler{.step = 2, .factor = 0.5, .base_lr = 0.01}))
                        .has_value());
      auto scheduled = await(store.set_learning_rate(0.1));
      BOOST_REQUIRE(!scheduled.has_value());
      BOOST_TEST(scheduled.error().message().find("scheduler") != std::string::npos, scheduled.error().message());
      auto negative = await(store.set_learning_rate(-0.5));
      BOOST_REQUIRE(!negative.has_value());
      BOOST_TEST(negative.error().message().find("is not a learning rate") != std::string::npos);
      BOOST_REQUIRE(await(store.set_updater(kv::updater{})).has_value());  // back to assign
      BOOST_TEST(!await(store.set_learning_rate(0.1)).has_value());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
