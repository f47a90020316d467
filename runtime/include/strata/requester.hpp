#pragma once
/// \file
/// `requester`: requests and sends from code outside actors, in the order they are made.

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/actor.hpp"
#include "strata/actor_system.hpp"

namespace strata {

namespace detail {
/// One call of a requester, run by its actor in order. `run` makes the call and runs `finished`
/// once it is answered; `fail` answers the caller instead if the actor stops first.
struct requester_job {
  std::function<void(actor& self, std::function<void()> finished)> run;
  std::function<void(const error&)> fail;
};
/// Answered once every call made before it has been answered.
struct requester_barrier {
  std::shared_ptr<std::promise<expected<unit_t>>> promise;
};
/// The requester's owner has gone: stop once the calls in flight are answered.
struct requester_close {};
actor_ref spawn_requester(actor_system& system, spawn_options options);
}  // namespace detail

/// A caller outside any actor (main, a test, a library's client object) that makes requests and
/// sends through one actor of its own, so that what it sends to one actor arrives in the order
/// it was made, requests and sends alike (`actor_system::request` makes each request through a
/// new actor, so two of them may overtake each other). The futures hold the response or the
/// error (timeout, failed reply, undeliverable, or the system shutting down first).
/// `barrier()` resolves once everything requested before it has been answered. Destroying the
/// requester does not cancel its requests: its actor stops once they are answered. Calls from one
/// thread keep their order; calls from several threads are each in order per thread. Destroy a
/// requester before its actor_system (it holds a pointer to it).
///
/// \code
///   strata::requester caller(sys);
///   caller.send(log, line{"a"});
///   auto n = caller.request(counter, 1s, add{2});   // arrives after line "a"; expected<int>
/// \endcode
class requester : public detail::typed_calls<requester> {
public:
  explicit requester(actor_system& system, std::string name = "requester")
      : requester(system, spawn_options{.name = std::move(name)}) {}
  /// With the requester's actor placed by `options`: `.dedicated_thread = true` lets a caller
  /// that holds a scheduler thread while it waits (an actor that blocks on the future) be served
  /// when the system has no other scheduler thread.
  requester(actor_system& system, spawn_options options)
      : system_(&system), actor_(detail::spawn_requester(system, std::move(options))) {}
  requester(const requester&) = delete;
  requester& operator=(const requester&) = delete;
  ~requester() { (void)system_->send(actor_, detail::requester_close{}); }

  template <class R, class T>
  std::future<expected<std::conditional_t<std::is_void_v<R>, unit_t, R>>> request(
      const actor_ref& to, std::chrono::nanoseconds timeout, T msg) {
    using response = std::conditional_t<std::is_void_v<R>, unit_t, R>;
    auto promise = std::make_shared<std::promise<expected<response>>>();
    auto future = promise->get_future();
    auto payload = std::make_shared<T>(std::move(msg));
    detail::requester_job job{
        [to, timeout, payload, promise](actor& self, std::function<void()> finished) {
          self.request<R>(to, timeout, std::move(*payload))
              .then(
                  [promise, finished](response& r) {
                    promise->set_value(expected<response>(std::move(r)));
                    finished();
                  },
                  [promise, finished](const error& e) {
                    promise->set_value(expected<response>(e));
                    finished();
                  });
        },
        [promise](const error& e) { promise->set_value(expected<response>(e)); }};
    if (auto sent = system_->send(actor_, std::move(job)); !sent) promise->set_value(expected<response>(sent.error()));
    return future;
  }
  /// Through a typed handle (detail::typed_calls): `R` checked against the protocol, or not
  /// named where the protocol declares the reply (`R(T)`).
  using detail::typed_calls<requester>::request;

  /// Sends `msg` to `to` in order with this requester's requests (the sender is its actor).
  template <class T>
  expected<void> send(const actor_ref& to, T msg) {
    auto payload = std::make_shared<T>(std::move(msg));
    return system_->send(actor_, detail::requester_job{[to, payload](actor& self, std::function<void()> finished) {
                                                         (void)self.send(to, std::move(*payload));
                                                         finished();
                                                       },
                                                       [](const error&) {}});
  }
  /// Through a typed handle: checked against the receiver's protocol (detail::typed_calls).
  using detail::typed_calls<requester>::send;

  /// Resolves once every request made before it has been answered (or has failed).
  std::future<expected<unit_t>> barrier() {
    auto promise = std::make_shared<std::promise<expected<unit_t>>>();
    auto future = promise->get_future();
    if (auto sent = system_->send(actor_, detail::requester_barrier{promise}); !sent)
      promise->set_value(expected<unit_t>(sent.error()));
    return future;
  }

  /// The actor that makes the calls (the sender the receivers see).
  const actor_ref& ref() const noexcept { return actor_; }

private:
  actor_system* system_;
  actor_ref actor_;
};

}  // namespace strata
