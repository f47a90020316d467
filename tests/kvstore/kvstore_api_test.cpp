// Contract tests of the rest of MXNet's KVStore API: broadcast, pushpull in place, init of an
// existing key (keep_first), is_capable, store types by name. Each on one store and on a sharded
// store whose keys are split in chunks, on random data.

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cmath>
#include <numbers>
#include <chrono>
#include <future>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/three_devices.hpp"

namespace kvstore_api_test {


using strata::test::await;

struct fixture : strata::test::three_devices {
  fixture() : three_devices(20261203) {}
  /// One store, and three shards splitting every key of more than 4 floats in chunks.
  std::vector<strata::kvstore::options> stores(strata::kvstore::options base = {}) {
    strata::kvstore::options sharded = base;
    sharded.shards = 3;
    sharded.chunk_bytes = 16;
    return {base, sharded};
  }
};

const std::vector<std::int64_t> shape{3, 5};

BOOST_AUTO_TEST_SUITE(kvstore_api)

BOOST_FIXTURE_TEST_CASE(broadcast_inits_keys_and_pulls_them_into_every_output, fixture) {
  for (const auto& o : stores()) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    auto a = random(15), b = random(15);
    auto outs = await(kv.broadcast("a", make(a, shape), {zeros(shape, 0), zeros(shape, 1), zeros(shape, 2)})).value();
    BOOST_REQUIRE(outs.size() == 3u);
    for (const auto& out : outs) BOOST_TEST(read(out) == a, boost::test_tools::per_element());
    auto both = await(kv.broadcast({"b", "c"}, {make(b, shape), make(a, {15})}, {zeros(shape, 1), zeros({15}, 2)})).value();
    BOOST_TEST(read(both.at(0)) == b, boost::test_tools::per_element());
    BOOST_TEST(read(both.at(1)) == a, boost::test_tools::per_element());
    // The keys are stored: a push then assigns them as usual.
    auto g = random(15);
    BOOST_REQUIRE(await(kv.push("b", make(g, shape))).has_value());
    BOOST_TEST(value_of(kv, "b", shape) == g, boost::test_tools::per_element());
    BOOST_TEST(value_of(kv, "a", shape) == a, boost::test_tools::per_element());
  }
}

BOOST_FIXTURE_TEST_CASE(a_broadcast_with_a_bad_output_fails_whole_and_stores_nothing, fixture) {
  for (const auto& o : stores()) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    auto r = await(kv.broadcast("w", make(random(15), shape), {zeros({5, 3})}));
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().code() == strata::errc::invalid_argument);
    BOOST_TEST(r.error().message() == "kvstore broadcast: the output for key \"w\" has shape [5, 3], expected [3, 5] (the stored shape).");
    auto p = await(kv.pull("w", zeros(shape)));
    BOOST_REQUIRE(!p.has_value());
    BOOST_TEST(p.error().message() == "kvstore pull: key \"w\" is not initialised; call init first.");
  }
}

BOOST_FIXTURE_TEST_CASE(pushpull_in_place_writes_the_updated_value_into_the_pushed_tensors, fixture) {
  for (const auto& o : stores()) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    BOOST_REQUIRE(await(kv.init({1, 2}, {make(random(15), shape), make(random(4), {4})})).has_value());
    auto g0 = random(15), g1 = random(15), h = random(4);
    std::vector<float> sum(15);
    for (std::size_t i = 0; i < 15; ++i) sum[i] = g0[i] + g1[i];
    auto v0 = make(g0, shape, 1), v1 = make(g1, shape, 2);
    auto outs = await(kv.pushpull(1, {v0, v1})).value();
    BOOST_REQUIRE(outs.size() == 2u);
    BOOST_TEST(read(v0) == sum, boost::test_tools::per_element());  // the caller's own tensors
    BOOST_TEST(read(v1) == sum, boost::test_tools::per_element());
    BOOST_TEST(value_of(kv, 1, shape) == sum, boost::test_tools::per_element());
    // Several keys, with an optimizer: each tensor holds its key's new weight.
    auto w = value_of(kv, 2, {4});
    BOOST_REQUIRE(await(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.5})).has_value());
    auto vh = make(h, {4}), vs = make(g0, shape);
    BOOST_REQUIRE(await(kv.pushpull(std::vector<strata::kvstore::key>{2, 1}, {vh, vs})).has_value());
    BOOST_TEST(read(vh) == value_of(kv, 2, {4}), boost::test_tools::per_element());
    BOOST_TEST(read(vs) == value_of(kv, 1, shape), boost::test_tools::per_element());
    BOOST_TEST((read(vh) != w));  // the optimizer did change it
  }
}

