// Tensors of another device kind than the store's (docs/kvstore.md, "values"). Implementation
// tests of the decision (src/crossing.hpp: which tensors a store takes, which copies bring them to
// it), which needs no GPU, and contract tests of the refusals a cpu machine can reach: sim tensors
// refused by cpu stores (one and sharded) in every request kind, the store left unchanged. The
// copies themselves run in test_kvstore_cuda (kvstore_crossing_cuda_test.cpp), on a GPU.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "crossing.hpp"  // actors/kvstore/src: an implementation test
#include "strata/kernels/half.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"

namespace kvstore_crossing_test {

namespace ki = strata::kvstore::internal;
using strata::device_kind;
using strata::dtype;
using strata::test::await;

constexpr device_kind kinds[] = {device_kind::cpu, device_kind::cuda, device_kind::sim};
constexpr dtype types[] = {dtype::float32, dtype::float16, dtype::bfloat16};
using bytes = std::vector<std::uint8_t>;  // a tensor's elements as stored: float32 or 16-bit words

/// Enqueues on `s` an item that sleeps `ms` milliseconds, then writes `values` into `t` (a cpu
/// tensor): late work, so that a copy not ordered after it reads what was there before.
void write_late(strata::stream& s, const strata::tensor& t, bytes values, int ms) {
  s.launch({.name = "write_late", .cpu = [t, values = std::move(values), ms] {
              std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // late work, under test
              std::memcpy(t.raw_data(), values.data(), values.size());
            }});
}

/// `n` random elements of `type` (16-bit: random floats in [-1, 1) rounded) as bytes.
bytes random_elements(dtype type, std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  bytes b(n * strata::size_of(type));
  for (std::size_t i = 0; i < n; ++i) {
    const float x = d(rng);
    if (type == dtype::float32) {
      std::memcpy(b.data() + 4 * i, &x, 4);
    } else {
      const std::uint16_t w = strata::kernels::half_bits(type, x);
      std::memcpy(b.data() + 2 * i, &w, 2);
    }
  }
  return b;
}

/// A tensor of `type` on `d` holding `b` (its elements' bytes), made in `s`'s order.
strata::tensor tensor_of(dtype type, const bytes& b, strata::device& d, const strata::stream& s) {
  auto raw = strata::tensor::from_host<std::uint8_t>(std::span<const std::uint8_t>(b), d, s);
  return strata::tensor({static_cast<std::int64_t>(b.size() / strata::size_of(type))}, type, raw.storage(),
                        raw.ready_event());
}

/// The bytes of `t`'s elements, read on `s`.
bytes bytes_of(const strata::tensor& t, const strata::stream& s) {
  return strata::tensor({static_cast<std::int64_t>(t.bytes())}, dtype::uint8, t.storage(), t.ready_event())
      .to_host<std::uint8_t>(s);
}
/// Enqueues on `s` an item that only sleeps: work queued after it on `s` runs late.
void stall(strata::stream& s, int ms) {
  s.launch({.name = "stall", .cpu = [ms] {
              std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // late work, under test
            }});
}

BOOST_AUTO_TEST_SUITE(kvstore_crossing)

BOOST_AUTO_TEST_CASE(a_store_takes_tensors_of_cpu_and_cuda_of_every_dtype_and_sim_ones_only_on_sim) {
  for (auto store : kinds)
    for (auto t : kinds) {
      BOOST_TEST_INFO("store " << to_string(store) << ", tensor " << to_string(t));
      // Written out case by case rather than by the rule the code follows; the dtype is the key's
      // (checked apart), float32, float16 or bfloat16 alike.
      bool taken = false;
      if (store == t) taken = true;  // its own kind
      else if (store == device_kind::cpu && t == device_kind::cuda) taken = true;
      else if (store == device_kind::cuda && t == device_kind::cpu) taken = true;
      const auto why = ki::crossing_refusal(store, "S", t, "T");
      BOOST_TEST(!why.has_value() == taken);
    }
}

BOOST_AUTO_TEST_CASE(each_refusal_is_one_sentence_naming_both_devices_and_what_was_expected) {
  BOOST_TEST(*ki::crossing_refusal(device_kind::cpu, "cpu:0", device_kind::sim, "sim:2") ==
             " is on sim:2, which a store on cpu:0 cannot read; expected a cpu or cuda tensor (sim tensors hold no data).");
  BOOST_TEST(*ki::crossing_refusal(device_kind::cuda, "cuda:1", device_kind::sim, "sim:0") ==
             " is on sim:0, which a store on cuda:1 cannot read; expected a cpu or cuda tensor (sim tensors hold no data).");
  BOOST_TEST(*ki::crossing_refusal(device_kind::sim, "sim:0", device_kind::cuda, "cuda:0") ==
             " is on cuda:0, which a store on sim:0 cannot read; expected a sim tensor.");
}

BOOST_AUTO_TEST_CASE(the_whole_buffer_copy_runs_on_a_cuda_stream_and_a_slice_bounces_through_a_whole_temporary) {
  using ki::copier;
  struct row {
    device_kind store, tensor;
    bool whole;
    ki::crossing_plan plan;
  };
  const row table[] = {
      {device_kind::cpu, device_kind::cpu, true, {copier::none, false}},
      {device_kind::cpu, device_kind::cpu, false, {copier::none, false}},
      {device_kind::cuda, device_kind::cuda, true, {copier::none, false}},
      {device_kind::cuda, device_kind::cuda, false, {copier::none, false}},
      {device_kind::cpu, device_kind::cuda, true, {copier::tensor_stream, false}},
      {device_kind::cpu, device_kind::cuda, false, {copier::tensor_stream, true}},
      {device_kind::cuda, device_kind::cpu, true, {copier::store_stream, false}},
      {device_kind::cuda, device_kind::cpu, false, {copier::store_stream, true}},
  };
  for (const auto& r : table) {
    BOOST_TEST_INFO("store " << to_string(r.store) << ", tensor " << to_string(r.tensor) << ", whole " << r.whole);
    BOOST_TEST((ki::plan_crossing(r.store, r.tensor, r.whole) == r.plan));
  }
}

// The copies of every plan, with cpu streams standing in for the GPU's (device copies and slice
// items behave alike on both), on random data of every dtype a key holds (float16 and bfloat16:
// random floats rounded, compared word for word) and slices at random offsets: a value pushed or
// given to init crosses into the store (`to_foreign` false), a pull's output out of it (true). Each
// direction is checked against the data written late on the stream it must follow, and against
// the store's next work (which must see the copy done: a late `other` stream shows it).
BOOST_AUTO_TEST_CASE(the_copies_of_every_plan_move_the_slice_in_order_with_the_store_stream) {
  strata::device_manager manager{strata::device_options{.cpu_threads_per_device = 1}};
  auto devs = manager.create("cpu:3");
  strata::stream producer = devs[2].create_stream();  // the caller's, writing a pushed value
  std::mt19937 rng(20261205);
  dtype type = dtype::float32;
  auto random = [&](std::size_t n) { return random_elements(type, n, rng); };
  auto status = std::make_shared<ki::work_status>();
  const ki::work_label label{"test: the copy", 0};
  constexpr std::size_t total = 1000;
  // `data_late`: what the copies read is written late on its own stream (they must wait for
  // it); otherwise the tensor's stream is late (the store's next work must wait for it).
  for (dtype t : types)
  for (auto whole_copy : {ki::copier::tensor_stream, ki::copier::store_stream})
    for (bool bounce : {false, true})
      for (bool to_foreign : {false, true})
        for (bool data_late : {true, false}) {
        type = t;
        const std::size_t element = strata::size_of(type);
        BOOST_TEST_INFO(to_string(type) << ", tensor stream " << (whole_copy == ki::copier::tensor_stream)
                                        << ", bounce " << bounce << ", to the tensor " << to_foreign << ", data late "
                                        << data_late);
        strata::stream store = devs[0].create_stream(), other = devs[1].create_stream();
        const std::size_t n = bounce ? 1 + rng() % (total - 1) : total;
        const std::size_t offset = bounce ? rng() % (total - n + 1) : 0;
        auto foreign_data = random(total), own_data = random(n), later = random(n);
        auto foreign = tensor_of(type, random(total), devs[1], other);
        auto own = tensor_of(type, random(n), devs[0], store);
        other.synchronize();  // their first contents are in place before the scenario writes them
        store.synchronize();
        const int late = data_late ? 60 : 0;
        bytes want;
        const auto at = static_cast<std::ptrdiff_t>(offset * element);
        if (to_foreign) {
          write_late(store, own, own_data, late);  // what the store's stream holds when the pull runs
          write_late(other, foreign, foreign_data, 0);  // the caller's earlier contents
          foreign.set_ready_event(other.record());
          store.wait(foreign.ready_event());
          want = foreign_data;
          std::copy(own_data.begin(), own_data.end(), want.begin() + at);
        } else {
          write_late(producer, foreign, foreign_data, late);  // the value
          foreign.set_ready_event(producer.record());
          store.wait(foreign.ready_event());  // as the store does before the crossing
          want.assign(foreign_data.begin() + at, foreign_data.begin() + at + static_cast<std::ptrdiff_t>(n * element));
        }
        if (!data_late) stall(other, 60);
        ki::enqueue_crossing({whole_copy, bounce}, store, other, {foreign, offset}, own, n, to_foreign, status, label);
        bytes seen(n * element);  // the store's next work: reads `own`, then overwrites it
        store.launch({.name = "next", .cpu = [own, later, &seen] {
                        std::memcpy(seen.data(), own.raw_data(), seen.size());
                        std::memcpy(own.raw_data(), later.data(), later.size());
                      }});
        store.synchronize();
        other.synchronize();
        if (to_foreign) {
          BOOST_TEST(bytes_of(foreign, other) == want, boost::test_tools::per_element());
          BOOST_TEST(seen == own_data, boost::test_tools::per_element());
        } else {
          BOOST_TEST(seen == want, boost::test_tools::per_element());
        }
        }
  BOOST_TEST(!status->failed());
}

// A pushpull (and an init followed by a pull) on a key of every dtype: the value's slice crosses
// into the store, the store's work replaces it, and the result crosses back into the output's
// slice, all on the same two streams with nothing waited for on the host; the output's other
// elements are left alone. Whole keys (one store) and split slices (a shard's part of a key).
BOOST_AUTO_TEST_CASE(a_pushpull_of_every_dtype_crosses_in_and_back_out_in_stream_order) {
  strata::device_manager manager{strata::device_options{.cpu_threads_per_device = 1}};
  auto devs = manager.create("cpu:2");
  std::mt19937 rng(20261206);
  auto status = std::make_shared<ki::work_status>();
  constexpr std::size_t total = 777;
  for (dtype type : types)
    for (auto whole_copy : {ki::copier::tensor_stream, ki::copier::store_stream})
      for (bool whole : {true, false}) {
        BOOST_TEST_INFO(to_string(type) << ", tensor stream " << (whole_copy == ki::copier::tensor_stream) << ", whole "
                                        << whole);
        const std::size_t element = strata::size_of(type);
        auto random = [&](std::size_t n) { return random_elements(type, n, rng); };
        strata::stream store = devs[0].create_stream(), other = devs[1].create_stream();
        const std::size_t n = whole ? total : 1 + rng() % (total - 1);
        const std::size_t offset = whole ? 0 : rng() % (total - n + 1);
        const bytes value_data = random(total), out_data = random(total), updated = random(n);
        auto value = tensor_of(type, value_data, devs[1], other);
        auto out = tensor_of(type, out_data, devs[1], other);
        auto own = tensor_of(type, random(n), devs[0], store);
        other.synchronize();
        store.synchronize();
        const ki::crossing_plan plan{whole_copy, !whole};
        store.wait(value.ready_event());
        ki::enqueue_crossing(plan, store, other, {value, offset}, own, n, false, status, {"test: push", 0});
        bytes pushed(n * element);  // the merge: reads the value, writes the new one (late)
        store.launch({.name = "merge", .cpu = [own, updated, &pushed] {
                        std::this_thread::sleep_for(std::chrono::milliseconds(30));  // late work, under test
                        std::memcpy(pushed.data(), own.raw_data(), pushed.size());
                        std::memcpy(own.raw_data(), updated.data(), updated.size());
                      }});
        store.wait(out.ready_event());
        ki::enqueue_crossing(plan, store, other, {out, offset}, own, n, true, status, {"test: pull", 0});
        store.synchronize();
        other.synchronize();
        const auto at = static_cast<std::ptrdiff_t>(offset * element);
        const bytes want_pushed(value_data.begin() + at, value_data.begin() + at + static_cast<std::ptrdiff_t>(n * element));
        BOOST_TEST(pushed == want_pushed, boost::test_tools::per_element());
        bytes want = out_data;
        std::copy(updated.begin(), updated.end(), want.begin() + at);
        BOOST_TEST(bytes_of(out, other) == want, boost::test_tools::per_element());
      }
  BOOST_TEST(!status->failed());
}

BOOST_AUTO_TEST_CASE(a_store_tensor_that_is_not_whole_or_of_another_dtype_is_refused_by_the_copies) {
  strata::device_manager manager{strata::device_options{.cpu_threads_per_device = 1}};
  auto devs = manager.create("cpu:2");
  strata::stream store = devs[0].create_stream(), other = devs[1].create_stream();
  auto foreign = strata::tensor::empty({10}, dtype::float32, devs[1], other);
  for (const auto& own : {strata::tensor::empty({12}, dtype::float32, devs[0], store),
                          strata::tensor::empty({10}, dtype::float16, devs[0], store)})
    BOOST_CHECK_THROW(ki::enqueue_crossing({ki::copier::tensor_stream, false}, store, other, {foreign, 0}, own, 10, false,
                                           std::make_shared<ki::work_status>(), {"test: the copy", 0}),
                      std::logic_error);
}

BOOST_AUTO_TEST_CASE(sim_tensors_given_to_a_cpu_store_are_refused_in_every_request_and_change_nothing) {
  strata::actor_system sys{strata::system_config{.worker_threads = 2}};
  strata::device_manager manager{strata::device_options{.cpu_threads_per_device = 1, .sim_time_scale = 0}};
  auto cpu = manager.create("cpu:1").at(0);
  auto sim = manager.create("sim:1").at(0);
  auto cs = cpu.create_stream(), ss = sim.create_stream();
  std::mt19937 rng(20261205);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  const std::vector<std::int64_t> shape{4, 6};
  auto random = [&] {
    std::vector<float> v(24);
    for (auto& x : v) x = d(rng);
    return v;
  };
  auto on_cpu = [&](const std::vector<float>& v) { return strata::tensor::from_host<float>(std::span<const float>(v), shape, cpu, cs); };
  auto on_sim = [&] { return strata::tensor::empty(shape, dtype::float32, sim, ss); };
  const std::string sim_text = " is on sim:0, which a store on cpu:0 cannot read; expected a cpu or cuda tensor (sim tensors hold no data).";
  // One store and three shards (chunks of 8 floats: the key is split).
  for (const auto& options : {strata::kvstore::options{}, strata::kvstore::options{.shards = 3, .chunk_bytes = 32}}) {
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, options));
    const auto w = random();
    BOOST_TEST_REQUIRE(await(kv.init("w", on_cpu(w))).has_value());
    auto fails_with = [&](auto&& reply, const std::string& text) {
      BOOST_REQUIRE(!reply.has_value());
      BOOST_TEST(reply.error().message() == text);
    };
    fails_with(await(kv.init("x", on_sim())), "kvstore init: the value for key \"x\"" + sim_text);
    fails_with(await(kv.push("w", {on_cpu(random()), on_sim()})), "kvstore push: the value for key \"w\"" + sim_text);
    fails_with(await(kv.pull("w", {on_cpu(random()), on_sim()})), "kvstore pull: the output for key \"w\"" + sim_text);
    fails_with(await(kv.pushpull("w", {on_cpu(random())}, {on_sim()})), "kvstore pushpull: the output for key \"w\"" + sim_text);
    fails_with(await(kv.pushpull("w", {on_sim()})), "kvstore pushpull: the value for key \"w\"" + sim_text);
    fails_with(await(kv.broadcast("y", on_cpu(random()), {on_sim()})), "kvstore broadcast: the output for key \"y\"" + sim_text);
    // Nothing changed: "w" holds its value, "x" and "y" do not exist.
    auto back = await(kv.pull("w", on_cpu(random()))).value().at(0).to_host<float>(cs);
    BOOST_TEST(back == w, boost::test_tools::per_element());
    BOOST_TEST(!await(kv.version("y")).has_value());
    BOOST_TEST(!await(kv.version("x")).has_value());
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_crossing_test
