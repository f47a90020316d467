// strata::kvstore_dist under mpirun: every rank is a worker and runs every case (they are
// collectives). Data is random: rank 0 draws the seed and shares it through the store itself.
// The reference is one process: a local kvstore fed every rank's values in rank order.
#define BOOST_TEST_MODULE strata_kvstore_dist
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/dist_world.hpp"

using namespace std::chrono_literals;
using namespace strata::test::dist;

namespace kvstore_dist_test {

BOOST_TEST_GLOBAL_FIXTURE(world_fixture);

BOOST_AUTO_TEST_CASE(dist_sync_with_momentum_and_a_change_of_rate_equals_one_process_bit_for_bit) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
  BOOST_TEST(kv.type() == "dist_sync");
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  const strata::kernels::sgd_options sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
  BOOST_REQUIRE(kv.set_optimizer(sgd));

  // One process: a local store gets every rank's values of a round in one push, in rank order.
  strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
  BOOST_REQUIRE(ref.set_optimizer(sgd).get());
  auto keys = some_keys(seed);
  for (std::size_t k = 0; k < keys.size(); ++k) {
    auto w0 = gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel());
    BOOST_REQUIRE(kv.barrier());  // every shard has its optimizer before the first push
    BOOST_REQUIRE(kv.init(keys[k].key, w.make(w0, keys[k].shape)));
    BOOST_REQUIRE(ref.init(keys[k].key, w.make(w0, keys[k].shape)).get());
  }
  for (int t = 1; t <= 4; ++t) {
    if (t == 3) {  // a new rate from round 3 on; the momentum carries over on every shard
      BOOST_REQUIRE(kv.set_learning_rate(0.02));
      BOOST_REQUIRE(kv.barrier());
      BOOST_REQUIRE(ref.set_learning_rate(0.02).get());
    }
    for (std::size_t k = 0; k < keys.size(); ++k) {
      auto mine = gradient(seed, kv.rank(), static_cast<int>(k), t, keys[k].numel());
      auto got = kv.pushpull(keys[k].key, {w.make(mine, keys[k].shape)});
      BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
      std::vector<strata::kvstore::key> ks(static_cast<std::size_t>(n), keys[k].key);
      std::vector<strata::tensor> vs;
      for (int r = 0; r < n; ++r) vs.push_back(w.make(gradient(seed, r, static_cast<int>(k), t, keys[k].numel()), keys[k].shape));
      BOOST_REQUIRE(ref.push(ks, vs).get());
      auto expected = ref.pull(keys[k].key, w.make(std::vector<float>(keys[k].numel()), keys[k].shape)).get();
      BOOST_REQUIRE(expected);
      auto a = w.host(*got);
      auto b = w.host(expected->front());
      BOOST_REQUIRE_EQUAL(a.size(), b.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i] ? 1 : 0;
      BOOST_TEST(differ == 0u, "key " << keys[k].key.to_string() << " round " << t << ": " << differ << " elements differ");
    }
  }
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(dist_sync_pushpull_without_an_optimizer_answers_the_merged_round_not_a_stale_value) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
  const std::uint32_t seed = w.shared_seed(kv);
  const int n = kv.num_workers();
  const std::size_t len = 1000;
  BOOST_REQUIRE(kv.init("g", w.make(std::vector<float>(len, 0.0f), {static_cast<std::int64_t>(len)})));
  for (int t = 1; t <= 5; ++t) {
    auto got = kv.pushpull("g", {w.make(gradient(seed, kv.rank(), 0, t, len), {static_cast<std::int64_t>(len)})});
    BOOST_REQUIRE(got);
    // The stored value becomes this round's sum, in rank order (MXNet without an updater).
    std::vector<float> sum = gradient(seed, 0, 0, t, len);
    for (int r = 1; r < n; ++r) {
      auto g = gradient(seed, r, 0, t, len);
      for (std::size_t i = 0; i < len; ++i) sum[i] += g[i];
    }
    auto a = w.host(*got);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < len; ++i) differ += a[i] != sum[i] ? 1 : 0;
    BOOST_TEST(differ == 0u, "round " << t << ": " << differ << " elements differ from the round's sum");
  }
  // Several local values in one push are summed on the worker first, in the order given.
  auto g1 = gradient(seed, kv.rank(), 1, 9, len), g2 = gradient(seed, kv.rank(), 2, 9, len);
  auto got = kv.pushpull("g", {w.make(g1, {static_cast<std::int64_t>(len)}), w.make(g2, {static_cast<std::int64_t>(len)})});
  BOOST_REQUIRE(got);
  std::vector<float> sum(len, 0.0f);
  for (int r = 0; r < n; ++r) {
    auto a = gradient(seed, r, 1, 9, len), b = gradient(seed, r, 2, 9, len);
    for (std::size_t i = 0; i < len; ++i) sum[i] += a[i] + b[i];
  }
  auto a = w.host(*got);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < len; ++i) differ += a[i] != sum[i] ? 1 : 0;
  BOOST_TEST(differ == 0u);
  BOOST_REQUIRE(kv.barrier());
}

