#pragma once
/// \file
/// `test_coordinator`: steps a deterministic actor system message by message and moves its
/// clock by hand, so that actor tests are repeatable and never sleep.

#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <limits>
#include <memory>

#include "strata/actor_ref.hpp"
#include "strata/actor_system.hpp"
#include "strata/error.hpp"

namespace strata {

/// The test's hands on a system created with `system_config::deterministic = true` (CAF's
/// test coordinator, Akka's TestKit with a manual clock). In such a system no thread runs actors
/// or timers: a message sent or a timer armed waits until the test calls `run_once`/`run` or
/// moves the clock. Runnable actors wait in one FIFO; each call runs one message of the first
/// and puts it back at the end if it has more, so the order of messages depends only on the test.
///
/// The clock starts at zero. `advance_time` fires every timer due by the new time, in due order
/// (timers due at the same time in the order they were armed); firing a timer only queues its
/// message (a delayed or periodic send, a request's timeout, a supervisor's restart backoff):
/// call `run` after it.
///
/// Not covered: work on device streams and other threads of their own (cpu arenas, CUDA
/// callbacks, MPI) still completes when it completes; its messages then join the FIFO.
///
/// Thread-safety: drive one system from one thread, never from inside an actor. Sends from
/// other threads are safe. Several coordinators on one system share its state.
///
/// \code
///   strata::actor_system sys(strata::system_config{.deterministic = true});
///   strata::test_coordinator coord(sys);
///   auto echo = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int x) { return x; }}; });
///   auto reply = sys.request<int>(echo, 1s, 7);
///   BOOST_TEST(coord.await(reply).value() == 7);        // runs until the reply is there
///   sys.delayed_send(echo, 5s, 1);
///   coord.advance_time(4s);  BOOST_TEST(!coord.run_once());  // not due yet
///   coord.advance_time(1s);  BOOST_TEST(coord.run() == 1u);
/// \endcode
class test_coordinator {
public:
  /// A system that is not deterministic is refused: `error_exception` (invalid_argument) with
  /// one sentence.
  explicit test_coordinator(actor_system& system);

  /// Runs one message of the first runnable actor. False if no actor has a message.
  bool run_once();
  /// Runs messages until no actor has one or `limit` ran; returns how many ran.
  std::size_t run(std::size_t limit = std::numeric_limits<std::size_t>::max());
  /// Runs messages until `done()` holds (checked before each) or no actor has one; returns
  /// whether `done()` holds.
  bool run_until(const std::function<bool()>& done);
  /// Runs messages until `f` is ready, then returns its value (the reply of
  /// `actor_system::request`, a promise an actor fulfils). If nothing is left to run first,
  /// throws `error_exception` (runtime_failure) with one sentence instead of waiting for ever.
  template <class T>
  T await(std::future<T>& f) {
    const auto ready = [&f] { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; };
    if (!run_until(ready)) throw_not_ready();
    return f.get();
  }

  /// Actors with a message to run.
  std::size_t runnable_actors() const;
  /// The actor whose message `run_once` runs next; an empty handle when none.
  actor_ref next_actor() const;

  /// The manual clock: time since the system started.
  std::chrono::nanoseconds now() const;
  /// Moves the clock forward by `d` (not negative), firing every timer due by then in due order;
  /// returns how many fired (a periodic timer once per period). A negative `d` throws
  /// `error_exception` (invalid_argument).
  std::size_t advance_time(std::chrono::nanoseconds d);
  /// Fires the next pending timer whatever its due time, moving the clock to it if it is later.
  /// False if none is pending.
  bool trigger_timer();
  /// Fires every timer pending now, each once, in due order (a periodic timer is armed again,
  /// not fired twice); returns how many fired.
  std::size_t trigger_timers();
  /// Timers armed and neither fired (one-shot), cancelled nor stopped.
  std::size_t pending_timers() const;

private:
  [[noreturn]] void throw_not_ready() const;
  std::shared_ptr<detail::system_impl> impl_;
};

}  // namespace strata
