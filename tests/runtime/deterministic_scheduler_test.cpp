// Contract tests of the deterministic test scheduler: a system with
// `system_config::deterministic` runs nothing by itself; a `test_coordinator` steps it message by
// message and moves its clock by hand.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "strata/strata.hpp"
#include "strata/test_coordinator.hpp"

using namespace std::chrono_literals;

namespace deterministic_scheduler_test {

using log_type = std::vector<std::string>;

strata::actor_system deterministic_system() { return strata::actor_system(strata::system_config{.deterministic = true}); }

/// Appends "<name>:<n>" to `log` for every int it handles.
strata::actor_ref spawn_recorder(strata::actor_system& sys, const std::string& name, std::shared_ptr<log_type> log) {
  return sys.spawn([name, log](strata::actor&) -> strata::behavior {
    return {[name, log](int n) { log->push_back(name + ":" + std::to_string(n)); }};
  });
}

/// Runs `call`, which must be refused with `error_exception` of `code` whose sentence starts with
/// `start`.
template <class F>
void require_refusal(F call, strata::errc code, const std::string& start) {
  try {
    call();
    BOOST_FAIL("the call was not refused; expected: " << start);
  } catch (const strata::error_exception& e) {
    BOOST_TEST(e.error().code() == code);
    BOOST_TEST(e.error().message().rfind(start, 0) == 0u, e.error().message());
  }
}

/// A deterministic system, its coordinator, and one recorder "a" (most tests' start).
struct recorder_system {
  strata::actor_system sys{strata::system_config{.deterministic = true}};
  strata::test_coordinator coord{sys};
  std::shared_ptr<log_type> log = std::make_shared<log_type>();
  strata::actor_ref a = spawn_recorder(sys, "a", log);
};

struct ball {
  int rounds_left;
};

/// Hits the ball to `partner` until no rounds are left; counts its hits.
strata::actor_ref spawn_player(strata::actor_system& sys, std::shared_ptr<int> hits,
                               std::shared_ptr<strata::actor_ref> partner) {
  return sys.spawn([hits, partner](strata::actor& self) -> strata::behavior {
    return {[&self, hits, partner](const ball& b) {
      ++*hits;
      if (b.rounds_left > 0) self.send(*partner, ball{b.rounds_left - 1});
    }};
  });
}

BOOST_AUTO_TEST_SUITE(deterministic_scheduler)

BOOST_AUTO_TEST_CASE(a_test_coordinator_on_a_threaded_system_is_refused_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  require_refusal([&sys] { strata::test_coordinator coord(sys); }, strata::errc::invalid_argument,
                  "test_coordinator needs an actor system created with system_config::deterministic = true; this one "
                  "runs its actors on 2 worker threads");
}

BOOST_FIXTURE_TEST_CASE(nothing_runs_until_the_test_asks_and_run_once_runs_exactly_one_message, recorder_system) {
  BOOST_TEST(sys.worker_count() == 0u);
  for (int i = 0; i < 3; ++i) BOOST_REQUIRE(sys.send(a, i));
  BOOST_TEST(log->empty());
  BOOST_TEST(coord.runnable_actors() == 1u);
  BOOST_TEST((coord.next_actor() == a));
  BOOST_TEST(coord.run_once());
  BOOST_TEST(*log == log_type{"a:0"});
  BOOST_TEST(coord.run_once());
  BOOST_TEST(log->size() == 2u);
  BOOST_TEST(coord.run() == 1u);
  BOOST_TEST(!coord.run_once());
  BOOST_TEST(coord.runnable_actors() == 0u);
  BOOST_TEST(!coord.next_actor());
  BOOST_TEST(sys.stats().messages_handled == 3u);
}

BOOST_FIXTURE_TEST_CASE(runnable_actors_take_turns_in_fifo_order_one_message_each, recorder_system) {
  auto b = spawn_recorder(sys, "b", log);
  auto c = spawn_recorder(sys, "c", log);
  sys.send(b, 1);
  sys.send(a, 1);
  sys.send(b, 2);
  sys.send(c, 1);
  sys.send(a, 2);
  sys.send(b, 3);
  BOOST_TEST(coord.run(2) == 2u);
  BOOST_TEST((*log == log_type{"b:1", "a:1"}));
  BOOST_TEST(coord.run() == 4u);
  BOOST_TEST((*log == log_type{"b:1", "a:1", "c:1", "b:2", "a:2", "b:3"}));
}

BOOST_AUTO_TEST_CASE(a_ping_pong_of_n_rounds_takes_exactly_2n_messages) {
  auto sys = deterministic_system();
  strata::test_coordinator coord(sys);
  for (int n : {1, 7, 100}) {
    auto ping_hits = std::make_shared<int>(0);
    auto pong_hits = std::make_shared<int>(0);
    auto to_ping = std::make_shared<strata::actor_ref>();
    auto to_pong = std::make_shared<strata::actor_ref>();
    auto ping = spawn_player(sys, ping_hits, to_pong);
    auto pong = spawn_player(sys, pong_hits, to_ping);
    *to_ping = ping;
    *to_pong = pong;
    // The serve: pong gets round 2n-1, ping 2n-2, ... and ping the last, round 0.
    sys.send(pong, ball{2 * n - 1});
    const auto handled_before = sys.stats().messages_handled;
    BOOST_TEST(coord.run() == static_cast<std::size_t>(2 * n), "n = " << n);
    BOOST_TEST(*ping_hits == n);
    BOOST_TEST(*pong_hits == n);
    BOOST_TEST(sys.stats().messages_handled - handled_before == static_cast<std::uint64_t>(2 * n));
    *to_ping = strata::actor_ref{};  // the players hold each other: break the cycle
    *to_pong = strata::actor_ref{};
    sys.stop(ping);
    sys.stop(pong);
    coord.run();
  }
}

BOOST_AUTO_TEST_CASE(two_runs_of_a_seeded_random_workload_give_the_identical_message_order) {
  auto workload = [](std::uint32_t seed) {
    auto sys = deterministic_system();
    strata::test_coordinator coord(sys);
    auto log = std::make_shared<log_type>();
    constexpr int actors = 6;
    auto peers = std::make_shared<std::vector<strata::actor_ref>>();
    for (int i = 0; i < actors; ++i) {
      peers->push_back(sys.spawn([i, log, peers, seed](strata::actor& self) -> strata::behavior {
        auto rng = std::make_shared<std::mt19937>(seed + static_cast<std::uint32_t>(i));
        return {[&self, i, log, peers, rng](int hops) {
          log->push_back(std::to_string(i) + "<" + std::to_string(hops));
          // Forwards to one to three random peers (itself included) while hops last.
          const int fan = 1 + static_cast<int>((*rng)() % 3);
          for (int k = 0; k < fan && hops > 0; ++k) self.send((*peers)[(*rng)() % peers->size()], hops - 1);
        }};
      }));
    }
    std::mt19937 rng(seed);
    for (int k = 0; k < 10; ++k) sys.send((*peers)[rng() % actors], 5);
    coord.run();
    sys.shutdown();
    peers->clear();  // every actor holds them all
    return *log;
  };
  const auto first = workload(42);
  const auto second = workload(42);
  BOOST_TEST(first.size() > 100u);
  BOOST_TEST(first == second);
  BOOST_TEST(workload(7) != first);  // the seed, not the scheduler, decides the order
}

BOOST_FIXTURE_TEST_CASE(a_delayed_send_arrives_only_when_the_clock_passes_its_delay, recorder_system) {
  auto timer = sys.delayed_send(a, 5s, 1);
  BOOST_TEST(coord.pending_timers() == 1u);
  BOOST_TEST(timer.active());
  BOOST_TEST(coord.now() == 0ns);
  BOOST_TEST(coord.advance_time(4999ms) == 0u);
  BOOST_TEST(!coord.run_once());
  BOOST_TEST(log->empty());
  BOOST_TEST(coord.advance_time(1ms) == 1u);
  BOOST_TEST(coord.now() == 5s);
  BOOST_TEST(coord.pending_timers() == 0u);
  BOOST_TEST(!timer.active());
  BOOST_TEST(log->empty());  // fired, queued, not run
  BOOST_TEST(coord.run() == 1u);
  BOOST_TEST(*log == log_type{"a:1"});
}

BOOST_FIXTURE_TEST_CASE(timers_fire_in_due_order_and_timers_due_together_in_the_order_they_were_armed, recorder_system) {
  sys.delayed_send(a, 30ms, 30);
  sys.delayed_send(a, 10ms, 10);
  sys.delayed_send(a, 20ms, 21);
  sys.delayed_send(a, 20ms, 22);
  auto cancelled = sys.delayed_send(a, 15ms, 15);
  cancelled.cancel();
  BOOST_TEST(coord.pending_timers() == 4u);
  BOOST_TEST(coord.advance_time(1s) == 4u);
  BOOST_TEST(coord.now() == 1s);
  coord.run();
  BOOST_TEST((*log == log_type{"a:10", "a:21", "a:22", "a:30"}));
}

BOOST_FIXTURE_TEST_CASE(a_periodic_send_fires_once_per_period_the_clock_passes_until_cancelled, recorder_system) {
  auto tick = sys.periodic_send(a, 100ms, 1);
  BOOST_TEST(coord.advance_time(99ms) == 0u);
  BOOST_TEST(coord.advance_time(251ms) == 3u);  // at 100, 200 and 300 ms
  BOOST_TEST(coord.run() == 3u);
  BOOST_TEST(coord.pending_timers() == 1u);
  tick.cancel();
  BOOST_TEST(coord.pending_timers() == 0u);
  BOOST_TEST(coord.advance_time(1s) == 0u);
  BOOST_TEST(!coord.run_once());
  BOOST_TEST(log->size() == 3u);
}

BOOST_FIXTURE_TEST_CASE(trigger_timer_fires_the_next_timer_whatever_its_due_time_and_moves_the_clock_to_it, recorder_system) {
  sys.delayed_send(a, 1h, 2);
  sys.delayed_send(a, 1min, 1);
  sys.periodic_send(a, 10min, 3);
  BOOST_TEST(coord.trigger_timer());
  BOOST_TEST(coord.now() == 1min);
  coord.run();
  BOOST_TEST(*log == log_type{"a:1"});
  // The rest, each once: the periodic timer (10 min) is armed again, for 20 min, not fired twice.
  BOOST_TEST(coord.trigger_timers() == 2u);
  BOOST_TEST(coord.now() == 1h);
  BOOST_TEST(coord.pending_timers() == 1u);
  coord.run();
  BOOST_TEST((*log == log_type{"a:1", "a:3", "a:2"}));
  BOOST_TEST(coord.trigger_timer());  // the periodic timer's next period, already past: the clock stays
  BOOST_TEST(coord.now() == 1h);
  sys.shutdown();
  BOOST_TEST(!coord.trigger_timer());
  BOOST_TEST(coord.pending_timers() == 0u);
}

BOOST_AUTO_TEST_CASE(a_request_from_outside_actors_is_answered_by_running_the_system) {
  auto sys = deterministic_system();
  strata::test_coordinator coord(sys);
  auto twice = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int x) { return 2 * x; }}; });
  auto reply = sys.request<int>(twice, 1s, 21);
  BOOST_TEST((reply.wait_for(0s) != std::future_status::ready));
  BOOST_TEST(coord.await(reply).value() == 42);
  strata::requester caller(sys);
  auto first = caller.request<int>(twice, 1s, 1);
  auto second = caller.request<int>(twice, 1s, 2);
  BOOST_TEST(coord.await(second).value() == 4);
  BOOST_TEST(coord.await(first).value() == 2);
}

