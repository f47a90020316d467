// Contract tests: quitting, stopping, failure, monitors, links, supervision, shutdown.

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <future>
#include <random>
#include <stdexcept>
#include <string>

#include "strata/strata.hpp"
#include "strata/test_coordinator.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace lifecycle_test {

struct boom {};
struct get_count {};

/// Watches one actor and reports its down reason.
strata::actor_ref spawn_watcher(strata::actor_system& sys, strata::actor_ref target,
                                std::shared_ptr<std::promise<strata::error>> p) {
  return sys.spawn([target, p](strata::actor& self) -> strata::behavior {
    self.monitor(target);
    return {[&self, p](const strata::down_msg& d) {
      p->set_value(d.reason);
      self.quit();
    }};
  });
}

/// Counts messages; throws on `boom`. Counts its constructions in `instances`.
class fragile : public strata::actor {
public:
  explicit fragile(std::shared_ptr<std::atomic<int>> instances) : instances_(std::move(instances)) {
    instances_->fetch_add(1);
  }
  strata::behavior make_behavior() override {
    return {[this](int) { ++count_; },
            [](const boom&) -> void { throw std::runtime_error("deliberate failure"); },
            [this](const get_count&) { return count_; }};
  }

private:
  std::shared_ptr<std::atomic<int>> instances_;
  int count_ = 0;
};

BOOST_AUTO_TEST_SUITE(lifecycle)

BOOST_AUTO_TEST_CASE(an_actor_that_quits_sends_a_normal_down_message_to_its_monitors) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto target = sys.spawn([](strata::actor& self) -> strata::behavior { return {[&self](int) { self.quit(); }}; });
  strata::test::shared_promise<strata::error> down;
  auto f = down.future();
  spawn_watcher(sys, target, down.p);
  sys.send(target, 1);
  auto reason = await(f);
  BOOST_TEST(reason.code() == strata::errc::normal_exit);
  BOOST_TEST(reason.is_normal());
}

BOOST_AUTO_TEST_CASE(an_exception_in_a_handler_fails_the_actor_with_the_reason) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto instances = std::make_shared<std::atomic<int>>(0);
  auto target = sys.spawn<fragile>(instances);
  strata::test::shared_promise<strata::error> down;
  auto f = down.future();
  spawn_watcher(sys, target, down.p);
  sys.send(target, boom{});
  auto reason = await(f);
  BOOST_TEST(reason.code() == strata::errc::unhandled_exception);
  BOOST_TEST(reason.message().find("deliberate failure") != std::string::npos);
  BOOST_TEST(reason.message().find("boom") != std::string::npos);
  BOOST_TEST(sys.stats().failed >= 1u);
}

BOOST_AUTO_TEST_CASE(monitoring_an_already_terminated_actor_delivers_down_at_once) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto target = sys.spawn([](strata::actor& self) -> strata::behavior {
    self.quit();
    return {[](int) {}};
  });
  BOOST_REQUIRE(sys.await_all_for(5s));
  strata::test::shared_promise<strata::error> down;
  auto f = down.future();
  spawn_watcher(sys, target, down.p);
  BOOST_TEST(await(f).code() == strata::errc::normal_exit);
}

