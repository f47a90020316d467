// Contract tests of the scheduler's fairness: an actor that a long handler keeps feeding does not
// wait for that handler to return while another worker is idle (scheduler::note_queued_send).

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;

namespace scheduler_test {

struct tick {};
struct produce {
  int messages;
};

/// What the producer saw while its one handler was still running.
struct progress {
  int handled_while_producing = 0;
  bool gave_up = false;  // the safety net below ran out: the consumer never ran
};

BOOST_AUTO_TEST_SUITE(scheduler)

BOOST_AUTO_TEST_CASE(an_actor_fed_by_a_long_handler_runs_on_an_idle_worker_before_the_handler_returns) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto handled = std::make_shared<std::atomic<int>>(0);
  auto consumer = sys.spawn([handled](strata::actor&) -> strata::behavior {
    return {[handled](const tick&) { handled->fetch_add(1, std::memory_order_relaxed); }};
  });
  auto result = std::make_shared<std::promise<progress>>();
  auto seen = result->get_future();
  auto producer = sys.spawn([consumer, handled, result](strata::actor& self) -> strata::behavior {
    return {[&self, consumer, handled, result](const produce& p) {
      // The first send wakes the consumer into this worker's next slot; the later ones queue
      // without a wake-up, and the 256th of them hands the consumer to the other worker. The
      // handler then stays in its turn until the consumer has handled everything: only another
      // worker can run it (before, the consumer sat in the slot until the handler returned).
      for (int i = 0; i < p.messages; ++i) self.send(consumer, tick{});
      const auto give_up = std::chrono::steady_clock::now() + strata::test::patience;  // safety net only
      progress out;
      while (handled->load(std::memory_order_relaxed) < p.messages) {
        if (std::chrono::steady_clock::now() > give_up) {
          out.gave_up = true;
          break;
        }
        std::this_thread::yield();
      }
      out.handled_while_producing = handled->load(std::memory_order_relaxed);
      result->set_value(out);
    }};
  });
  sys.send(producer, produce{5000});
  const progress p = strata::test::await(seen);
  BOOST_TEST(!p.gave_up);
  BOOST_TEST(p.handled_while_producing == 5000);
}

// The consumer drains its mailbox on the other worker and goes idle; the same long handler then
// wakes it again with a few more messages (fewer than release_after). Before, that wake put it
// back into the producer's next slot, where it stayed until the handler returned: the tail of a
// stream was never handled while the handler ran (under TSan, where the consumer keeps up, even
// the first test above timed out this way).
BOOST_AUTO_TEST_CASE(an_actor_a_long_handler_wakes_again_after_it_drained_also_runs_on_an_idle_worker) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto handled = std::make_shared<std::atomic<int>>(0);
  auto consumer = sys.spawn([handled](strata::actor&) -> strata::behavior {
    return {[handled](const tick&) { handled->fetch_add(1, std::memory_order_relaxed); }};
  });
  auto result = std::make_shared<std::promise<progress>>();
  auto seen = result->get_future();
  auto producer = sys.spawn([consumer, handled, result](strata::actor& self) -> strata::behavior {
    return {[&self, consumer, handled, result](const produce& p) {
      const auto give_up = std::chrono::steady_clock::now() + strata::test::patience / 2;  // safety net only
      progress out;
      auto wait_for = [&](int n) {
        while (handled->load(std::memory_order_relaxed) < n && !out.gave_up) {
          out.gave_up = std::chrono::steady_clock::now() > give_up;
          std::this_thread::yield();
        }
      };
      for (int i = 0; i < p.messages; ++i) self.send(consumer, tick{});
      wait_for(p.messages);  // drained: the consumer is idle now
      for (int i = 0; i < 10; ++i) self.send(consumer, tick{});
      wait_for(p.messages + 10);
      out.handled_while_producing = handled->load(std::memory_order_relaxed);
      result->set_value(out);
    }};
  });
  sys.send(producer, produce{300});
  const progress p = strata::test::await(seen);
  BOOST_TEST(!p.gave_up);
  BOOST_TEST(p.handled_while_producing == 310);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace scheduler_test
