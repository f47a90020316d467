#pragma once
// The rare poll: a state no event announces (a count of restarts, of live actors), read until it
// holds. Everything that has an event (a future, a down message, a latch) waits on that instead.

#include <chrono>
#include <thread>

namespace strata::test {

/// True once `condition()` holds, false when it still does not after `deadline`: polls it every
/// millisecond. Use as `BOOST_REQUIRE(eventually([&] { return stats().restarts == 3; }))`.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= until) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll's period, not a wait for an event
  }
  return true;
}

}  // namespace strata::test