BOOST_AUTO_TEST_CASE(a_link_propagates_a_failure_and_trapping_turns_it_into_a_message) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto instances = std::make_shared<std::atomic<int>>(0);
  auto failing = sys.spawn<fragile>(instances);
  // b is linked and does not trap exits: it terminates with linked_exit.
  auto b = sys.spawn([failing](strata::actor& self) -> strata::behavior {
    self.link_to(failing);
    return {[](int) {}};
  });
  strata::test::shared_promise<strata::error> b_down;
  auto b_f = b_down.future();
  spawn_watcher(sys, b, b_down.p);
  // c traps exits: it receives exit_msg and stays alive.
  strata::test::shared_promise<strata::error> c_exit;
  auto c_f = c_exit.future();
  auto c = sys.spawn([failing, p = c_exit.p](strata::actor& self) -> strata::behavior {
    self.trap_exit(true);
    self.link_to(failing);
    return {[p](const strata::exit_msg& m) { p->set_value(m.reason); }, [](const get_count&) { return 7; }};
  });
  // Make sure both links exist before the failure: round trip through each.
  auto b_ready = sys.request<void>(b, 5s, 0);
  BOOST_REQUIRE(await(b_ready).has_value());
  auto c_ready = sys.request<int>(c, 5s, get_count{});
  BOOST_REQUIRE(await(c_ready).has_value());
  sys.send(failing, boom{});
  auto b_reason = await(b_f);
  BOOST_TEST(b_reason.code() == strata::errc::linked_exit);
  BOOST_TEST(b_reason.message().find("deliberate failure") != std::string::npos);
  BOOST_TEST(await(c_f).code() == strata::errc::unhandled_exception);
  auto still_alive = sys.request<int>(c, 5s, get_count{});
  BOOST_TEST(await(still_alive).value() == 7);
}

BOOST_AUTO_TEST_CASE(a_supervisor_restarts_a_failed_child_behind_the_same_handle) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto sup = sys.spawn_supervisor(strata::restart_policy{.max_restarts = 3, .within = 10s});
  auto instances = std::make_shared<std::atomic<int>>(0);
  auto child = sys.spawn_child<fragile>(sup, strata::spawn_options{.name = "fragile"}, instances);
  for (int i = 0; i < 5; ++i) sys.send(child, i);
  sys.send(child, boom{});
  for (int i = 0; i < 3; ++i) sys.send(child, i);  // queued behind the failure: kept across the restart
  auto count = sys.request<int>(child, 5s, get_count{});
  auto r = await(count);
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(*r == 3);               // fresh state: only the messages after the restart
  BOOST_TEST(instances->load() == 2);
  BOOST_TEST(sys.stats().restarts == 1u);
}

BOOST_AUTO_TEST_CASE(a_supervisor_gives_up_after_its_restart_limit_and_fails_itself) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto sup = sys.spawn_supervisor(strata::restart_policy{.max_restarts = 2, .within = 10s});
  strata::test::shared_promise<strata::error> sup_down;
  auto sup_f = sup_down.future();
  spawn_watcher(sys, sup, sup_down.p);
  auto instances = std::make_shared<std::atomic<int>>(0);
  auto child = sys.spawn_child<fragile>(sup, strata::spawn_options{.name = "worker"}, instances);
  strata::test::shared_promise<strata::error> child_down;
  auto child_f = child_down.future();
  spawn_watcher(sys, child, child_down.p);
  for (int i = 0; i < 3; ++i) sys.send(child, boom{});
  auto reason = await(sup_f);
  BOOST_TEST(reason.code() == strata::errc::restart_limit);
  BOOST_TEST(reason.message().find("worker") != std::string::npos);
  BOOST_TEST(await(child_f).code() == strata::errc::unhandled_exception);
  BOOST_TEST(instances->load() == 3);  // the original and two restarts
}

BOOST_AUTO_TEST_CASE(stopping_an_actor_from_outside_ends_it_with_reason_stopped) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto target = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  strata::test::shared_promise<strata::error> down;
  auto f = down.future();
  spawn_watcher(sys, target, down.p);
  sys.stop(target);
  BOOST_TEST(await(f).code() == strata::errc::stopped);
}

BOOST_AUTO_TEST_CASE(shutdown_in_drain_mode_handles_every_queued_message) {
  auto handled = std::make_shared<std::atomic<int>>(0);
  strata::shutdown_report report;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 2});
    auto slow = sys.spawn([handled](strata::actor&) -> strata::behavior {
      return {[handled](int) {
        std::this_thread::sleep_for(50us);  // slow work, under test: the drain waits for all of it
        handled->fetch_add(1);
      }};
    });
    for (int i = 0; i < 2000; ++i) sys.send(slow, i);
    report = sys.shutdown(strata::shutdown_mode::drain);
  }
  BOOST_TEST(handled->load() == 2000);
  BOOST_TEST(report.messages_discarded == 0u);
  BOOST_TEST(report.actors_stopped == 1u);
  BOOST_TEST(!report.drain_timed_out);
}

