// Contract tests for the cuda backend. They need a GPU: without one every test is skipped (Boost.Test
// precondition) and the executable exits with 77, which ctest reports as "Skipped"; where a GPU is
// expected (STRATA_REQUIRE_GPU=1, nvidia-smi), a skip fails the run (tests/kernels_cuda/gpu_requirement.hpp).
#define BOOST_TEST_MODULE strata_device_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../kernels_cuda/gpu_requirement.hpp"  // the GPU programs' skip rule
#include "helpers.hpp"

using namespace strata;

namespace {

boost::test_tools::assertion_result has_gpu(boost::unit_test::test_unit_id) {
  return strata::test::gpu_precondition(1);
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// A work item that sets `bytes` bytes at `p` to `value` (cudaMemsetAsync on the item's stream).
kernel_work memset_work(std::string name, void* p, int value, std::size_t bytes) {
  return {.name = std::move(name),
          .kind = work_kind::pointwise,
          .bytes = static_cast<double>(bytes),
          .cuda = [=](const cuda_launch_context& c) {
            if (cudaMemsetAsync(p, value, bytes, static_cast<cudaStream_t>(c.stream)) != cudaSuccess)
              throw std::runtime_error("cudaMemsetAsync failed");
          }};
}

/// Collects the records a device's work observer receives (on the device's reporter thread).
struct record_log {
  std::mutex mu;
  std::vector<work_record> records;
  std::vector<std::string> names;
  work_observer observer() {
    return [this](const work_record& r) {
      std::lock_guard lk(mu);
      records.push_back(r);
      names.push_back(*r.name);
    };
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_devices, *boost::unit_test::precondition(has_gpu))

BOOST_AUTO_TEST_CASE(a_cuda_device_reports_its_gpu) {
  auto d = make_devices("cuda:0");
  BOOST_REQUIRE(d.size() == 1u);
  BOOST_TEST(d[0].name() == "cuda:0");
  BOOST_TEST(d[0].properties().gpu_ordinal == 0);
  BOOST_TEST(d[0].properties().total_memory > 0u);
  BOOST_TEST(!d[0].properties().hardware.empty());
  BOOST_TEST(d[0].create_stream().native_handle() != nullptr);
}

BOOST_AUTO_TEST_CASE(devices_sharing_one_gpu_have_their_own_streams) {
  auto d = make_devices("cuda:0x2");
  BOOST_REQUIRE(d.size() == 2u);
  BOOST_TEST(d[0].name() == "cuda:0#0");
  BOOST_TEST(d[1].name() == "cuda:0#1");
  auto a = d[0].create_stream(stream_priority::high);
  auto b = d[1].create_stream(stream_priority::low);
  BOOST_TEST(a.native_handle() != b.native_handle());
  auto values = random_floats(1 << 16, 1);
  auto t = tensor::from_host<float>(values, d[0], a);
  auto u = tensor::empty(t.shape(), t.dtype(), d[1], b);
  b.wait(t.ready_event());
  t.storage().record_stream(b);
  b.copy(u.storage(), t.storage());
  u.set_ready_event(b.record());
  BOOST_TEST(u.to_host<float>(b) == values);
  BOOST_TEST(d[1].can_read_in_place(t.storage()));  // another share of the same GPU
  BOOST_TEST(!make_devices("cpu:1")[0].can_read_in_place(t.storage()));
}

BOOST_AUTO_TEST_CASE(a_float_tensor_survives_a_round_trip_through_gpu_memory_on_random_data) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  auto values = random_floats(100'003, 2);
  auto t = tensor::from_host<float>(values, d[0], s);
  BOOST_TEST(t.raw_data() != nullptr);
  BOOST_CHECK_THROW(t.data<float>(), device_error);  // device memory
  BOOST_TEST(t.to_host<float>(s) == values);
}

BOOST_AUTO_TEST_CASE(a_cublas_sgemm_launched_through_kernel_work_matches_a_float64_reference) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  const int m = 33, n = 17, k = 29;
  auto a = random_floats(static_cast<std::size_t>(m) * k, 3);
  auto b = random_floats(static_cast<std::size_t>(k) * n, 4);
  auto ta = tensor::from_host<float>(a, {k, m}, d[0], s);  // column-major m x k
  auto tb = tensor::from_host<float>(b, {n, k}, d[0], s);  // column-major k x n
  auto tc = tensor::empty({n, m}, dtype::float32, d[0], s);
  s.launch({.name = "sgemm",
            .kind = work_kind::matmul,
            .flops = 2.0 * m * n * k,
            .cuda = [&](const cuda_launch_context& c) {
              const float one = 1.f, zero = 0.f;
              auto st = cublasSgemm(static_cast<cublasHandle_t>(c.cublas), CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one,
                                    static_cast<const float*>(ta.raw_data()), m,
                                    static_cast<const float*>(tb.raw_data()), k, &zero,
                                    static_cast<float*>(tc.raw_data()), m);
              if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasSgemm failed");
            }});
  tc.set_ready_event(s.record());
  auto c = tc.to_host<float>(s);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double ref = 0;
      for (int p = 0; p < k; ++p)
        ref += static_cast<double>(a[static_cast<std::size_t>(p * m + i)]) * b[static_cast<std::size_t>(j * k + p)];
      BOOST_TEST_REQUIRE(c[static_cast<std::size_t>(j * m + i)] == ref, boost::test_tools::tolerance(2e-3));
    }
}

BOOST_AUTO_TEST_CASE(a_cuda_stream_waiting_for_a_cpu_event_copies_the_finished_data) {
  device_manager m;
  auto cpu = m.create("cpu:1");
  auto gpu = m.create("cuda:0");
  auto cs = cpu[0].create_stream();
  auto gs = gpu[0].create_stream();
  auto values = random_floats(4096, 5);
  auto host = tensor::empty({4096}, dtype::float32, cpu[0], cs);
  test::gate slow;
  cs.launch({.name = "produce", .cpu = [&, p = host.data<float>()] {
               (void)slow.pass();
               std::copy(values.begin(), values.end(), p);
             }});
  host.set_ready_event(cs.record());
  auto dev = tensor::empty({4096}, dtype::float32, gpu[0], gs);
  gs.wait(host.ready_event());  // gates the cuda stream on the host side; no thread blocks
  host.storage().record_stream(gs);
  gs.copy(dev.storage(), host.storage());
  dev.set_ready_event(gs.record());
  BOOST_TEST(!dev.ready_event().query());
  slow.open();
  BOOST_TEST(dev.to_host<float>(gs) == values);
}

BOOST_AUTO_TEST_CASE(a_cpu_stream_waiting_for_a_cuda_event_observes_the_copied_data) {
  device_manager m;
  auto cpu = m.create("cpu:1");
  auto gpu = m.create("cuda:0");
  auto cs = cpu[0].create_stream();
  auto gs = gpu[0].create_stream();
  auto values = random_floats(1 << 20, 6);
  auto t = tensor::from_host<float>(values, gpu[0], gs);
  auto back = tensor::empty(t.shape(), t.dtype(), cpu[0], cs);
  gs.wait(t.ready_event());
  gs.copy(back.storage(), t.storage());  // device to a cpu buffer, through pinned staging
  cs.wait(gs.record());
  std::vector<float> seen;
  cs.launch({.name = "read", .cpu = [&, p = back.data<float>()] { seen.assign(p, p + values.size()); }});
  cs.synchronize();
  BOOST_TEST(seen == values);
}

BOOST_AUTO_TEST_CASE(completion_callbacks_fire_once_in_order_off_the_calling_thread) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  std::vector<int> fired;
  std::atomic<bool> on_caller{false};
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < 100; ++i)
    s.on_complete([&, i](std::exception_ptr) {
      if (std::this_thread::get_id() == caller) on_caller = true;
      fired.push_back(i);
    });
  s.synchronize();
  BOOST_TEST(!on_caller.load());
  BOOST_REQUIRE(fired.size() == 100u);
  for (int i = 0; i < 100; ++i) BOOST_TEST_REQUIRE(fired[static_cast<std::size_t>(i)] == i);
}