// A pushed tensor may be reused once its push is answered, as with the one-process store: the
// owner must not keep the caller's tensor while its version waits for the other ranks (the
// owner's own push reaches it unserialized), nor answer a push from another rank before that
// rank's bytes have arrived. The owner's rank pushes first and overwrites its tensor before the
// others push; every other rank overwrites its 4 MB tensor as soon as its push returns.
BOOST_AUTO_TEST_CASE(dist_sync_a_pushed_tensor_may_be_overwritten_once_its_push_is_answered) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
  const int n = kv.num_workers();
  const std::int64_t len = 1'000'000;  // the big-array bound: not split
  strata::kvstore::key key = std::string("reuse");
  for (int i = 0; kv.owner(key) != 0; ++i) key = "reuse" + std::to_string(i);
  BOOST_REQUIRE(kv.init(key, w.make(std::vector<float>(static_cast<std::size_t>(len), 0.0f), {len})));
  for (int t = 1; t <= 3; ++t) {
    auto mine = w.make(std::vector<float>(static_cast<std::size_t>(len), static_cast<float>(kv.rank() + t)), {len});
    auto overwrite = [&] {
      w.s.launch({.name = "overwrite", .cpu = [p = mine.device_data<float>(), len] { std::fill(p, p + len, 1000.0f); }});
      w.s.synchronize();
    };
    if (kv.rank() == 0) {
      BOOST_REQUIRE(kv.push(key, {mine}));
      overwrite();
      BOOST_REQUIRE(kv.barrier());
    } else {
      BOOST_REQUIRE(kv.barrier());
      BOOST_REQUIRE(kv.push(key, {mine}));
      overwrite();
    }
    auto got = kv.pull(key);
    BOOST_REQUIRE(got);
    const auto a = w.host(*got);
    float expected = 0;
    for (int r = 0; r < n; ++r) expected += static_cast<float>(r + t);
    std::size_t differ = 0;
    for (float x : a) differ += x != expected ? 1 : 0;
    BOOST_TEST(differ == 0u, "round " << t << ": " << differ << " elements are not " << expected);
    BOOST_REQUIRE(kv.barrier());
  }
}

