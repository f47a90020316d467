// Contract tests of the kvstore's priority (the store's ready queue) and of sharded stores
// (keys spread over several store actors, large keys split into chunks): results equal those of
// one store, bit for bit, and so do their checkpoints.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <initializer_list>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "strata/kvstore/kvstore.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/three_devices.hpp"

using namespace std::chrono_literals;

namespace kvstore_shard_test {

constexpr auto patience = std::chrono::seconds(30);

using strata::test::await;

struct fixture : strata::test::three_devices {
  fixture() : three_devices(20240607) {}
};

// ---- priority ----------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(kvstore_priority)

/// A store whose updater holds key 0's update until `open()` and logs the keys it updates.
struct gated_fixture : fixture {
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::promise<void> entered;  // key 0's update started: the store is busy
  std::mutex mutex;
  std::vector<std::int64_t> order;
  strata::actor_ref store = strata::kvstore::spawn(sys);

  gated_fixture() {
    strata::kvstore::client kv(sys, store);
    std::vector<strata::kvstore::key> keys;
    std::vector<strata::tensor> values;
    for (int k = 0; k < 5; ++k) {
      keys.emplace_back(k);
      values.push_back(zeros({4}));
    }
    BOOST_REQUIRE(await(kv.init(keys, values)).has_value());
    BOOST_REQUIRE(await(kv.set_updater([this](const strata::kvstore::key& key, const strata::tensor& merged,
                                              strata::tensor& stored) {
                    const auto k = std::get<std::int64_t>(key.value());
                    if (k == 0) {  // a slow update keeps the store busy
                      entered.set_value();
                      opened.wait();
                    }
                    {
                      std::lock_guard lock(mutex);
                      order.push_back(k);
                    }
                    std::copy_n(merged.data<float>(), stored.numel(), stored.data<float>());
                  })).has_value());
  }
  /// Pushes key 0 and returns once its update holds the store.
  std::future<strata::expected<strata::unit_t>> hold(strata::kvstore::client& kv) {
    auto f = kv.push(0, zeros({4}));
    BOOST_REQUIRE(entered.get_future().wait_for(patience) == std::future_status::ready);
    return f;
  }
  /// Returns once the requests `kv` sent so far are in the store's ready queue: the store answers
  /// `type()` at once, without queueing it, and takes a client's messages in the order sent.
  static void queued(strata::kvstore::client& kv) { BOOST_REQUIRE(await(kv.type()).has_value()); }
  /// Once the requests each of `senders` sent so far are in the ready queue, releases the update.
  void open(std::initializer_list<std::reference_wrapper<strata::kvstore::client>> senders) {
    for (auto& kv : senders) queued(kv);
    gate.set_value();
  }
};

BOOST_FIXTURE_TEST_CASE(queued_requests_are_served_highest_priority_first, gated_fixture) {
  strata::kvstore::client kv(sys, store);
  auto busy = hold(kv);
  auto low = kv.send(strata::kvstore::push{{1}, {make(random(4), {4})}, 0});
  auto high = kv.send(strata::kvstore::push{{3}, {make(random(4), {4})}, 5});
  auto middle = kv.send(strata::kvstore::push{{4}, {make(random(4), {4})}, 3});
  open({kv});
  for (auto* f : {&busy, &low, &high, &middle}) BOOST_TEST(await(std::move(*f)).has_value());
  BOOST_TEST(order == (std::vector<std::int64_t>{0, 3, 4, 1}), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(equal_priorities_are_served_in_arrival_order, gated_fixture) {
  strata::kvstore::client kv(sys, store);
  std::vector<std::future<strata::expected<strata::unit_t>>> pushes;
  pushes.push_back(hold(kv));
  for (int k : {3, 1, 4, 2}) pushes.push_back(kv.send(strata::kvstore::push{{k}, {make(random(4), {4})}, 2}));
  open({kv});
  for (auto& f : pushes) BOOST_TEST(await(std::move(f)).has_value());
  BOOST_TEST(order == (std::vector<std::int64_t>{0, 3, 1, 4, 2}), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_high_priority_pull_still_sees_the_earlier_push_of_its_sender, gated_fixture) {
  // The pull may not overtake the push of the same sender on its key: the push is served first,
  // at the pull's priority, ahead of the other queued requests.
  strata::kvstore::client kv(sys, store);
  auto busy = hold(kv);
  auto other = kv.send(strata::kvstore::push{{1}, {make(random(4), {4})}, 3});
  auto value = random(4);
  auto push = kv.send(strata::kvstore::push{{2}, {make(value, {4})}, 0});
  auto pull = kv.send(strata::kvstore::pull{{2}, {zeros({4}, 1)}, 0, 9});
  // Another sender's higher-priority pull of the same key may overtake the push (no order between senders).
  strata::kvstore::client second(sys, store);
  auto early = second.send(strata::kvstore::pull{{2}, {zeros({4}, 2)}, 0, 10});
  open({kv, second});
  BOOST_TEST(await(std::move(busy)).has_value());
  BOOST_TEST(await(std::move(other)).has_value());
  BOOST_TEST(await(std::move(push)).has_value());
  BOOST_TEST(read(await(std::move(pull)).value().at(0)) == value, boost::test_tools::per_element());
  BOOST_TEST(read(await(std::move(early)).value().at(0)) == std::vector<float>(4, 0.f), boost::test_tools::per_element());
  BOOST_TEST(order == (std::vector<std::int64_t>{0, 2, 1}), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_high_priority_request_does_not_overtake_an_earlier_one_that_uses_its_tensor, gated_fixture) {
  // MXNet orders every operation on an array in issue order: a pull into v waits for the queued
  // push that reads v, whatever its priority and whoever sent it (a pull into v overtaking the
  // push would have the push read the pulled value).
  strata::kvstore::client kv(sys, store);
  auto key3 = random(4);
  BOOST_REQUIRE(await(kv.push(3, make(key3, {4}))).has_value());
  auto busy = hold(kv);
  auto v_data = random(4), w_data = random(4);
  auto v = make(v_data, {4}, 1);
  auto w = make(w_data, {4}, 2);
  auto push_v = kv.send(strata::kvstore::push{{1}, {v}, 0});
  auto pull_v = kv.send(strata::kvstore::pull{{3}, {v}, 0, 9});
  strata::kvstore::client second(sys, store);
  auto push_w = kv.send(strata::kvstore::push{{2}, {w}, 0});
  // Another sender, the same tensor: requests of two senders arrive in no set order, so the push
  // is in the queue first, then the pull must still wait for it.
  queued(kv);
  auto pull_w = second.send(strata::kvstore::pull{{3}, {w}, 0, 9});
  open({kv, second});
  for (auto* f : {&busy, &push_v, &push_w}) BOOST_TEST(await(std::move(*f)).has_value());
  BOOST_TEST(read(await(std::move(pull_v)).value().at(0)) == key3, boost::test_tools::per_element());
  BOOST_TEST(read(await(std::move(pull_w)).value().at(0)) == key3, boost::test_tools::per_element());
  auto out = await(kv.pull({1, 2}, {zeros({4}), zeros({4})})).value();
  BOOST_TEST(read(out.at(0)) == v_data, boost::test_tools::per_element());  // the pushes read v and w before the pulls
  BOOST_TEST(read(out.at(1)) == w_data, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(priority_still_reorders_requests_that_share_no_tensor, gated_fixture) {
  strata::kvstore::client kv(sys, store);
  auto busy = hold(kv);
  auto low = kv.send(strata::kvstore::push{{1}, {make(random(4), {4})}, 0});
  auto high = kv.send(strata::kvstore::push{{2}, {make(random(4), {4})}, 4});
  open({kv});
  for (auto* f : {&busy, &low, &high}) BOOST_TEST(await(std::move(*f)).has_value());
  BOOST_TEST(order == (std::vector<std::int64_t>{0, 2, 1}), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_set_updater_is_not_overtaken_by_later_high_priority_pushes, gated_fixture) {
  strata::kvstore::client kv(sys, store);
  auto busy = hold(kv);
  auto assign = kv.set_updater({});  // back to assign: the push below must not be logged
  auto push = kv.send(strata::kvstore::push{{1}, {make(random(4), {4})}, 7});
  open({kv});
  for (auto* f : {&busy, &assign, &push}) BOOST_TEST(await(std::move(*f)).has_value());
  BOOST_TEST(order == (std::vector<std::int64_t>{0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// ---- sharding ----------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(kvstore_sharding)

/// One script of calls, run on a plain store and on a sharded one; returns every pulled array.
std::vector<std::vector<float>> run_script(fixture& f, strata::kvstore::client& kv, std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto random = [&](std::size_t n) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  };
  const std::vector<std::string> names = {"small", "big", "odd", "mid"};
  const std::vector<std::vector<std::int64_t>> shapes = {{3, 5}, {25, 40}, {7}, {300}};  // big: 4000 B, mid: 1200 B
  std::vector<std::vector<float>> pulled;
  auto keep = [&](const std::vector<strata::tensor>& outs) {
    for (const auto& t : outs) pulled.push_back(f.read(t));
  };
  auto numel = [](const std::vector<std::int64_t>& s) {
    std::size_t n = 1;
    for (auto d : s) n *= static_cast<std::size_t>(d);
    return n;
  };
  std::vector<strata::kvstore::key> keys(names.begin(), names.end());
  std::vector<strata::tensor> values;
  for (const auto& s : shapes) values.push_back(f.make(random(numel(s)), s));
  BOOST_REQUIRE(await(kv.init(keys, values)).has_value());
  for (int round = 0; round < 3; ++round) {
    if (round == 1) {
      BOOST_REQUIRE(await(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}))
                        .has_value());
    }
    // Three devices push every key (summed), then pulls into outputs on several devices.
    std::vector<strata::kvstore::key> push_keys;
    std::vector<strata::tensor> push_values;
    for (int dev = 0; dev < 3; ++dev)
      for (std::size_t k = 0; k < names.size(); ++k) {
        push_keys.emplace_back(names[k]);
        push_values.push_back(f.make(random(numel(shapes[k])), shapes[k], dev));
      }
    BOOST_REQUIRE(await(kv.push(push_keys, push_values)).has_value());
    keep(await(kv.pull({"big", "small", "big", "odd", "mid"},
                       {f.zeros(shapes[1], 1), f.zeros(shapes[0], 2), f.zeros(shapes[1], 0), f.zeros(shapes[2], 1),
                        f.zeros(shapes[3], 2)}))
             .value());
    // One value of one key, read in place by the update.
    keep(await(kv.pushpull("big", {f.make(random(1000), shapes[1], 2)}, {f.zeros(shapes[1], 1)})).value());
  }
  for (std::size_t k = 0; k < names.size(); ++k) BOOST_TEST(await(kv.version(names[k])).value() == (k == 1 ? 6u : 3u));
  return pulled;
}

BOOST_FIXTURE_TEST_CASE(sharded_stores_give_the_results_of_one_store_bit_for_bit, fixture) {
  strata::kvstore::client reference(sys, strata::kvstore::spawn(sys));
  const auto expected = run_script(*this, reference, 7);
  for (std::size_t shards : {1u, 2u, 4u}) {
    BOOST_TEST_CONTEXT("shards = " << shards) {
      // 1024-byte chunks: "big" becomes 4 chunks and "mid" 2, spread over the shards.
      strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.name = "sharded", .shards = shards, .chunk_bytes = 1024}));
      const auto got = run_script(*this, kv, 7);
      BOOST_REQUIRE(got.size() == expected.size());
      for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == expected[i], boost::test_tools::per_element());
    }
  }
}

BOOST_FIXTURE_TEST_CASE(shards_on_given_devices_split_a_key_into_chunks_and_reassemble_it, fixture) {
  strata::kvstore::client reference(sys, strata::kvstore::spawn(sys));
  const auto expected = run_script(*this, reference, 11);
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.shards = 3, .chunk_bytes = 256, .shard_devices = devs}));
  const auto got = run_script(*this, kv, 11);
  BOOST_REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == expected[i], boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_sharded_store_refuses_bad_requests_with_the_same_sentence_and_stays_unchanged, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.shards = 2, .chunk_bytes = 16}));
  auto w = random(6);
  BOOST_REQUIRE(await(kv.init("3", make(w, {2, 3}))).has_value());
  auto unknown = await(kv.push({"3", "8"}, {make(random(6), {2, 3}), make(random(6), {2, 3})}));
  BOOST_REQUIRE(!unknown.has_value());
  BOOST_TEST(unknown.error().message() == "kvstore push: key \"8\" is not initialised; call init first.");
  auto shape = await(kv.push("3", {make(random(6), {2, 3}), make(random(6), {3, 2})}));
  BOOST_REQUIRE(!shape.has_value());
  BOOST_TEST(shape.error().message() ==
             "kvstore push: the value for key \"3\" has shape [3, 2], expected [2, 3] (the stored shape).");
  auto again = await(kv.init({"4", "3"}, {make(random(6), {2, 3}), make(random(6), {2, 3})}));
  BOOST_REQUIRE(!again.has_value());
  BOOST_TEST(again.error().message() == "kvstore init: key \"3\" already exists.");
  auto kind = await(kv.pull(5, zeros({2, 3})));
  BOOST_REQUIRE(!kind.has_value());
  BOOST_TEST(kind.error().message() ==
             "kvstore pull: key 5 is an integer but this store holds string keys; one store cannot mix key kinds.");
  BOOST_TEST(read(await(kv.pull("3", zeros({2, 3}, 1))).value().at(0)) == w, boost::test_tools::per_element());
  BOOST_TEST(await(kv.version("3")).value() == 0u);
  BOOST_TEST(!await(kv.pull("4", zeros({2, 3}))).has_value());  // the failed init stored nothing
}