BOOST_AUTO_TEST_CASE(timing_events_measure_gpu_work_and_plain_events_refuse) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  auto start = d[0].create_event(true);
  auto end = d[0].create_event(true);
  buffer big = d[0].allocate(256 << 20, s);
  s.record(start);
  s.copy(big, big, 128 << 20);
  s.record(end);
  end.synchronize();
  BOOST_TEST(start.query());
  BOOST_TEST(event::elapsed_ms(start, end) >= 0.0);
  auto plain = s.record();
  plain.synchronize();
  BOOST_CHECK_THROW(event::elapsed_ms(start, plain), device_error);
}

BOOST_AUTO_TEST_CASE(released_memory_returns_to_the_pool_in_stream_order) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  { buffer b = d[0].allocate(64 << 20, s); }
  // The free is issued by the dispatcher thread; wait until the counter drops.
  for (int i = 0; i < 200 && d[0].memory().bytes_in_use != 0; ++i) s.synchronize();
  BOOST_TEST(d[0].memory().bytes_in_use == 0u);
  BOOST_TEST(d[0].memory().peak_bytes_in_use >= std::size_t{64} << 20);
}

BOOST_AUTO_TEST_CASE(the_work_observer_gets_every_item_with_steady_clock_times_in_stream_order) {
  auto d = make_devices("cuda:0");
  stream streams[2] = {d[0].create_stream(), d[0].create_stream()};
  record_log log;
  d[0].set_work_observer(log.observer());
  constexpr std::size_t bytes = std::size_t{32} << 20;
  buffer a = d[0].allocate(bytes, streams[0]);
  buffer b = d[0].allocate(bytes, streams[1]);
  constexpr int n = 16;
  const auto before = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    auto& s = streams[i % 2];
    s.launch(memset_work("fill" + std::to_string(i), (i % 2 ? b : a).data(), i, bytes));
  }
  streams[1].wait(streams[0].record());
  streams[1].copy(a, b);
  for (auto& s : streams) s.synchronize();  // returns once the observer has seen the stream's items
  const auto after = std::chrono::steady_clock::now();
  d[0].set_work_observer({});
  streams[0].launch(memset_work("unobserved", a.data(), 0, bytes));
  streams[0].synchronize();

  std::lock_guard lk(log.mu);
  BOOST_REQUIRE(log.records.size() == static_cast<std::size_t>(n + 1));
  const auto slack = std::chrono::milliseconds(1);  // calibration error is microseconds
  const auto lo = (before - slack).time_since_epoch(), hi = (after + slack).time_since_epoch();
  std::map<std::uint64_t, std::chrono::nanoseconds> last_end;
  int fills = 0;
  for (std::size_t i = 0; i < log.records.size(); ++i) {
    const auto& r = log.records[i];
    BOOST_TEST_CONTEXT("record " << i << " (" << log.names[i] << ")") {
      BOOST_TEST((r.kind == device_kind::cuda));
      BOOST_TEST(r.device_index == d[0].index());
      BOOST_TEST(!r.modelled);
      BOOST_TEST(r.start.count() <= r.end.count());
      BOOST_TEST(r.start.count() >= std::chrono::duration_cast<std::chrono::nanoseconds>(lo).count());
      BOOST_TEST(r.end.count() <= std::chrono::duration_cast<std::chrono::nanoseconds>(hi).count());
      BOOST_TEST((r.stream_id == streams[0].id() || r.stream_id == streams[1].id()));
      if (auto it = last_end.find(r.stream_id); it != last_end.end()) BOOST_TEST(it->second.count() <= r.start.count());
      last_end[r.stream_id] = r.end;
      if (log.names[i] == "copy") {
        BOOST_TEST((r.work == work_kind::copy));
        BOOST_TEST(r.stream_id == streams[1].id());
        BOOST_TEST(r.bytes == 2.0 * static_cast<double>(bytes));
        continue;
      }
      // Items of one stream arrive in submission order.
      const int k = std::stoi(log.names[i].substr(4));
      BOOST_TEST(log.names[i] == "fill" + std::to_string(k));
      BOOST_TEST(r.stream_id == streams[k % 2].id());
      BOOST_TEST((r.work == work_kind::pointwise));
      BOOST_TEST(r.bytes == static_cast<double>(bytes));
      ++fills;
    }
  }
  BOOST_TEST(fills == n);
  std::vector<int> order[2];
  for (const auto& name : log.names)
    if (name != "copy") order[std::stoi(name.substr(4)) % 2].push_back(std::stoi(name.substr(4)));
  for (auto& o : order) BOOST_TEST(std::is_sorted(o.begin(), o.end()));
}

