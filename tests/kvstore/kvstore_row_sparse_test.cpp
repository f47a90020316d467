// Row-sparse values (MXNet's row_sparse push and row_sparse_pull) on a store, on random data:
// sums by id against a dense sum written here, pulls of named rows, the lazy SGD and Adam update
// (only pushed rows and their state change) against the dense update of the same rows on a
// second key, a user updater's dense sum, and bad input refused with one sentence.

#include <boost/test/unit_test.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/one_device.hpp"

namespace kvstore_row_sparse_test {

namespace kv = strata::kvstore;
using strata::test::await;

constexpr std::int64_t rows = 50;
constexpr std::int64_t cols = 6;

struct fixture : strata::test::one_device {
  const std::vector<std::int64_t> shape{rows, cols};

  kv::row_sparse sparse(const std::vector<std::int64_t>& ids, const std::vector<float>& data) {
    return {make(data, {static_cast<std::int64_t>(ids.size()), cols}), ids, shape};
  }
  std::vector<std::int64_t> some_ids(std::size_t k) {
    std::uniform_int_distribution<std::int64_t> d(0, rows - 1);
    std::vector<std::int64_t> ids(k);
    for (auto& id : ids) id = d(rng);
    return ids;
  }
};

BOOST_AUTO_TEST_SUITE(kvstore_row_sparse)

BOOST_FIXTURE_TEST_CASE(a_row_sparse_push_without_an_updater_stores_the_rows_summed_by_id, fixture) {
  kv::client store(sys, kv::spawn(sys));
  BOOST_REQUIRE(await(store.init("emb", make(random(rows * cols), shape))).has_value());
  std::vector<float> expected(rows * cols, 0.f);
  std::vector<kv::row_sparse> values;
  for (int w = 0; w < 3; ++w) {  // three workers' gradients, ids overlapping and repeated
    auto ids = some_ids(8);
    auto data = random(ids.size() * cols);
    for (std::size_t r = 0; r < ids.size(); ++r)
      for (std::int64_t c = 0; c < cols; ++c) expected[ids[r] * cols + c] += data[r * cols + c];
    values.push_back(sparse(ids, data));
  }
  BOOST_REQUIRE(await(store.push("emb", values)).has_value());
  const auto got = value_of(store, "emb", shape);
  for (std::size_t i = 0; i < expected.size(); ++i) BOOST_TEST(got[i] == expected[i], boost::test_tools::tolerance(1e-6f));
}

BOOST_FIXTURE_TEST_CASE(row_sparse_pull_copies_the_named_rows_in_their_order, fixture) {
  kv::client store(sys, kv::spawn(sys));
  const auto w = random(rows * cols);
  BOOST_REQUIRE(await(store.init(3, make(w, shape))).has_value());
  const std::vector<std::int64_t> ids{49, 0, 7, 7, 23};
  auto out = await(store.row_sparse_pull(3, make(std::vector<float>(ids.size() * cols, -1.f), {5, cols}), ids));
  BOOST_REQUIRE(out.has_value());
  const auto got = out->at(0).to_host<float>(strm);
  for (std::size_t r = 0; r < ids.size(); ++r)
    for (std::int64_t c = 0; c < cols; ++c) BOOST_TEST(got[r * cols + c] == w[ids[r] * cols + c]);
}

BOOST_FIXTURE_TEST_CASE(sgd_and_adam_update_only_the_pushed_rows_as_a_dense_update_of_those_rows_would, fixture) {
  using optimizer = std::variant<strata::kernels::sgd_options, strata::kernels::adam_options>;
  for (const optimizer& opt : {optimizer{strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}},
                               optimizer{strata::kernels::adam_options{.lr = 0.01, .weight_decay = 0.05}}}) {
    BOOST_TEST_CONTEXT(opt.index()) {
      kv::client store(sys, kv::spawn(sys));
      const auto w = random(rows * cols);
      const std::vector<std::int64_t> touched{3, 17, 40};  // the rows every step pushes
      std::vector<float> w_rows;
      for (auto id : touched) w_rows.insert(w_rows.end(), w.begin() + id * cols, w.begin() + (id + 1) * cols);
      BOOST_REQUIRE(await(store.init({"emb", "rows"}, {make(w, shape), make(w_rows, {3, cols})})).has_value());
      BOOST_REQUIRE(std::visit([&](const auto& o) { return await(store.set_optimizer(o)); }, opt).has_value());
      for (int step = 0; step < 4; ++step) {
        // Two pieces per step, ids out of order and one repeated: the dense twin gets their sum.
        auto a = random(2 * cols), b = random(2 * cols);
        std::vector<float> dense_grad(3 * cols, 0.f);
        auto add = [&](std::size_t slot, const std::vector<float>& data, std::size_t r) {
          for (std::int64_t c = 0; c < cols; ++c) dense_grad[slot * cols + c] += data[r * cols + c];
        };
        add(2, a, 0), add(0, a, 1), add(0, b, 0), add(1, b, 1);
        BOOST_REQUIRE(await(store.push("emb", {sparse({40, 3}, a), sparse({3, 17}, b)})).has_value());
        BOOST_REQUIRE(await(store.push("rows", make(dense_grad, {3, cols}))).has_value());
      }
      const auto emb = value_of(store, "emb", shape);
      const auto twin = value_of(store, "rows", {3, cols});
      for (std::int64_t id = 0, slot = 0; id < rows; ++id) {
        const bool pushed = slot < 3 && touched[slot] == id;
        for (std::int64_t c = 0; c < cols; ++c) {
          const float expect = pushed ? twin[slot * cols + c] : w[id * cols + c];
          BOOST_TEST(emb[id * cols + c] == expect, "row " << id << " col " << c);
        }
        if (pushed) ++slot;
      }
    }
  }
}

