#pragma once
// Helpers shared by the runtime tests: bounded waits, so that a bug fails a test instead of
// hanging it.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <memory>

namespace strata::test {

inline constexpr auto patience = std::chrono::seconds(20);

/// Waits for `f` at most `patience`; fails the test (and returns a default) on timeout.
template <class T>
T await(std::future<T>& f) {
  if (f.wait_for(patience) != std::future_status::ready) {
    BOOST_FAIL("timed out waiting for the actors");
  }
  return f.get();
}
inline void await(std::future<void>& f) {
  if (f.wait_for(patience) != std::future_status::ready) BOOST_FAIL("timed out waiting for the actors");
  f.get();
}

/// A promise shared between a test body and its actors.
template <class T>
struct shared_promise {
  std::shared_ptr<std::promise<T>> p = std::make_shared<std::promise<T>>();
  std::future<T> future() { return p->get_future(); }
};

}  // namespace strata::test
