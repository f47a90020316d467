// Row-sparse values in dist_sync and dist_async (suite kvstore_dist_row_sparse). The reference is
// one process: a cpu kvstore fed, each round, every rank's row-sparse value in rank order in one
// push (as the owner's shard is), on random rows and random row ids (out of order, repeated,
// overlapping other ranks'). A bound of 40 elements splits the keys of 77 and 69 elements over
// the ranks, at part boundaries inside rows.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/dist_world.hpp"
#include "strata/kernels/half.hpp"

using namespace strata::test::dist;
using strata::dtype;

namespace kvstore_dist_row_sparse_test {

constexpr std::int64_t bound = 40;

struct sparse_key {
  strata::kvstore::key key;
  std::vector<std::int64_t> shape;
  dtype type = dtype::float32;
  std::int64_t rows() const { return shape[0]; }
  std::size_t numel() const {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
  std::size_t row_length() const { return numel() / static_cast<std::size_t>(rows()); }
};

/// Whole keys (30 and 32 elements, one float16) and split ones (77 elements in rows of 7, 69 in
/// rows of 3 as bfloat16, when there are several ranks).
std::vector<sparse_key> sparse_keys() {
  return {{std::int64_t{0}, {6, 5}},
          {std::int64_t{1}, {11, 7}},
          {std::int64_t{2}, {8, 4}, dtype::float16},
          {std::int64_t{3}, {23, 3}, dtype::bfloat16}};
}

/// The bytes of `t`, to compare bit for bit.
std::vector<std::uint8_t> bytes_of(world& w, const strata::tensor& t) {
  std::vector<std::uint8_t> b(t.bytes());
  t.copy_to_host(b.data(), w.s).synchronize();
  return b;
}

/// Random row ids of a key: out of order, some repeated, drawn from a range every rank shares
/// (so that ranks' rows overlap). `only_first` names row 0 alone (a split key's later parts get
/// no rows).
std::vector<std::int64_t> some_rows(std::uint32_t seed, int r, int k, int t, std::int64_t rows, bool only_first = false) {
  if (only_first) return {0, 0};
  std::mt19937 rng(seed * 31u + static_cast<std::uint32_t>(r) * 7877u + static_cast<std::uint32_t>(k) * 613u +
                   static_cast<std::uint32_t>(t) * 17u);
  const std::size_t count = 1 + rng() % static_cast<std::uint32_t>(rows);
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < count; ++i) ids.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(rows)));
  return ids;
}

/// Rank `r`'s row-sparse value of key `k` in round `t`; in round 5 the last rank's has no rows.
strata::kvstore::row_sparse value_of(world& w, std::uint32_t seed, int r, int k, int t, const sparse_key& spec,
                                     bool only_first = false, int last_rank = -1) {
  auto ids = t == 5 && r == last_rank ? std::vector<std::int64_t>{} : some_rows(seed, r, k, t, spec.rows(), only_first);
  auto shape = spec.shape;
  shape[0] = static_cast<std::int64_t>(ids.size());
  auto rows = gradient(seed, r, k, t, ids.size() * spec.row_length());
  return {make_as(w, spec.type, rows, shape), std::move(ids), spec.shape};
}

/// The key's whole value on the dist store and on the reference: equal bit for bit.
void same_value(world& w, kvd::store& kv, strata::kvstore::client& ref, const sparse_key& spec, const std::string& what) {
  auto got = kv.pull(spec.key);
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
  auto expected = ref.pull(spec.key, strata::tensor::empty(spec.shape, spec.type, w.cpu, w.s)).get();
  BOOST_REQUIRE(expected);
  BOOST_TEST((bytes_of(w, *got) == bytes_of(w, expected->front())), what << " key " << spec.key.to_string());
}

