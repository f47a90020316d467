#include "strata/test_coordinator.hpp"

#include <stdexcept>
#include <string>

#include "cell.hpp"
#include "system_impl.hpp"

namespace strata {

namespace {
/// The coordinator runs actors on the caller's thread: from inside an actor that would nest one
/// actor's turn in another's.
void require_outside_actors(const char* call) {
  if (detail::current_cell() != nullptr)
    throw std::logic_error(std::string("test_coordinator::") + call +
                           " was called from inside an actor; drive the system from the test's own thread");
}
}  // namespace

test_coordinator::test_coordinator(actor_system& system) : impl_(system.impl_) {
  if (!impl_->det)
    throw error_exception(error(errc::invalid_argument,
                                "test_coordinator needs an actor system created with system_config::deterministic = "
                                "true; this one runs its actors on " +
                                    std::to_string(impl_->config.worker_threads) + " worker threads"));
}

bool test_coordinator::run_once() {
  require_outside_actors("run_once");
  return impl_->det->run_once();
}

std::size_t test_coordinator::run(std::size_t limit) {
  require_outside_actors("run");
  std::size_t n = 0;
  while (n < limit && impl_->det->run_once()) ++n;
  return n;
}

bool test_coordinator::run_until(const std::function<bool()>& done) {
  require_outside_actors("run_until");
  impl_->run_deterministic(done);
  return done();
}

void test_coordinator::throw_not_ready() const {
  throw error_exception(error(errc::runtime_failure,
                              "test_coordinator::await: the future has no value and no actor has a message to run (" +
                                  std::to_string(pending_timers()) +
                                  " timers pending: advance the clock or trigger a timer first)"));
}

std::size_t test_coordinator::runnable_actors() const { return impl_->det->runnable(); }

actor_ref test_coordinator::next_actor() const {
  detail::actor_cell* c = impl_->det->front();
  return c ? actor_ref::from_cell(c) : actor_ref{};
}

std::chrono::nanoseconds test_coordinator::now() const { return impl_->timers.now(); }

std::size_t test_coordinator::advance_time(std::chrono::nanoseconds d) {
  require_outside_actors("advance_time");
  if (d < std::chrono::nanoseconds{0})
    throw error_exception(error(errc::invalid_argument, "test_coordinator::advance_time needs a duration >= 0, got " +
                                                            std::to_string(d.count()) + " ns: the clock never goes back"));
  const auto until = impl_->timers.now() + d;
  std::size_t n = 0;
  while (impl_->timers.fire_next(until, std::numeric_limits<std::uint64_t>::max())) ++n;
  impl_->timers.advance_to(until);
  return n;
}

bool test_coordinator::trigger_timer() {
  require_outside_actors("trigger_timer");
  return impl_->timers.fire_next(std::chrono::nanoseconds::max(), std::numeric_limits<std::uint64_t>::max());
}

std::size_t test_coordinator::trigger_timers() {
  require_outside_actors("trigger_timers");
  const std::uint64_t armed_before = impl_->timers.arm_count();
  std::size_t n = 0;
  while (impl_->timers.fire_next(std::chrono::nanoseconds::max(), armed_before)) ++n;
  return n;
}

std::size_t test_coordinator::pending_timers() const { return impl_->timers.pending(); }

}  // namespace strata
