// Keys split over several servers (store_options::big_array_bound): every case uses a bound of
// 10 elements, so keys of 7 and 10 elements stay whole and keys of 11, 15 and 1001 are cut into
// parts of odd sizes on ranks 0, 1, ... The reference is one process (a local kvstore fed every
// rank's values in rank order), or the rule written again per worker, on random data.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dist_world.hpp"
#include "strata/kvstore/compression.hpp"

using namespace strata::test::dist;

namespace kvstore_dist_split_test {

constexpr std::int64_t bound = 10;

/// Keys of 7 and 10 elements (whole), 11, 15 and 1001 (split when there are several ranks).
std::vector<key_spec> split_keys() {
  return {{std::int64_t{0}, {7}}, {std::int64_t{1}, {2, 5}}, {std::int64_t{2}, {11}}, {std::int64_t{3}, {3, 5}},
          {std::int64_t{4}, {7, 143}}};
}

kvd::store_options split_options(world& w, kvd::mode mode = kvd::mode::sync) {
  return kvd::store_options{.mode = mode, .value_device = w.cpu, .big_array_bound = bound};
}

std::size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i] ? 1 : 0;
  return n;
}

/// `--split-save PATH` / `--split-load PATH` after `--` (ctest passes them).
std::string flag_value(const std::string& flag) {
  auto& suite = boost::unit_test::framework::master_test_suite();
  for (int i = 1; i + 1 < suite.argc; ++i)
    if (flag == suite.argv[i]) return suite.argv[i + 1];
  return {};
}

/// Rounds `first`..`last` of pushpulls on the dist store and, with every rank's gradients in rank
/// order, on the one-process reference `ref`; the values must be equal bit for bit. In round 2
/// each worker pushes its gradient as two values (summed on the worker).
void train_both(world& w, kvd::store& kv, strata::kvstore::client& ref, std::uint32_t seed,
                const std::vector<key_spec>& keys, int first, int last) {
  const int n = kv.num_workers();
  for (int t = first; t <= last; ++t)
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto& spec = keys[k];
      auto mine = gradient(seed, kv.rank(), static_cast<int>(k), t, spec.numel());
      std::vector<strata::tensor> values{w.make(mine, spec.shape)};
      if (t == 2) {
        std::vector<float> half(mine.size()), rest(mine.size());
        for (std::size_t i = 0; i < mine.size(); ++i) half[i] = mine[i] * 0.5f, rest[i] = mine[i] - half[i];
        values = {w.make(half, spec.shape), w.make(rest, spec.shape)};
      }
      auto got = kv.pushpull(spec.key, values);
      BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
      std::vector<strata::kvstore::key> ks;
      std::vector<strata::tensor> vs;
      for (int r = 0; r < n; ++r) {
        auto g = gradient(seed, r, static_cast<int>(k), t, spec.numel());
        if (t == 2) {
          std::vector<float> half(g.size()), rest(g.size());
          for (std::size_t i = 0; i < g.size(); ++i) half[i] = g[i] * 0.5f, rest[i] = g[i] - half[i];
          for (std::size_t i = 0; i < g.size(); ++i) g[i] = half[i] + rest[i];
        }
        ks.push_back(spec.key);
        vs.push_back(w.make(g, spec.shape));
      }
      BOOST_REQUIRE(ref.push(ks, vs).get());
      auto expected = ref.pull(spec.key, w.make(std::vector<float>(spec.numel()), spec.shape)).get();
      BOOST_REQUIRE(expected);
      BOOST_TEST(got->shape() == spec.shape);
      const auto bad = differing(w.host(*got), w.host(expected->front()));
      BOOST_TEST(bad == 0u, "key " << spec.key.to_string() << " round " << t << ": " << bad << " elements differ");
    }
}

void init_both(world& w, kvd::store& kv, strata::kvstore::client& ref, std::uint32_t seed, const std::vector<key_spec>& keys) {
  for (std::size_t k = 0; k < keys.size(); ++k) {
    auto w0 = gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel());
    BOOST_REQUIRE(kv.init(keys[k].key, w.make(w0, keys[k].shape)));
    BOOST_REQUIRE(ref.init(keys[k].key, w.make(w0, keys[k].shape)).get());
  }
}

BOOST_AUTO_TEST_SUITE(kvstore_dist_split)