/// A random subset of rows (repeats, any order) pulled from both: equal bit for bit.
void same_rows(world& w, kvd::store& kv, strata::kvstore::client& ref, const sparse_key& spec, std::uint32_t seed,
               int t, const std::string& what) {
  auto ids = some_rows(seed + 5, kv.rank(), 0, t, spec.rows());
  auto shape = spec.shape;
  shape[0] = static_cast<std::int64_t>(ids.size());
  auto out = strata::tensor::empty(shape, spec.type, w.cpu, w.s);
  auto got = kv.row_sparse_pull(spec.key, out, ids);
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
  auto expected = ref.row_sparse_pull(spec.key, strata::tensor::empty(shape, spec.type, w.cpu, w.s), ids).get();
  BOOST_REQUIRE(expected);
  BOOST_TEST((bytes_of(w, out) == bytes_of(w, expected->front())), what << " rows of key " << spec.key.to_string());
}

/// Rows `values` summed by id in the order given, in float32, rounded once to `spec`'s dtype:
/// what a worker that pushes several values makes of them (ids ascending).
strata::kvstore::row_sparse summed_here(world& w, const std::vector<strata::kvstore::row_sparse>& values,
                                        const sparse_key& spec) {
  std::map<std::int64_t, std::vector<float>> sums;
  const std::size_t length = spec.row_length();
  for (const auto& v : values) {
    std::vector<float> rows(v.row_ids.size() * length);
    if (spec.type == dtype::float32) {
      rows = w.host(v.rows);
    } else {
      std::vector<std::uint16_t> bits(rows.size());
      v.rows.copy_to_host(bits.data(), w.s).synchronize();
      for (std::size_t i = 0; i < bits.size(); ++i) rows[i] = strata::kernels::half_value(spec.type, bits[i]);
    }
    for (std::size_t i = 0; i < v.row_ids.size(); ++i) {
      auto& sum = sums[v.row_ids[i]];
      if (sum.empty()) sum.assign(rows.begin() + i * length, rows.begin() + (i + 1) * length);
      else
        for (std::size_t j = 0; j < length; ++j) sum[j] += rows[i * length + j];
    }
  }
  std::vector<std::int64_t> ids;
  std::vector<float> flat;
  for (const auto& [id, row] : sums) ids.push_back(id), flat.insert(flat.end(), row.begin(), row.end());
  auto shape = spec.shape;
  shape[0] = static_cast<std::int64_t>(ids.size());
  return {make_as(w, spec.type, flat, shape), std::move(ids), spec.shape};
}