BOOST_FIXTURE_TEST_CASE(pushpull_in_place_without_values_is_refused, fixture) {
  for (const auto& o : stores()) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    auto r = await(kv.pushpull(std::vector<strata::kvstore::key>{}, {}));
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message() == "kvstore pushpull: no keys given; expected at least one.");
  }
}

BOOST_FIXTURE_TEST_CASE(with_keep_first_a_second_init_of_a_key_is_ignored_and_the_first_value_wins, fixture) {
  for (const auto& o : stores({.init_existing = strata::kvstore::init_existing::keep_first})) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    auto first = random(15), second = random(15), other = random(4);
    BOOST_REQUIRE(await(kv.init(7, make(first, shape))).has_value());
    // Every worker inits: the store keeps the first value; a new key of the same call is stored.
    BOOST_REQUIRE(await(kv.init({7, 8}, {make(second, shape), make(other, {4})})).has_value());
    BOOST_TEST(value_of(kv, 7, shape) == first, boost::test_tools::per_element());
    BOOST_TEST(value_of(kv, 8, {4}) == other, boost::test_tools::per_element());
    BOOST_TEST(await(kv.version(7)).value() == 0u);
    // A broadcast of an existing key pulls the kept value.
    auto outs = await(kv.broadcast(7, make(second, shape), {zeros(shape, 1)})).value();
    BOOST_TEST(read(outs.at(0)) == first, boost::test_tools::per_element());
  }
}

BOOST_FIXTURE_TEST_CASE(with_keep_first_an_init_of_another_shape_is_refused, fixture) {
  for (const auto& o : stores({.init_existing = strata::kvstore::init_existing::keep_first})) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    auto first = random(15);
    BOOST_REQUIRE(await(kv.init(7, make(first, shape))).has_value());
    auto r = await(kv.init({9, 7}, {make(random(4), {4}), make(random(15), {15})}));
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message() == "kvstore init: the value for key 7 has shape [15], expected [3, 5] (the stored shape).");
    BOOST_TEST(value_of(kv, 7, shape) == first, boost::test_tools::per_element());
    BOOST_TEST(!await(kv.pull(9, zeros({4}))).has_value());  // nothing of the call was stored
  }
}

BOOST_FIXTURE_TEST_CASE(by_default_an_init_of_an_existing_key_is_still_an_error, fixture) {
  for (const auto& o : stores()) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    BOOST_REQUIRE(await(kv.init(7, make(random(15), shape))).has_value());
    auto r = await(kv.init(7, make(random(15), shape)));
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message() == "kvstore init: key 7 already exists.");
  }
}

BOOST_FIXTURE_TEST_CASE(a_store_is_capable_of_optimizer_and_refuses_unknown_capabilities, fixture) {
  for (const auto& o : stores()) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, o));
    BOOST_TEST(await(kv.is_capable("optimizer")).value());
    BOOST_TEST(await(kv.is_capable("Optimizer")).value());
    auto r = await(kv.is_capable("compression"));
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message() ==
               "kvstore is_capable: unknown capability \"compression\"; the known capabilities are: \"optimizer\".");
  }
}

