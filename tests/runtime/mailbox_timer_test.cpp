// Contract tests: bounded mailboxes, dedicated threads, delayed and periodic sends.

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <utility>

#include "strata/extension/transport.hpp"  // the inline-run hooks strata::net uses
#include "strata/strata.hpp"
#include "strata/test_coordinator.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace mailbox_timer_test {
/// An actor blocked in its first handler until the gate opens, so that its mailbox fills.
struct gated {
  std::promise<void> entered;
  std::promise<void> gate;
  std::shared_future<void> gate_f = gate.get_future().share();
  std::atomic<int> handled{0};
};
strata::actor_ref spawn_gated(strata::actor_system& sys, gated& g, strata::spawn_options opts) {
  return sys.spawn_fn_with(std::move(opts), [&g](strata::actor&) -> strata::behavior {
    return {[&g](int v) {
      if (v == -1) {
        g.entered.set_value();
        g.gate_f.wait();
        return;
      }
      g.handled.fetch_add(1);
    }};
  });
}

BOOST_AUTO_TEST_SUITE(mailboxes_and_timers)

BOOST_AUTO_TEST_CASE(a_full_bounded_mailbox_with_policy_fail_refuses_the_send) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  gated g;
  auto target = spawn_gated(sys, g, {.name = "bounded", .mailbox_capacity = 10, .overflow = strata::overflow_policy::fail});
  BOOST_REQUIRE(sys.send(target, -1).has_value());
  g.entered.get_future().wait();
  int accepted = 0, refused = 0;
  for (int i = 0; i < 25; ++i) {
    auto r = sys.send(target, i);
    if (r) ++accepted;
    else {
      ++refused;
      BOOST_TEST(r.error().code() == strata::errc::mailbox_full);
    }
  }
  BOOST_TEST(accepted == 10);
  BOOST_TEST(refused == 15);
  auto req = sys.request<void>(target, 5s, 99);  // refused at once, not timed out
  auto r = await(req);
  BOOST_TEST(r.error().code() == strata::errc::mailbox_full);
  g.gate.set_value();
  sys.shutdown();
  BOOST_TEST(g.handled.load() == 10);
  BOOST_TEST(sys.stats().mailbox_full == 16u);
}

BOOST_AUTO_TEST_CASE(a_full_bounded_mailbox_with_policy_drop_drops_and_counts) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  gated g;
  auto target = spawn_gated(sys, g, {.mailbox_capacity = 5, .overflow = strata::overflow_policy::drop});
  sys.send(target, -1);
  g.entered.get_future().wait();
  for (int i = 0; i < 20; ++i) BOOST_TEST(sys.send(target, i).has_value());
  g.gate.set_value();
  sys.shutdown();
  BOOST_TEST(g.handled.load() == 5);
  BOOST_TEST(sys.stats().dropped == 15u);
}

BOOST_AUTO_TEST_CASE(a_dedicated_thread_actor_always_runs_on_the_same_thread) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto threads = std::make_shared<std::set<std::thread::id>>();
  auto target = sys.spawn_fn_with({.name = "gpu-owner", .dedicated_thread = true},
                                  [threads](strata::actor&) -> strata::behavior {
                                    threads->insert(std::this_thread::get_id());
                                    return {[threads](int) { threads->insert(std::this_thread::get_id()); },
                                            [threads](const std::string&) { return threads->size(); }};
                                  });
  // Messages from many threads and actors.
  for (int i = 0; i < 200; ++i) sys.send(target, i);
  for (int k = 0; k < 4; ++k)
    sys.spawn([target](strata::actor& self) -> strata::behavior {
      for (int i = 0; i < 100; ++i) self.send(target, i);
      self.quit();
      return {[](int) {}};
    });
  auto distinct = sys.request<std::size_t>(target, 5s, std::string("how many threads?"));
  // make_behavior ran on the spawning thread; every handler on the dedicated one.
  BOOST_TEST(await(distinct).value() == 2u);
  BOOST_TEST(threads->count(std::this_thread::get_id()) == 1u);
}

// spawn_options::handle_remote_inline: a thread that hosts inline runs (strata::net's
// communication thread) runs an idle actor's turn itself when it delivers to it; any other thread
// schedules it; a busy actor's message queues, so the order holds across the two.
BOOST_AUTO_TEST_CASE(an_inline_actor_runs_on_the_hosting_thread_only_when_it_finds_it_idle) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  struct seen {
    std::mutex m;
    std::vector<std::pair<int, std::thread::id>> runs;
  };
  auto log = std::make_shared<seen>();
  auto inline_actor = sys.spawn_fn_with({.handle_remote_inline = true}, [log](strata::actor&) -> strata::behavior {
    return {[log](int i) {
              std::lock_guard lock(log->m);
              log->runs.emplace_back(i, std::this_thread::get_id());
            },
            [log](const std::string&) {
              std::lock_guard lock(log->m);
              return log->runs.size();
            }};
  });
  auto plain = sys.spawn([log](strata::actor&) -> strata::behavior {
    return {[log](int i) {
      std::lock_guard lock(log->m);
      log->runs.emplace_back(-i, std::this_thread::get_id());
    }};
  });
  auto deliver = [](const strata::actor_ref& to, int i) {
    auto* e = new strata::detail::typed_envelope<int>(i);
    e->msg_id = strata::detail::next_message_id();
    return strata::detail::deliver(to.cell(), e);
  };
  std::thread::id host;
  std::vector<std::size_t> seen_after;
  std::thread([&] {
    host = std::this_thread::get_id();
    BOOST_TEST(!strata::detail::host_inline_runs(true));
    const auto before = strata::detail::inline_runs_here();
    for (int i = 1; i <= 50; ++i) {
      BOOST_TEST(deliver(inline_actor, i).has_value());
      std::lock_guard lock(log->m);
      seen_after.push_back(log->runs.size());  // an inline run is done when deliver returns
    }
    BOOST_TEST(deliver(plain, 7).has_value());  // not marked: scheduled as always
    BOOST_TEST(strata::detail::inline_runs_here() - before == 50u);
    BOOST_TEST(strata::detail::host_inline_runs(false));
  }).join();
  // From a thread that hosts nothing (this one), the inline actor is scheduled.
  for (int i = 51; i <= 60; ++i) sys.send(inline_actor, i);
  auto count = sys.request<std::size_t>(inline_actor, 5s, std::string("count"));
  BOOST_TEST(await(count).value() >= 60u);
  auto flushed = sys.request<strata::unit_t>(plain, 5s, 0);  // after its 7 (logged as 0)
  (void)await(flushed);
  std::lock_guard lock(log->m);
  for (std::size_t k = 0; k < seen_after.size(); ++k) BOOST_TEST(seen_after[k] >= k + 1);
  std::vector<int> order;
  for (auto& [i, thread] : log->runs) {
    if (i > 0) order.push_back(i);
    if (i > 0 && i <= 50) BOOST_TEST((thread == host), "message " << i << " did not run on the hosting thread");
    if (i > 50 || i < 0) BOOST_TEST((thread != host), "message " << i << " ran on the hosting thread");
  }
  std::vector<int> expected(60);
  std::iota(expected.begin(), expected.end(), 1);
  BOOST_TEST(order == expected, boost::test_tools::per_element());
}

