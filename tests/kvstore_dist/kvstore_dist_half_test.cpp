// float16 and bfloat16 keys in strata::kvstore_dist. Data is random (a seed rank 0 draws); the
// reference is one process's cpu kvstore fed every rank's values of a round in one push, in rank
// order (its 16-bit rules are tested on their own in tests/kvstore/kvstore_half_test.cpp), and the
// results must agree bit for bit.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "support/dist_world.hpp"
#include "strata/kernels/half.hpp"

using namespace strata::test::dist;
using strata::dtype;
namespace kv = strata::kvstore;
namespace sk = strata::kernels;

namespace kvstore_dist_half_test {

const dtype half_types[] = {dtype::float16, dtype::bfloat16};

/// The bytes of `t` (any dtype), to compare bit for bit.
std::vector<std::uint8_t> bytes_of(world& w, const strata::tensor& t) {
  strata::tensor raw({static_cast<std::int64_t>(t.bytes())}, dtype::uint8, t.storage(), t.ready_event());
  return raw.to_host<std::uint8_t>(w.s);
}

/// `x` rounded to `type` and widened back.
float as(dtype type, float x) { return sk::half_value(type, sk::half_bits(type, x)); }

struct half_key {
  kv::key key;
  std::vector<std::int64_t> shape;
  dtype type;
  std::size_t numel() const {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
};

/// The one-process reference: a cpu kvstore with the same rule.
struct reference {
  world& w;
  kv::client store;
  reference(world& wd, const kv::set_optimizer* rule) : w(wd), store(wd.sys, kv::spawn(wd.sys)) {
    if (rule != nullptr) BOOST_REQUIRE(store.send(*rule).get());
  }
  /// Every rank's value (`per_rank[r]`) of `k` in one push, in rank order; then the value.
  std::vector<std::uint8_t> push_all(const half_key& k, const std::vector<std::vector<float>>& per_rank) {
    std::vector<kv::key> ks(per_rank.size(), k.key);
    std::vector<strata::tensor> vs;
    for (const auto& v : per_rank) vs.push_back(make_as(w, k.type, v, k.shape));
    BOOST_REQUIRE(store.push(ks, vs).get());
    return value(k);
  }
  std::vector<std::uint8_t> value(const half_key& k) {
    auto got = store.pull(k.key, make_as(w, k.type, std::vector<float>(k.numel()), k.shape)).get();
    BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
    return bytes_of(w, got->front());
  }
};

/// Rank `r`'s gradient of key `k` in round `t`, as `type` holds it.
std::vector<float> grad(std::uint32_t seed, int r, int k, int t, const half_key& key) {
  auto g = gradient(seed, r, k, t, key.numel());
  if (key.type != dtype::float32)
    for (auto& x : g) x = as(key.type, x);
  return g;
}

/// Inits `keys` in `kv` (rank 0's value counts) and in the reference.
void init_both(world& w, kvd::store& kvs, reference& ref, std::uint32_t seed, const std::vector<half_key>& keys) {
  for (std::size_t k = 0; k < keys.size(); ++k) {
    auto w0 = gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel());
    BOOST_REQUIRE(kvs.init(keys[k].key, make_as(w, keys[k].type, w0, keys[k].shape)));
    BOOST_REQUIRE(ref.store.init(keys[k].key, make_as(w, keys[k].type, w0, keys[k].shape)).get());
  }
}

/// Rounds `first`..`last`: every rank pushpulls its gradient of every key; the reference takes
/// every rank's in rank order; the two values must be equal bit for bit. Answers the last values.
std::map<kv::key, std::vector<std::uint8_t>> train_both(world& w, kvd::store& kvs, reference& ref, std::uint32_t seed,
                                                        const std::vector<half_key>& keys, int first, int last) {
  std::map<kv::key, std::vector<std::uint8_t>> out;
  for (int t = first; t <= last; ++t)
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto& key = keys[k];
      auto got = kvs.pushpull(key.key, {make_as(w, key.type, grad(seed, kvs.rank(), static_cast<int>(k), t, key), key.shape)});
      BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
      BOOST_TEST((got->dtype() == key.type));
      std::vector<std::vector<float>> all;
      for (int r = 0; r < kvs.num_workers(); ++r) all.push_back(grad(seed, r, static_cast<int>(k), t, key));
      auto want = ref.push_all(key, all);
      auto mine = bytes_of(w, *got);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < mine.size() && i < want.size(); ++i) differ += mine[i] != want[i] ? 1 : 0;
      BOOST_TEST((mine.size() == want.size() && differ == 0u),
                 "key " << key.key.to_string() << " (" << to_string(key.type) << ") round " << t << ": " << differ
                        << " bytes differ from one process");
      out[key.key] = std::move(mine);
    }
  return out;
}