BOOST_AUTO_TEST_CASE(dist_async_applies_every_push_and_refuses_to_run_without_an_optimizer) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::async, .value_device = w.cpu});
  BOOST_TEST(kv.type() == "dist_async");
  const std::uint32_t seed = w.shared_seed(kv);
  const int n = kv.num_workers();
  const std::size_t len = 257;
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(len)};
  BOOST_REQUIRE(kv.init("w", w.make(std::vector<float>(len, 0.0f), shape)));
  auto refused = kv.push("w", {w.make(gradient(seed, kv.rank(), 0, 0, len), shape)});
  BOOST_REQUIRE(!refused);
  BOOST_TEST(refused.error().message().find("needs set_optimizer") != std::string::npos);
  BOOST_REQUIRE(kv.barrier());
  BOOST_REQUIRE(kv.set_optimizer(strata::kernels::sgd_options{.lr = 1.0}));
  BOOST_REQUIRE(kv.barrier());
  const int pushes = 6;
  for (int t = 1; t <= pushes; ++t) BOOST_REQUIRE(kv.push("w", {w.make(gradient(seed, kv.rank(), 0, t, len), shape)}));
  BOOST_REQUIRE(kv.barrier());
  auto got = kv.pull("w");
  BOOST_REQUIRE(got);
  // Every push was applied once, in some order: w = -sum of all gradients (float64 reference).
  std::vector<double> expected(len, 0.0);
  for (int r = 0; r < n; ++r)
    for (int t = 1; t <= pushes; ++t) {
      auto g = gradient(seed, r, 0, t, len);
      for (std::size_t i = 0; i < len; ++i) expected[i] -= g[i];
    }
  auto a = w.host(*got);
  double worst = 0;
  for (std::size_t i = 0; i < len; ++i) worst = std::max(worst, std::abs(a[i] - expected[i]));
  BOOST_TEST(worst < 1e-4);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(rank_workers_owners_and_bad_input_each_get_one_sentence) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
  BOOST_TEST(kv.rank() == w.net.rank());
  BOOST_TEST(kv.num_workers() == w.net.size());
  for (int k = 0; k < 20; ++k) {
    int o = kv.owner(strata::kvstore::key(std::int64_t{k}));
    BOOST_TEST((o >= 0 && o < kv.num_workers()));
  }
  auto unknown = kv.push("never-initialised", {w.make({1.0f}, {1})});
  BOOST_REQUIRE(!unknown);
  BOOST_TEST(unknown.error().message().find("never initialised") != std::string::npos);
  BOOST_REQUIRE(kv.init("x", w.make({1.0f, 2.0f}, {2})));
  auto bad_shape = kv.push("x", {w.make({1.0f, 2.0f, 3.0f}, {3})});
  BOOST_REQUIRE(!bad_shape);
  BOOST_TEST(bad_shape.error().message().find("expected float32") != std::string::npos);
  auto twice = kv.init("x", w.make({1.0f, 2.0f}, {2}));
  if (kv.rank() == 0) {
    BOOST_REQUIRE(!twice);
    BOOST_TEST(twice.error().message().find("exists already") != std::string::npos);
  }
  auto empty = kv.push("x", {});
  BOOST_REQUIRE(!empty);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(broadcast_gives_every_rank_rank_0s_value_in_every_mode) {
  // MXNet's dist_device_sync_custom test_broadcast (cpu values here): every rank broadcasts its
  // own value; rank 0's wins and every rank gets it back. An existing key is refused.
  world& w = *the_world;
  for (auto m : {kvd::mode::sync, kvd::mode::async, kvd::mode::allreduce}) {
    kvd::store kv(w.sys, w.net, kvd::store_options{.mode = m, .value_device = w.cpu});
    BOOST_TEST_CONTEXT(kv.type()) {
      const float mine = static_cast<float>(kv.rank() + 1);
      auto got = kv.broadcast("b", w.make({mine, 2 * mine, 3 * mine, 4 * mine, 5 * mine, 6 * mine}, {2, 3}));
      BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
      BOOST_TEST(got->shape() == (std::vector<std::int64_t>{2, 3}));
      BOOST_TEST(w.host(*got) == (std::vector<float>{1, 2, 3, 4, 5, 6}), boost::test_tools::per_element());
      auto again = kv.broadcast("b", w.make({9, 9, 9, 9, 9, 9}, {2, 3}));
      if (kv.rank() == 0) {  // as init: rank 0's value is the one refused
        BOOST_REQUIRE(!again);
        BOOST_TEST(again.error().message().find("exists already") != std::string::npos, again.error().message());
      }
      BOOST_REQUIRE(kv.barrier());
    }
  }
}