BOOST_FIXTURE_TEST_CASE(stores_are_created_by_name_including_user_registered_types, fixture) {
  auto local = strata::kvstore::create(sys, "local");
  BOOST_REQUIRE(local.has_value());
  strata::kvstore::client kv(sys, *local);
  BOOST_TEST(await(kv.type()).value() == "local");
  auto on_device = strata::kvstore::create(sys, "device", {.merge_device = devs[1]});
  BOOST_REQUIRE(on_device.has_value());
  strata::kvstore::client dkv(sys, *on_device);
  BOOST_TEST(await(dkv.type()).value() == "device");
  auto w = random(15);
  BOOST_REQUIRE(await(dkv.init(0, make(w, shape))).has_value());
  BOOST_TEST(value_of(dkv, 0, shape) == w, boost::test_tools::per_element());

  // MXNet's 'teststore': a user type, here a keep_first store that counts how often it was made.
  static std::atomic<int> made{0};
  BOOST_REQUIRE(strata::kvstore::register_type("teststore", [](strata::actor_system& s, const strata::kvstore::options& o) {
                  ++made;
                  auto mine = o;
                  mine.init_existing = strata::kvstore::init_existing::keep_first;
                  return strata::kvstore::spawn(s, mine);
                }).has_value());
  auto test = strata::kvstore::create(sys, "teststore", {.shards = 2});
  BOOST_REQUIRE(test.has_value());
  BOOST_TEST(made.load() == 1);
  strata::kvstore::client tkv(sys, *test);
  BOOST_REQUIRE(await(tkv.init(1, make(w, shape))).has_value());
  BOOST_REQUIRE(await(tkv.init(1, make(random(15), shape))).has_value());  // kept: the user's rule
  BOOST_TEST(value_of(tkv, 1, shape) == w, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(mxnets_store_type_names_make_stores_that_report_the_name_they_were_made_by, fixture) {
  // MXNet's test_get_type: create('local_allreduce_cpu').type == 'local_allreduce_cpu'; its older
  // names make the stores strata calls local and device.
  for (const char* name : {"local_update_cpu", "local_allreduce_cpu", "local_allreduce_device", "local"}) {
    BOOST_TEST_CONTEXT(name) {
      auto made = strata::kvstore::create(sys, name, {.merge_device = devs[1]});
      BOOST_REQUIRE(made.has_value());
      strata::kvstore::client kv(sys, *made);
      BOOST_TEST(await(kv.type()).value() == name);
      auto w = random(15), g = random(15);
      BOOST_REQUIRE(await(kv.init(0, make(w, shape))).has_value());
      BOOST_REQUIRE(await(kv.push(0, make(g, shape))).has_value());
      BOOST_TEST(value_of(kv, 0, shape) == g, boost::test_tools::per_element());  // assign
    }
  }
  // local_allreduce_device is a device store: without a merge device it is refused as "device" is.
  auto no_device = strata::kvstore::create(sys, "local_allreduce_device");
  BOOST_REQUIRE(!no_device.has_value());
  BOOST_TEST(no_device.error().message() ==
             "kvstore::spawn: a device store needs kvstore::options::merge_device; none was given.");
  // A user's type whose factory passes the options on reports its registered name (MXNet's
  // test_get_type_device with 'teststore'), one store or sharded; a factory may still name it.
  BOOST_REQUIRE(strata::kvstore::register_type("zz_teststore", [](strata::actor_system& s, const strata::kvstore::options& o) {
                  return strata::kvstore::spawn(s, o);
                }).has_value());
  BOOST_REQUIRE(strata::kvstore::register_type("zz_named", [](strata::actor_system& s, const strata::kvstore::options& o) {
                  auto mine = o;
                  mine.type_name = "mine";
                  return strata::kvstore::spawn(s, mine);
                }).has_value());
  for (std::size_t shards : {1, 3}) {
    strata::kvstore::client test(sys, strata::kvstore::create(sys, "zz_teststore", {.shards = shards}).value());
    BOOST_TEST(await(test.type()).value() == "zz_teststore");
    strata::kvstore::client named(sys, strata::kvstore::create(sys, "zz_named", {.shards = shards}).value());
    BOOST_TEST(await(named.type()).value() == "mine");
  }
  // Spawned directly, a store still names its kind.
  strata::kvstore::client plain(sys, strata::kvstore::spawn(sys, {.shards = 2}));
  BOOST_TEST(await(plain.type()).value() == "local");
}

BOOST_FIXTURE_TEST_CASE(an_unknown_store_type_or_a_bad_registration_is_refused_with_one_sentence, fixture) {
  BOOST_REQUIRE(strata::kvstore::register_type("zz_other", [](strata::actor_system& s, const strata::kvstore::options& o) {
                  return strata::kvstore::spawn(s, o);
                }).has_value());
  auto r = strata::kvstore::create(sys, "dist_sync");
  BOOST_REQUIRE(!r.has_value());
  const std::string m = r.error().message();
  BOOST_TEST(m.starts_with("kvstore::create: unknown store type \"dist_sync\"; the known types are \"device\", \"local\", "));
  BOOST_TEST(m.find("\"zz_other\"") != std::string::npos);
  auto empty = strata::kvstore::register_type("", [](strata::actor_system& s, const strata::kvstore::options& o) {
    return strata::kvstore::spawn(s, o);
  });
  BOOST_REQUIRE(!empty.has_value());
  BOOST_TEST(empty.error().message() == "kvstore::register_type: the name is empty; expected a store type's name.");
  auto none = strata::kvstore::register_type("x", {});
  BOOST_REQUIRE(!none.has_value());
  BOOST_TEST(none.error().message() == "kvstore::register_type: the factory for \"x\" is empty; expected a function.");
  auto no_device = strata::kvstore::create(sys, "device");
  BOOST_REQUIRE(!no_device.has_value());
  BOOST_TEST(no_device.error().message() ==
             "kvstore::spawn: a device store needs kvstore::options::merge_device; none was given.");
}

BOOST_AUTO_TEST_SUITE_END()

// ---- learning-rate schedulers ------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(kvstore_lr_scheduler)

namespace kv = strata::kvstore;

/// MXNet's scheduler objects (mxnet/python/mxnet/lr_scheduler.py), transcribed as they are:
/// stateful, lowering base_lr in place, called with increasing update counts.
struct mxnet_warmup {
  std::int64_t steps;
  double begin;
  bool linear;
  double lr(double final_lr, std::int64_t n) const {
    if (linear) return begin + (final_lr - begin) * static_cast<double>(n) / static_cast<double>(steps);
    return begin;
  }
};
struct mxnet_factor {
  std::int64_t step;
  double factor, stop_factor_lr, base_lr;
  mxnet_warmup w;
  std::int64_t count = 0;
  double operator()(std::int64_t n) {
    if (n < w.steps) return w.lr(base_lr, n);
    while (n > count + step) {
      count += step;
      base_lr *= factor;
      if (base_lr < stop_factor_lr) base_lr = stop_factor_lr;
    }
    return base_lr;
  }
};
struct mxnet_multi_factor {
  std::vector<std::int64_t> step;
  double factor, base_lr;
  mxnet_warmup w;
  std::size_t cur_step_ind = 0;
  double operator()(std::int64_t n) {
    if (n < w.steps) return w.lr(base_lr, n);
    while (cur_step_ind <= step.size() - 1) {
      if (n > step[cur_step_ind]) {
        ++cur_step_ind;
        base_lr *= factor;
      } else {
        return base_lr;
      }
    }
    return base_lr;
  }
};
struct mxnet_cosine {
  std::int64_t max_update;
  double base_lr_orig, final_lr;
  mxnet_warmup w;
  double base_lr = 0;
  double operator()(std::int64_t n) {
    if (n < w.steps) return w.lr(base_lr_orig, n);
    const double max_steps = static_cast<double>(max_update - w.steps);
    if (n <= max_update)
      base_lr = final_lr + (base_lr_orig - final_lr) *
                               (1 + std::cos(std::numbers::pi * static_cast<double>(n - w.steps) / max_steps)) / 2;
    return base_lr;
  }
};

BOOST_AUTO_TEST_CASE(each_scheduler_gives_mxnets_learning_rates_exactly) {
  std::mt19937 rng(20261204);
  std::uniform_real_distribution<double> unit(0.05, 0.95);
  std::uniform_int_distribution<std::int64_t> small(1, 9);
  for (int round = 0; round < 20; ++round) {
    const bool linear = round % 2 == 0;
    const double base = unit(rng);
    const kv::lr_warmup w{.steps = round < 4 ? 0 : small(rng), .begin_lr = base * unit(rng),
                          .mode = linear ? kv::warmup_mode::linear : kv::warmup_mode::constant};
    const mxnet_warmup mw{w.steps, w.begin_lr, linear};
    kv::factor_scheduler f{.step = small(rng), .factor = unit(rng), .stop_factor_lr = base * 0.01, .base_lr = base, .warmup = w};
    std::vector<std::int64_t> steps{w.steps + small(rng)};
    for (int i = 0; i < 3; ++i) steps.push_back(steps.back() + small(rng));
    kv::multi_factor_scheduler m{.steps = steps, .factor = unit(rng), .base_lr = base, .warmup = w};
    kv::cosine_scheduler c{.max_update = w.steps + 10 * small(rng), .base_lr = base, .final_lr = base * unit(rng), .warmup = w};
    mxnet_factor rf{f.step, f.factor, f.stop_factor_lr, base, mw};
    mxnet_multi_factor rm{steps, m.factor, base, mw};
    mxnet_cosine rc{c.max_update, base, c.final_lr, mw};
    BOOST_REQUIRE(kv::check_scheduler(f).has_value());
    BOOST_REQUIRE(kv::check_scheduler(m).has_value());
    BOOST_REQUIRE(kv::check_scheduler(c).has_value());
    for (std::int64_t n = 1; n <= 150; ++n) {
      BOOST_TEST(kv::learning_rate(f, n) == rf(n), "factor, update " << n);
      BOOST_TEST(kv::learning_rate(m, n) == rm(n), "multi_factor, update " << n);
      BOOST_TEST(kv::learning_rate(c, n) == rc(n), "cosine, update " << n);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(the_stores_sgd_uses_the_scheduled_lr_at_each_update, fixture) {
  const kv::lr_scheduler schedules[] = {
      kv::factor_scheduler{.step = 3, .factor = 0.5, .base_lr = 0.4, .warmup = {.steps = 2, .begin_lr = 0.1}},
      kv::multi_factor_scheduler{.steps = {2, 5, 7}, .factor = 0.3, .base_lr = 0.2,
                                 .warmup = {.steps = 1, .begin_lr = 0.05, .mode = kv::warmup_mode::constant}},
      kv::cosine_scheduler{.max_update = 8, .base_lr = 0.3, .final_lr = 0.01, .warmup = {.steps = 3, .begin_lr = 0.0}},
  };
  for (const auto& schedule : schedules)
    for (const auto& o : stores()) {
      kv::client store(sys, kv::spawn(sys, o));
      auto w = random(15);
      BOOST_REQUIRE(await(store.init("w", make(w, shape))).has_value());
      BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::sgd_options{.lr = 7.0}, schedule)).has_value());
      for (std::int64_t n = 1; n <= 10; ++n) {
        auto g = random(15);
        BOOST_REQUIRE(await(store.push("w", make(g, shape))).has_value());
        const float neg_lr = static_cast<float>(-kv::learning_rate(schedule, n));
        for (std::size_t i = 0; i < w.size(); ++i) w[i] += neg_lr * g[i];
      }
      BOOST_TEST(value_of(store, "w", shape) == w, boost::test_tools::per_element());
    }
}

BOOST_FIXTURE_TEST_CASE(a_scheduler_without_a_base_lr_starts_from_the_optimizers_lr_as_in_mxnet, fixture) {
  // MXNet's Optimizer(learning_rate=lr, lr_scheduler=s) sets s.base_lr = lr: code ported from it
  // names the rate once, on the optimizer. A base_lr set by hand wins.
  const double lr = 0.4;
  const std::vector<std::pair<kv::lr_scheduler, kv::lr_scheduler>> cases{  // (unset, the same set by hand)
      {kv::factor_scheduler{.step = 2, .factor = 0.5}, kv::factor_scheduler{.step = 2, .factor = 0.5, .base_lr = lr}},
      {kv::multi_factor_scheduler{.steps = {1, 3}, .factor = 0.3},
       kv::multi_factor_scheduler{.steps = {1, 3}, .factor = 0.3, .base_lr = lr}},
      {kv::cosine_scheduler{.max_update = 6, .final_lr = 0.01, .warmup = {.steps = 2, .begin_lr = 0.1}},
       kv::cosine_scheduler{.max_update = 6, .base_lr = lr, .final_lr = 0.01, .warmup = {.steps = 2, .begin_lr = 0.1}}},
  };
  for (const auto& [unset, by_hand] : cases)
    for (const auto& o : stores()) {
      kv::client store(sys, kv::spawn(sys, o));
      auto w = random(15);
      BOOST_REQUIRE(await(store.init("w", make(w, shape))).has_value());
      BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::sgd_options{.lr = lr}, unset)).has_value());
      for (std::int64_t n = 1; n <= 7; ++n) {
        auto g = random(15);
        BOOST_REQUIRE(await(store.push("w", make(g, shape))).has_value());
        const float neg_lr = static_cast<float>(-kv::learning_rate(by_hand, n));
        for (std::size_t i = 0; i < w.size(); ++i) w[i] += neg_lr * g[i];
      }
      BOOST_TEST(value_of(store, "w", shape) == w, boost::test_tools::per_element());
    }
  // Alone (no optimizer), an unset base_lr is MXNet's default 0.01.
  BOOST_TEST(kv::learning_rate(kv::factor_scheduler{.step = 5}, 1) == 0.01);
  BOOST_TEST(kv::learning_rate(kv::factor_scheduler{.step = 5, .base_lr = 0.3}, 1) == 0.3);
}