std::vector<half_key> keys_of(dtype type, std::uint32_t seed) {
  std::vector<half_key> keys;
  for (const auto& k : some_keys(seed)) keys.push_back({k.key, k.shape, type});
  keys.erase(keys.begin() + 4, keys.end());
  return keys;
}

kvd::store_options split_at(world& w, std::int64_t bound, kvd::mode mode = kvd::mode::sync) {
  return kvd::store_options{.mode = mode, .value_device = w.cpu, .big_array_bound = bound};
}

std::string flag_value(const std::string& flag) {
  auto& suite = boost::unit_test::framework::master_test_suite();
  for (int i = 1; i + 1 < suite.argc; ++i)
    if (flag == suite.argv[i]) return suite.argv[i + 1];
  return {};
}

BOOST_AUTO_TEST_SUITE(kvstore_dist_half)

BOOST_AUTO_TEST_CASE(dist_sync_assign_sums_16_bit_pushes_in_float32_in_rank_order_and_rounds_once_as_one_process) {
  world& w = *the_world;
  for (dtype type : half_types) {
    kvd::store kvs(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
    const std::uint32_t seed = w.shared_seed(kvs, std::int64_t{1000});
    reference ref(w, nullptr);
    auto keys = keys_of(type, seed);
    init_both(w, kvs, ref, seed, keys);
    for (const auto& k : keys) {  // the key keeps rank 0's 16-bit value
      auto got = kvs.pull(k.key);
      BOOST_REQUIRE(got);
      BOOST_TEST((got->dtype() == type));
      BOOST_TEST((bytes_of(w, *got) == ref.value(k)));
    }
    train_both(w, kvs, ref, seed, keys, 1, 3);
    // Three local values: summed on the worker in float32, rounded once to the key's dtype, sent.
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto& key = keys[k];
      std::vector<strata::tensor> local;
      for (int j = 1; j <= 3; ++j)
        local.push_back(make_as(w, type, grad(seed, kvs.rank(), 10 * j + static_cast<int>(k), 4, key), key.shape));
      auto got = kvs.pushpull(key.key, local);
      BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
      std::vector<std::vector<float>> all;
      for (int r = 0; r < kvs.num_workers(); ++r) {
        auto a = grad(seed, r, 10 + static_cast<int>(k), 4, key), b = grad(seed, r, 20 + static_cast<int>(k), 4, key),
             c = grad(seed, r, 30 + static_cast<int>(k), 4, key);
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = as(type, a[i] + b[i] + c[i]);
        all.push_back(std::move(a));
      }
      BOOST_TEST((bytes_of(w, *got) == ref.push_all(key, all)), "three local values, key " << key.key.to_string());
    }
    BOOST_REQUIRE(kvs.barrier());
  }
}