BOOST_FIXTURE_TEST_CASE(a_throwing_updater_on_a_sharded_store_names_the_callers_key, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.shards = 2, .chunk_bytes = 8}));
  BOOST_REQUIRE(await(kv.init("w", make(random(6), {6}))).has_value());
  BOOST_REQUIRE(await(kv.set_updater([](const strata::kvstore::key&, const strata::tensor&, strata::tensor&) {
                  throw std::runtime_error("boom");
                })).has_value());
  auto r = await(kv.push("w", make(random(6), {6})));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == "kvstore push: the update of key \"w\" failed: boom");
}

BOOST_FIXTURE_TEST_CASE(a_synchronous_sharded_store_answers_a_versioned_pull_when_all_chunks_have_it, fixture) {
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.contributions_per_version = 2, .shards = 2, .chunk_bytes = 16}));
  BOOST_REQUIRE(await(kv.init(0, zeros({10}))).has_value());
  auto later = kv.pull(0, zeros({10}, 2), 1);
  auto g0 = random(10), g1 = random(10);
  BOOST_REQUIRE(await(kv.push(0, make(g0, {10}, 0))).has_value());
  BOOST_TEST((later.wait_for(50ms) == std::future_status::timeout));
  BOOST_REQUIRE(await(kv.push(0, make(g1, {10}, 1))).has_value());
  std::vector<float> sum(10);
  for (std::size_t i = 0; i < 10; ++i) sum[i] = g0[i] + g1[i];
  BOOST_TEST(read(await(std::move(later)).value().at(0)) == sum, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_shard_options_are_refused) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  BOOST_CHECK_THROW(strata::kvstore::spawn(sys, {.shards = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(strata::kvstore::spawn(sys, {.max_in_flight = 0}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- checkpoints of sharded stores -------------------------------------------------------------
// A store of N shards (1 being the plain store) writes the file one store writes, byte for byte;
// a store of M shards loads it and goes on as if it had never stopped (values, versions, Adam's
// moments and step); a save is a barrier; a bad file or a shard that cannot take its part leaves
// every shard as it was.

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("strata_kvck_" + std::to_string(::getpid()) + "_" + name)).string();
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// 1200 B and 280 B: split by 256-byte chunks into 5 and 2 chunks; the last key stays whole.
const std::vector<std::vector<std::int64_t>> session_shapes = {{10, 30}, {70}, {3}};
const strata::kernels::adam_options adam{.lr = 0.01, .weight_decay = 0.01};
constexpr std::size_t rounds = 4;

std::size_t count_of(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

/// A session's inputs, drawn once so that every store gets the same.
struct session {
  std::vector<strata::kvstore::key> keys;
  std::vector<std::vector<float>> init;                     // per key
  std::vector<std::vector<std::vector<float>>> grads;       // per round: two values per key
};

/// The shared fixture plus one session's steps, run alike on every store.
struct checkpoint_fixture : fixture {
  session draw(bool string_keys) {
    session s;
    if (string_keys) s.keys = {"emb", "bias", "scale"};
    else s.keys = {11, 5, 7};
    for (const auto& shape : session_shapes) s.init.push_back(random(count_of(shape)));
    for (std::size_t r = 0; r < rounds; ++r) {
      s.grads.emplace_back();
      for (std::size_t k = 0; k < 2 * session_shapes.size(); ++k)
        s.grads.back().push_back(random(count_of(session_shapes[k / 2])));
    }
    return s;
  }
  /// A store of `shards` (1: the plain store) splitting keys at 256 bytes.
  strata::actor_ref store(std::size_t shards) { return strata::kvstore::spawn(sys, {.shards = shards, .chunk_bytes = 256}); }

  void start(strata::kvstore::client& kv, const session& s) {
    std::vector<strata::tensor> values;
    for (std::size_t k = 0; k < session_shapes.size(); ++k) values.push_back(make(s.init[k], session_shapes[k]));
    BOOST_REQUIRE(await(kv.init(s.keys, values)).has_value());
    BOOST_REQUIRE(await(kv.set_optimizer(adam)).has_value());
  }
  /// Round `r`: every key gets two values, from two devices (summed, then Adam).
  strata::kvstore::client::done push(strata::kvstore::client& kv, const session& s, std::size_t r) {
    std::vector<strata::kvstore::key> keys;
    std::vector<strata::tensor> values;
    for (std::size_t k = 0; k < 2 * session_shapes.size(); ++k) {
      keys.push_back(s.keys[k / 2]);
      values.push_back(make(s.grads[r][k], session_shapes[k / 2], static_cast<int>(1 + k % 2)));
    }
    return kv.push(keys, values);
  }
  void push_rounds(strata::kvstore::client& kv, const session& s, std::size_t from, std::size_t to) {
    for (std::size_t r = from; r < to; ++r) BOOST_REQUIRE(await(push(kv, s, r)).has_value());
  }
  std::vector<std::vector<float>> stored(strata::kvstore::client& kv, const session& s) {
    std::vector<strata::tensor> outs;
    for (const auto& shape : session_shapes) outs.push_back(make(std::vector<float>(count_of(shape), 0.f), shape, 2));
    const auto pulled = await(kv.pull(s.keys, outs));
    std::vector<std::vector<float>> got;
    for (const auto& t : pulled.value()) got.push_back(t.to_host<float>(streams[2]));
    return got;
  }
  void require_versions(strata::kvstore::client& kv, const session& s, std::uint64_t want) {
    for (const auto& key : s.keys) BOOST_TEST(await(kv.version(key)).value() == want, "key " << key.to_string());
  }
};

BOOST_AUTO_TEST_SUITE(kvstore_checkpoint_sharded)

BOOST_FIXTURE_TEST_CASE(a_checkpoint_of_n_shards_is_one_stores_file_and_loads_into_m_shards_to_go_on_identically,
                        checkpoint_fixture) {
  for (bool string_keys : {false, true}) {
    const session s = draw(string_keys);
    // Reference: one plain store, never stopped; its checkpoint after two rounds.
    strata::kvstore::client ref(sys, store(1));
    start(ref, s);
    push_rounds(ref, s, 0, 2);
    const auto ref_path = temp_path("ref.ckpt");
    BOOST_REQUIRE(await(ref.save(ref_path)).has_value());
    const auto at_save = stored(ref, s);
    push_rounds(ref, s, 2, rounds);
    const auto at_end = stored(ref, s);
    for (std::size_t n : {1u, 2u, 3u, 4u}) {
      const auto path = temp_path("n" + std::to_string(n) + ".ckpt");
      {
        strata::kvstore::client kv(sys, store(n));
        start(kv, s);
        push_rounds(kv, s, 0, 2);
        BOOST_REQUIRE(await(kv.save(path)).has_value());
      }
      BOOST_TEST_CONTEXT("string keys " << string_keys << ", saved by " << n << " shards") {
        BOOST_TEST(!std::filesystem::exists(path + ".tmp"));
        BOOST_TEST((slurp(path) == slurp(ref_path)));
        for (std::size_t m : {1u, 2u, 3u, 4u}) {
          BOOST_TEST_CONTEXT("loaded by " << m << " shards") {
            // Three shards on given devices, the others each on a device of its own.
            strata::kvstore::client kv(sys, m == 3 ? strata::kvstore::spawn(sys, {.shards = 3, .chunk_bytes = 256,
                                                                                  .shard_devices = devs})
                                                  : store(m));
            BOOST_REQUIRE(await(kv.set_optimizer(adam)).has_value());
            BOOST_REQUIRE(await(kv.load(path)).has_value());
            require_versions(kv, s, 2);
            const auto loaded = stored(kv, s);
            for (std::size_t k = 0; k < session_shapes.size(); ++k)
              BOOST_TEST(loaded[k] == at_save[k], boost::test_tools::per_element());
            push_rounds(kv, s, 2, rounds);  // Adam's moments and step went along: bit for bit
            const auto got = stored(kv, s);
            for (std::size_t k = 0; k < session_shapes.size(); ++k)
              BOOST_TEST(got[k] == at_end[k], boost::test_tools::per_element());
          }
        }
      }
      std::filesystem::remove(path);
    }
    std::filesystem::remove(ref_path);
  }
}

BOOST_FIXTURE_TEST_CASE(a_save_sees_the_pushes_queued_before_it_and_none_queued_after, checkpoint_fixture) {
  const session s = draw(false);
  strata::kvstore::client ref(sys, store(1));
  start(ref, s);
  push_rounds(ref, s, 0, 3);
  const auto want = stored(ref, s);
  for (std::size_t n : {1u, 3u}) {
    BOOST_TEST_CONTEXT("shards = " << n) {
      const auto path = temp_path("inflight.ckpt");
      strata::kvstore::client kv(sys, store(n));
      start(kv, s);
      std::vector<strata::kvstore::client::done> calls;  // none waited for before the last is sent
      for (std::size_t r = 0; r < 3; ++r) calls.push_back(push(kv, s, r));
      calls.push_back(kv.save(path));
      calls.push_back(push(kv, s, 3));
      for (auto& c : calls) BOOST_REQUIRE(await(std::move(c)).has_value());
      strata::kvstore::client loaded(sys, store(2));
      BOOST_REQUIRE(await(loaded.load(path)).has_value());
      require_versions(loaded, s, 3);
      const auto got = stored(loaded, s);
      for (std::size_t k = 0; k < session_shapes.size(); ++k) BOOST_TEST(got[k] == want[k], boost::test_tools::per_element());
      require_versions(kv, s, 4);
      std::filesystem::remove(path);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(a_truncated_or_corrupt_checkpoint_fails_a_sharded_load_and_leaves_every_shard_unchanged,
                        checkpoint_fixture) {
  const auto path = temp_path("bad.ckpt");
  const session file_keys = draw(true);
  {
    strata::kvstore::client writer(sys, store(2));
    start(writer, file_keys);
    push_rounds(writer, file_keys, 0, 1);
    BOOST_REQUIRE(await(writer.save(path)).has_value());
  }
  const auto good = slurp(path);
  const session s = draw(false);
  strata::kvstore::client kv(sys, store(3));
  start(kv, s);
  push_rounds(kv, s, 0, 1);
  const auto before = stored(kv, s);
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 0x40);
  for (const auto& bad : {good.substr(0, good.size() - 1), good.substr(0, good.size() / 2), good.substr(0, 5), flipped}) {
    BOOST_TEST_CONTEXT("a file of " << bad.size() << " bytes") {
      spit(path, bad);
      auto r = await(kv.load(path));
      BOOST_REQUIRE(!r.has_value());
      const auto& text = r.error().message();
      BOOST_TEST(text.find("kvstore load: checkpoint \"" + path + "\" is truncated or corrupt: ") == 0u, text);
      BOOST_TEST((text.back() == '.' && text.find('\n') == std::string::npos), text);
      const auto now = stored(kv, s);
      for (std::size_t k = 0; k < session_shapes.size(); ++k)
        BOOST_TEST(now[k] == before[k], boost::test_tools::per_element());
      require_versions(kv, s, 1);
    }
  }
  BOOST_TEST(await(kv.load(path)).error().message() ==
             "kvstore load: checkpoint \"" + path + "\" is truncated or corrupt: its checksum does not match its contents.");
  // The shards hold nothing staged from the failed loads: a good file loads.
  spit(path, good);
  BOOST_REQUIRE(await(kv.load(path)).has_value());
  require_versions(kv, file_keys, 1);
  BOOST_TEST(!await(kv.version(s.keys[0])).has_value());
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(a_shard_that_cannot_take_its_part_fails_the_load_and_no_shard_changes) {
  // Two sim shards, the second with 64 KiB of memory: a 400 KB key's chunks on it do not fit.
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto roomy = strata::find_builtin_sim_profile("h200").value();
  roomy.name = "roomy";
  auto tiny = roomy;
  tiny.name = "tiny";
  tiny.memory_bytes = std::size_t{64} << 10;
  strata::device_manager manager(strata::device_options{.sim_time_scale = 0, .sim_profiles = {roomy, tiny}});
  auto devs = manager.create("sim:1:roomy");
  devs.push_back(manager.create("sim:1:tiny").at(0));
  auto s = devs[0].create_stream();
  auto sim_tensor = [&](std::int64_t n) { return strata::tensor::empty({n}, strata::dtype::float32, devs[0], s); };
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.shards = 2, .chunk_bytes = 64 << 10, .shard_devices = devs}));
  BOOST_REQUIRE(await(kv.init({1, 2}, {sim_tensor(100), sim_tensor(200)})).has_value());
  for (int i = 0; i < 2; ++i) BOOST_REQUIRE(await(kv.push({1, 2}, {sim_tensor(100), sim_tensor(200)})).has_value());

  const auto path = temp_path("big.ckpt");
  {
    strata::device_manager cpu_manager;
    auto cpu = cpu_manager.create("cpu:1").at(0);
    auto cs = cpu.create_stream();
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> big(100000);
    for (auto& x : big) x = d(rng);
    strata::kvstore::client writer(sys, strata::kvstore::spawn(sys));
    const std::span<const float> all(big);
    BOOST_REQUIRE(await(writer.init({1, 3}, {strata::tensor::from_host<float>(all.first(100), cpu, cs),
                                             strata::tensor::from_host<float>(all, cpu, cs)}))
                      .has_value());
    BOOST_REQUIRE(await(writer.save(path)).has_value());
  }
  auto r = await(kv.load(path));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message().find("kvstore load: ") == 0u, r.error().message());
  BOOST_TEST(await(kv.version(1)).value() == 2u);
  BOOST_TEST(await(kv.version(2)).value() == 2u);
  BOOST_TEST(await(kv.version(3)).error().message() == "kvstore version: key 3 is not initialised.");
  BOOST_REQUIRE(await(kv.push({1, 2}, {sim_tensor(100), sim_tensor(200)})).has_value());
  BOOST_TEST(await(kv.version(2)).value() == 3u);

  auto saved = await(kv.save(path));  // sim tensors hold no data
  BOOST_REQUIRE(!saved.has_value());
  BOOST_TEST(saved.error().message().find("kvstore save: the store is on sim:") == 0u, saved.error().message());
  BOOST_TEST(saved.error().message().ends_with(", whose tensors hold no data; expected a cpu or cuda store."));
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_shard_test