/// dist_sync under `rule` (none: assign) against the reference, both initialised alike: five
/// rounds, round 3 dense, round 4 only row 0 from every rank, round 5 none from the last rank.
/// With `per_push` > 1 each rank pushes that many row-sparse values at once, and the reference
/// gets each rank's values summed by the test.
void sync_rounds(world& w, const char* name, const strata::kvstore::set_optimizer* rule, int per_push = 1) {
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu, .big_array_bound = bound});
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
  if (rule != nullptr) {
    BOOST_REQUIRE(kv.set_optimizer(*rule));
    BOOST_REQUIRE(ref.send(*rule).get());
  }
  BOOST_REQUIRE(kv.barrier());
  const auto keys = sparse_keys();
  for (std::size_t k = 0; k < keys.size(); ++k) {
    auto w0 = make_as(w, keys[k].type, gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel()), keys[k].shape);
    BOOST_REQUIRE(kv.init(keys[k].key, w0));
    BOOST_REQUIRE(ref.init(keys[k].key, w0).get());
    if (n > 1 && keys[k].numel() > static_cast<std::size_t>(bound)) BOOST_TEST(kv.owner(keys[k].key) == -1);
  }
  for (int t = 1; t <= 5; ++t)
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto& spec = keys[k];
      const int ki = static_cast<int>(k);
      const std::string what = std::string(name) + " round " + std::to_string(t);
      if (t == 3) {  // a dense version between row-sparse ones
        auto dense = [&](int r) { return make_as(w, spec.type, gradient(seed, r, ki, t, spec.numel()), spec.shape); };
        BOOST_REQUIRE(kv.push(spec.key, {dense(kv.rank())}));
        std::vector<strata::tensor> all;
        for (int r = 0; r < n; ++r) all.push_back(dense(r));
        BOOST_REQUIRE(ref.push(std::vector<strata::kvstore::key>(static_cast<std::size_t>(n), spec.key), all).get());
      } else if (per_push == 1) {
        auto pushed = kv.push_row_sparse(spec.key, value_of(w, seed, kv.rank(), ki, t, spec, t == 4, n - 1));
        BOOST_REQUIRE_MESSAGE(pushed, (pushed ? "" : pushed.error().message()));
        std::vector<strata::kvstore::row_sparse> all;
        for (int r = 0; r < n; ++r) all.push_back(value_of(w, seed, r, ki, t, spec, t == 4, n - 1));
        BOOST_REQUIRE(ref.push(spec.key, all).get());
      } else {
        // Rank r's values: rounds t, t + 10, ... of its draws (overlapping ids, repeats).
        auto values_of = [&](int r) {
          std::vector<strata::kvstore::row_sparse> v;
          for (int j = 0; j < per_push; ++j) v.push_back(value_of(w, seed, r, ki, t + 10 * j, spec, t == 4, n - 1));
          return v;
        };
        auto pushed = kv.push_row_sparse(spec.key, values_of(kv.rank()));
        BOOST_REQUIRE_MESSAGE(pushed, (pushed ? "" : pushed.error().message()));
        std::vector<strata::kvstore::row_sparse> all;
        for (int r = 0; r < n; ++r) all.push_back(summed_here(w, values_of(r), spec));
        BOOST_REQUIRE(ref.push(spec.key, all).get());
      }
      same_rows(w, kv, ref, spec, seed, t, what);
      same_value(w, kv, ref, spec, what);
    }
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_SUITE(kvstore_dist_row_sparse)

BOOST_AUTO_TEST_CASE(dist_sync_row_sparse_under_assign_equals_one_process_bit_for_bit) {
  sync_rounds(*the_world, "assign", nullptr);
}

BOOST_AUTO_TEST_CASE(dist_sync_row_sparse_under_sgd_momentum_equals_one_process_bit_for_bit) {
  const strata::kvstore::set_optimizer sgd{strata::kernels::sgd_options{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3}};
  sync_rounds(*the_world, "sgd", &sgd);
}

BOOST_AUTO_TEST_CASE(dist_sync_row_sparse_under_adam_equals_one_process_bit_for_bit) {
  const strata::kvstore::set_optimizer adam{strata::kernels::adam_options{.lr = 0.01, .weight_decay = 1e-3}};
  sync_rounds(*the_world, "adam", &adam);
}

BOOST_AUTO_TEST_CASE(several_row_sparse_values_in_one_push_are_summed_by_id_on_the_worker) {
  // MXNet's push of a list (one value per device): each worker sums its values by id first.
  const strata::kvstore::set_optimizer sgd{strata::kernels::sgd_options{.lr = 0.05, .momentum = 0.9}};
  sync_rounds(*the_world, "three values per push, sgd", &sgd, 3);
  sync_rounds(*the_world, "two values per push, assign", nullptr, 2);
}