BOOST_AUTO_TEST_CASE(a_request_times_out_only_when_the_clock_passes_its_timeout) {
  auto sys = deterministic_system();
  strata::test_coordinator coord(sys);
  auto owed = std::make_shared<std::vector<strata::response_promise<int>>>();
  auto silent = sys.spawn([owed](strata::actor& self) -> strata::behavior {
    return {[&self, owed](int) {
      owed->push_back(self.make_response_promise<int>());
      return owed->back();
    }};
  });
  auto reply = sys.request<int>(silent, 2s, 1);
  coord.run();
  BOOST_TEST(owed->size() == 1u);
  BOOST_TEST(coord.pending_timers() == 1u);
  coord.advance_time(1999ms);
  coord.run();
  BOOST_TEST((reply.wait_for(0s) != std::future_status::ready));
  BOOST_TEST(coord.advance_time(1ms) == 1u);
  auto answer = coord.await(reply);
  BOOST_REQUIRE(!answer);
  BOOST_TEST(answer.error().code() == strata::errc::request_timeout);
}

BOOST_AUTO_TEST_CASE(await_on_a_future_nothing_will_fulfil_says_so_in_one_sentence) {
  auto sys = deterministic_system();
  strata::test_coordinator coord(sys);
  std::promise<int> never;
  auto f = never.get_future();
  sys.delayed_send(sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; }), 1s, 1);
  require_refusal([&] { coord.await(f); }, strata::errc::runtime_failure,
                  "test_coordinator::await: the future has no value and no actor has a message to run (1 timers "
                  "pending: advance the clock or trigger a timer first)");
  require_refusal([&] { coord.advance_time(-1ms); }, strata::errc::invalid_argument,
                  "test_coordinator::advance_time needs a duration >= 0, got -1000000 ns");
}

