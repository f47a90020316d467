// Row-sparse values on sharded and synchronous stores, on random data: sharded stores (2, 3 and
// 4 shards, keys split into chunks whose boundaries fall inside rows) against one store bit for
// bit after rounds of pushes and pulls with repeated and out-of-order ids, under assign, SGD with
// momentum and weight decay, and Adam, and with pulls of higher priority sent without waiting; synchronous versions of three contributions from three
// clients (one store and three shards) against a dense reference of the same rule on the union
// of the rows; bad input on sharded, synchronous, compressed and sim stores, one sentence each.

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/one_device.hpp"
#include "support/sim_stores.hpp"

namespace kvstore_row_sparse_sharded_test {

namespace kv = strata::kvstore;
using strata::test::await;
using optimizer = std::variant<std::monostate, strata::kernels::sgd_options, strata::kernels::adam_options>;

const std::vector<optimizer> rules{optimizer{},
                                   optimizer{strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}},
                                   optimizer{strata::kernels::adam_options{.lr = 0.01, .weight_decay = 0.05}}};

/// The bits of each float: equal vectors mean equal bit for bit (-0 and 0 differ).
std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

struct key_shape {
  kv::key key;
  std::vector<std::int64_t> shape;
};

struct fixture : strata::test::one_device {
  // Rows of 7 and of 5 floats, and a rank-1 key (rows of one float).
  const std::vector<key_shape> keys{{"emb", {37, 7}}, {"tags", {29, 5}}, {"bias", {60}}};

  static std::size_t row(const std::vector<std::int64_t>& shape) { return count(shape) / static_cast<std::size_t>(shape[0]); }
  /// `k` row ids of `rows`, in any order, repeats likely.
  std::vector<std::int64_t> some_ids(std::int64_t rows, std::size_t k) {
    std::uniform_int_distribution<std::int64_t> d(0, rows - 1);
    std::vector<std::int64_t> ids(k);
    for (auto& id : ids) id = d(rng);
    return ids;
  }
  kv::row_sparse sparse(const std::vector<std::int64_t>& shape, std::vector<std::int64_t> ids, const std::vector<float>& data) {
    auto rows_shape = shape;
    rows_shape[0] = static_cast<std::int64_t>(ids.size());
    return {make(data, rows_shape), std::move(ids), shape};
  }
  /// Random multiples of 1/64 in [-1, 1]: sums of a few are exact in any order.
  std::vector<float> dyadic(std::size_t n) {
    std::uniform_int_distribution<int> d(-64, 64);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(d(rng)) / 64.f;
    return v;
  }
  /// Options of a store of `shards` shards whose keys split into chunks of `chunk_bytes`.
  static kv::options sharded(std::size_t shards, std::size_t chunk_bytes, std::size_t contributions = 0) {
    kv::options o;
    o.shards = shards;
    o.chunk_bytes = chunk_bytes;
    o.contributions_per_version = contributions;
    return o;
  }
  static void install(kv::client& store, const optimizer& rule) {
    if (const auto* sgd = std::get_if<strata::kernels::sgd_options>(&rule))
      BOOST_REQUIRE(await(store.set_optimizer(*sgd)).has_value());
    if (const auto* adam = std::get_if<strata::kernels::adam_options>(&rule))
      BOOST_REQUIRE(await(store.set_optimizer(*adam)).has_value());
  }
};

template <class T>
void refused(const strata::expected<T>& r, const std::string& expected) {
  BOOST_TEST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message() == expected);
}

BOOST_AUTO_TEST_SUITE(kvstore_row_sparse_sharded)