BOOST_AUTO_TEST_CASE(dist_async_row_sparse_sgd_applies_every_push_of_every_worker) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::async, .value_device = w.cpu, .big_array_bound = bound});
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  // No optimizer yet: refused, as a dense push.
  const auto keys = sparse_keys();
  const auto& first = keys[1];
  BOOST_REQUIRE(kv.init(first.key, w.make(std::vector<float>(first.numel(), 0.0f), first.shape)));
  auto none = kv.push_row_sparse(first.key, value_of(w, seed, kv.rank(), 1, 1, first));
  BOOST_TEST(!none);
  BOOST_TEST((none ? std::string() : none.error().message()).find("needs set_optimizer first") != std::string::npos);
  BOOST_REQUIRE(kv.barrier());
  // lr 1 and small integer rows: every sum is exact, so the order the pushes arrive in does not
  // matter and the value equals one process fed every rank's pushes.
  const strata::kvstore::set_optimizer sgd{strata::kernels::sgd_options{.lr = 1.0}};
  BOOST_REQUIRE(kv.set_optimizer(sgd));
  BOOST_REQUIRE(kv.barrier());
  strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
  BOOST_REQUIRE(ref.send(sgd).get());
  BOOST_REQUIRE(ref.init(first.key, w.make(std::vector<float>(first.numel(), 0.0f), first.shape)).get());
  auto integral = [&](int r, int t) {
    auto v = value_of(w, seed, r, 1, t, first);
    auto rows = w.host(v.rows);
    for (auto& x : rows) x = std::round(x * 8.0f);
    v.rows = w.make(rows, v.rows.shape());
    return v;
  };
  const int rounds = 4;
  for (int t = 1; t <= rounds; ++t) {
    auto pushed = kv.push_row_sparse(first.key, integral(kv.rank(), t));
    BOOST_REQUIRE_MESSAGE(pushed, (pushed ? "" : pushed.error().message()));
  }
  BOOST_REQUIRE(kv.barrier());  // every worker's pushes have been applied
  for (int t = 1; t <= rounds; ++t)
    for (int r = 0; r < n; ++r) BOOST_REQUIRE(ref.push(first.key, std::vector<strata::kvstore::row_sparse>{integral(r, t)}).get());
  same_value(w, kv, ref, first, "async");
  same_rows(w, kv, ref, first, seed, 1, "async");
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(only_the_rows_travel_on_the_wire) {
  world& w = *the_world;
  // dist_async, so that a rank's pull need not wait for the others' pushes.
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::async, .value_device = w.cpu, .big_array_bound = bound});
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  BOOST_REQUIRE(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.5}));
  const auto keys = sparse_keys();
  for (const auto& spec : keys) BOOST_REQUIRE(kv.init(spec.key, make_as(w, spec.type, std::vector<float>(spec.numel(), 1.0f), spec.shape)));
  BOOST_REQUIRE(kv.barrier());
  // One rank at a time, the others waiting in a barrier, so that the counts are this rank's alone.
  for (int turn = 0; turn < n; ++turn) {
    if (kv.rank() == turn)
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const auto& spec = keys[k];
        auto value = value_of(w, seed, kv.rank(), static_cast<int>(k), 1, spec);
        // The bytes of the pieces bound for other ranks: all of a whole key's rows when another
        // rank owns it; of a split key those outside this rank's part.
        std::uint64_t remote = 0;
        const auto owners = kv.owners(spec.key);
        const std::size_t element = strata::size_of(spec.type);
        if (owners.size() == 1) remote = owners.front() == kv.rank() ? 0 : value.rows.bytes();
        else {
          const auto total = static_cast<std::int64_t>(spec.numel());
          const int parts = static_cast<int>(owners.size());
          const std::int64_t begin = kv.rank() * (total / parts) + std::min<std::int64_t>(kv.rank(), total % parts);
          const std::int64_t end = begin + total / parts + (kv.rank() < total % parts ? 1 : 0);
          const auto len = static_cast<std::int64_t>(spec.row_length());
          for (auto id : value.row_ids) {
            const std::int64_t mine = std::max<std::int64_t>(0, std::min(end, (id + 1) * len) - std::max(begin, id * len));
            remote += static_cast<std::uint64_t>(len - mine) * element;
          }
        }
        const auto before = w.net.stats().tensor_bytes_sent;
        const auto pushed_before = kv.bytes_pushed();
        BOOST_REQUIRE(kv.push_row_sparse(spec.key, value));
        BOOST_TEST(w.net.stats().tensor_bytes_sent - before == remote, "key " << spec.key.to_string());
        BOOST_TEST(kv.bytes_pushed() - pushed_before == value.rows.bytes());
        // Pulled rows: what arrives is those rows from other ranks, never the whole key.
        const auto received = w.net.stats().tensor_bytes_received;
        auto out = strata::tensor::empty(value.rows.shape(), spec.type, w.cpu, w.s);
        BOOST_REQUIRE(kv.row_sparse_pull(spec.key, out, value.row_ids));
        BOOST_TEST(w.net.stats().tensor_bytes_received - received == remote, "pull of key " << spec.key.to_string());
      }
    BOOST_REQUIRE(kv.barrier());
  }
}

