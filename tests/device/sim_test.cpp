// Contract tests: the sim backend's modelled time (checked on modelled timestamps, not wall time).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include "helpers.hpp"

using namespace strata;
using namespace std::chrono_literals;

namespace sim_test {
constexpr double latency = 5e-6;  // h200 profile
constexpr double tolerance_ms = 1e-6;

/// Modelled milliseconds of `work` on a fresh h200 stream, measured by events around it.
double modelled_ms(kernel_work work) {
  auto dev = make_devices("sim:1:h200", test::deterministic_sim());
  auto s = dev[0].create_stream();
  event start = s.record();
  s.launch(std::move(work));
  event end = s.record();
  end.synchronize();
  return event::elapsed_ms(start, end);
}

BOOST_AUTO_TEST_SUITE(sim_devices)

BOOST_AUTO_TEST_CASE(compute_bound_matmul_work_takes_flops_over_the_tensor_rate_plus_launch_latency) {
  double ms = modelled_ms({.name = "gemm", .kind = work_kind::matmul, .flops = 494e12 * 0.010, .bytes = 1e6});
  BOOST_TEST(ms == (0.010 + latency) * 1e3, boost::test_tools::tolerance(tolerance_ms));
}

BOOST_AUTO_TEST_CASE(compute_bound_pointwise_work_takes_flops_over_the_fp32_rate_plus_launch_latency) {
  double ms = modelled_ms({.name = "tanh", .kind = work_kind::pointwise, .flops = 67e12 * 0.003, .bytes = 1e6});
  BOOST_TEST(ms == (0.003 + latency) * 1e3, boost::test_tools::tolerance(tolerance_ms));
}

BOOST_AUTO_TEST_CASE(memory_bound_work_takes_bytes_over_the_bandwidth_plus_launch_latency) {
  double ms = modelled_ms({.name = "axpy", .flops = 67e12 * 0.001, .bytes = 4.8e12 * 0.004});
  BOOST_TEST(ms == (0.004 + latency) * 1e3, boost::test_tools::tolerance(tolerance_ms));
}

BOOST_AUTO_TEST_CASE(copies_take_bytes_over_the_host_link_or_memory_rate_plus_launch_latency) {
  auto dev = make_devices("sim:1:h200", test::deterministic_sim());
  auto s = dev[0].create_stream();
  buffer b = dev[0].allocate(64'000'000, s);
  std::vector<char> host(1'000'000);
  event start = s.record();
  s.copy_from_host(b, host.data(), host.size());  // sim reads nothing, models the host link
  event mid = s.record();
  s.copy_to_host(host.data(), b, host.size());
  s.copy(b, b, 64'000'000);  // same device: read + write at HBM bandwidth
  event end = s.record();
  end.synchronize();
  BOOST_TEST(event::elapsed_ms(start, mid) == (1e6 / 64e9 + latency) * 1e3, boost::test_tools::tolerance(tolerance_ms));
  BOOST_TEST(event::elapsed_ms(mid, end) == (1e6 / 64e9 + latency + 2 * 64e6 / 4.8e12 + latency) * 1e3,
             boost::test_tools::tolerance(tolerance_ms));
}

BOOST_AUTO_TEST_CASE(waits_chain_modelled_times_across_sim_devices) {
  auto dev = make_devices("sim:3:h200", test::deterministic_sim());
  auto a = dev[0].create_stream();
  auto b = dev[1].create_stream();
  auto c = dev[2].create_stream();
  a.launch({.name = "a", .kind = work_kind::matmul, .flops = 494e12 * 0.010});
  event ea = a.record();
  // The modelled time is known when the record is processed, before it completes in wall time.
  BOOST_TEST(ea.modelled_time() == 0.010 + latency, boost::test_tools::tolerance(1e-12));

  b.launch({.name = "b0", .bytes = 4.8e12 * 0.001});  // ends at 1 ms: b must wait for a
  b.wait(ea);
  b.launch({.name = "b1", .bytes = 4.8e12 * 0.005});
  event eb = b.record();
  BOOST_TEST(eb.modelled_time() == ea.modelled_time() + 0.005 + latency, boost::test_tools::tolerance(1e-12));

  c.launch({.name = "c0", .bytes = 4.8e12 * 0.020});  // already past ea: the wait costs nothing
  c.wait(ea);
  c.launch({.name = "c1", .bytes = 4.8e12 * 0.001});
  event ec = c.record();
  BOOST_TEST(ec.modelled_time() == 0.020 + 0.001 + 2 * latency, boost::test_tools::tolerance(1e-12));

  eb.synchronize();
  ec.synchronize();
  BOOST_TEST(ea.query());
  BOOST_TEST(event::elapsed_ms(ea, eb) == (0.005 + latency) * 1e3, boost::test_tools::tolerance(tolerance_ms));
}

BOOST_AUTO_TEST_CASE(the_work_observer_reports_modelled_start_and_end_times) {
  auto dev = make_devices("sim:1:h200", test::deterministic_sim());
  std::mutex mu;
  std::vector<work_record> seen;
  dev[0].set_work_observer([&](const work_record& r) {
    std::lock_guard lk(mu);
    seen.push_back(r);
  });
  auto s = dev[0].create_stream();
  s.launch({.name = "one", .kind = work_kind::matmul, .flops = 494e12 * 0.002});
  s.launch({.name = "two", .bytes = 4.8e12 * 0.001});
  s.synchronize();
  std::lock_guard lk(mu);
  BOOST_REQUIRE(seen.size() == 2u);
  BOOST_TEST(seen[0].modelled);
  BOOST_TEST(seen[0].start.count() == 0);
  BOOST_TEST(seen[0].end.count() == std::llround((0.002 + latency) * 1e9));
  BOOST_TEST(seen[1].start.count() == seen[0].end.count());
  BOOST_TEST(std::abs(seen[1].end.count() - seen[1].start.count() - std::llround((0.001 + latency) * 1e9)) <= 1);
}

BOOST_AUTO_TEST_CASE(sim_callbacks_run_in_order_on_the_sim_clock_thread) {
  auto dev = make_devices("sim:2", test::deterministic_sim());
  auto s = dev[0].create_stream();
  auto t = dev[1].create_stream();
  std::vector<int> fired;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 50; ++i) {
    s.launch({.name = "k", .bytes = 4.8e9 * (i % 3)});
    s.on_complete([&, i](std::exception_ptr) {
      fired.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  std::promise<std::thread::id> other;
  auto f = other.get_future();
  t.on_complete([&](std::exception_ptr) { other.set_value(std::this_thread::get_id()); });
  s.synchronize();
  BOOST_REQUIRE(test::ready_within(f));
  BOOST_REQUIRE(fired.size() == 50u);
  for (int i = 0; i < 50; ++i) BOOST_TEST_REQUIRE(fired[static_cast<std::size_t>(i)] == i);
  for (auto id : threads) {
    BOOST_TEST((id != std::this_thread::get_id()));
    BOOST_TEST((id == threads.front()));
  }
  BOOST_TEST((f.get() == threads.front()));  // one clock thread for all sim devices of a manager
}

BOOST_AUTO_TEST_CASE(modelled_time_passes_in_real_time_at_scale_one) {
  device_options o;  // time_scale 1, following the host clock
  auto dev = make_devices("sim:1:h200", o);
  auto s = dev[0].create_stream();
  auto wall_start = std::chrono::steady_clock::now();
  event start = s.record();
  s.launch({.name = "30 ms", .kind = work_kind::matmul, .flops = 494e12 * 0.030});
  event end = s.record();
  end.synchronize();
  auto wall = std::chrono::steady_clock::now() - wall_start;
  BOOST_TEST(event::elapsed_ms(start, end) >= 30.0);  // >=: following the host clock may add time
  double wall_ms = std::chrono::duration<double, std::milli>(wall).count();
  BOOST_TEST(wall_ms >= 25.0);  // generous lower bound
}

BOOST_AUTO_TEST_CASE(following_the_host_clock_never_starts_work_before_its_submission) {
  device_options o;
  o.sim_time_scale = 0.01;
  auto dev = make_devices("sim:1:h200", o);
  auto s = dev[0].create_stream();
  s.launch({.name = "first", .bytes = 4.8e12 * 0.001});
  s.synchronize();
  // At least the first item's 10 us of wall time has passed: 1 ms modelled at scale 0.01.
  event e = s.record();
  BOOST_TEST(e.modelled_time() >= 0.001);
}

BOOST_AUTO_TEST_CASE(sim_streams_run_work_without_any_implementation) {
  auto dev = make_devices("sim:1", test::deterministic_sim());
  auto s = dev[0].create_stream(stream_priority::high);
  BOOST_TEST((s.priority() == stream_priority::high));
  s.launch({.name = "no code", .flops = 1e9});
  s.synchronize();
  BOOST_TEST(!s.error());
  BOOST_TEST(s.native_handle() == nullptr);
}

BOOST_AUTO_TEST_CASE(an_event_can_only_be_recorded_on_a_stream_of_its_backend) {
  device_manager m(test::deterministic_sim());
  auto sim = m.create("sim:1");
  auto cpu = m.create("cpu:1");
  auto s = sim[0].create_stream();
  BOOST_CHECK_THROW(s.record(cpu[0].create_event()), device_error);
  BOOST_CHECK_THROW(s.record(event{}), device_error);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace sim_test