BOOST_FIXTURE_TEST_CASE(sharded_row_sparse_pushes_and_pulls_equal_one_store_bit_for_bit, fixture) {
  for (const auto& rule : rules)
    for (std::size_t shards : {2, 3, 4}) {
      BOOST_TEST_CONTEXT("rule " << rule.index() << ", " << shards << " shards") {
        kv::client one(sys, kv::spawn(sys));
        // 23 floats a chunk: most chunk boundaries fall inside rows of 7 and of 5.
        kv::client split(sys, kv::spawn(sys, sharded(shards, 92)));
        for (const auto& k : keys) {
          const auto w = random(count(k.shape));
          BOOST_REQUIRE(await(one.init(k.key, make(w, k.shape))).has_value());
          BOOST_REQUIRE(await(split.init(k.key, make(w, k.shape))).has_value());
        }
        install(one, rule);
        install(split, rule);
        for (int round = 0; round < 5; ++round) {
          kv::push_row_sparse push;  // every key, two values each, ids out of order and repeated
          for (const auto& k : keys)
            for (int v = 0; v < 2; ++v) {
              auto ids = some_ids(k.shape[0], 6);
              const auto data = random(ids.size() * row(k.shape));
              push.keys.push_back(k.key);
              push.values.push_back(sparse(k.shape, std::move(ids), data));
            }
          BOOST_REQUIRE(await(one.send(push)).has_value());
          BOOST_REQUIRE(await(split.send(push)).has_value());
          kv::row_sparse_pull pull;  // rows of every key in a random order with repeats
          for (const auto& k : keys) {
            auto ids = some_ids(k.shape[0], 9);
            auto out_shape = k.shape;
            out_shape[0] = static_cast<std::int64_t>(ids.size());
            pull.keys.push_back(k.key);
            pull.row_ids.push_back(std::move(ids));
            pull.outs.push_back(filled(out_shape, -1.f));
          }
          auto twin = pull;
          for (auto& out : twin.outs) out = filled(out.shape(), -2.f);
          auto a = await(one.send(pull));
          auto b = await(split.send(twin));
          BOOST_REQUIRE(a.has_value());
          BOOST_REQUIRE(b.has_value());
          for (std::size_t i = 0; i < keys.size(); ++i)
            BOOST_TEST(bits(a->at(i).to_host<float>(strm)) == bits(b->at(i).to_host<float>(strm)),
                       boost::test_tools::per_element());
        }
        for (const auto& k : keys) {
          BOOST_TEST(bits(value_of(one, k.key, k.shape)) == bits(value_of(split, k.key, k.shape)),
                     boost::test_tools::per_element());
          BOOST_TEST(await(one.version(k.key)).value() == await(split.version(k.key)).value());
        }
      }
    }
}

BOOST_FIXTURE_TEST_CASE(a_senders_row_sparse_pull_sees_its_earlier_push_whatever_the_priority_on_a_sharded_store, fixture) {
  // Pushes and high-priority pulls sent without waiting: each pull must see the push before it,
  // on one store and on three shards alike (SGD with momentum, so every step's state differs).
  const std::vector<std::int64_t> shape{37, 7};
  const auto w = random(count(shape));
  kv::client one(sys, kv::spawn(sys));
  kv::client split(sys, kv::spawn(sys, sharded(3, 92)));
  for (auto* store : {&one, &split}) {
    BOOST_REQUIRE(await(store->init("emb", make(w, shape))).has_value());
    install(*store, strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9});
  }
  std::vector<kv::client::done> pushes;
  std::vector<kv::client::tensors> pulls;
  for (int step = 0; step < 6; ++step) {
    auto ids = some_ids(shape[0], 5);
    const auto data = random(ids.size() * 7);
    const auto watched = some_ids(shape[0], 8);
    for (auto* store : {&one, &split}) {
      pushes.push_back(store->send(kv::push_row_sparse{{"emb"}, {sparse(shape, ids, data)}, 0}));
      pulls.push_back(store->send(kv::row_sparse_pull{{"emb"}, {watched}, {filled({8, 7}, 0.f)}, 0, 9}));
    }
  }
  for (auto& f : pushes) BOOST_REQUIRE(await(f).has_value());
  for (std::size_t i = 0; i < pulls.size(); i += 2) {
    auto a = await(pulls[i]);
    auto b = await(pulls[i + 1]);
    BOOST_REQUIRE(a.has_value());
    BOOST_REQUIRE(b.has_value());
    BOOST_TEST(bits(a->at(0).to_host<float>(strm)) == bits(b->at(0).to_host<float>(strm)), boost::test_tools::per_element());
  }
}

