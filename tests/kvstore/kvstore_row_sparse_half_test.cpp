// Row-sparse pushes and pulls of float16 and bfloat16 keys, on random data: a row-sparse key
// against a dense 16-bit key holding just its pushed rows (the dense path, tested on its own),
// bit for bit, under assign, SGD with momentum (with and without multi_precision) and Adam with
// multi_precision, on one store and on 2 and 3 shards whose chunks end inside rows, asynchronous
// and synchronous; rows pushed at some steps only against one dense key per row (the master copy
// of a row not pushed stays); another dtype refused with one sentence.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "strata/kernels/optimizers.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "support/half_device.hpp"

namespace kvstore_row_sparse_half_test {

namespace kv = strata::kvstore;
namespace sk = strata::kernels;
using strata::dtype;
using strata::test::await;

constexpr std::int64_t rows = 50;
constexpr std::int64_t cols = 6;
const dtype half_types[] = {dtype::float16, dtype::bfloat16};

struct rule {
  std::variant<std::monostate, sk::sgd_options, sk::adam_options> options;
  bool multi_precision = false;
};
const std::vector<rule> rules{{},
                              {sk::sgd_options{.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01}, true},
                              {sk::sgd_options{.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01}, false},
                              {sk::adam_options{.lr = 0.01, .weight_decay = 0.05}, true}};

struct fixture : strata::test::half_device {
  kv::row_sparse sparse(dtype type, const std::vector<std::int64_t>& ids, const std::vector<float>& data,
                        std::int64_t width = cols, std::int64_t height = rows) {
    return {make16(type, data, {static_cast<std::int64_t>(ids.size()), width}), ids, {height, width}};
  }
  void install(kv::client& store, const rule& r) {
    if (const auto* sgd = std::get_if<sk::sgd_options>(&r.options))
      BOOST_REQUIRE(await(store.send(kv::set_optimizer{.options = *sgd, .multi_precision = r.multi_precision})).has_value());
    if (const auto* adam = std::get_if<sk::adam_options>(&r.options))
      BOOST_REQUIRE(await(store.send(kv::set_optimizer{.options = *adam, .multi_precision = r.multi_precision})).has_value());
  }
  /// Rows `ids` of a key's words (rows of `cols`).
  static std::vector<std::uint16_t> rows_of(const std::vector<std::uint16_t>& words, const std::vector<std::int64_t>& ids,
                                            std::int64_t width = cols) {
    std::vector<std::uint16_t> out;
    for (auto id : ids) out.insert(out.end(), words.begin() + id * width, words.begin() + (id + 1) * width);
    return out;
  }
};

std::string rule_name(const rule& r) {
  const char* names[] = {"assign", "sgd momentum", "adam"};
  return std::string(names[r.options.index()]) + (r.multi_precision ? " multi_precision" : "");
}

BOOST_AUTO_TEST_SUITE(kvstore_row_sparse_half)

BOOST_FIXTURE_TEST_CASE(row_sparse_pushes_of_16_bit_keys_equal_the_dense_16_bit_path_on_the_same_rows, fixture) {
  // Chunks of 20 bytes: 10 elements, ending inside rows of 6; the sync stores take two pushes a version.
  const std::vector<kv::options> stores{{}, {.shards = 2, .chunk_bytes = 20}, {.shards = 3, .chunk_bytes = 20},
                                        {.contributions_per_version = 2},
                                        {.contributions_per_version = 2, .shards = 3, .chunk_bytes = 20}};
  const std::vector<std::int64_t> touched{3, 17, 40};
  for (auto type : half_types)
    for (const auto& r : rules)
      for (const auto& o : stores) {
        BOOST_TEST_CONTEXT(strata::to_string(type) << ", " << rule_name(r) << ", " << o.shards << " shards, "
                                                   << o.contributions_per_version << " per version") {
          kv::client store(sys, kv::spawn(sys, o));
          const auto w = random(rows * cols);
          const auto w_rows = rows_of(bits_of(make16(type, w, {rows, cols})), touched);
          std::vector<float> w_rows_values;
          for (auto b : w_rows) w_rows_values.push_back(strata::kernels::half_value(type, b));
          BOOST_REQUIRE(await(store.init({"emb", "rows"}, {make16(type, w, {rows, cols}), make16(type, w_rows_values, {3, cols})}))
                            .has_value());
          const auto initial = pulled_bits(store, "emb", type, rows * cols, {rows, cols});
          install(store, r);
          for (int step = 0; step < 4; ++step) {
            // Two values per step, ids out of order and row 3 in both: the dense twin gets two
            // values of three rows, zero where a value names no row, in the same order.
            const auto a = random(2 * cols), b = random(2 * cols);
            std::vector<float> da(3 * cols, 0.f), db(3 * cols, 0.f);
            std::copy_n(a.begin(), cols, da.begin() + 2 * cols);  // row 40
            std::copy_n(a.begin() + cols, cols, da.begin());      // row 3
            std::copy_n(b.begin(), cols, db.begin());             // row 3
            std::copy_n(b.begin() + cols, cols, db.begin() + cols);  // row 17
            const auto sa = sparse(type, {40, 3}, a), sb = sparse(type, {3, 17}, b);
            const auto ta = make16(type, da, {3, cols}), tb = make16(type, db, {3, cols});
            if (o.contributions_per_version == 0) {
              BOOST_REQUIRE(await(store.push("emb", std::vector<kv::row_sparse>{sa, sb})).has_value());
              BOOST_REQUIRE(await(store.push("rows", {ta, tb})).has_value());
            } else {  // one contribution per call: the first is kept by the store until the second
              BOOST_REQUIRE(await(store.push("emb", std::vector<kv::row_sparse>{sa})).has_value());
              std::memset(sa.rows.raw_data(), 0x3c, sa.rows.bytes());  // answered: the caller may reuse its tensor
              BOOST_REQUIRE(await(store.push("emb", std::vector<kv::row_sparse>{sb})).has_value());
              BOOST_REQUIRE(await(store.push("rows", ta)).has_value());
              BOOST_REQUIRE(await(store.push("rows", tb)).has_value());
            }
          }
          const auto emb = pulled_bits(store, "emb", type, rows * cols, {rows, cols});
          const auto twin = pulled_bits(store, "rows", type, 3 * cols, {3, cols});
          for (std::int64_t id = 0, slot = 0; id < rows; ++id) {
            const bool pushed = slot < 3 && touched[static_cast<std::size_t>(slot)] == id;
            for (std::int64_t c = 0; c < cols; ++c) {
              const std::uint16_t untouched = r.options.index() == 0 ? 0 : initial[static_cast<std::size_t>(id * cols + c)];
              const std::uint16_t expect = pushed ? twin[static_cast<std::size_t>(slot * cols + c)] : untouched;
              BOOST_TEST_REQUIRE(emb[static_cast<std::size_t>(id * cols + c)] == expect, "row " << id << " col " << c);
            }
            if (pushed) ++slot;
          }
          // row_sparse_pull into a 16-bit output: the rows in the order asked, repeats too.
          const std::vector<std::int64_t> asked{17, 40, 3, 17, 0};
          auto out = await(store.row_sparse_pull("emb", make16(type, std::vector<float>(5 * cols, 7.f), {5, cols}), asked));
          BOOST_REQUIRE(out.has_value());
          BOOST_TEST(bits_of(out->at(0)) == rows_of(emb, asked), boost::test_tools::per_element());
        }
      }
}

BOOST_FIXTURE_TEST_CASE(sgd_on_rows_pushed_at_some_steps_equals_one_dense_key_per_row_and_keeps_the_master_of_rows_not_pushed,
                        fixture) {
  // Steps of 1e-4 x gradients below 1: below half a float16 ulp near 1, so multi_precision's
  // master copies carry them; a row's master must survive the steps that do not push it.
  constexpr std::int64_t n_rows = 12, width = 5;
  const sk::sgd_options sgd{.lr = 1e-4, .momentum = 0.9};
  for (auto type : half_types)
    for (bool multi : {true, false})
      for (const kv::options& o : {kv::options{}, kv::options{.shards = 3, .chunk_bytes = 14}}) {
        BOOST_TEST_CONTEXT(strata::to_string(type) << (multi ? " multi_precision, " : ", ") << o.shards << " shards") {
          kv::client store(sys, kv::spawn(sys, o));
          kv::client per_row(sys, kv::spawn(sys));  // key i: row i as a dense key
          const auto w = representable(type, random(n_rows * width, 0.5f, 1.f));
          BOOST_REQUIRE(await(store.init("emb", make16(type, w, {n_rows, width}))).has_value());
          for (std::int64_t i = 0; i < n_rows; ++i)
            BOOST_REQUIRE(await(per_row.init(i, make16(type, std::vector<float>(w.begin() + i * width, w.begin() + (i + 1) * width),
                                                       {width})))
                              .has_value());
          install(store, {sgd, multi});
          install(per_row, {sgd, multi});
          std::uniform_int_distribution<std::int64_t> pick(0, n_rows - 1);
          for (int step = 0; step < 30; ++step) {
            // Two values of 3 random ids each (repeats likely); each row's occurrences, in order,
            // are its dense key's values.
            std::vector<kv::row_sparse> values;
            std::map<std::int64_t, std::vector<strata::tensor>> dense;
            for (int v = 0; v < 2; ++v) {
              std::vector<std::int64_t> ids(3);
              for (auto& id : ids) id = pick(rng);
              const auto data = random(3 * width, 0.f, 1.f);
              values.push_back(sparse(type, ids, data, width, n_rows));
              for (std::size_t k = 0; k < ids.size(); ++k)
                dense[ids[k]].push_back(
                    make16(type, std::vector<float>(data.begin() + static_cast<std::ptrdiff_t>(k * width),
                                                    data.begin() + static_cast<std::ptrdiff_t>((k + 1) * width)),
                           {width}));
            }
            BOOST_REQUIRE(await(store.push("emb", values)).has_value());
            for (auto& [id, ts] : dense) BOOST_REQUIRE(await(per_row.push(id, ts)).has_value());
          }
          const auto got = pulled_bits(store, "emb", type, n_rows * width, {n_rows, width});
          std::vector<std::uint16_t> want;
          for (std::int64_t i = 0; i < n_rows; ++i) {
            const auto row = pulled_bits(per_row, i, type, width);
            want.insert(want.end(), row.begin(), row.end());
          }
          BOOST_TEST(got == want, boost::test_tools::per_element());
          if (multi) BOOST_TEST(got != bits_of(make16(type, w, {n_rows * width})));  // the master copies moved values
        }
      }
}

BOOST_FIXTURE_TEST_CASE(a_row_sparse_value_or_output_of_another_dtype_is_refused_with_one_sentence, fixture) {
  for (const kv::options& o : {kv::options{}, kv::options{.shards = 3, .chunk_bytes = 20}}) {
    BOOST_TEST_CONTEXT(o.shards << " shards") {
      kv::client store(sys, kv::spawn(sys, o));
      const auto w = random(rows * cols);
      BOOST_REQUIRE(await(store.init({"h", "f"}, {make16(dtype::float16, w, {rows, cols}), make(w, {rows, cols})})).has_value());
      const auto before = pulled_bits(store, "h", dtype::float16, rows * cols, {rows, cols});
      auto refused = [](auto r, const std::string& sentence) {
        BOOST_TEST_REQUIRE(!r.has_value());
        BOOST_TEST(r.error().message() == sentence);
      };
      refused(await(store.push("h", std::vector<kv::row_sparse>{{make(random(cols), {1, cols}), {4}, {rows, cols}}})),
              "kvstore push: the row-sparse value for key \"h\" has dtype float32, expected float16.");
      refused(await(store.push("h", std::vector<kv::row_sparse>{sparse(dtype::bfloat16, {4}, random(cols))})),
              "kvstore push: the row-sparse value for key \"h\" has dtype bfloat16, expected float16.");
      refused(await(store.push("f", std::vector<kv::row_sparse>{sparse(dtype::float16, {4}, random(cols))})),
              "kvstore push: the row-sparse value for key \"f\" has dtype float16, expected float32.");
      refused(await(store.row_sparse_pull("h", make(random(cols), {1, cols}), {4})),
              "kvstore row_sparse_pull: the output for key \"h\" has dtype float32, expected float16.");
      refused(await(store.row_sparse_pull("f", make16(dtype::bfloat16, random(cols), {1, cols}), {4})),
              "kvstore row_sparse_pull: the output for key \"f\" has dtype bfloat16, expected float32.");
      BOOST_TEST(pulled_bits(store, "h", dtype::float16, rows * cols, {rows, cols}) == before);
      BOOST_TEST(await(store.version("h")).value() == 0u);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_row_sparse_half_test
