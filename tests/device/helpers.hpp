#pragma once
// Small helpers shared by the device tests.

#include <chrono>
#include <future>

#include "strata/device/all.hpp"

namespace strata::test {

using namespace std::chrono_literals;

/// True if `f` becomes ready within `timeout` (a generous bound that turns a hang into a failure).
template <class F>
bool ready_within(F& f, std::chrono::milliseconds timeout = 20s) {
  return f.wait_for(timeout) == std::future_status::ready;
}

/// A gate a work item blocks on until the test opens it (no sleeps).
struct gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  void open() { promise.set_value(); }
  /// For work items: waits at most 20 s so a broken test fails instead of hanging.
  bool pass() const { return future.wait_for(20s) == std::future_status::ready; }
};

/// Options for deterministic sim tests: modelled times depend only on costs and waits; time passes
/// a thousand times faster than modelled.
inline device_options deterministic_sim() {
  device_options o;
  o.sim_time_scale = 0.001;
  o.sim_follow_host_clock = false;
  return o;
}

}  // namespace strata::test