BOOST_FIXTURE_TEST_CASE(synchronous_row_sparse_versions_sum_three_contributions_and_update_the_union_of_their_rows,
                        fixture) {
  constexpr std::size_t workers = 3;
  const std::vector<std::int64_t> shape{41, 6};
  const std::size_t cols = 6, n = count(shape);
  for (const auto& rule : rules)
    for (std::size_t shards : {1, 3}) {
      BOOST_TEST_CONTEXT("rule " << rule.index() << ", " << shards << " shard(s)") {
        auto store = kv::spawn(sys, sharded(shards, 100, workers));  // 25 floats: boundaries inside rows of 6
        std::vector<std::unique_ptr<kv::client>> clients;
        for (std::size_t w = 0; w < workers; ++w) clients.push_back(std::make_unique<kv::client>(sys, store));
        std::vector<float> value = random(n), momentum(n, 0.f), exp_avg(n, 0.f), exp_avg_sq(n, 0.f);
        BOOST_REQUIRE(await(clients[0]->init("emb", make(value, shape))).has_value());
        install(*clients[0], rule);
        for (std::int64_t version = 1; version <= 4; ++version) {
          // Sent before the version's pushes: it waits for the version.
          const auto watched = some_ids(shape[0], 5);
          auto pulled = clients[0]->row_sparse_pull("emb", filled({5, 6}, 0.f), watched, version);
          std::vector<float> sum(n, 0.f);
          std::vector<bool> in_union(static_cast<std::size_t>(shape[0]), false);
          std::vector<kv::client::done> pushes;
          for (std::size_t w = 0; w < workers; ++w) {
            auto ids = some_ids(shape[0], 7);
            const auto data = dyadic(ids.size() * cols);
            for (std::size_t r = 0; r < ids.size(); ++r) {
              in_union[static_cast<std::size_t>(ids[r])] = true;
              for (std::size_t c = 0; c < cols; ++c) sum[static_cast<std::size_t>(ids[r]) * cols + c] += data[r * cols + c];
            }
            pushes.push_back(clients[w]->push("emb", {sparse(shape, std::move(ids), data)}));
          }
          for (auto& f : pushes) BOOST_REQUIRE(await(f).has_value());
          // The reference: the rule once, on the union of the rows, with the dense sum.
          for (std::size_t id = 0; id < in_union.size(); ++id) {
            const std::size_t at = id * cols;
            if (std::holds_alternative<std::monostate>(rule)) {
              for (std::size_t c = 0; c < cols; ++c) value[at + c] = in_union[id] ? sum[at + c] : 0.f;
            } else if (!in_union[id]) {
              continue;
            } else if (const auto* sgd = std::get_if<strata::kernels::sgd_options>(&rule)) {
              strata::kernels::cpu::sgd_step(cols, &value[at], &sum[at], &momentum[at], *sgd);
            } else {
              strata::kernels::cpu::adam_step(cols, &value[at], &sum[at], &exp_avg[at], &exp_avg_sq[at], version,
                                              std::get<strata::kernels::adam_options>(rule));
            }
          }
          auto rows = await(pulled);
          BOOST_REQUIRE(rows.has_value());
          std::vector<float> expected;
          for (auto id : watched)
            expected.insert(expected.end(), value.begin() + id * 6, value.begin() + (id + 1) * 6);
          BOOST_TEST(bits(rows->at(0).to_host<float>(strm)) == bits(expected), boost::test_tools::per_element());
          BOOST_TEST(await(clients[1]->version("emb")).value() == static_cast<std::uint64_t>(version));
        }
        BOOST_TEST(bits(value_of(*clients[2], "emb", shape)) == bits(value), boost::test_tools::per_element());
      }
    }
}