BOOST_AUTO_TEST_CASE(an_observer_that_throws_keeps_receiving_records) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  std::atomic<int> calls{0};
  d[0].set_work_observer([&](const work_record&) {
    ++calls;
    throw std::runtime_error("observers must not throw");
  });
  buffer a = d[0].allocate(4096, s);
  for (int i = 0; i < 3; ++i) s.launch(memset_work("fill", a.data(), i, 4096));
  s.synchronize();
  d[0].set_work_observer({});
  BOOST_TEST(calls.load() == 3);
}

BOOST_AUTO_TEST_CASE(dropping_a_device_with_undelivered_records_neither_crashes_nor_hangs) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  constexpr int n = 64;
  {
    auto d = make_devices("cuda:0");
    auto s = d[0].create_stream();
    d[0].set_work_observer([calls](const work_record&) { ++*calls; });
    buffer a = d[0].allocate(std::size_t{256} << 20, s);
    for (int i = 0; i < n; ++i) s.launch(memset_work("fill", a.data(), i, std::size_t{256} << 20));
  }  // buffer, stream and device go with the work in flight; their records are dropped
  BOOST_TEST(calls->load() <= n);
  // A new device on the GPU reports again.
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  record_log log;
  d[0].set_work_observer(log.observer());
  buffer a = d[0].allocate(4096, s);
  s.launch(memset_work("after", a.data(), 1, 4096));
  s.synchronize();
  d[0].set_work_observer({});
  std::lock_guard lk(log.mu);
  BOOST_REQUIRE(log.names.size() == 1u);
  BOOST_TEST(log.names[0] == "after");
}