BOOST_AUTO_TEST_CASE(an_allreduce_store_over_a_group_sums_among_its_members_only) {
  // Ranks 0, 2, ... and 1, 3, ... each share a store of their own (as an LM stage's replicas do).
  world& w = *the_world;
  const int me = w.net.rank();
  auto group = w.net.split(me % 2);
  BOOST_REQUIRE_MESSAGE(group, (group ? "" : group.error().message()));
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .value_device = w.cpu, .group = *group});
  BOOST_TEST(kv.rank() == group->rank);
  BOOST_TEST(kv.num_workers() == group->size);
  BOOST_REQUIRE(kv.init("g", w.make({7.0f, 7.0f, 7.0f}, {3})));
  int members = 0;
  for (int r : group->members) members += r + 1;
  const float mine = static_cast<float>(me + 1);
  for (int round = 1; round <= 3; ++round) {  // no optimizer: the value becomes the round's sum
    auto got = kv.pushpull("g", {w.make({mine, 2 * mine, static_cast<float>(round) * mine}, {3})});
    BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
    const float m = static_cast<float>(members);
    BOOST_TEST(w.host(*got) == (std::vector<float>{m, 2 * m, static_cast<float>(round) * m}), boost::test_tools::per_element());
  }
  // A step made from inside an actor that holds the system's only scheduler thread until the
  // step is done (as a pipeline stage summing its gradients over its replicas does).
  struct step {};
  std::promise<std::vector<float>> inside;
  auto stepper = w.sys.spawn([&](strata::actor&) -> strata::behavior {
    return {[&](const step&) {
      auto got = kv.pushpull("g", {w.make({mine, mine, mine}, {3})});
      inside.set_value(got ? w.host(*got) : std::vector<float>{});
    }};
  });
  auto answered = inside.get_future();
  BOOST_REQUIRE(w.sys.send(stepper, step{}));
  BOOST_REQUIRE(answered.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  BOOST_TEST(answered.get() == std::vector<float>(3, static_cast<float>(members)), boost::test_tools::per_element());
  w.sys.stop(stepper);
  BOOST_REQUIRE(kv.barrier());
  // Only dist_sync_allreduce on a cpu replica spans a group.
  try {
    kvd::store bad(w.sys, w.net, kvd::store_options{.mode = kvd::mode::sync, .value_device = w.cpu, .group = *group});
    BOOST_FAIL("a dist_sync store over a group was made");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "kvstore_dist::store: store_options::group is for dist_sync_allreduce stores on a "
                                        "cpu replica; this store is dist_sync.");
  }
}

BOOST_AUTO_TEST_CASE(dist_sync_allreduce_sums_every_rank_in_one_fused_call_and_updates_every_replica_alike) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .value_device = w.cpu});
  BOOST_TEST(kv.type() == "dist_sync_allreduce");
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  const strata::kernels::sgd_options sgd{.lr = 0.05, .momentum = 0.9};
  BOOST_REQUIRE(kv.set_optimizer(sgd));
  strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
  BOOST_REQUIRE(ref.set_optimizer(sgd).get());
  auto keys = some_keys(seed + 1);
  std::vector<strata::kvstore::key> names;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    // Only rank 0's initial value counts; the others offer their own, which must be ignored.
    auto w0 = gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel());
    auto offered = kv.rank() == 0 ? w0 : gradient(seed, kv.rank(), static_cast<int>(k), 77, keys[k].numel());
    BOOST_REQUIRE(kv.init(keys[k].key, w.make(offered, keys[k].shape)));
    auto back = kv.pull(keys[k].key);
    BOOST_REQUIRE(back);
    BOOST_TEST((w.host(*back) == w0));
    BOOST_REQUIRE(ref.init(keys[k].key, w.make(w0, keys[k].shape)).get());
    names.push_back(keys[k].key);
  }
  // Keys given in reverse order: the fused buffer is packed in key order whatever the call order.
  std::reverse(names.begin(), names.end());
  for (int t = 1; t <= 3; ++t) {
    if (t == 3) {  // every replica takes a new rate and keeps its momentum
      BOOST_REQUIRE(kv.set_learning_rate(0.02));
      BOOST_REQUIRE(ref.set_learning_rate(0.02).get());
    }
    std::vector<strata::tensor> grads;
    for (const auto& name : names) {
      auto k = static_cast<std::size_t>(std::get<std::int64_t>(name.value()));
      grads.push_back(w.make(gradient(seed, kv.rank(), static_cast<int>(k), t, keys[k].numel()), keys[k].shape));
    }
    auto got = kv.pushpull(names, grads);
    BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto k = static_cast<std::size_t>(std::get<std::int64_t>(names[i].value()));
      std::vector<float> sum(keys[k].numel(), 0.0f);
      for (int r = 0; r < n; ++r) {
        auto g = gradient(seed, r, static_cast<int>(k), t, keys[k].numel());
        for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += g[j];
      }
      BOOST_REQUIRE(ref.push(names[i], w.make(sum, keys[k].shape)).get());
      auto expected = ref.pull(names[i], w.make(std::vector<float>(keys[k].numel()), keys[k].shape)).get();
      BOOST_REQUIRE(expected);
      auto a = w.host((*got)[i]);
      auto b = w.host(expected->front());
      double worst = 0;
      for (std::size_t j = 0; j < a.size(); ++j) worst = std::max(worst, static_cast<double>(std::abs(a[j] - b[j])));
      // MPI picks the order of the additions: equal to one process up to float rounding.
      BOOST_TEST(worst < 1e-5, "key " << k << " round " << t << ": max |diff| " << worst);
    }
  }
  auto refused = kv.push(names.front(), {w.make(std::vector<float>(keys.back().numel()), keys.back().shape)});
  BOOST_REQUIRE(!refused);
  BOOST_TEST(refused.error().message().find("supports pushpull only") != std::string::npos);
  BOOST_REQUIRE(kv.barrier());
}

