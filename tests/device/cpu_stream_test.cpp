// Contract tests: streams, events and completion callbacks on the cpu backend (and across backends).
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "helpers.hpp"

using namespace strata;
using namespace std::chrono_literals;

namespace cpu_stream_test {
device_options two_threads() {
  device_options o = test::deterministic_sim();
  o.cpu_threads_per_device = 2;
  return o;
}

BOOST_AUTO_TEST_SUITE(cpu_streams)

BOOST_AUTO_TEST_CASE(work_items_on_one_stream_run_one_at_a_time_in_submission_order) {
  auto dev = make_devices("cpu:1", two_threads());
  auto s = dev[0].create_stream();
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  for (int i = 0; i < 2000; ++i)
    s.launch({.name = "append", .cpu = [&, i] {
                if (running.fetch_add(1) != 0) overlapped = true;
                order.push_back(i);
                running.fetch_sub(1);
              }});
  s.synchronize();
  BOOST_TEST(!overlapped.load());
  BOOST_REQUIRE(order.size() == 2000u);
  for (int i = 0; i < 2000; ++i) BOOST_TEST_REQUIRE(order[static_cast<std::size_t>(i)] == i);
}

BOOST_AUTO_TEST_CASE(work_items_of_two_streams_on_one_device_run_concurrently) {
  auto dev = make_devices("cpu:1", two_threads());
  auto a = dev[0].create_stream();
  auto b = dev[0].create_stream();
  // Each item announces itself and waits for the other: both finish only if they overlap.
  std::promise<void> a_in, b_in;
  auto a_seen = a_in.get_future().share();
  auto b_seen = b_in.get_future().share();
  std::atomic<bool> a_saw_b{false}, b_saw_a{false};
  a.launch({.name = "a", .cpu = [&] {
              a_in.set_value();
              a_saw_b = b_seen.wait_for(20s) == std::future_status::ready;
            }});
  b.launch({.name = "b", .cpu = [&] {
              b_in.set_value();
              b_saw_a = a_seen.wait_for(20s) == std::future_status::ready;
            }});
  a.synchronize();
  b.synchronize();
  BOOST_TEST(a_saw_b.load());
  BOOST_TEST(b_saw_a.load());
}

BOOST_AUTO_TEST_CASE(a_stream_waiting_for_an_event_of_another_stream_observes_its_result) {
  auto dev = make_devices("cpu:1", two_threads());
  auto a = dev[0].create_stream();
  auto b = dev[0].create_stream();
  test::gate slow;
  int value = 0;  // written by a's item, read by b's item: ordered by the event alone
  int observed = -1;
  a.launch({.name = "slow producer", .cpu = [&] {
              (void)slow.pass();
              value = 42;
            }});
  event produced = a.record();
  b.wait(produced);
  b.launch({.name = "consumer", .cpu = [&] { observed = value; }});
  event consumed = b.record();
  BOOST_TEST(!produced.query());
  BOOST_TEST(!consumed.query());  // b is deferred; no host thread blocks for it
  slow.open();
  consumed.synchronize();
  BOOST_TEST(observed == 42);
  BOOST_TEST(produced.query());
}

BOOST_AUTO_TEST_CASE(a_stream_of_another_cpu_device_waits_for_the_event_too) {
  auto dev = make_devices("cpu:2", two_threads());
  auto a = dev[0].create_stream();
  auto b = dev[1].create_stream();
  test::gate slow;
  std::vector<int> log;
  std::mutex mu;
  a.launch({.name = "slow", .cpu = [&] {
              (void)slow.pass();
              std::lock_guard lk(mu);
              log.push_back(1);
            }});
  b.wait(a.record());
  b.launch({.name = "after", .cpu = [&] {
              std::lock_guard lk(mu);
              log.push_back(2);
            }});
  slow.open();
  b.synchronize();
  BOOST_TEST((log == std::vector<int>{1, 2}));
}

BOOST_AUTO_TEST_CASE(completion_callbacks_fire_once_in_order_on_a_backend_thread) {
  auto dev = make_devices("cpu:1", two_threads());
  auto s = dev[0].create_stream();
  const auto caller = std::this_thread::get_id();
  std::vector<int> fired;
  std::atomic<int> done_items{0};
  std::atomic<bool> on_caller{false}, early{false};
  for (int i = 0; i < 200; ++i) {
    s.launch({.name = "work", .cpu = [&] { done_items.fetch_add(1); }});
    s.on_complete([&, i](std::exception_ptr e) {
      if (std::this_thread::get_id() == caller) on_caller = true;
      if (done_items.load() != i + 1 || e) early = true;
      fired.push_back(i);
    });
  }
  s.synchronize();
  BOOST_TEST(!on_caller.load());
  BOOST_TEST(!early.load());  // each ran after exactly the work submitted before it
  BOOST_REQUIRE(fired.size() == 200u);
  for (int i = 0; i < 200; ++i) BOOST_TEST_REQUIRE(fired[static_cast<std::size_t>(i)] == i);
}

BOOST_AUTO_TEST_CASE(event_query_is_non_blocking_and_elapsed_time_covers_the_work_between) {
  auto dev = make_devices("cpu:1", two_threads());
  auto s = dev[0].create_stream();
  event never = dev[0].create_event();
  BOOST_TEST(never.query());  // never recorded: complete
  BOOST_TEST(event{}.query());
  BOOST_CHECK_THROW(event::elapsed_ms(never, never), device_error);

  test::gate slow;
  event start = dev[0].create_event(true);
  event end = dev[0].create_event(true);
  s.record(start);
  s.launch({.name = "slow", .cpu = [&] { (void)slow.pass(); }});
  s.record(end);
  BOOST_TEST(!end.query());
  BOOST_CHECK_THROW(event::elapsed_ms(start, end), device_error);  // not complete yet
  slow.open();
  end.synchronize();
  BOOST_TEST(end.query());
  BOOST_TEST(event::elapsed_ms(start, end) >= 0.0);
  BOOST_CHECK_THROW(event::elapsed_ms(start, make_devices("sim:1", test::deterministic_sim())[0].create_stream().record()),
                    device_error);  // different backends
}

BOOST_AUTO_TEST_CASE(recording_an_event_again_moves_it_while_earlier_waits_keep_the_old_point) {
  auto dev = make_devices("cpu:1", two_threads());
  auto a = dev[0].create_stream();
  auto b = dev[0].create_stream();
  test::gate first, second;
  event e = dev[0].create_event();
  a.launch({.name = "first", .cpu = [&] { (void)first.pass(); }});
  a.record(e);
  b.wait(e);  // waits for the first point only
  event b_done = b.record();
  a.launch({.name = "second", .cpu = [&] { (void)second.pass(); }});
  a.record(e);
  first.open();
  b_done.synchronize();
  BOOST_TEST(!e.query());  // e now names the second point
  second.open();
  e.synchronize();
}

BOOST_AUTO_TEST_CASE(event_then_runs_the_callback_once_when_the_point_completes) {
  auto dev = make_devices("cpu:1", two_threads());
  auto s = dev[0].create_stream();
  test::gate slow;
  s.launch({.name = "slow", .cpu = [&] { (void)slow.pass(); }});
  event e = s.record();
  std::promise<std::thread::id> where;
  auto f = where.get_future();
  e.then([&](std::exception_ptr) { where.set_value(std::this_thread::get_id()); });
  slow.open();
  BOOST_REQUIRE(test::ready_within(f));
  BOOST_TEST((f.get() != std::this_thread::get_id()));
  int immediate = 0;
  e.then([&](std::exception_ptr) { ++immediate; });  // already complete: runs here
  event{}.then([&](std::exception_ptr) { ++immediate; });
  BOOST_TEST(immediate == 2);
}

BOOST_AUTO_TEST_CASE(a_failing_work_item_reaches_later_callbacks_events_and_synchronize_and_skips_later_work) {
  auto dev = make_devices("cpu:1", two_threads());
  auto s = dev[0].create_stream();
  auto other = dev[0].create_stream();
  bool later_ran = false;
  s.launch({.name = "fails", .cpu = [] { throw std::runtime_error("kernel exploded"); }});
  s.launch({.name = "later", .cpu = [&] { later_ran = true; }});
  event e = s.record();
  std::promise<std::exception_ptr> seen;
  auto f = seen.get_future();
  s.on_complete([&](std::exception_ptr err) { seen.set_value(err); });
  BOOST_REQUIRE(test::ready_within(f));
  BOOST_TEST(static_cast<bool>(f.get()));
  BOOST_CHECK_THROW(s.synchronize(), std::runtime_error);
  BOOST_CHECK_THROW(e.synchronize(), std::runtime_error);
  BOOST_TEST(!later_ran);
  other.wait(e);  // the error travels to a waiting stream
  BOOST_CHECK_THROW(other.synchronize(), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(a_cpu_stream_rejects_work_without_a_cpu_implementation) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  BOOST_CHECK_THROW(s.launch({.name = "gpu only", .cuda = [](const cuda_launch_context&) {}}), device_error);
  BOOST_CHECK_THROW(stream{}.launch({}), device_error);
}

// Under ThreadSanitizer a device runs its work on threads of its own, not in a oneTBB arena
// (runtime/src/device/cpu_backend.cpp, turn_threads): there is no arena to check.
#if !defined(__SANITIZE_THREAD__)
BOOST_AUTO_TEST_CASE(work_items_run_inside_the_device_arena_so_nested_parallelism_stays_there) {
  device_options o;
  o.cpu_threads_per_device = 2;
  auto dev = make_devices("cpu:1", o);
  auto s = dev[0].create_stream();
  int concurrency = 0;
  std::atomic<long> sum{0};
  s.launch({.name = "nested", .cpu = [&] {
              concurrency = tbb::this_task_arena::max_concurrency();
              tbb::parallel_for(0, 1000, [&](int i) { sum += i; });
            }});
  s.synchronize();
  BOOST_TEST(concurrency == 2);
  BOOST_TEST(sum.load() == 499500);
}
#endif

BOOST_AUTO_TEST_CASE(the_work_observer_sees_every_item_with_ordered_timestamps) {
  auto dev = make_devices("cpu:1", two_threads());
  std::mutex mu;
  std::vector<work_record> seen;
  std::vector<std::string> names;
  dev[0].set_work_observer([&](const work_record& r) {
    std::lock_guard lk(mu);
    seen.push_back(r);
    names.push_back(*r.name);
  });
  auto s = dev[0].create_stream();
  for (int i = 0; i < 5; ++i) s.launch({.name = std::string("k").append(std::to_string(i)), .flops = 10, .cpu = [] {}});
  s.synchronize();
  dev[0].set_work_observer({});
  s.launch({.name = "unobserved", .cpu = [] {}});
  s.synchronize();
  BOOST_REQUIRE(seen.size() == 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    BOOST_TEST(names[i] == std::string("k").append(std::to_string(i)));
    BOOST_TEST(seen[i].start.count() <= seen[i].end.count());
    BOOST_TEST(seen[i].stream_id == s.id());
    BOOST_TEST(!seen[i].modelled);
    if (i) BOOST_TEST(seen[i - 1].end.count() <= seen[i].start.count());
  }
}

BOOST_AUTO_TEST_CASE(an_observer_that_throws_loses_its_records_but_not_the_stream_on_cpu_and_sim) {
  for (const char* spec : {"cpu:1", "sim:1"}) {
    BOOST_TEST_CONTEXT(spec) {
      auto dev = make_devices(spec, two_threads());
      std::atomic<int> calls{0};
      dev[0].set_work_observer([&](const work_record&) {
        ++calls;
        throw std::runtime_error("observers must not throw");
      });
      auto s = dev[0].create_stream();
      int ran = 0;
      for (int i = 0; i < 3; ++i) s.launch({.name = "k", .flops = 1e6, .cpu = [&] { ++ran; }});
      BOOST_CHECK_NO_THROW(s.synchronize());
      dev[0].set_work_observer({});
      BOOST_TEST(calls.load() == 3);
      if (dev[0].kind() == strata::device_kind::cpu) BOOST_TEST(ran == 3);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_sim_stream_waiting_for_a_cpu_event_completes_after_it_fires) {
  device_manager m(two_threads());
  auto cpu = m.create("cpu:1");
  auto sim = m.create("sim:1");
  auto a = cpu[0].create_stream();
  auto b = sim[0].create_stream();
  test::gate slow;
  std::atomic<bool> cpu_done{false}, sim_saw_cpu{false};
  a.launch({.name = "slow", .cpu = [&] {
              (void)slow.pass();
              cpu_done = true;
            }});
  b.wait(a.record());
  b.launch({.name = "modelled", .flops = 1e9});
  std::promise<void> p;
  auto f = p.get_future();
  b.on_complete([&](std::exception_ptr) {
    sim_saw_cpu = cpu_done.load();
    p.set_value();
  });
  slow.open();
  BOOST_REQUIRE(test::ready_within(f));
  BOOST_TEST(sim_saw_cpu.load());
}

BOOST_AUTO_TEST_CASE(a_cpu_stream_waiting_for_a_sim_event_runs_after_the_modelled_completion) {
  device_manager m(two_threads());
  auto cpu = m.create("cpu:1");
  auto sim = m.create("sim:1");
  auto a = sim[0].create_stream();
  auto b = cpu[0].create_stream();
  std::atomic<bool> sim_done{false}, cpu_saw_sim{false};
  a.launch({.name = "modelled", .kind = work_kind::matmul, .flops = 494e12 * 0.05});  // 50 ms, 50 us wall
  a.on_complete([&](std::exception_ptr) { sim_done = true; });
  b.wait(a.record());
  b.launch({.name = "after", .cpu = [&] { cpu_saw_sim = sim_done.load(); }});
  b.synchronize();
  BOOST_TEST(cpu_saw_sim.load());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace cpu_stream_test