BOOST_FIXTURE_TEST_CASE(a_user_updater_gets_the_row_sparse_sum_as_a_dense_tensor, fixture) {
  kv::client store(sys, kv::spawn(sys));
  BOOST_REQUIRE(await(store.init(1, make(std::vector<float>(rows * cols, 1.f), shape))).has_value());
  BOOST_REQUIRE(await(store.set_updater([](const kv::key&, const strata::tensor& merged, strata::tensor& stored) {
                  const float* g = merged.data<float>();
                  float* p = stored.data<float>();
                  for (std::int64_t i = 0; i < stored.numel(); ++i) p[i] -= 2.f * g[i];
                })).has_value());
  const auto data = random(2 * cols);
  BOOST_REQUIRE(await(store.push(1, {sparse({5, 9}, data)})).has_value());
  const auto got = value_of(store, 1, shape);
  for (std::int64_t id = 0; id < rows; ++id)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float g = id == 5 ? data[c] : id == 9 ? data[cols + c] : 0.f;
      BOOST_TEST(got[id * cols + c] == 1.f - 2.f * g);
    }
}

BOOST_FIXTURE_TEST_CASE(bad_row_sparse_requests_are_refused_with_one_sentence, fixture) {
  kv::client store(sys, kv::spawn(sys));
  BOOST_REQUIRE(await(store.init(1, make(random(rows * cols), shape))).has_value());
  const auto before = value_of(store, 1, shape);
  auto refused = [](auto r, const std::string& expected) {
    BOOST_TEST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message().find(expected) != std::string::npos, r.error().message());
    BOOST_TEST(r.error().message().find('\n') == std::string::npos);
  };
  refused(await(store.push(1, {sparse({3, 50}, random(2 * cols))})), "names row 50, outside [0, 50).");
  refused(await(store.push(1, {kv::row_sparse{make(random(3 * cols), {3, cols}), {1, 2}, shape}})),
          "has shape [3, 6], expected [2, 6] (one row per id).");
  refused(await(store.push(1, {kv::row_sparse{make(random(2 * cols), {2, cols}), {1, 2}, {rows, 3}}})),
          "has shape [50, 3], expected [50, 6] (the stored shape).");
  refused(await(store.push(2, {sparse({1}, random(cols))})), "key 2 is not initialised");
  refused(await(store.row_sparse_pull(1, make(random(cols), {1, cols}), {-1})), "names row -1, outside [0, 50).");
  refused(await(store.row_sparse_pull(1, make(random(2 * cols), {2, cols}), {4})), "expected [1, 6] (one row per id).");
  refused(await(store.push(1, {kv::row_sparse{strata::tensor{}, {1}, shape}})),
          "kvstore push: the row-sparse value for key 1 is an empty tensor; expected a float32 tensor.");
  refused(await(store.row_sparse_pull(1, strata::tensor{}, {1})),
          "kvstore row_sparse_pull: the output for key 1 is an empty tensor; expected a float32 tensor.");
  {  // rows and outputs live in host memory; a sim tensor holds none
    strata::device_manager sims(strata::device_options{.sim_time_scale = 0});
    auto sim = sims.create("sim:1").at(0);
    auto ss = sim.create_stream();
    auto on_sim = strata::tensor::empty({1, cols}, strata::dtype::float32, sim, ss);
    refused(await(store.push(1, {kv::row_sparse{on_sim, {1}, shape}})),
            "kvstore push: the row-sparse value for key 1 is on sim:0; row-sparse values are cpu tensors.");
    refused(await(store.row_sparse_pull(1, on_sim, {1})),
            "kvstore row_sparse_pull: the output for key 1 is on sim:0; row-sparse values are cpu tensors.");
  }
  {  // a row_sparse_pull request whose lists do not pair up
    kv::row_sparse_pull m{{1, 1}, {{1}}, {make(random(cols), {1, cols})}, 0};
    refused(await(sys.request<std::vector<strata::tensor>>(store.store(), std::chrono::seconds(20), std::move(m))),
            "kvstore row_sparse_pull: 2 keys, 1 row id lists and 1 outputs; expected one of each per key, at least one.");
  }
  BOOST_REQUIRE(await(store.init(3, make({2.5f}, {}))).has_value());
  refused(await(store.push(3, {kv::row_sparse{make({1.f}, {1}), {0}, {}}})),
          "kvstore push: the row-sparse value for key 3 names rows of a scalar key; row-sparse values need a key of rank 1 or more.");
  BOOST_TEST(value_of(store, 1, shape) == before, boost::test_tools::per_element());  // nothing changed

  BOOST_REQUIRE(await(store.set_gradient_compression("2bit", 0.5f)).has_value());
  refused(await(store.push(1, {sparse({1}, random(cols))})),
          "kvstore push: gradient compression does not apply to row-sparse pushes (MXNet refuses them too); turn "
          "gradient compression off first.");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_row_sparse_test
