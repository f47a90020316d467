#pragma once
/// \file
/// `group`: publish / subscribe by topic name within one actor system.

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/actor_ref.hpp"
#include "strata/error.hpp"
#include "strata/message.hpp"

namespace strata {

namespace detail {
struct group_state;
using envelope_factory = envelope* (*)(const void* msg);
template <class T>
envelope* copy_into_envelope(const void* msg) {
  return new typed_envelope<T>(*static_cast<const T*>(msg));
}
const std::string& group_name(const group_state& g) noexcept;
expected<void> group_subscribe(group_state& g, const actor_ref& member);
bool group_unsubscribe(group_state& g, const actor_ref& member);
std::size_t group_size(group_state& g);
std::size_t group_publish(group_state& g, envelope_factory make, const void* msg, bool urgent);
}  // namespace detail

/// A publish / subscribe topic: every message published reaches every member subscribed at the
/// time, each as an ordinary message from the publisher. A member that terminates leaves the
/// group by itself. Handles come from `actor_system::group(name)`: the same name gives the same
/// group. A handle is a cheap value; copy it freely.
///
/// Ordering: the messages of one publisher (one actor, or one outside thread) reach each member
/// in the order published, as sends do; publishers are not ordered with each other.
///
/// Thread-safety: every member function may be called from any thread and from handlers.
/// The handle names a topic rather than a set of local pointers, so a version spanning ranks can
/// keep this interface.
///
/// Example:
/// \code
///   auto prices = sys.group("prices");
///   prices.subscribe(chart);
///   prices.publish(price_tick{"ACME", 41.5});   // chart receives a price_tick
/// \endcode
class group {
public:
  group() = default;
  explicit group(std::shared_ptr<detail::group_state> state) noexcept : state_(std::move(state)) {}

  /// The topic's name (empty for a default-constructed handle).
  const std::string& name() const noexcept {
    static const std::string none;
    return state_ ? detail::group_name(*state_) : none;
  }
  explicit operator bool() const noexcept { return static_cast<bool>(state_); }

  /// Adds `member`; subscribing a member twice keeps one subscription. Refused with one sentence
  /// for an empty handle (`invalid_argument`), a terminated actor (`target_terminated`), or an
  /// empty group handle.
  expected<void> subscribe(const actor_ref& member) {
    if (!state_) return error(errc::invalid_argument, "cannot subscribe to a default-constructed (empty) group handle");
    return detail::group_subscribe(*state_, member);
  }
  /// Removes `member`; false if it was not subscribed.
  bool unsubscribe(const actor_ref& member) { return state_ && detail::group_unsubscribe(*state_, member); }
  /// Members now.
  std::size_t size() const { return state_ ? detail::group_size(*state_) : 0; }

  /// Sends a copy of `msg` to every member; returns to how many it was delivered. Called from a
  /// handler, the sender is that actor; else the send is anonymous. Members that cannot take it
  /// (a full bounded mailbox) count it as any failed send does (see dead letters).
  template <class T>
  std::size_t publish(const T& msg) {
    if (!state_) return 0;
    return detail::group_publish(*state_, &detail::copy_into_envelope<std::decay_t<T>>, &msg, false);
  }

  friend bool operator==(const group& a, const group& b) noexcept { return a.state_ == b.state_; }

private:
  std::shared_ptr<detail::group_state> state_;
};

}  // namespace strata
