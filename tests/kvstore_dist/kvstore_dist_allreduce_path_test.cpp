// dist_sync_allreduce's decisions that need no GPU: which path a store's sums take for which
// replica device and option, where a step's keys go in the packed buffer, the checks of the
// values a cuda replica takes, the packing and unpacking work items (run here on a cpu device:
// the same code enqueues kernels::cuda on a GPU), and the constructor's refusals. One process,
// no mpirun (ctest kvstore_dist_allreduce_path).
#define BOOST_TEST_MODULE strata_kvstore_dist_allreduce_path
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "allreduce_cuda.hpp"
#include "allreduce_path.hpp"
#include "strata/actor_system.hpp"
#include "strata/kvstore_dist/store.hpp"
#include "strata/net/endpoint.hpp"

namespace kd = strata::kvstore_dist;
namespace ki = strata::kvstore_dist::detail;
using strata::device_kind;

namespace {

std::string refusal(const strata::expected<ki::sum_path>& r) { return r ? std::string() : r.error().message(); }

/// Every key kind in the independent order the packing must follow: integers (numerically)
/// before strings (bytewise), as MXNet's and kvstore::key's order.
bool key_before(const strata::kvstore::key& a, const strata::kvstore::key& b) {
  if (a.is_int() != b.is_int()) return a.is_int();
  if (a.is_int()) return std::stoll(a.to_string()) < std::stoll(b.to_string());
  return std::get<std::string>(a.value()) < std::get<std::string>(b.value());
}

ki::value_facts cuda_value(int gpu, std::vector<std::int64_t> shape, strata::dtype type = strata::dtype::float32) {
  return ki::value_facts{.valid = true, .kind = device_kind::cuda, .gpu = gpu, .device_name = "cuda:" + std::to_string(gpu),
                         .type = type, .shape = std::move(shape)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_replica_device_and_option_takes_its_path_or_one_sentence) {
  using ki::sum_path;
  const auto none = std::optional<device_kind>{};
  // (mode, replica kind, option, NCCL built) -> path, written out case by case.
  struct row {
    kd::mode m;
    std::optional<device_kind> kind;
    kd::cuda_sum option;
    bool nccl;
    std::optional<sum_path> path;  // none: refused
    std::string says;              // a part of the refusal
  };
  const std::vector<row> rows = {
      {kd::mode::allreduce, none, kd::cuda_sum::automatic, true, sum_path::host_mpi, ""},
      {kd::mode::allreduce, none, kd::cuda_sum::automatic, false, sum_path::host_mpi, ""},
      {kd::mode::allreduce, device_kind::cpu, kd::cuda_sum::automatic, true, sum_path::host_mpi, ""},
      {kd::mode::allreduce, device_kind::cuda, kd::cuda_sum::automatic, true, sum_path::nccl, ""},
      {kd::mode::allreduce, device_kind::cuda, kd::cuda_sum::automatic, false, sum_path::staged_mpi, ""},
      {kd::mode::allreduce, device_kind::cuda, kd::cuda_sum::nccl, true, sum_path::nccl, ""},
      {kd::mode::allreduce, device_kind::cuda, kd::cuda_sum::nccl, false, {}, "cuda_sum is nccl, but this build has no strata::nccl"},
      {kd::mode::allreduce, device_kind::cuda, kd::cuda_sum::staged_mpi, true, sum_path::staged_mpi, ""},
      {kd::mode::allreduce, device_kind::cuda, kd::cuda_sum::staged_mpi, false, sum_path::staged_mpi, ""},
      {kd::mode::allreduce, device_kind::sim, kd::cuda_sum::automatic, true, {}, "replica_device is R; expected a cpu or cuda device."},
      {kd::mode::allreduce, device_kind::cpu, kd::cuda_sum::nccl, true, {}, "cuda_sum is set, but it only applies"},
      {kd::mode::allreduce, none, kd::cuda_sum::staged_mpi, true, {}, "cuda_sum is set, but it only applies"},
      {kd::mode::sync, none, kd::cuda_sum::automatic, true, sum_path::host_mpi, ""},
      {kd::mode::async, none, kd::cuda_sum::automatic, false, sum_path::host_mpi, ""},
      {kd::mode::sync, device_kind::cuda, kd::cuda_sum::automatic, true, {}, "replica_device is R, but only dist_sync_allreduce keeps replicas"},
      {kd::mode::async, device_kind::cpu, kd::cuda_sum::automatic, true, {}, "replica_device is R, but only dist_sync_allreduce keeps replicas"},
      {kd::mode::sync, none, kd::cuda_sum::nccl, true, {}, "cuda_sum is set, but it only applies"},
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    auto got = ki::choose_sum_path(r.m, r.kind, "R", r.option, r.nccl);
    BOOST_TEST_CONTEXT("row " << i) {
      BOOST_TEST(static_cast<bool>(got) == r.path.has_value());
      if (got && r.path) BOOST_TEST(ki::to_string(*got) == ki::to_string(*r.path));
      if (!got) {
        BOOST_TEST(got.error().code() == strata::errc::invalid_argument);
        BOOST_TEST(refusal(got).find(r.says) != std::string::npos, refusal(got));
        BOOST_TEST(refusal(got).rfind("kvstore_dist::store: ", 0) == 0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(keys_are_packed_in_key_order_whatever_order_each_rank_gives_them) {
  std::mt19937 rng(20261205);
  for (int trial = 0; trial < 50; ++trial) {
    // Distinct random keys of both kinds, random sizes (0 included).
    std::vector<strata::kvstore::key> keys;
    std::vector<std::size_t> sizes;
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    while (static_cast<int>(keys.size()) < n) {
      strata::kvstore::key k = std::uniform_int_distribution<int>(0, 1)(rng) == 0
                                   ? strata::kvstore::key(std::uniform_int_distribution<std::int64_t>(-1000, 1000)(rng))
                                   : strata::kvstore::key("w" + std::to_string(std::uniform_int_distribution<int>(0, 500)(rng)));
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      keys.push_back(k);
      sizes.push_back(std::uniform_int_distribution<std::size_t>(0, 40)(rng));
    }
    // The reference: sort (key, size) pairs with key_before, then running offsets.
    std::vector<std::pair<strata::kvstore::key, std::size_t>> sorted;
    for (std::size_t i = 0; i < keys.size(); ++i) sorted.emplace_back(keys[i], sizes[i]);
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return key_before(a.first, b.first); });
    auto plan = ki::plan_packing(keys, sizes);
    BOOST_REQUIRE(plan);
    BOOST_REQUIRE(plan->order.size() == keys.size());
    std::size_t offset = 0;
    for (std::size_t j = 0; j < sorted.size(); ++j) {
      BOOST_TEST((keys[plan->order[j]] == sorted[j].first));
      BOOST_TEST(plan->offsets[j] == offset);
      offset += sorted[j].second;
    }
    BOOST_TEST(plan->total == offset);
    // Another rank passing the same keys shuffled packs each key at the same offset.
    std::vector<std::size_t> perm(keys.size());
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<strata::kvstore::key> keys2;
    std::vector<std::size_t> sizes2;
    for (std::size_t p : perm) {
      keys2.push_back(keys[p]);
      sizes2.push_back(sizes[p]);
    }
    auto plan2 = ki::plan_packing(keys2, sizes2);
    BOOST_REQUIRE(plan2);
    for (std::size_t j = 0; j < keys.size(); ++j) {
      BOOST_TEST((keys2[plan2->order[j]] == keys[plan->order[j]]));
      BOOST_TEST(plan2->offsets[j] == plan->offsets[j]);
    }
  }
  auto twice = ki::plan_packing({3, "a", 3}, {1, 2, 3});
  BOOST_REQUIRE(!twice);
  BOOST_TEST(twice.error().message() ==
             "kvstore dist pushpull: key 3 appears twice; dist_sync_allreduce takes each key once per call.");
  BOOST_TEST(!ki::plan_packing({1, 2}, {1}));
}

BOOST_AUTO_TEST_CASE(a_cuda_replica_refuses_values_that_are_not_float32_on_its_gpu_in_one_sentence) {
  const std::vector<std::int64_t> shape{2, 3};
  const strata::kvstore::key key("w");
  auto check = [&](std::vector<ki::value_facts> values) {
    auto r = ki::check_cuda_values(key, values, 1, "cuda:1", shape);
    return r ? std::string("ok") : r.error().message();
  };
  BOOST_TEST(check({cuda_value(1, shape), cuda_value(1, shape)}) == "ok");
  // Mixed cpu and cuda values in one call: the cpu one is named.
  ki::value_facts host{.valid = true, .kind = device_kind::cpu, .gpu = -1, .device_name = "cpu:0", .type = strata::dtype::float32, .shape = shape};
  BOOST_TEST(check({cuda_value(1, shape), host}) ==
             "kvstore dist pushpull: value 1 for key \"w\" is on cpu:0; this dist_sync_allreduce store keeps its replica "
             "on cuda:1 and takes float32 tensors on that GPU.");
  BOOST_TEST(check({cuda_value(0, shape)}).find("value 0 for key \"w\" is on cuda:0; this") != std::string::npos);
  BOOST_TEST(check({cuda_value(1, shape, strata::dtype::int32)}) ==
             "kvstore dist pushpull: value 0 for key \"w\" is int32 [2, 3], expected float32 [2, 3].");
  BOOST_TEST(check({cuda_value(1, shape), cuda_value(1, {3, 2})}) ==
             "kvstore dist pushpull: value 1 for key \"w\" is float32 [3, 2], expected float32 [2, 3].");
  BOOST_TEST(check({}) == "kvstore dist pushpull: no values for key \"w\".");
  BOOST_TEST(check({ki::value_facts{}}) == "kvstore dist pushpull: value 0 for key \"w\" is no tensor.");
}

BOOST_AUTO_TEST_CASE(the_step_agreement_names_the_ranks_that_refused_or_passed_other_keys) {
  using strata::kvstore::key;
  using ki::step_refusal;
  const std::vector<key> ab{"a", "b"}, ba{"b", "a"}, a{"a"};
  BOOST_TEST(ki::keys_print(ab) == ki::keys_print(ba));  // the same keys in any order
  BOOST_TEST(ki::keys_print(ab) != ki::keys_print(a));
  BOOST_TEST(ki::keys_print({key(std::int64_t{1})}) != ki::keys_print({key("1")}));  // kinds differ
  BOOST_TEST(ki::keys_print({"ab", "c"}) != ki::keys_print({"a", "bc"}));            // so do the cuts
  // Four ranks, each filling its own slot of the summed buffer.
  auto summed = [](const std::vector<step_refusal>& reasons, const std::vector<std::vector<key>>& keys) {
    std::vector<float> total(reasons.size() * ki::step_slot_floats, 0.0f);
    for (std::size_t r = 0; r < reasons.size(); ++r) {
      std::vector<float> mine(total.size(), 0.0f);
      ki::fill_step_slot(mine, static_cast<int>(r), reasons[r], ki::keys_print(keys[r]));
      for (std::size_t i = 0; i < total.size(); ++i) total[i] += mine[i];
    }
    return total;
  };
  const auto ok = step_refusal::none;
  const strata::expected<void> fine;
  BOOST_TEST(static_cast<bool>(ki::step_verdict(summed({ok, ok, ok, ok}, {ab, ba, ab, ba}), fine)));
  auto one = ki::step_verdict(summed({ok, ok, step_refusal::unknown_key, ok}, {ab, ab, ab, ab}), fine);
  BOOST_REQUIRE(!one);
  BOOST_TEST(one.error().message() == "kvstore dist pushpull: rank 2 refused its values for this step (a key it never "
                                      "initialised); no replica was updated.");
  auto two = ki::step_verdict(summed({step_refusal::bad_value, ok, ok, step_refusal::bad_keys}, {ab, ab, ab, a}), fine);
  BOOST_REQUIRE(!two);
  BOOST_TEST(two.error().message() ==
             "kvstore dist pushpull: ranks 0, 3 refused their values for this step (rank 0: a value of the wrong shape, "
             "dtype or device; rank 3: a key given twice, or keys and values of different counts); no replica was updated.");
  // A rank's own refusal is its own sentence.
  const strata::expected<void> own = strata::error(strata::errc::invalid_argument, "mine.");
  BOOST_TEST(ki::step_verdict(summed({step_refusal::bad_value, ok}, {ab, ab}), own).error().message() == "mine.");
  auto other = ki::step_verdict(summed({ok, ok, ok, ok}, {ab, ab, a, ab}), fine);
  BOOST_REQUIRE(!other);
  BOOST_TEST(other.error().message() == "kvstore dist pushpull: rank 2 passed other keys than rank 0 to this step (every "
                                        "rank passes the same keys); no replica was updated.");
}

BOOST_AUTO_TEST_CASE(packing_sums_each_keys_values_in_order_into_its_place_and_unpacking_returns_them) {
  auto dev = strata::make_devices("cpu:1").front();
  auto s = dev.create_stream();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const std::vector<strata::kvstore::key> keys{"b", 9, "a", -4, 100};
  const std::vector<std::vector<std::int64_t>> shapes{{3, 5}, {7}, {1}, {2, 2, 2}, {33}};
  std::vector<std::vector<strata::tensor>> values(keys.size());
  std::vector<std::vector<std::vector<float>>> host(keys.size());
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::size_t n = 1;
    for (auto d : shapes[i]) n *= static_cast<std::size_t>(d);
    sizes.push_back(n);
    const int count = 3 - static_cast<int>(i % 3);  // 3, 2 or 1 values for a key
    for (int c = 0; c < count; ++c) {
      std::vector<float> v(n);
      for (auto& x : v) x = u(rng);
      host[i].push_back(v);
      values[i].push_back(strata::tensor::from_host<float>(v, shapes[i], dev, s));
    }
  }
  auto plan = ki::plan_packing(keys, sizes);
  BOOST_REQUIRE(plan);
  strata::tensor packed = ki::pack_sums(dev, s, *plan, values);
  const auto got = packed.to_host<float>(s);
  BOOST_REQUIRE(got.size() == plan->total);
  // Reference: each key's values added left to right in float, placed by the independent order.
  std::vector<std::size_t> by_order(keys.size());
  for (std::size_t i = 0; i < by_order.size(); ++i) by_order[i] = i;
  std::sort(by_order.begin(), by_order.end(), [&](std::size_t a, std::size_t b) { return key_before(keys[a], keys[b]); });
  std::vector<float> expected;
  for (std::size_t i : by_order) {
    std::vector<float> sum = host[i][0];
    for (std::size_t c = 1; c < host[i].size(); ++c)
      for (std::size_t e = 0; e < sum.size(); ++e) sum[e] += host[i][c][e];
    expected.insert(expected.end(), sum.begin(), sum.end());
  }
  BOOST_TEST(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)) == 0);  // bit for bit

  auto parts = ki::unpack(dev, s, packed, *plan, shapes);
  BOOST_REQUIRE(parts.size() == keys.size());
  std::size_t at = 0;
  for (std::size_t j = 0; j < parts.size(); ++j) {
    BOOST_TEST((parts[j].shape() == shapes[by_order[j]]));
    const auto part = parts[j].to_host<float>(s);
    BOOST_TEST(std::memcmp(part.data(), expected.data() + at, part.size() * sizeof(float)) == 0);
    at += part.size();
  }
}

BOOST_AUTO_TEST_CASE(a_failed_link_ends_the_wait_for_a_sum_that_never_comes_with_a_named_error) {
  using namespace std::chrono_literals;
  auto dev = strata::make_devices("cpu:1").front();
  auto s = dev.create_stream();
  // The end of a "sum" held back until the test releases it (a peer that never joins).
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  s.launch({.name = "held_sum", .cpu = [gate] { gate.wait(); }});
  const strata::event held = s.record();
  const std::string head = "kvstore dist pushpull: the allreduce of this step failed, and no replica was updated: ";

  // Another rank leaves while this one waits (once the wait has found no sum): the wait ends
  // with rank_down.
  auto link = ki::make_sum_link();
  std::promise<void> waiting;
  auto waited = waiting.get_future();
  ki::when_waiting(*link, [&waiting] { waiting.set_value(); });
  std::thread leaver([&] {
    if (waited.wait_for(60s) != std::future_status::ready) return;  // the wait below then times out and fails
    ki::abort_sum_link(*link, strata::errc::rank_down, "another rank left the job: rank 1");
    ki::abort_sum_link(*link, strata::errc::runtime_failure, "a later reason is ignored");
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto lost = ki::await_sum(*link, held, 60s);
  leaver.join();
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 30s));
  BOOST_REQUIRE(!lost);
  BOOST_TEST(lost.error().code() == strata::errc::rank_down);
  BOOST_TEST(lost.error().message() == head + "another rank left the job: rank 1");

  // No sum within the timeout: the link aborts itself (request_timeout), and stays failed.
  auto slow = ki::make_sum_link();
  auto late = ki::await_sum(*slow, held, 100ms);
  BOOST_REQUIRE(!late);
  BOOST_TEST(late.error().code() == strata::errc::request_timeout);
  BOOST_TEST(late.error().message().rfind(head + "the sum did not finish within 100 ms (store_options::timeout)", 0) == 0,
             late.error().message());

  release.set_value();
  s.synchronize();
  // A failed link fails every later step, even one whose sum has finished.
  auto after = ki::await_sum(*link, held, 60s);
  BOOST_REQUIRE(!after);
  BOOST_TEST(after.error().message() == head + "another rank left the job: rank 1");
  // A working link and a finished sum: done.
  auto fresh = ki::make_sum_link();
  BOOST_TEST(static_cast<bool>(ki::await_sum(*fresh, held, 60s)));
  // A sum whose work failed: its error, named.
  s.launch({.name = "failed_sum", .cpu = [] { throw std::runtime_error("the GPU said no"); }});
  auto failed = ki::await_sum(*fresh, s.record(), 60s);
  BOOST_REQUIRE(!failed);
  BOOST_TEST(failed.error().message().find(head) == 0);
  BOOST_TEST(failed.error().message().find("the GPU said no") != std::string::npos, failed.error().message());
}

BOOST_AUTO_TEST_CASE(the_store_refuses_a_replica_device_or_cuda_sum_its_mode_does_not_take) {
  strata::actor_system sys{strata::system_config{.worker_threads = 1}};
  strata::net::endpoint net{sys};
  auto thrown = [&](kd::store_options o) {
    try {
      kd::store kv(sys, net, std::move(o));
      return std::string("made");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
  };
  auto cpu = strata::make_devices("cpu:1").front();
  strata::device_manager sims;
  auto sim = sims.create("sim:1").front();
  BOOST_TEST(thrown({.mode = kd::mode::sync, .replica_device = cpu}) ==
             "kvstore_dist::store: replica_device is " + cpu.name() +
                 ", but only dist_sync_allreduce keeps replicas (dist_sync and dist_async keep values on their server shards).");
  BOOST_TEST(thrown({.mode = kd::mode::allreduce, .replica_device = sim}) ==
             "kvstore_dist::store: replica_device is " + sim.name() + "; expected a cpu or cuda device.");
  BOOST_TEST(thrown({.mode = kd::mode::allreduce, .cuda_sum = kd::cuda_sum::staged_mpi}) ==
             "kvstore_dist::store: cuda_sum is set, but it only applies to dist_sync_allreduce with a cuda replica_device.");
  // A cpu replica_device is the host path: cpu values in, cpu values out, the sum of one rank.
  {
    kd::store kv(sys, net, {.mode = kd::mode::allreduce, .replica_device = cpu});
    std::vector<float> a{1.5f, -2.0f, 0.25f}, b{0.5f, 4.0f, -1.0f};
    auto s = cpu.create_stream();
    BOOST_REQUIRE(kv.init("k", strata::tensor::from_host<float>(a, cpu, s)));
    auto got = kv.pushpull("k", {strata::tensor::from_host<float>(a, cpu, s), strata::tensor::from_host<float>(b, cpu, s)});
    BOOST_REQUIRE(got);
    BOOST_TEST((got->get_device().kind() == device_kind::cpu));
    BOOST_TEST((got->to_host<float>(s) == std::vector<float>{2.0f, 2.0f, -0.75f}));
  }
  net.shutdown();
  sys.shutdown();
}