BOOST_AUTO_TEST_CASE(bad_row_sparse_input_is_refused_with_one_sentence_and_changes_nothing) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu, .big_array_bound = bound});
  const std::uint32_t seed = w.shared_seed(kv, std::int64_t{1000});
  const int n = kv.num_workers();
  const auto keys = sparse_keys();
  strata::kvstore::client ref(w.sys, strata::kvstore::spawn(w.sys));
  for (std::size_t k = 0; k < keys.size(); ++k) {
    auto w0 = make_as(w, keys[k].type, gradient(seed, 99, static_cast<int>(k), 0, keys[k].numel()), keys[k].shape);
    BOOST_REQUIRE(kv.init(keys[k].key, w0));
    BOOST_REQUIRE(ref.init(keys[k].key, w0).get());
  }
  auto refused = [](const strata::expected<void>& r, const std::string& part) {
    BOOST_TEST(!r, "expected a refusal naming \"" << part << "\"");
    if (r) return;
    const auto& text = r.error().message();
    BOOST_TEST(text.find(part) != std::string::npos, text);
    BOOST_TEST(std::count(text.begin(), text.end(), '.') >= 1);
    BOOST_TEST(text.find('\n') == std::string::npos);
  };
  for (std::size_t k = 0; k < 2; ++k) {  // key 0 whole, key 1 split (with several ranks)
    const auto& spec = keys[k];
    auto good = value_of(w, seed, kv.rank(), static_cast<int>(k), 1, spec);
    auto bad_id = good;
    bad_id.row_ids.back() = spec.rows();
    refused(kv.push_row_sparse(spec.key, bad_id), "outside [0, " + std::to_string(spec.rows()) + ")");
    auto negative = good;
    negative.row_ids.front() = -1;
    refused(kv.push_row_sparse(spec.key, negative), "names row -1");
    auto short_rows = good;
    short_rows.row_ids.push_back(0);
    refused(kv.push_row_sparse(spec.key, short_rows), "(one row per id)");
    auto other_shape = good;
    other_shape.shape[0] += 1;
    refused(kv.push_row_sparse(spec.key, other_shape), "(the stored shape)");
    auto other_dtype = good;
    other_dtype.rows = make_as(w, dtype::float16, w.host(good.rows), good.rows.shape());
    refused(kv.push_row_sparse(spec.key, other_dtype), "has dtype float16, expected float32");
    // Row 0 alone: a split key's later parts get no rows, and refuse the dtype all the same.
    auto first_row = value_of(w, seed, kv.rank(), static_cast<int>(k), 1, spec, true);
    first_row.rows = make_as(w, dtype::float16, w.host(first_row.rows), first_row.rows.shape());
    refused(kv.push_row_sparse(spec.key, first_row), "has dtype float16, expected float32");
    refused(kv.push_row_sparse("nobody", good), "never initialised");
    // Several values in one push: each is checked before the worker sums them.
    using values = std::vector<strata::kvstore::row_sparse>;
    refused(kv.push_row_sparse(spec.key, values{}), "give at least one");
    refused(kv.push_row_sparse(spec.key, values{good, bad_id}), "outside [0, " + std::to_string(spec.rows()) + ")");
    refused(kv.push_row_sparse(spec.key, values{good, short_rows}), "(one row per id)");
    refused(kv.push_row_sparse(spec.key, values{good, other_dtype}), "cpu rows of one dtype, over one key shape");
    refused(kv.push_row_sparse(spec.key, values{good, other_shape}), "cpu rows of one dtype, over one key shape");
    refused(kv.push_row_sparse(spec.key, values{other_dtype, other_dtype}), "has dtype float16, expected float32");
    refused(kv.push_row_sparse(spec.key, values{other_shape, other_shape}), "(the stored shape)");
    auto wrong_out = strata::tensor::empty({2, 1}, dtype::float32, w.cpu, w.s);
    refused(kv.row_sparse_pull(spec.key, wrong_out, {0, 1}), "(one row per id)");
    auto half_out = strata::tensor::empty({2, spec.shape[1]}, dtype::float16, w.cpu, w.s);
    refused(kv.row_sparse_pull(spec.key, half_out, {0, 1}), "expected float32");
    auto out = strata::tensor::empty({1, spec.shape[1]}, dtype::float32, w.cpu, w.s);
    refused(kv.row_sparse_pull(spec.key, out, {spec.rows()}), "outside [0, " + std::to_string(spec.rows()) + ")");
    refused(kv.row_sparse_pull("nobody", out, {0}), "never initialised");
  }
  // A version collects one kind: rank 0's dense push makes the others' row-sparse ones refused.
  const auto& spec = keys[0];
  if (n > 1) {
    if (kv.rank() == 0) BOOST_REQUIRE(kv.push(spec.key, {w.make(gradient(seed, 0, 0, 1, spec.numel()), spec.shape)}));
    BOOST_REQUIRE(kv.barrier());
    if (kv.rank() != 0)
      refused(kv.push_row_sparse(spec.key, value_of(w, seed, kv.rank(), 0, 1, spec)), "not both");
    if (kv.rank() != 0) BOOST_REQUIRE(kv.push(spec.key, {w.make(gradient(seed, kv.rank(), 0, 1, spec.numel()), spec.shape)}));
  } else {
    BOOST_REQUIRE(kv.push(spec.key, {w.make(gradient(seed, 0, 0, 1, spec.numel()), spec.shape)}));
  }
  std::vector<strata::tensor> dense;
  for (int r = 0; r < n; ++r) dense.push_back(w.make(gradient(seed, r, 0, 1, spec.numel()), spec.shape));
  BOOST_REQUIRE(ref.push(std::vector<strata::kvstore::key>(static_cast<std::size_t>(n), spec.key), dense).get());
  // Compression refuses row-sparse pushes (as MXNet).
  BOOST_REQUIRE(kv.set_gradient_compression("2bit", 0.5f));
  refused(kv.push_row_sparse(spec.key, value_of(w, seed, kv.rank(), 0, 2, spec)), "gradient compression does not apply");
  BOOST_REQUIRE(kv.set_gradient_compression("none"));
  // Nothing refused changed a key: a good round after them still equals one process bit for bit.
  for (std::size_t k = 0; k < keys.size(); ++k) {
    auto pushed = kv.push_row_sparse(keys[k].key, value_of(w, seed, kv.rank(), static_cast<int>(k), 2, keys[k]));
    BOOST_REQUIRE_MESSAGE(pushed, (pushed ? "" : pushed.error().message()));
    std::vector<strata::kvstore::row_sparse> all;
    for (int r = 0; r < n; ++r) all.push_back(value_of(w, seed, r, static_cast<int>(k), 2, keys[k]));
    BOOST_REQUIRE(ref.push(keys[k].key, all).get());
    same_value(w, kv, ref, keys[k], "after refusals");
  }
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(dist_sync_allreduce_refuses_row_sparse_values) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .value_device = w.cpu});
  BOOST_REQUIRE(kv.init("e", w.make(std::vector<float>(6, 0.0f), {3, 2})));
  auto pushed = kv.push_row_sparse("e", {w.make({1, 2}, {1, 2}), {1}, {3, 2}});
  BOOST_TEST(!pushed);
  BOOST_TEST((pushed ? std::string() : pushed.error().message()).find("dist_sync and dist_async stores only") != std::string::npos);
  auto out = strata::tensor::empty({1, 2}, dtype::float32, w.cpu, w.s);
  BOOST_TEST(!kv.row_sparse_pull("e", out, {1}));
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_dist_row_sparse_test