BOOST_AUTO_TEST_CASE(await_idle_returns_once_every_message_and_delayed_send_is_handled) {
  // A token hops between actors a random number of times; every fifth hop goes through a
  // delayed send, so the system is briefly without a runnable actor but not idle.
  std::mt19937 rng(std::random_device{}());
  const int hops = 20 + static_cast<int>(rng() % 200);
  auto done = std::make_shared<std::atomic<int>>(0);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto peer = std::make_shared<strata::actor_ref>();
  auto hop = [done, peer](strata::actor& self) -> strata::behavior {
    return {[&self, done, peer](int left) {
      if (left == 0) {
        done->fetch_add(1);
        return;
      }
      if (left % 5 == 0) (void)self.delayed_send(*peer, 2ms, left - 1);
      else self.send(*peer, left - 1);
    }};
  };
  auto a = sys.spawn(hop);
  *peer = sys.spawn(hop);
  sys.send(a, hops);
  BOOST_REQUIRE(sys.await_idle(30s));
  BOOST_TEST(done->load() == 1);
  auto report = sys.shutdown();
  BOOST_TEST(report.messages_discarded == 0u);
  BOOST_TEST(report.timers_cancelled == 0u);
}

BOOST_AUTO_TEST_CASE(await_idle_times_out_while_a_periodic_timer_runs_and_refuses_an_actor_caller) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto ticks = std::make_shared<std::atomic<int>>(0);
  auto ticker = sys.spawn([ticks](strata::actor&) -> strata::behavior { return {[ticks](int) { ticks->fetch_add(1); }}; });
  auto timer = sys.periodic_send(ticker, 5ms, 1);
  BOOST_TEST(!sys.await_idle(100ms));
  BOOST_TEST(ticks->load() > 0);
  timer.cancel();
  BOOST_TEST(sys.await_idle(10s));
  auto threw = std::make_shared<std::promise<bool>>();
  auto inside = sys.spawn([threw](strata::actor& self) -> strata::behavior {
    return {[&self, threw](int) {
      try {
        (void)self.system().await_idle(1ms);
        threw->set_value(false);
      } catch (const std::logic_error&) {
        threw->set_value(true);
      }
    }};
  });
  sys.send(inside, 0);
  auto f = threw->get_future();
  BOOST_TEST(await(f));
}

BOOST_AUTO_TEST_CASE(shutdown_in_discard_mode_reports_the_messages_it_dropped) {
  // A deterministic system runs only what the test steps: shutdown begins with the first message
  // handled and the other 999 still queued, whatever the machine's speed.
  auto handled = std::make_shared<int>(0);
  strata::actor_system sys(strata::system_config{.deterministic = true});
  strata::test_coordinator coord(sys);
  auto slow = sys.spawn([handled](strata::actor&) -> strata::behavior { return {[handled](int) { ++*handled; }}; });
  for (int i = 0; i < 1000; ++i) sys.send(slow, i);
  BOOST_REQUIRE(coord.run_until([&] { return *handled == 1; }));
  auto report = sys.shutdown(strata::shutdown_mode::discard);
  BOOST_TEST(*handled == 1);
  BOOST_TEST(report.messages_discarded == 999u);
  BOOST_TEST(report.stats.live_actors == 0u);
  auto again = sys.shutdown();
  BOOST_TEST(again.messages_discarded == report.messages_discarded);
}

BOOST_AUTO_TEST_CASE(await_all_returns_once_every_actor_has_terminated) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  for (int i = 0; i < 100; ++i) {
    auto a = sys.spawn([](strata::actor& self) -> strata::behavior { return {[&self](int) { self.quit(); }}; });
    sys.send(a, i);
  }
  BOOST_TEST(sys.await_all_for(10s));
  BOOST_TEST(sys.stats().live_actors == 0u);
  BOOST_TEST(sys.stats().terminated == 100u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lifecycle_test