BOOST_FIXTURE_TEST_CASE(an_actor_spawned_on_a_dedicated_thread_runs_in_the_same_fifo, recorder_system) {
  auto d = sys.spawn_fn_with(strata::spawn_options{.name = "own-thread", .dedicated_thread = true},
                             [log = log](strata::actor&) -> strata::behavior {
                               return {[log](int n) { log->push_back("d:" + std::to_string(n)); }};
                             });
  sys.send(d, 1);
  sys.send(a, 1);
  sys.send(d, 2);
  BOOST_TEST(log->empty());
  coord.run();
  BOOST_TEST((*log == log_type{"d:1", "a:1", "d:2"}));
}

BOOST_AUTO_TEST_CASE(shutdown_runs_what_is_queued_stops_every_actor_and_never_hangs) {
  auto log = std::make_shared<log_type>();
  {
    auto sys = deterministic_system();
    auto a = spawn_recorder(sys, "a", log);
    sys.send(a, 1);
    sys.send(a, 2);
    sys.delayed_send(a, 1s, 3);
    auto report = sys.shutdown();
    BOOST_TEST(report.timers_cancelled == 1u);
    BOOST_TEST(report.actors_stopped == 1u);
    BOOST_TEST(!report.drain_timed_out);
    BOOST_TEST(report.stats.live_actors == 0u);
    BOOST_TEST((*log == log_type{"a:1", "a:2"}));
  }
  // Actors that feed each other for ever: the drain gives up after its timeout, the stop ends them.
  strata::actor_system sys(strata::system_config{.drain_timeout = 20ms, .deterministic = true});
  auto loop = sys.spawn([](strata::actor& self) -> strata::behavior {
    return {[&self](int n) { self.send(self.self(), n + 1); }};
  });
  sys.send(loop, 0);
  auto report = sys.shutdown();
  BOOST_TEST(report.drain_timed_out);
  BOOST_TEST(report.stats.live_actors == 0u);
  {
    auto discarded = deterministic_system();  // the destructor's drain and a discard
    sys.send(spawn_recorder(discarded, "b", log), 1);
    BOOST_TEST(discarded.shutdown(strata::shutdown_mode::discard).stats.live_actors == 0u);
  }
}