BOOST_FIXTURE_TEST_CASE(bad_hyper_parameters_are_refused_with_one_sentence_and_the_rule_stays, fixture) {
  namespace k = strata::kernels;
  const double nan = std::nan("");
  struct bad_case {
    std::variant<k::sgd_options, k::adam_options> options;
    kv::lr_scheduler s;
    std::string sentence;
  };
  const std::vector<bad_case> cases{
      {k::sgd_options{.lr = nan}, {}, "kvstore set_optimizer: sgd_options::lr is nan; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{.lr = -1}, {}, "kvstore set_optimizer: sgd_options::lr is -1; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{.momentum = -5}, {}, "kvstore set_optimizer: sgd_options::momentum is -5; expected a finite number >= 0."},
      {k::sgd_options{.weight_decay = INFINITY}, {},
       "kvstore set_optimizer: sgd_options::weight_decay is inf; expected a finite number >= 0."},
      {k::sgd_options{.nesterov = true}, {},
       "kvstore set_optimizer: sgd_options::nesterov is set with momentum 0; expected a momentum above 0 (Nesterov momentum needs one)."},
      {k::adam_options{.beta1 = 2}, {}, "kvstore set_optimizer: adam_options::beta1 is 2; expected a number in [0, 1)."},
      {k::adam_options{.beta2 = 1}, {}, "kvstore set_optimizer: adam_options::beta2 is 1; expected a number in [0, 1)."},
      {k::adam_options{.eps = -1e-8}, {}, "kvstore set_optimizer: adam_options::eps is -1e-08; expected a finite number >= 0."},
      {k::adam_options{.lr = nan}, {}, "kvstore set_optimizer: adam_options::lr is nan; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{}, kv::factor_scheduler{.base_lr = nan},
       "kvstore set_optimizer: factor_scheduler::base_lr is nan; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{}, kv::factor_scheduler{.stop_factor_lr = -1},
       "kvstore set_optimizer: factor_scheduler::stop_factor_lr is -1; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{}, kv::multi_factor_scheduler{.steps = {2}, .base_lr = -0.5},
       "kvstore set_optimizer: multi_factor_scheduler::base_lr is -0.5; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{}, kv::factor_scheduler{.warmup = {.steps = 2, .begin_lr = nan}},
       "kvstore set_optimizer: factor_scheduler::warmup.begin_lr is nan; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{}, kv::cosine_scheduler{.max_update = 4, .final_lr = -0.1},
       "kvstore set_optimizer: cosine_scheduler::final_lr is -0.1; expected a learning rate (a finite number >= 0)."},
      {k::sgd_options{.lr = 0.1}, kv::cosine_scheduler{.max_update = 4, .final_lr = 0.1},  // MXNet: "Base lr has to be higher than final lr"
       "kvstore set_optimizer: cosine_scheduler::final_lr is 0.1, not below base_lr 0.1; expected the cosine to fall from "
       "base_lr to final_lr."},
      {k::sgd_options{.lr = nan}, kv::factor_scheduler{.base_lr = 0.1},  // a scheduler does not hide a bad lr
       "kvstore set_optimizer: sgd_options::lr is nan; expected a learning rate (a finite number >= 0)."},
  };
  for (const auto& o : stores()) {
    BOOST_TEST_CONTEXT(o.shards << " shards") {
      kv::client store(sys, kv::spawn(sys, o));
      auto w = random(15);
      BOOST_REQUIRE(await(store.init(1, make(w, shape))).has_value());
      for (const auto& c : cases) {
        auto r = std::visit([&](const auto& opt) { return await(store.set_optimizer(opt, c.s)); }, c.options);
        BOOST_REQUIRE(!r.has_value());
        BOOST_TEST(r.error().message() == c.sentence);
      }
      auto g = random(15);  // the rule is still assign
      BOOST_REQUIRE(await(store.push(1, make(g, shape))).has_value());
      BOOST_TEST(value_of(store, 1, shape) == g, boost::test_tools::per_element());
      // and the bounds themselves are accepted
      BOOST_TEST(await(store.set_optimizer(k::adam_options{.lr = 0, .beta1 = 0, .beta2 = 0, .eps = 0})).has_value());
      BOOST_TEST(await(store.set_optimizer(k::sgd_options{.lr = 0, .momentum = 0.5, .nesterov = true})).has_value());
    }
  }
}