// An inline actor that sends to another from its inline turn does not run it nested: the second
// is scheduled (the hosting thread runs one actor at a time).
BOOST_AUTO_TEST_CASE(an_inline_turn_does_not_nest_another_inline_actor) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto second_thread = std::make_shared<strata::test::shared_promise<std::thread::id>>();
  auto second = sys.spawn_fn_with({.handle_remote_inline = true}, [second_thread](strata::actor&) -> strata::behavior {
    return {[second_thread](int) { second_thread->p->set_value(std::this_thread::get_id()); }};
  });
  auto first = sys.spawn_fn_with({.handle_remote_inline = true}, [second](strata::actor& self) -> strata::behavior {
    return {[&self, second](int i) { self.send(second, i); }};
  });
  auto f = second_thread->future();
  std::thread::id host;
  std::thread([&] {
    host = std::this_thread::get_id();
    const bool was = strata::detail::host_inline_runs(true);
    auto* e = new strata::detail::typed_envelope<int>(1);
    e->msg_id = strata::detail::next_message_id();
    BOOST_TEST(strata::detail::deliver(first.cell(), e).has_value());
    strata::detail::host_inline_runs(was);
  }).join();
  BOOST_REQUIRE(f.wait_for(5s) == std::future_status::ready);
  BOOST_TEST((f.get() != host));
}

BOOST_AUTO_TEST_CASE(a_delayed_send_arrives_after_its_delay) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::test::shared_promise<std::chrono::steady_clock::time_point> arrived;
  auto f = arrived.future();
  auto target = sys.spawn([p = arrived.p](strata::actor& self) -> strata::behavior {
    return {[&self, p](int) {
      p->set_value(std::chrono::steady_clock::now());
      self.quit();
    }};
  });
  auto start = std::chrono::steady_clock::now();
  sys.delayed_send(target, 30ms, 1);
  BOOST_TEST((await(f) - start >= 30ms));
}

BOOST_AUTO_TEST_CASE(a_cancelled_timer_delivers_nothing) {
  strata::actor_system sys(strata::system_config{.deterministic = true});
  strata::test_coordinator coord(sys);
  auto count = std::make_shared<int>(0);
  auto target = sys.spawn([count](strata::actor&) -> strata::behavior { return {[count](int) { ++*count; }}; });
  auto t = sys.delayed_send(target, 40ms, 1);
  BOOST_TEST(t.active());
  t.cancel();
  BOOST_TEST(!t.active());
  BOOST_TEST(coord.advance_time(100ms) == 0u);
  coord.run();
  BOOST_TEST(*count == 0);
}

BOOST_AUTO_TEST_CASE(a_periodic_send_repeats_until_cancelled) {
  // On the manual clock the count is exact: five periods, then the actor cancels its timer, and
  // in the 20 periods that follow no tick arrives.
  strata::actor_system sys(strata::system_config{.deterministic = true});
  strata::test_coordinator coord(sys);
  auto ticks = std::make_shared<int>(0);
  sys.spawn([ticks](strata::actor& self) -> strata::behavior {
    auto timer = std::make_shared<strata::timer_handle>(self.periodic_send(self.self(), 5ms, std::string("tick")));
    return {[ticks, timer](const std::string&) {
      if (++*ticks == 5) timer->cancel();
    }};
  });
  for (int period = 0; period < 5; ++period) {
    BOOST_TEST(coord.advance_time(5ms) == 1u);
    coord.run();
  }
  BOOST_TEST(*ticks == 5);
  BOOST_TEST(coord.pending_timers() == 0u);
  BOOST_TEST(coord.advance_time(100ms) == 0u);  // nothing fired after cancel()
  coord.run();
  BOOST_TEST(*ticks == 5);
}

BOOST_AUTO_TEST_CASE(shutdown_cancels_pending_timers_and_reports_them) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto target = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  sys.delayed_send(target, 1h, 1);
  sys.periodic_send(target, 1h, 2);
  auto report = sys.shutdown();
  BOOST_TEST(report.timers_cancelled == 2u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace mailbox_timer_test