BOOST_FIXTURE_TEST_CASE(bad_row_sparse_requests_on_sharded_synchronous_and_sim_stores_are_refused_with_one_sentence,
                        fixture) {
  const std::vector<std::int64_t> shape{37, 7};
  const auto w = random(count(shape));
  kv::client one(sys, kv::spawn(sys));
  kv::client split(sys, kv::spawn(sys, sharded(3, 64)));
  for (auto* store : {&one, &split}) BOOST_REQUIRE(await(store->init("emb", make(w, shape))).has_value());
  for (auto* store : {&one, &split}) {  // the same sentences as one store's
    refused(await(store->push("emb", {sparse(shape, {3, 37}, random(14))})),
            "kvstore push: the row-sparse value for key \"emb\" names row 37, outside [0, 37).");
    refused(await(store->push("emb", {kv::row_sparse{make(random(21), {3, 7}), {1, 2}, shape}})),
            "kvstore push: the row-sparse value for key \"emb\" has shape [3, 7], expected [2, 7] (one row per id).");
    refused(await(store->push("nope", {sparse(shape, {1}, random(7))})),
            "kvstore push: key \"nope\" is not initialised; call init first.");
    refused(await(store->row_sparse_pull("emb", filled({1, 7}, 0.f), {-1})),
            "kvstore row_sparse_pull: the output for key \"emb\" names row -1, outside [0, 37).");
    BOOST_TEST(bits(value_of(*store, "emb", shape)) == bits(w), boost::test_tools::per_element());  // unchanged
    BOOST_REQUIRE(await(store->set_gradient_compression("2bit", 0.5f)).has_value());
    refused(await(store->push("emb", {sparse(shape, {1}, random(7))})),
            "kvstore push: gradient compression does not apply to row-sparse pushes (MXNet refuses them too); turn "
            "gradient compression off first.");
    BOOST_REQUIRE(await(store->set_gradient_compression("none", 0.5f)).has_value());
    BOOST_REQUIRE(await(store->push("emb", {sparse(shape, {1}, random(7))})).has_value());
  }

  // Synchronous: a version collects dense or row-sparse values, not both.
  for (std::size_t shards : {1, 2}) {
    kv::client store(sys, kv::spawn(sys, sharded(shards, 64, 2)));
    BOOST_REQUIRE(await(store.init("emb", make(w, shape))).has_value());
    BOOST_REQUIRE(await(store.push("emb", make(random(count(shape)), shape))).has_value());
    refused(await(store.push("emb", {sparse(shape, {1}, random(7))})),
            "kvstore push: key \"emb\" has dense values towards its next version; a version collects dense or "
            "row-sparse values, not both.");
    BOOST_REQUIRE(await(store.push("emb", make(random(count(shape)), shape))).has_value());
    BOOST_REQUIRE(await(store.push("emb", {sparse(shape, {1}, random(7))})).has_value());
    refused(await(store.push("emb", make(random(count(shape)), shape))),
            "kvstore push: key \"emb\" has row-sparse values towards its next version; a version collects dense or "
            "row-sparse values, not both.");
    BOOST_TEST(await(store.version("emb")).value() == 1u);
  }

  // sim stores (they hold no data) refuse row-sparse values; cpu and cuda stores take them.
  strata::test::sim_stores sims(sys);
  for (auto* store : sims.both()) {
    BOOST_REQUIRE(await(store->init("emb", strata::tensor::empty(shape, strata::dtype::float32, sims.sim[0], sims.sim_stream)))
                      .has_value());
    refused(await(store->push("emb", {sparse(shape, {1}, random(7))})),
            "kvstore push: row-sparse values run on cpu and cuda stores only (this store merges on sim:0).");
    refused(await(store->row_sparse_pull("emb", filled({1, 7}, 0.f), {1})),
            "kvstore row_sparse_pull: row-sparse values run on cpu and cuda stores only (this store merges on sim:0).");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_row_sparse_sharded_test