BOOST_AUTO_TEST_CASE(await_all_on_a_deterministic_system_runs_until_every_actor_quit_or_says_why_not) {
  auto sys = deterministic_system();
  auto quitter = sys.spawn([](strata::actor& self) -> strata::behavior { return {[&self](int) { self.quit(); }}; });
  sys.send(quitter, 1);
  sys.await_all();
  BOOST_TEST(sys.stats().live_actors == 0u);
  auto idle = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  BOOST_TEST(!sys.await_all_for(1s));
  BOOST_CHECK_THROW(sys.await_all(), strata::error_exception);
  BOOST_TEST(sys.await_idle(1s));
  sys.delayed_send(idle, 1s, 1);
  BOOST_TEST(!sys.await_idle(1s));  // a timer is pending, and only the test moves the clock
}

BOOST_AUTO_TEST_CASE(the_example_of_the_header_runs_as_written) {
  strata::actor_system sys(strata::system_config{.deterministic = true});
  strata::test_coordinator coord(sys);
  auto echo = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int x) { return x; }}; });
  auto reply = sys.request<int>(echo, 1s, 7);
  BOOST_TEST(coord.await(reply).value() == 7);
  sys.delayed_send(echo, 5s, 1);
  coord.advance_time(4s);
  BOOST_TEST(!coord.run_once());
  coord.advance_time(1s);
  BOOST_TEST(coord.run() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace deterministic_scheduler_test