/// `--save PATH` / `--load PATH` after `--` on the command line (ctest passes them): a
/// checkpoint written by a job of one size and read by a job of another.
std::string arg_after(const std::string& flag) {
  auto& suite = boost::unit_test::framework::master_test_suite();
  for (int i = 1; i + 1 < suite.argc; ++i)
    if (flag == suite.argv[i]) return suite.argv[i + 1];
  return {};
}

/// Every key's value, pulled from the distributed store.
std::map<strata::kvstore::key, std::vector<float>> values_of(world& w, kvd::store& kv,
                                                             const std::vector<strata::kvstore::key>& keys) {
  std::map<strata::kvstore::key, std::vector<float>> out;
  for (const auto& k : keys) {
    auto got = kv.pull(k);
    BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
    out[k] = w.host(*got);
  }
  return out;
}

/// Rounds `first`..`last` of pushes on every rank's dist store and, for the same gradients in
/// rank order, on the one-process reference; then the pulls of both must be equal bit for bit.
void train_both(world& w, kvd::store& kv, strata::kvstore::client& ref, std::uint32_t seed,
                const strata::kvstore::checkpoint& layout, int first, int last) {
  const int n = kv.num_workers();
  for (int t = first; t <= last; ++t)
    for (std::size_t k = 0; k < layout.entries.size(); ++k) {
      const auto& e = layout.entries[k];
      const std::size_t numel = e.arrays.front().size();
      auto got = kv.pushpull(e.key, {w.make(gradient(seed, kv.rank(), static_cast<int>(k), t, numel), e.shape)});
      BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
      std::vector<strata::kvstore::key> ks(static_cast<std::size_t>(n), e.key);
      std::vector<strata::tensor> vs;
      for (int r = 0; r < n; ++r) vs.push_back(w.make(gradient(seed, r, static_cast<int>(k), t, numel), e.shape));
      BOOST_REQUIRE(ref.push(ks, vs).get());
      auto expected = ref.pull(e.key, w.make(std::vector<float>(numel), e.shape)).get();
      BOOST_REQUIRE(expected);
      BOOST_TEST((w.host(*got) == w.host(expected->front())), "key " << e.key.to_string() << " round " << t);
    }
}