BOOST_AUTO_TEST_CASE(a_failing_launch_reaches_later_callbacks_events_and_synchronize_and_skips_later_work) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  auto other = d[0].create_stream();
  bool later_ran = false;
  s.launch({.name = "fails", .cuda = [](const cuda_launch_context&) { throw std::runtime_error("launch exploded"); }});
  s.launch({.name = "later", .cuda = [&](const cuda_launch_context&) { later_ran = true; }});
  event e = s.record();
  std::promise<std::exception_ptr> seen;
  auto f = seen.get_future();
  s.on_complete([&](std::exception_ptr err) { seen.set_value(err); });
  BOOST_REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  BOOST_TEST(static_cast<bool>(f.get()));
  BOOST_CHECK_THROW(s.synchronize(), std::runtime_error);
  BOOST_CHECK_THROW(e.synchronize(), std::runtime_error);
  BOOST_TEST(!later_ran);
  other.wait(e);  // the error travels to a waiting stream (a native event wait)
  BOOST_CHECK_THROW(other.synchronize(), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(a_cuda_stream_rejects_work_without_a_cuda_implementation) {
  auto d = make_devices("cuda:0");
  auto s = d[0].create_stream();
  BOOST_CHECK_THROW(s.launch({.name = "cpu only", .cpu = [] {}}), device_error);
}

BOOST_AUTO_TEST_CASE(a_gpu_that_does_not_exist_is_a_clear_error) {
  try {
    make_devices("cuda:4000");
    BOOST_FAIL("expected an error");
  } catch (const device_error& e) {
    BOOST_TEST((e.code() == device_errc::unavailable));
    BOOST_TEST(std::string(e.what()).find("GPU 4000 does not exist") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()

int main(int argc, char* argv[]) {
  return strata::test::run_gpu_tests("test_device_cuda", &init_unit_test, argc, argv);
}
