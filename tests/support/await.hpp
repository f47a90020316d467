#pragma once
// Waiting on events inside a Boost.Test case: a future's answer (a kvstore client's call, a
// promise an actor fulfils), an actor's end. Each wait is bounded: a bug fails the case instead of
// hanging it.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <memory>

#include "strata/strata.hpp"

namespace strata::test {

/// How long a test waits for something that normally takes milliseconds.
inline constexpr auto patience = std::chrono::seconds(20);

/// The answer of `f`; fails the case when none comes within `limit`.
template <class T>
T await(std::future<T>& f, std::chrono::seconds limit = std::chrono::seconds(60)) {
  if (f.wait_for(limit) != std::future_status::ready) BOOST_FAIL("timed out waiting for an answer");
  return f.get();
}

template <class T>
T await(std::future<T>&& f, std::chrono::seconds limit = std::chrono::seconds(60)) {
  return await(f, limit);
}

/// A promise shared between a test body and its actors.
template <class T>
struct shared_promise {
  std::shared_ptr<std::promise<T>> p = std::make_shared<std::promise<T>>();
  std::future<T> future() { return p->get_future(); }
};

/// Returns once `target` has terminated (a monitor's down message), at most `patience`.
inline void await_down(actor_system& sys, const actor_ref& target) {
  shared_promise<void> down;
  auto f = down.future();
  sys.spawn([target, p = down.p](actor& self) -> behavior {
    self.monitor(target);
    return {[&self, p](const down_msg&) {
      p->set_value();
      self.quit();
    }};
  });
  await(f, patience);
}

}  // namespace strata::test