BOOST_FIXTURE_TEST_CASE(a_bad_scheduler_is_refused_with_one_sentence_and_the_rule_stays, fixture) {
  struct bad_case {
    kv::lr_scheduler s;
    std::string sentence;
  };
  const std::vector<bad_case> cases{
      {kv::factor_scheduler{.step = 2, .factor = 1.5},
       "kvstore set_optimizer: factor_scheduler::factor is 1.5; expected a factor in (0, 1] that lowers the lr."},
      {kv::factor_scheduler{.step = 0}, "kvstore set_optimizer: factor_scheduler::step is 0; expected at least 1."},
      {kv::multi_factor_scheduler{.steps = {}, .factor = 0.5},
       "kvstore set_optimizer: multi_factor_scheduler::steps is empty; expected at least one step."},
      {kv::multi_factor_scheduler{.steps = {3, 3}, .factor = 0.5},
       "kvstore set_optimizer: multi_factor_scheduler::steps is not increasing at index 1; expected increasing steps."},
      {kv::cosine_scheduler{.max_update = 5, .warmup = {.steps = -2}},
       "kvstore set_optimizer: cosine_scheduler::warmup.steps is -2; expected 0 or more."},
      {kv::cosine_scheduler{.max_update = 3, .warmup = {.steps = 3}},
       "kvstore set_optimizer: cosine_scheduler::max_update is 3; expected at least 1 and more than warmup.steps."},
  };
  for (const auto& o : stores()) {
    kv::client store(sys, kv::spawn(sys, o));
    auto w = random(15);
    BOOST_REQUIRE(await(store.init(1, make(w, shape))).has_value());
    for (const auto& c : cases) {
      auto r = await(store.set_optimizer(strata::kernels::sgd_options{.lr = 0.5}, c.s));
      BOOST_REQUIRE(!r.has_value());
      BOOST_TEST(r.error().message() == c.sentence);
    }
    auto g = random(15);  // the rule is still assign
    BOOST_REQUIRE(await(store.push(1, make(g, shape))).has_value());
    BOOST_TEST(value_of(store, 1, shape) == g, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_api_test