BOOST_AUTO_TEST_CASE(a_distributed_checkpoint_is_one_kvstore_file_that_any_number_of_ranks_continues_bit_for_bit) {
  world& w = *the_world;
  const strata::kernels::sgd_options sgd{.lr = 0.05, .momentum = 0.9};
  const std::string load_from = arg_after("--load");
  std::string path = arg_after("--save");
  {
    kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
    const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
    BOOST_REQUIRE(kv.set_optimizer(sgd));
    strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
    BOOST_REQUIRE(ref.set_optimizer(sgd).get());
    strata::kvstore::checkpoint layout;
    if (!load_from.empty()) {
      // Written by a job of another size: load it on this one and on one process, train both.
      auto file = strata::kvstore::read_checkpoint(load_from);
      BOOST_REQUIRE_MESSAGE(file, (file ? "" : file.error().message()));
      layout = *file;
      BOOST_REQUIRE(kv.load(load_from));
      BOOST_REQUIRE(ref.load(load_from).get());
      train_both(w, kv, ref, seed, layout, 10, 12);
      BOOST_REQUIRE(kv.barrier());
      return;
    }
    // Train a few rounds, save, and compare the file with what the store holds.
    for (const auto& k : some_keys(seed)) {
      strata::kvstore::checkpoint_entry e;
      e.key = k.key;
      e.shape = k.shape;
      e.arrays.push_back(gradient(seed, 99, static_cast<int>(layout.entries.size()), 0, k.numel()));
      BOOST_REQUIRE(kv.init(e.key, w.make(e.arrays.front(), e.shape)));
      BOOST_REQUIRE(ref.init(e.key, w.make(e.arrays.front(), e.shape)).get());
      layout.entries.push_back(std::move(e));
    }
    train_both(w, kv, ref, seed, layout, 1, 3);
    if (path.empty())
      path = (std::filesystem::temp_directory_path() / ("strata_kvd_" + std::to_string(seed) + ".ckpt")).string();
    BOOST_REQUIRE(kv.save(path));
    auto file = strata::kvstore::read_checkpoint(path);
    BOOST_REQUIRE_MESSAGE(file, (file ? "" : file.error().message()));
    std::vector<strata::kvstore::key> keys;
    for (const auto& e : layout.entries) keys.push_back(e.key);
    auto held = values_of(w, kv, keys);
    std::size_t seen = 0;
    for (const auto& e : file->entries) {
      if (held.count(e.key) == 0) continue;  // the shared seed's key
      ++seen;
      BOOST_TEST((e.arrays.front() == held[e.key]), "key " << e.key.to_string());
      BOOST_TEST(e.version == 3u);
      BOOST_TEST(e.arrays.size() == 2u);  // value and momentum
    }
    BOOST_TEST(seen == layout.entries.size());
    if (!arg_after("--save").empty()) {
      BOOST_REQUIRE(kv.barrier());
      return;  // the file is for another job
    }
    // Go on two rounds here; then a fresh store loads the file and goes the same two rounds.
    train_both(w, kv, ref, seed, layout, 4, 5);
    auto after = values_of(w, kv, keys);
    BOOST_REQUIRE(kv.barrier());
    kvd::store again(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
    BOOST_REQUIRE(again.set_optimizer(sgd));
    BOOST_REQUIRE(again.load(path));
    strata::kvstore::client ref2(w.sys, strata::kvstore::spawn(w.sys));
    BOOST_REQUIRE(ref2.set_optimizer(sgd).get());
    BOOST_REQUIRE(ref2.load(path).get());
    train_both(w, again, ref2, seed, layout, 4, 5);
    auto resumed = values_of(w, again, keys);
    for (const auto& k : keys) BOOST_TEST((resumed[k] == after[k]), "key " << k.to_string() << " after resuming");
    // A missing file fails on every rank, with one sentence, and changes nothing.
    auto missing = again.load(path + ".missing");
    BOOST_REQUIRE(!missing);
    BOOST_TEST(missing.error().message().find(".missing") != std::string::npos);
    BOOST_TEST((values_of(w, again, keys) == resumed));
    BOOST_REQUIRE(again.barrier());
    if (again.rank() == 0) std::filesystem::remove(path);
  }
}

}  // namespace kvstore_dist_test