BOOST_AUTO_TEST_CASE(split_keys_under_dist_sync_with_momentum_equal_one_process_bit_for_bit) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, split_options(w));
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  const strata::kernels::sgd_options sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
  BOOST_REQUIRE(kv.set_optimizer(sgd));
  BOOST_REQUIRE(kv.barrier());
  strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
  BOOST_REQUIRE(ref.set_optimizer(sgd).get());
  const auto keys = split_keys();
  init_both(w, kv, ref, seed, keys);
  // Whole keys keep one owner; a split key's parts live on ranks 0, 1, ... (-1 for owner).
  for (const auto& spec : keys) {
    const bool split = n > 1 && static_cast<std::int64_t>(spec.numel()) > bound;
    const auto owners = kv.owners(spec.key);
    BOOST_TEST(kv.owner(spec.key) == (split ? -1 : owners.front()));
    BOOST_TEST(owners.size() == (split ? static_cast<std::size_t>(n) : 1u), "key " << spec.key.to_string());
    if (split)
      for (int p = 0; p < n; ++p) BOOST_TEST(owners[static_cast<std::size_t>(p)] == p);
  }
  train_both(w, kv, ref, seed, keys, 1, 2);
  // A new rate from round 3 on; the momentum carries over in every part.
  BOOST_REQUIRE(kv.set_learning_rate(0.02));
  BOOST_REQUIRE(kv.barrier());
  BOOST_REQUIRE(ref.set_learning_rate(0.02).get());
  train_both(w, kv, ref, seed, keys, 3, 5);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(split_keys_under_dist_async_apply_every_push_of_every_worker) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, split_options(w, kvd::mode::async));
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  BOOST_REQUIRE(kv.set_optimizer(strata::kernels::sgd_options{.lr = 1.0}));
  BOOST_REQUIRE(kv.barrier());
  const auto keys = split_keys();
  for (std::size_t k = 0; k < keys.size(); ++k)
    BOOST_REQUIRE(kv.init(keys[k].key, w.make(gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel()), keys[k].shape)));
  const int pushes = 4;
  for (int t = 1; t <= pushes; ++t)
    for (std::size_t k = 0; k < keys.size(); ++k)
      BOOST_REQUIRE(kv.push(keys[k].key, {w.make(gradient(seed, kv.rank(), static_cast<int>(k), t, keys[k].numel()), keys[k].shape)}));
  BOOST_REQUIRE(kv.barrier());  // every worker's pushes have been taken
  for (std::size_t k = 0; k < keys.size(); ++k) {
    // Every push was applied once, in some order: w = w0 - sum of all gradients (float64).
    auto w0 = gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel());
    std::vector<double> expected(w0.begin(), w0.end());
    for (int r = 0; r < n; ++r)
      for (int t = 1; t <= pushes; ++t) {
        auto g = gradient(seed, r, static_cast<int>(k), t, keys[k].numel());
        for (std::size_t i = 0; i < g.size(); ++i) expected[i] -= g[i];
      }
    auto got = kv.pull(keys[k].key);
    BOOST_REQUIRE(got);
    auto a = w.host(*got);
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - expected[i]));
    BOOST_TEST(worst < 1e-4, "key " << keys[k].key.to_string());
  }
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(split_keys_with_2bit_compression_equal_the_rule_per_worker_bit_for_bit) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, split_options(w));
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  const float threshold = 0.5f;
  const auto keys = split_keys();
  for (const auto& spec : keys) BOOST_REQUIRE(kv.init(spec.key, w.make(std::vector<float>(spec.numel(), 0.0f), spec.shape)));
  BOOST_REQUIRE(kv.set_gradient_compression("2bit", threshold));
  // Each worker's residual of each whole key, the rule applied to the whole key (kvstore::compress).
  std::map<std::pair<int, std::size_t>, std::vector<float>> residuals;
  std::uint64_t expected_bytes = 0;
  for (int t = 1; t <= 4; ++t)
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto& spec = keys[k];
      auto got = kv.pushpull(spec.key, {w.make(gradient(seed, kv.rank(), static_cast<int>(k), t, spec.numel()), spec.shape)});
      BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
      std::vector<float> sum(spec.numel(), 0.0f);
      for (int r = 0; r < n; ++r) {
        auto g = gradient(seed, r, static_cast<int>(k), t, spec.numel());
        auto& res = residuals[{r, k}];
        res.resize(g.size(), 0.0f);
        std::vector<float> sent(g.size());
        strata::kvstore::compress(strata::kvstore::compression_type::two_bit, threshold, g.data(), res.data(), sent.data(), g.size());
        for (std::size_t i = 0; i < g.size(); ++i) sum[i] = r == 0 ? sent[i] : sum[i] + sent[i];
      }
      const auto bad = differing(w.host(*got), sum);
      BOOST_TEST(bad == 0u, "key " << spec.key.to_string() << " round " << t << ": " << bad << " elements differ");
      // Each part travels as its own code words (16 elements a word) plus the threshold.
      const auto owners = kv.owners(spec.key);
      const std::size_t parts = owners.size(), numel = spec.numel();
      for (std::size_t p = 0; p < parts; ++p) {
        const std::size_t size = numel / parts + (p < numel % parts ? 1 : 0);
        expected_bytes += (size + 15) / 16 * 4 + 4;
      }
    }
  BOOST_TEST(kv.bytes_pushed() == expected_bytes);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(a_split_checkpoint_holds_whole_keys_that_other_rank_counts_and_one_process_continue_bit_for_bit) {
  world& w = *the_world;
  const strata::kernels::sgd_options sgd{.lr = 0.05, .momentum = 0.9};
  const std::string load_from = flag_value("--split-load");
  std::string path = flag_value("--split-save");
  const auto keys = split_keys();
  kvd::store kv(w.sys, w.net, split_options(w));
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  BOOST_REQUIRE(kv.set_optimizer(sgd));
  BOOST_REQUIRE(kv.barrier());
  strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
  BOOST_REQUIRE(ref.set_optimizer(sgd).get());
  if (!load_from.empty()) {
    // Saved by a job of another size (its parts cut otherwise): load here and in one process.
    BOOST_REQUIRE(kv.load(load_from));
    BOOST_REQUIRE(ref.load(load_from).get());
    train_both(w, kv, ref, seed, keys, 10, 12);
    BOOST_REQUIRE(kv.barrier());
    return;
  }
  init_both(w, kv, ref, seed, keys);
  train_both(w, kv, ref, seed, keys, 1, 3);
  if (path.empty())
    path = (std::filesystem::temp_directory_path() / ("strata_kvd_split_" + std::to_string(seed) + ".ckpt")).string();
  BOOST_REQUIRE(kv.save(path));
  // The file holds every key whole: its value as pulled, its momentum, its version.
  auto file = strata::kvstore::read_checkpoint(path);
  BOOST_REQUIRE_MESSAGE(file, (file ? "" : file.error().message()));
  std::size_t seen = 0;
  for (const auto& e : file->entries) {
    for (const auto& spec : keys) {
      if (!(spec.key == e.key)) continue;
      ++seen;
      auto held = kv.pull(spec.key);
      BOOST_REQUIRE(held);
      BOOST_TEST(e.shape == spec.shape);
      BOOST_TEST(e.version == 3u);
      BOOST_REQUIRE(e.arrays.size() == 2u);  // value and momentum
      BOOST_TEST(differing(e.arrays.front(), w.host(*held)) == 0u, "key " << spec.key.to_string());
    }
  }
  BOOST_TEST(seen == keys.size());
  if (!flag_value("--split-save").empty()) {
    BOOST_REQUIRE(kv.barrier());
    return;  // the file is for another job
  }
  // Here: stores that cut the keys otherwise (no split; every key of 2+ elements split) and one
  // process load the file and go on alike.
  for (std::int64_t other : {kvd::store_options::never_split, std::int64_t{0}}) {
    kvd::store again(w.sys, w.net, kvd::store_options{.value_device = w.cpu, .big_array_bound = other});
    BOOST_REQUIRE(again.set_optimizer(sgd));
    BOOST_REQUIRE(again.barrier());
    BOOST_REQUIRE(again.load(path));
    strata::kvstore::client ref2(w.sys, strata::kvstore::spawn(w.sys));
    BOOST_REQUIRE(ref2.set_optimizer(sgd).get());
    BOOST_REQUIRE(ref2.load(path).get());
    train_both(w, again, ref2, seed, keys, 4, 5);
    BOOST_REQUIRE(again.barrier());
  }
  if (kv.rank() == 0) std::filesystem::remove(path);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(bad_input_to_a_split_store_gets_one_sentence_and_changes_nothing) {
  world& w = *the_world;
  try {
    kvd::store refused(w.sys, w.net, kvd::store_options{.value_device = w.cpu, .big_array_bound = -1});
    BOOST_FAIL("a negative big_array_bound was taken");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("big_array_bound is -1; expected 0 or more") != std::string::npos);
  }
  kvd::store kv(w.sys, w.net, split_options(w));
  const int n = kv.num_workers();
  // A split key must be float32, float16 or bfloat16: refused on every rank, and the key stays free.
  if (n > 1) {
    std::vector<std::int32_t> ints(20, 1);
    auto wrong = kv.init("big", strata::tensor::from_host<std::int32_t>(std::span<const std::int32_t>(ints), {20}, w.cpu, w.s));
    BOOST_REQUIRE(!wrong);
    if (kv.rank() == 0) BOOST_TEST(wrong.error().message().find("must be a float32, float16 or bfloat16 cpu tensor") != std::string::npos);
    else BOOST_TEST(wrong.error().message().find("rank 0's value was refused") != std::string::npos);
  }
  std::vector<float> v(20);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.25f;
  BOOST_REQUIRE(kv.init("big", w.make(v, {4, 5})));
  const strata::kvstore::key big = "big";
  auto twice = kv.init(big, w.make(v, {4, 5}));
  BOOST_REQUIRE(!twice);
  BOOST_TEST(twice.error().message().find("exists already") != std::string::npos);
  auto bad_shape = kv.push(big, {w.make(v, {20})});
  BOOST_REQUIRE(!bad_shape);
  BOOST_TEST(bad_shape.error().message().find("expected float32 [4, 5]") != std::string::npos);
  auto none = kv.push(big, {});
  BOOST_REQUIRE(!none);
  // Nothing changed: the value is rank 0's init, whole and in order.
  auto got = kv.pull(big);
  BOOST_REQUIRE(got);
  BOOST_TEST(got->shape() == (std::vector<std::int64_t>{4, 5}));
  BOOST_TEST(differing(w.host(*got), v) == 0u);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_dist_split_test