BOOST_AUTO_TEST_CASE(dist_sync_sgd_momentum_and_adam_on_16_bit_keys_equal_one_process_with_and_without_multi_precision) {
  world& w = *the_world;
  for (dtype type : half_types)
    for (int optimizer = 0; optimizer < 2; ++optimizer) {
      std::map<kv::key, std::vector<std::uint8_t>> by_precision[2];
      std::uint32_t seed = 0;  // rank 0's draw for the first store; the second uses it again
      for (int mp = 0; mp < 2; ++mp) {
        kv::set_optimizer rule{.options = strata::kernels::sgd_options{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-3},
                               .multi_precision = mp == 1};
        if (optimizer == 1) rule.options = strata::kernels::adam_options{.lr = 0.003};
        kvd::store kvs(w.sys, w.net, kvd::store_options{.value_device = w.cpu});
        if (mp == 0) seed = w.shared_seed(kvs, std::int64_t{1000});
        BOOST_REQUIRE(kvs.set_optimizer(rule));
        BOOST_REQUIRE(kvs.barrier());  // every shard has its rule before the first push
        reference ref(w, &rule);
        auto keys = keys_of(type, seed);
        init_both(w, kvs, ref, seed, keys);
        by_precision[mp] = train_both(w, kvs, ref, seed, keys, 1, 4);
        BOOST_REQUIRE(kvs.barrier());
      }
      // The master copy made a difference somewhere: multi_precision reached the servers.
      std::size_t differ = 0;
      for (const auto& [key, bytes] : by_precision[0]) differ += bytes != by_precision[1][key] ? 1 : 0;
      BOOST_TEST(differ > 0u, to_string(type) << (optimizer == 0 ? " sgd" : " adam")
                                              << ": multi_precision changed no key");
    }
}

BOOST_AUTO_TEST_CASE(dist_async_updates_16_bit_keys_at_every_push_as_one_process_taking_them_in_turn) {
  world& w = *the_world;
  const kv::set_optimizer rule{.options = strata::kernels::adam_options{.lr = 0.01}, .multi_precision = true};
  kvd::store kvs(w.sys, w.net, kvd::store_options{.mode = kvd::mode::async, .value_device = w.cpu});
  const std::uint32_t seed = w.shared_seed(kvs, std::int64_t{1000});
  BOOST_REQUIRE(kvs.set_optimizer(rule));
  BOOST_REQUIRE(kvs.barrier());
  reference ref(w, &rule);
  // One store, keys of three dtypes.
  std::vector<half_key> keys{{std::int64_t{0}, {5, 33}, dtype::float16},
                             {std::int64_t{1}, {70}, dtype::bfloat16},
                             {std::int64_t{2}, {3, 9}, dtype::float32}};
  init_both(w, kvs, ref, seed, keys);
  for (int t = 1; t <= 3; ++t)
    for (int r = 0; r < kvs.num_workers(); ++r) {
      // The ranks take turns, so that every key sees the pushes in a known order.
      for (std::size_t k = 0; k < keys.size(); ++k) {
        if (kvs.rank() == r)
          BOOST_REQUIRE(kvs.push(keys[k].key, {make_as(w, keys[k].type, grad(seed, r, static_cast<int>(k), t, keys[k]), keys[k].shape)}));
        BOOST_REQUIRE(ref.store.push(keys[k].key, make_as(w, keys[k].type, grad(seed, r, static_cast<int>(k), t, keys[k]), keys[k].shape)).get());
      }
      BOOST_REQUIRE(kvs.barrier());
    }
  for (const auto& k : keys) {
    auto got = kvs.pull(k.key);
    BOOST_REQUIRE(got);
    BOOST_TEST((got->dtype() == k.type));
    BOOST_TEST((bytes_of(w, *got) == ref.value(k)), "key " << k.key.to_string() << " (" << to_string(k.type) << ")");
  }
  BOOST_REQUIRE(kvs.barrier());
}

