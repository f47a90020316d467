// Contract tests of the kvstore actor: init/push/pull semantics, merges, updaters, optimisers,
// errors (one per kind, store unchanged), ordering per sender, synchronous mode.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "strata/kvstore/kvstore.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/three_devices.hpp"

using namespace std::chrono_literals;

namespace kvstore_test {


using strata::test::await;

/// Devices, streams and random data shared by the tests.
struct fixture : strata::test::three_devices {
  fixture() : three_devices(20240601) {}
  /// Small integers as floats: every sum of a few of them is exact.
  std::vector<float> random_ints(std::size_t n) {
    std::uniform_int_distribution<int> d(-50, 50);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(d(rng));
    return v;
  }
};

const std::vector<std::int64_t> shape23{2, 3};

BOOST_AUTO_TEST_SUITE(kvstore)

BOOST_FIXTURE_TEST_CASE(a_pull_after_init_returns_the_initial_value, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto v = random(35);
  BOOST_TEST(await(kv.init(7, make(v, {5, 7}))).has_value());
  auto outs = await(kv.pull(7, zeros({5, 7}, 1))).value();
  BOOST_REQUIRE(outs.size() == 1u);
  BOOST_TEST(read(outs[0]) == v, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(values_pushed_from_several_devices_are_summed_then_assigned, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_TEST(await(kv.init("w", make(random(6), shape23))).has_value());
  std::vector<std::vector<float>> parts = {random(6), random(6), random(6)};
  BOOST_TEST(await(kv.push("w", {make(parts[0], shape23, 0), make(parts[1], shape23, 1), make(parts[2], shape23, 2)}))
                 .has_value());
  std::vector<float> expected(6);
  for (std::size_t i = 0; i < 6; ++i) expected[i] = (parts[0][i] + parts[1][i]) + parts[2][i];  // summed in order
  BOOST_TEST(value_of(kv, "w", shape23) == expected, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(one_key_is_pulled_into_outputs_on_several_devices, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto v = random(6);
  BOOST_TEST(await(kv.init(3, make(v, shape23))).has_value());
  auto outs = await(kv.pull(3, std::vector<strata::tensor>{zeros(shape23, 1), zeros(shape23, 2)})).value();
  BOOST_REQUIRE(outs.size() == 2u);
  BOOST_TEST(read(outs[0]) == v, boost::test_tools::per_element());
  BOOST_TEST(read(outs[1]) == v, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(several_keys_are_handled_in_one_call, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto a = random(4), b = random(9);
  BOOST_TEST(await(kv.init({1, 2}, {make(a, {4}), make(b, {3, 3})})).has_value());
  auto ga = random(4), gb = random(9);
  BOOST_TEST(await(kv.push({2, 1}, {make(gb, {3, 3}), make(ga, {4})})).has_value());
  auto outs = await(kv.pull({1, 2}, {zeros({4}, 2), zeros({3, 3}, 1)})).value();
  BOOST_TEST(read(outs[0]) == ga, boost::test_tools::per_element());
  BOOST_TEST(read(outs[1]) == gb, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(pushpull_pushes_then_pulls_in_one_round_trip, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_TEST(await(kv.init("k", make(random(6), shape23))).has_value());
  auto g0 = random_ints(6), g1 = random_ints(6);
  auto outs = await(kv.pushpull("k", {make(g0, shape23, 0), make(g1, shape23, 1)}, {zeros(shape23, 2)})).value();
  std::vector<float> expected(6);
  for (std::size_t i = 0; i < 6; ++i) expected[i] = g0[i] + g1[i];
  BOOST_TEST(read(outs[0]) == expected, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_device_store_merges_on_its_device, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.kind = strata::kvstore::kind::device,
                                                             .merge_device = devs[2]}));
  BOOST_TEST(await(kv.init(0, make(random(6), shape23, 0))).has_value());
  auto g0 = random_ints(6), g1 = random_ints(6);
  BOOST_TEST(await(kv.push(0, {make(g0, shape23, 0), make(g1, shape23, 1)})).has_value());
  std::vector<float> expected(6);
  for (std::size_t i = 0; i < 6; ++i) expected[i] = g0[i] + g1[i];
  BOOST_TEST(value_of(kv, 0, shape23) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_device_store_without_a_device_is_refused) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  BOOST_CHECK_THROW(strata::kvstore::spawn(sys, {.kind = strata::kvstore::kind::device}), std::invalid_argument);
}

BOOST_FIXTURE_TEST_CASE(a_tensor_of_another_device_kind_is_refused_naming_the_kind_the_store_reads, fixture) {
  strata::device_manager sims(strata::device_options{.sim_time_scale = 0});
  auto sim = sims.create("sim:1");
  auto sim_stream = sim[0].create_stream();
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto r = await(kv.init("w", strata::tensor::empty(shape23, strata::dtype::float32, sim[0], sim_stream)));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() ==
             "kvstore init: the value for key \"w\" is on sim:0, which a store on cpu:0 cannot read; expected a cpu or cuda "
             "tensor (sim tensors hold no data).");
  strata::kvstore::client on_sim(sys, strata::kvstore::spawn(sys, {.kind = strata::kvstore::kind::device,
                                                                 .merge_device = sim[0]}));
  auto s = await(on_sim.init("w", make(random(6), shape23)));
  BOOST_REQUIRE(!s.has_value());
  BOOST_TEST(s.error().message() ==
             "kvstore init: the value for key \"w\" is on cpu:0, which a store on sim:0 cannot read; expected a sim tensor.");
}

// ---- updaters and optimisers ------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_user_updater_runs_inside_the_store_with_the_merged_value, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto w = random(6);
  BOOST_TEST(await(kv.init("w", make(w, shape23))).has_value());
  std::vector<std::string> seen;
  BOOST_TEST(await(kv.set_updater([&seen](const strata::kvstore::key& key, const strata::tensor& merged,
                                          strata::tensor& stored) {
               seen.push_back(key.to_string());
               const float* g = merged.data<float>();
               float* p = stored.data<float>();
               for (std::int64_t i = 0; i < stored.numel(); ++i) p[i] -= 0.5f * g[i];
             })).has_value());
  auto g0 = random(6), g1 = random(6);
  BOOST_TEST(await(kv.push("w", {make(g0, shape23, 1), make(g1, shape23, 2)})).has_value());
  std::vector<float> expected(6);
  for (std::size_t i = 0; i < 6; ++i) expected[i] = w[i] - 0.5f * (g0[i] + g1[i]);
  BOOST_TEST(value_of(kv, "w", shape23) == expected, boost::test_tools::per_element());
  BOOST_TEST(seen == std::vector<std::string>{"\"w\""}, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_throwing_updater_fails_that_push_only, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_TEST(await(kv.init(1, make(random(6), shape23))).has_value());
  BOOST_TEST(await(kv.set_updater([](const strata::kvstore::key&, const strata::tensor&, strata::tensor&) {
               throw std::runtime_error("boom");
             })).has_value());
  auto r = await(kv.push(1, make(random(6), shape23)));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore push: the update of key 1 failed: boom");
  BOOST_TEST(await(kv.set_updater({})).has_value());  // back to assign; the store still works
  auto g = random(6);
  BOOST_TEST(await(kv.push(1, make(g, shape23))).has_value());
  BOOST_TEST(value_of(kv, 1, shape23) == g, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(sgd_with_momentum_and_weight_decay_matches_a_host_reference, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  const std::size_t n = 50;
  auto w = random(n);
  BOOST_TEST(await(kv.init({10, 11}, {make(w, {50}), make(w, {50})})).has_value());
  strata::kernels::sgd_options o{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
  BOOST_TEST(await(kv.set_optimizer(o)).has_value());
  std::vector<double> ref(w.begin(), w.end()), buf(n, 0.0);
  for (int step = 0; step < 4; ++step) {
    auto g0 = random(n), g1 = random(n);
    BOOST_TEST(await(kv.push(10, {make(g0, {50}, 0), make(g1, {50}, 1)})).has_value());
    for (std::size_t i = 0; i < n; ++i) {
      double d = static_cast<double>(g0[i] + g1[i]) + o.weight_decay * ref[i];
      buf[i] = step == 0 ? d : o.momentum * buf[i] + d;
      ref[i] -= o.lr * buf[i];
    }
  }
  auto got = value_of(kv, 10, {50});
  for (std::size_t i = 0; i < n; ++i) BOOST_TEST(std::abs(got[i] - ref[i]) <= 1e-5);
  BOOST_TEST(value_of(kv, 11, {50}) == w, boost::test_tools::per_element());  // other keys untouched
}

BOOST_FIXTURE_TEST_CASE(adam_keeps_state_per_key_and_matches_a_host_reference, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  const std::size_t n = 40;
  auto wa = random(n), wb = random(n);
  BOOST_TEST(await(kv.init({"a", "b"}, {make(wa, {40}), make(wb, {40})})).has_value());
  strata::kernels::adam_options o{.lr = 0.01, .weight_decay = 0.1};
  BOOST_TEST(await(kv.set_optimizer(o)).has_value());
  struct ref_state {
    std::vector<double> w, m, v;
    int step = 0;
  };
  std::map<std::string, ref_state> ref;
  ref["a"] = {std::vector<double>(wa.begin(), wa.end()), std::vector<double>(n), std::vector<double>(n)};
  ref["b"] = {std::vector<double>(wb.begin(), wb.end()), std::vector<double>(n), std::vector<double>(n)};
  for (const char* key : {"a", "a", "b", "a", "b"}) {
    auto g = random(n);
    BOOST_TEST(await(kv.push(key, make(g, {40}))).has_value());
    auto& r = ref[key];
    ++r.step;
    for (std::size_t i = 0; i < n; ++i) {
      double gi = g[i] + o.weight_decay * r.w[i];
      r.m[i] = o.beta1 * r.m[i] + (1 - o.beta1) * gi;
      r.v[i] = o.beta2 * r.v[i] + (1 - o.beta2) * gi * gi;
      double mhat = r.m[i] / (1 - std::pow(o.beta1, r.step));
      double vhat = r.v[i] / (1 - std::pow(o.beta2, r.step));
      r.w[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
    }
  }
  for (const char* key : {"a", "b"}) {
    auto got = value_of(kv, key, {40});
    for (std::size_t i = 0; i < n; ++i) BOOST_TEST(std::abs(got[i] - ref[key].w[i]) <= 1e-5);
  }
}

// ---- errors: one clear sentence, store unchanged ------------------------------------------------

struct error_fixture : fixture {
  std::vector<float> w = random(6);
  strata::kvstore::client kv{sys, strata::kvstore::spawn(sys)};
  error_fixture() { BOOST_REQUIRE(await(kv.init("3", make(w, shape23))).has_value()); }
  void check_unchanged() {
    BOOST_TEST(value_of(kv, "3", shape23) == w, boost::test_tools::per_element());
    BOOST_TEST(await(kv.version("3")).value() == 0u);
  }
};

BOOST_FIXTURE_TEST_CASE(init_of_an_existing_key_fails, error_fixture) {
  auto r = await(kv.init({"4", "3"}, {make(random(6), shape23), make(random(6), shape23)}));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(r.error().message() == "kvstore init: key \"3\" already exists.");
  check_unchanged();
  auto p = await(kv.pull("4", zeros(shape23)));  // the other key of the call was not stored either
  BOOST_REQUIRE(!p.has_value());
}

BOOST_FIXTURE_TEST_CASE(a_push_to_an_unknown_key_fails, error_fixture) {
  auto r = await(kv.push({"3", "8"}, {make(random(6), shape23), make(random(6), shape23)}));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore push: key \"8\" is not initialised; call init first.");
  check_unchanged();
}

BOOST_FIXTURE_TEST_CASE(a_pull_of_an_unknown_key_fails, error_fixture) {
  auto r = await(kv.pull("9", zeros(shape23)));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore pull: key \"9\" is not initialised; call init first.");
  check_unchanged();
}

BOOST_FIXTURE_TEST_CASE(a_push_with_another_shape_fails, error_fixture) {
  auto r = await(kv.push("3", {make(random(6), shape23), make(random(6), {3, 2})}));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() ==
             "kvstore push: the value for key \"3\" has shape [3, 2], expected [2, 3] (the stored shape).");
  check_unchanged();
}

BOOST_FIXTURE_TEST_CASE(a_pull_into_another_shape_fails, error_fixture) {
  auto r = await(kv.pull("3", zeros({6})));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() ==
             "kvstore pull: the output for key \"3\" has shape [6], expected [2, 3] (the stored shape).");
  check_unchanged();
}

BOOST_FIXTURE_TEST_CASE(a_push_of_another_dtype_fails, error_fixture) {
  std::vector<std::int32_t> ints(6, 1);
  auto t = strata::tensor::from_host<std::int32_t>(std::span<const std::int32_t>(ints), shape23, devs[0], streams[0]);
  auto r = await(kv.push("3", t));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore push: the value for key \"3\" has dtype int32, expected float32.");
  check_unchanged();
}

BOOST_FIXTURE_TEST_CASE(mixing_integer_and_string_keys_fails, error_fixture) {
  auto r = await(kv.init(5, make(random(6), shape23)));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() ==
             "kvstore init: key 5 is an integer but this store holds string keys; one store cannot mix key kinds.");
  auto p = await(kv.push(5, make(random(6), shape23)));
  BOOST_REQUIRE(!p.has_value());
  BOOST_TEST(p.error().message() ==
             "kvstore push: key 5 is an integer but this store holds string keys; one store cannot mix key kinds.");
  check_unchanged();
}

BOOST_FIXTURE_TEST_CASE(keys_and_values_of_different_counts_fail, error_fixture) {
  auto r = await(kv.push(std::vector<strata::kvstore::key>{"3", "3"}, std::vector<strata::tensor>{make(w, shape23)}));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore push: 2 keys and 1 values; expected one value per key.");
  check_unchanged();
}

// ---- ordering ----------------------------------------------------------------------------------

/// What one sender actor saw: the value each of its pulls returned.
struct sender_log {
  std::vector<std::vector<float>> pushed;
  std::vector<std::vector<float>> pulled;
};

BOOST_FIXTURE_TEST_CASE(each_sender_sees_its_own_pushes_in_order, fixture) {
  // Several sender actors fire push, pull, push, pull, ... without waiting; every pull must see
  // the push just before it (own key per sender), and a shared key sums everything in the end.
  auto store = strata::kvstore::spawn(sys);
  strata::kvstore::client kv(sys, store);
  const int senders = 4, rounds = 25;
  std::vector<strata::kvstore::key> keys;
  std::vector<strata::tensor> inits;
  for (int s = 0; s < senders; ++s) {
    keys.emplace_back(s);
    inits.push_back(zeros({16}));
  }
  keys.emplace_back(100);
  inits.push_back(zeros({16}));
  BOOST_REQUIRE(await(kv.init(keys, inits)).has_value());
  BOOST_REQUIRE(await(kv.set_updater([](const strata::kvstore::key& key, const strata::tensor& merged,
                                        strata::tensor& stored) {
                  const float* g = merged.data<float>();
                  float* p = stored.data<float>();
                  bool accumulate = key == strata::kvstore::key(100);
                  for (std::int64_t i = 0; i < stored.numel(); ++i) p[i] = accumulate ? p[i] + g[i] : g[i];
                })).has_value());

  std::vector<std::shared_ptr<sender_log>> logs;
  std::vector<std::future<void>> done;
  std::vector<float> shared_sum(16, 0.f);
  for (int s = 0; s < senders; ++s) {
    auto log = std::make_shared<sender_log>();
    for (int r = 0; r < rounds; ++r) {
      log->pushed.push_back(random_ints(16));
      for (std::size_t i = 0; i < 16; ++i) shared_sum[i] += log->pushed.back()[i];
    }
    logs.push_back(log);
    auto finished = std::make_shared<std::promise<void>>();
    done.push_back(finished->get_future());
    auto dev = devs[static_cast<std::size_t>(s % 3)];
    sys.spawn([store, log, finished, s, rounds, dev](strata::actor& self) mutable -> strata::behavior {
      auto st = dev.create_stream();
      auto remaining = std::make_shared<int>(rounds);
      log->pulled.resize(static_cast<std::size_t>(rounds));
      for (int r = 0; r < rounds; ++r) {
        const auto& data = log->pushed[static_cast<std::size_t>(r)];
        auto value = strata::tensor::from_host<float>(std::span<const float>(data), {16}, dev, st);
        self.request<void>(store, 30s, strata::kvstore::push{{s, 100}, {value, value}}).then([] {});
        std::vector<float> z(16, 0.f);
        auto out = strata::tensor::from_host<float>(std::span<const float>(z), {16}, dev, st);
        self.request<std::vector<strata::tensor>>(store, 30s, strata::kvstore::pull{{s}, {out}, 0})
            .then([&self, log, r, remaining, finished](std::vector<strata::tensor>& outs) {
              const float* p = outs.at(0).data<float>();  // the reply comes after the copy completed
              log->pulled[static_cast<std::size_t>(r)].assign(p, p + 16);
              if (--*remaining == 0) {
                finished->set_value();
                self.quit();
              }
            });
      }
      return {[](int) {}};
    });
  }
  for (auto& f : done) await(f);
  for (int s = 0; s < senders; ++s)
    for (int r = 0; r < rounds; ++r)
      BOOST_TEST(logs[static_cast<std::size_t>(s)]->pulled[static_cast<std::size_t>(r)] ==
                     logs[static_cast<std::size_t>(s)]->pushed[static_cast<std::size_t>(r)],
                 boost::test_tools::per_element());
  BOOST_TEST(value_of(kv, 100, {16}) == shared_sum, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_client_pull_issued_after_a_push_sees_it_without_waiting, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_REQUIRE(await(kv.init(1, zeros({8}))).has_value());
  std::vector<std::future<strata::expected<strata::unit_t>>> pushes;
  std::vector<std::future<strata::expected<std::vector<strata::tensor>>>> pulls;
  std::vector<std::vector<float>> pushed;
  for (int r = 0; r < 30; ++r) {
    pushed.push_back(random(8));
    pushes.push_back(kv.push(1, make(pushed.back(), {8}, r % 3)));
    pulls.push_back(kv.pull(1, zeros({8}, (r + 1) % 3)));
  }
  for (int r = 0; r < 30; ++r) {
    BOOST_TEST(await(pushes[static_cast<std::size_t>(r)]).has_value());
    auto outs = await(pulls[static_cast<std::size_t>(r)]).value();
    BOOST_TEST(read(outs[0]) == pushed[static_cast<std::size_t>(r)], boost::test_tools::per_element());
  }
}

// ---- synchronous mode --------------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_synchronous_key_updates_when_all_contributions_arrived, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.contributions_per_version = 3}));
  auto w = random_ints(6);
  BOOST_REQUIRE(await(kv.init(0, make(w, shape23))).has_value());
  auto early = kv.pull(0, zeros(shape23, 2), 1);  // parked until version 1 exists
  std::vector<std::vector<float>> g = {random_ints(6), random_ints(6), random_ints(6), random_ints(6)};
  BOOST_TEST(await(kv.push(0, make(g[0], shape23, 0))).has_value());
  BOOST_TEST(await(kv.push(0, make(g[1], shape23, 1))).has_value());
  BOOST_TEST((early.wait_for(50ms) == std::future_status::timeout));
  BOOST_TEST(value_of(kv, 0, shape23) == w, boost::test_tools::per_element());  // version 0 still
  BOOST_TEST(await(kv.version(0)).value() == 0u);
  // The third contribution completes version 1; the fourth starts version 2.
  BOOST_TEST(await(kv.push(0, {make(g[2], shape23, 2), make(g[3], shape23, 0)})).has_value());
  std::vector<float> v1(6);
  for (std::size_t i = 0; i < 6; ++i) v1[i] = g[0][i] + g[1][i] + g[2][i];
  auto outs = await(early).value();
  BOOST_TEST(read(outs[0]) == v1, boost::test_tools::per_element());
  BOOST_TEST(await(kv.version(0)).value() == 1u);
  auto later = kv.pull(0, zeros(shape23, 1), 2);
  auto g4 = random_ints(6), g5 = random_ints(6);
  BOOST_TEST(await(kv.push(0, {make(g4, shape23, 1), make(g5, shape23, 2)})).has_value());
  std::vector<float> v2(6);
  for (std::size_t i = 0; i < 6; ++i) v2[i] = g[3][i] + g4[i] + g5[i];
  BOOST_TEST(read(await(later).value()[0]) == v2, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// ---- checkpoints -------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(kvstore_checkpoint)

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("strata_kv_" + std::to_string(::getpid()) + "_" + name)).string();
}

BOOST_FIXTURE_TEST_CASE(a_saved_store_loads_with_values_versions_and_adam_state, fixture) {
  const auto path = temp_path("roundtrip.ckpt");
  strata::kernels::adam_options o{.lr = 0.01};
  auto w = random(12);
  std::vector<std::vector<float>> grads = {random(12), random(12), random(12), random(12)};
  // Reference: one store runs four steps without a break.
  strata::kvstore::client ref(sys, strata::kvstore::spawn(sys));
  BOOST_REQUIRE(await(ref.init("p", make(w, {3, 4}))).has_value());
  BOOST_REQUIRE(await(ref.set_optimizer(o)).has_value());
  for (const auto& g : grads) BOOST_REQUIRE(await(ref.push("p", make(g, {3, 4}))).has_value());
  // Under test: two steps, save, a fresh store loads, two more steps.
  {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
    BOOST_REQUIRE(await(kv.init("p", make(w, {3, 4}))).has_value());
    BOOST_REQUIRE(await(kv.set_optimizer(o)).has_value());
    for (int i = 0; i < 2; ++i) BOOST_REQUIRE(await(kv.push("p", make(grads[static_cast<std::size_t>(i)], {3, 4}))).has_value());
    BOOST_REQUIRE(await(kv.save(path)).has_value());
  }
  BOOST_TEST(!std::filesystem::exists(path + ".tmp"));
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_REQUIRE(await(kv.set_optimizer(o)).has_value());
  BOOST_REQUIRE(await(kv.load(path)).has_value());
  BOOST_TEST(await(kv.version("p")).value() == 2u);
  for (int i = 2; i < 4; ++i) BOOST_REQUIRE(await(kv.push("p", make(grads[static_cast<std::size_t>(i)], {3, 4}))).has_value());
  BOOST_TEST(value_of(kv, "p", {3, 4}) == value_of(ref, "p", {3, 4}), boost::test_tools::per_element());
  std::filesystem::remove(path);
}

BOOST_FIXTURE_TEST_CASE(a_load_fails_parked_pulls_of_keys_it_drops_and_serves_those_its_versions_reach, fixture) {
  const auto path = temp_path("fewer_keys.ckpt");
  auto w1 = random(6);
  {  // the checkpoint: key 1 alone, at version 2
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
    BOOST_REQUIRE(await(kv.init(1, make(random(6), shape23))).has_value());
    for (int i = 0; i < 2; ++i) BOOST_REQUIRE(await(kv.push(1, make(random(6), shape23))).has_value());
    BOOST_REQUIRE(await(kv.save(path)).has_value());
    w1 = value_of(kv, 1, shape23);
  }
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_REQUIRE(await(kv.init({1, 2}, {make(random(6), shape23), make(random(6), shape23)})).has_value());
  auto dropped = kv.pull(2, zeros(shape23), 3);  // key 2 is not in the file
  auto reached = kv.pull(1, zeros(shape23), 2);  // the file holds version 2
  BOOST_REQUIRE(await(kv.load(path)).has_value());
  auto d = await(std::move(dropped));
  BOOST_REQUIRE(!d.has_value());
  BOOST_TEST(d.error().message() == "kvstore pull: a load replaced the store's keys and a pulled key is no longer there.");
  auto r = await(std::move(reached));
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(read(r->front()) == w1, boost::test_tools::per_element());
  BOOST_REQUIRE(await(kv.push(1, make(random(6), shape23))).has_value());  // the store still serves
  BOOST_TEST(await(kv.version(1)).value() == 3u);
  std::filesystem::remove(path);
}

BOOST_FIXTURE_TEST_CASE(a_truncated_checkpoint_fails_and_leaves_the_store_unchanged, fixture) {
  const auto path = temp_path("truncated.ckpt");
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto w = random(6);
  BOOST_REQUIRE(await(kv.init({1, 2}, {make(w, shape23), make(random(6), shape23)})).has_value());
  BOOST_REQUIRE(await(kv.save(path)).has_value());
  const auto size = std::filesystem::file_size(path);
  for (auto cut : {size - 1, size / 2, std::uintmax_t{5}}) {
    std::filesystem::resize_file(path, cut);
    strata::kvstore::client other(sys, strata::kvstore::spawn(sys));
    auto v = random(6);
    BOOST_REQUIRE(await(other.init(1, make(v, shape23))).has_value());
    auto r = await(other.load(path));
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message().find("kvstore load: checkpoint \"" + path + "\" is truncated or corrupt") == 0u,
               r.error().message());
    BOOST_TEST(value_of(other, 1, shape23) == v, boost::test_tools::per_element());
    BOOST_TEST(!await(other.version(2)).has_value());
  }
  std::filesystem::remove(path);
}

BOOST_FIXTURE_TEST_CASE(a_corrupted_byte_is_caught_by_the_checksum, fixture) {
  const auto path = temp_path("corrupt.ckpt");
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  BOOST_REQUIRE(await(kv.init(1, make(random(6), shape23))).has_value());
  BOOST_REQUIRE(await(kv.save(path)).has_value());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  auto r = await(kv.load(path));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore load: checkpoint \"" + path +
                                        "\" is truncated or corrupt: its checksum does not match its contents.");
  auto missing = await(kv.load(path + ".missing"));
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message().find("kvstore load: cannot open checkpoint") == 0u);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_test