BOOST_AUTO_TEST_CASE(split_16_bit_keys_give_the_bits_of_one_process_with_multi_precision) {
  world& w = *the_world;
  const kv::set_optimizer rule{.options = strata::kernels::sgd_options{.lr = 0.01, .momentum = 0.9},
                               .multi_precision = true};
  kvd::store kvs(w.sys, w.net, split_at(w, 100));
  const std::uint32_t seed = w.shared_seed(kvs, std::int64_t{1000});
  BOOST_REQUIRE(kvs.set_optimizer(rule));
  BOOST_REQUIRE(kvs.barrier());
  reference ref(w, &rule);
  std::vector<half_key> keys{{std::int64_t{0}, {7, 50}, dtype::float16},
                             {std::int64_t{1}, {3, 61}, dtype::bfloat16},
                             {std::int64_t{2}, {10}, dtype::float16}};
  init_both(w, kvs, ref, seed, keys);
  const int n = kvs.num_workers();
  BOOST_TEST(kvs.owners(keys[0].key).size() == static_cast<std::size_t>(n));  // split when n > 1
  BOOST_TEST(kvs.owners(keys[1].key).size() == static_cast<std::size_t>(n));
  BOOST_TEST(kvs.owners(keys[2].key).size() == 1u);
  train_both(w, kvs, ref, seed, keys, 1, 3);
  // Two local values of a split key: summed in float32, rounded once, then cut.
  auto got = kvs.pushpull(keys[0].key, {make_as(w, keys[0].type, grad(seed, kvs.rank(), 5, 4, keys[0]), keys[0].shape),
                                        make_as(w, keys[0].type, grad(seed, kvs.rank(), 6, 4, keys[0]), keys[0].shape)});
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
  std::vector<std::vector<float>> all;
  for (int r = 0; r < n; ++r) {
    auto a = grad(seed, r, 5, 4, keys[0]), b = grad(seed, r, 6, 4, keys[0]);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = as(keys[0].type, a[i] + b[i]);
    all.push_back(std::move(a));
  }
  BOOST_TEST((bytes_of(w, *got) == ref.push_all(keys[0], all)));
  BOOST_TEST(kvs.bytes_pushed() == 3u * 2u * (350u + 183u + 10u) + 2u * 350u);  // two bytes an element
  BOOST_REQUIRE(kvs.barrier());
}

BOOST_AUTO_TEST_CASE(gradient_compression_of_16_bit_keys_quantizes_the_widened_value_as_one_process) {
  world& w = *the_world;
  const kv::set_optimizer rule{.options = strata::kernels::sgd_options{.lr = 0.1}, .multi_precision = true};
  kvd::store kvs(w.sys, w.net, split_at(w, 100));
  const std::uint32_t seed = w.shared_seed(kvs, std::int64_t{1000});
  BOOST_REQUIRE(kvs.set_optimizer(rule));
  BOOST_REQUIRE(kvs.set_gradient_compression("2bit", 0.5f));
  reference ref(w, &rule);
  // One process keeps a residual per value of a push (its slot): slot r is rank r's.
  BOOST_REQUIRE(ref.store.set_gradient_compression("2bit", 0.5f).get());
  std::vector<half_key> keys{{std::int64_t{0}, {4, 60}, dtype::float16}, {std::int64_t{1}, {37}, dtype::bfloat16}};
  init_both(w, kvs, ref, seed, keys);
  auto last = train_both(w, kvs, ref, seed, keys, 1, 4);
  // A threshold the key's dtype does not hold is refused by the owner, and nothing changes.
  BOOST_REQUIRE(kvs.set_gradient_compression("2bit", 0.3f));
  for (std::size_t k = 0; k < keys.size(); ++k) {
    auto refused = kvs.push(keys[k].key, {make_as(w, keys[k].type, grad(seed, kvs.rank(), 0, 9, keys[k]), keys[k].shape)});
    BOOST_REQUIRE(!refused);
    BOOST_TEST(refused.error().message() == "kvstore dist push: key " + keys[k].key.to_string() + " is " +
                                                std::string(to_string(keys[k].type)) +
                                                ", which does not hold the 2bit threshold 0.300000 exactly; choose one "
                                                "it holds (such as 0.5 or 0.25).",
               refused.error().message());
    auto still = kvs.pull(keys[k].key);
    BOOST_REQUIRE(still);
    BOOST_TEST((bytes_of(w, *still) == last[keys[k].key]));
  }
  BOOST_REQUIRE(kvs.barrier());
}

BOOST_AUTO_TEST_CASE(a_16_bit_checkpoint_saved_on_some_ranks_continues_on_others_and_in_one_process_bit_for_bit) {
  world& w = *the_world;
  const kv::set_optimizer rule{.options = strata::kernels::sgd_options{.lr = 0.01, .momentum = 0.9},
                               .multi_precision = true};
  const std::string load_from = flag_value("--half-load");
  std::string path = flag_value("--half-save");
  std::vector<half_key> keys{{std::int64_t{0}, {6, 40}, dtype::float16},
                             {std::int64_t{1}, {250}, dtype::bfloat16},
                             {std::int64_t{2}, {2, 9}, dtype::float16}};
  kvd::store kvs(w.sys, w.net, split_at(w, 100));
  const std::uint32_t seed = w.shared_seed(kvs, std::int64_t{1000});
  BOOST_REQUIRE(kvs.set_optimizer(rule));
  BOOST_REQUIRE(kvs.barrier());
  reference ref(w, &rule);
  if (!load_from.empty()) {  // written by a job of another size: this one and one process go on
    BOOST_REQUIRE(kvs.load(load_from));
    BOOST_REQUIRE(ref.store.load(load_from).get());
    train_both(w, kvs, ref, seed, keys, 10, 12);
    BOOST_REQUIRE(kvs.barrier());
    return;
  }
  init_both(w, kvs, ref, seed, keys);
  train_both(w, kvs, ref, seed, keys, 1, 3);
  if (path.empty())
    path = (std::filesystem::temp_directory_path() / ("strata_kvd_half_" + std::to_string(seed) + ".ckpt")).string();
  BOOST_REQUIRE(kvs.save(path));
  auto file = kv::read_checkpoint(path);
  BOOST_REQUIRE_MESSAGE(file, (file ? "" : file.error().message()));
  std::size_t seen = 0;
  for (const auto& e : file->entries)
    for (const auto& k : keys)
      if (e.key == k.key) {
        ++seen;
        BOOST_TEST((e.type == k.type), "key " << k.key.to_string());
        BOOST_TEST(e.master.size() == k.numel());  // whole, split keys joined
        BOOST_TEST(e.version == 3u);
        auto held = kvs.pull(k.key);
        BOOST_REQUIRE(held);
        BOOST_TEST((bytes_of(w, make_as(w, k.type, e.arrays.front(), k.shape)) == bytes_of(w, *held)));
      }
  BOOST_TEST(seen == keys.size());
  if (!flag_value("--half-save").empty()) {
    BOOST_REQUIRE(kvs.barrier());
    return;  // the file is for another job
  }
  // Here: a fresh distributed store and a fresh process load it and go on alike.
  auto after = train_both(w, kvs, ref, seed, keys, 4, 5);
  BOOST_REQUIRE(kvs.barrier());
  kvd::store again(w.sys, w.net, split_at(w, 100));
  BOOST_REQUIRE(again.set_optimizer(rule));
  BOOST_REQUIRE(again.load(path));
  reference ref2(w, &rule);
  BOOST_REQUIRE(ref2.store.load(path).get());
  auto resumed = train_both(w, again, ref2, seed, keys, 4, 5);
  BOOST_TEST((resumed == after));
  BOOST_REQUIRE(again.barrier());
  if (again.rank() == 0) std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(a_value_of_another_dtype_is_refused_with_one_sentence_naming_the_key_and_both_dtypes) {
  world& w = *the_world;
  kvd::store kvs(w.sys, w.net, split_at(w, 100));
  const int n = kvs.num_workers();
  const std::vector<float> v{1.5f, -2.25f, 3.0f, 0.125f};
  std::vector<float> big(300);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  BOOST_REQUIRE(kvs.init(std::int64_t{1}, make_as(w, dtype::float16, v, {4})));
  BOOST_REQUIRE(kvs.init(std::int64_t{2}, make_as(w, dtype::bfloat16, big, {300})));  // split when n > 1
  BOOST_REQUIRE(kvs.init(std::int64_t{3}, w.make(v, {4})));
  auto says = [&](const strata::expected<void>& r, const std::string& sentence) {
    BOOST_REQUIRE(!r);
    BOOST_TEST(r.error().message() == sentence);
  };
  const std::string push = "kvstore dist push: the value for key ";
  says(kvs.push(std::int64_t{1}, {w.make(v, {4})}), push + "1 has dtype float32, expected float16.");
  says(kvs.push(std::int64_t{1}, {make_as(w, dtype::bfloat16, v, {4})}), push + "1 has dtype bfloat16, expected float16.");
  says(kvs.push(std::int64_t{3}, {make_as(w, dtype::float16, v, {4})}), push + "3 has dtype float16, expected float32.");
  says(kvs.push(std::int64_t{2}, {w.make(big, {300})}), push + "2 has dtype float32, expected bfloat16.");
  says(kvs.push(std::int64_t{2}, {make_as(w, dtype::float16, big, {300}), make_as(w, dtype::float16, big, {300})}),
       push + "2 has dtype float16, expected bfloat16.");
  std::vector<std::int32_t> ints(4, 1);
  says(kvs.push(std::int64_t{1}, {strata::tensor::from_host<std::int32_t>(std::span<const std::int32_t>(ints), {4}, w.cpu, w.s)}),
       push + "1 has dtype int32, expected float16.");
  says(kvs.push(std::int64_t{1}, {make_as(w, dtype::float16, v, {4}), make_as(w, dtype::bfloat16, v, {4})}),
       "kvstore dist push: the values for key 1 must be cpu tensors of one shape and one dtype, float32, float16 or "
       "bfloat16.");
  says(kvs.push(std::int64_t{1}, {make_as(w, dtype::float16, v, {2, 2})}),
       "kvstore dist push: the value for key 1 is [2, 2], expected float16 [4].");
  // Compressed, the dtype travels with the codes and is checked alike.
  BOOST_REQUIRE(kvs.set_gradient_compression("2bit", 0.5f));
  says(kvs.push(std::int64_t{1}, {w.make(v, {4})}), push + "1 has dtype float32, expected float16.");
  says(kvs.push(std::int64_t{2}, {w.make(big, {300})}), push + "2 has dtype float32, expected bfloat16.");
  BOOST_REQUIRE(kvs.set_gradient_compression("none"));
  // Nothing changed: rank 0's values, and the next good push is version 1 of every worker.
  for (auto [key, type, values] : {std::tuple{std::int64_t{1}, dtype::float16, v}, std::tuple{std::int64_t{2}, dtype::bfloat16, big}}) {
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(values.size())};
    auto held = kvs.pull(key);
    BOOST_REQUIRE(held);
    BOOST_TEST((bytes_of(w, *held) == bytes_of(w, make_as(w, type, values, shape))));
    auto got = kvs.pushpull(key, {make_as(w, type, values, shape)});
    BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
    std::vector<float> sum(values.size(), 0.0f);  // every rank pushed the same values: n times them
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += as(type, values[i]);
    BOOST_TEST((bytes_of(w, *got) == bytes_of(w, make_as(w, type, sum, shape))));
  }
  BOOST_REQUIRE(kvs.barrier());
  // dist_sync_allreduce keeps float32 keys only: a 16-bit init, or a checkpoint with 16-bit keys,
  // is refused on every rank.
  const std::string shared = (std::filesystem::temp_directory_path() /
                              ("strata_kvd_half_dtypes_" + std::to_string(w.shared_seed(kvs, std::int64_t{4})) + ".ckpt"))
                                 .string();
  BOOST_REQUIRE(kvs.save(shared));
  kvd::store all(w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .value_device = w.cpu});
  says(all.init(std::int64_t{1}, make_as(w, dtype::float16, v, {4})),
       all.rank() == 0 ? "kvstore dist init: the value for key 1 must be a float32 cpu tensor."
                       : "kvstore dist init of key 1: rank 0's value was refused; nothing was stored.");
  says(all.load(shared), "kvstore dist load of \"" + shared +
                             "\": key 1 is float16, and dist_sync_allreduce keeps float32 keys only; nothing changed.");
  BOOST_REQUIRE(all.barrier());
  if (all.rank() == 0) std::filesystem::remove(shared);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_dist_half_test
