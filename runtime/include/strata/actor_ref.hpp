#pragma once
/// \file
/// Actor handles: `actor_ref` (untyped) and `typed_actor<protocol<...>>` (checked at compile time).

#include <atomic>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

namespace strata {

namespace detail {
/// The reference-counted head of an actor's control block; the rest is private to the runtime.
struct cell_base {
  std::atomic<std::uint32_t> refs{1};
  std::uint64_t id = 0;
  /// True for a handle to an actor of another process (a `remote_cell`, see strata/extension/transport.hpp).
  bool remote = false;
};
/// Frees a control block whose last reference went away (runtime-internal).
void destroy_cell(cell_base* cell) noexcept;
inline void retain(cell_base* cell) noexcept { cell->refs.fetch_add(1, std::memory_order_relaxed); }
inline void release(cell_base* cell) noexcept {
  if (cell->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy_cell(cell);
}
}  // namespace detail

/// A handle to an actor: a cheap value (one pointer, reference counted) that stays valid after
/// the actor terminates (messages to a terminated actor are counted as undeliverable, never lost
/// silently). Handles identify actors by id and do not assume the actor lives in this process'
/// address space beyond what the runtime resolves.
///
/// Thread-safety: a handle may be copied and used from any thread.
class actor_ref {
public:
  actor_ref() noexcept = default;
  actor_ref(const actor_ref& other) noexcept : cell_(other.cell_) {
    if (cell_) detail::retain(cell_);
  }
  actor_ref(actor_ref&& other) noexcept : cell_(std::exchange(other.cell_, nullptr)) {}
  actor_ref& operator=(const actor_ref& other) noexcept {
    actor_ref copy(other);
    swap(copy);
    return *this;
  }
  actor_ref& operator=(actor_ref&& other) noexcept {
    actor_ref moved(std::move(other));
    swap(moved);
    return *this;
  }
  ~actor_ref() {
    if (cell_) detail::release(cell_);
  }

  /// Adds a reference to `cell` (runtime-internal).
  static actor_ref from_cell(detail::cell_base* cell) noexcept {
    if (cell) detail::retain(cell);
    return actor_ref(cell);
  }
  /// Takes over an existing reference to `cell` (runtime-internal).
  static actor_ref adopt(detail::cell_base* cell) noexcept { return actor_ref(cell); }

  void swap(actor_ref& other) noexcept { std::swap(cell_, other.cell_); }
  explicit operator bool() const noexcept { return cell_ != nullptr; }
  /// Unique id of the actor within its system (0 for an empty handle).
  std::uint64_t id() const noexcept { return cell_ ? cell_->id : 0; }
  detail::cell_base* cell() const noexcept { return cell_; }

  friend bool operator==(const actor_ref& a, const actor_ref& b) noexcept { return a.cell_ == b.cell_; }
  friend std::strong_ordering operator<=>(const actor_ref& a, const actor_ref& b) noexcept {
    return a.id() <=> b.id();
  }

private:
  explicit actor_ref(detail::cell_base* cell) noexcept : cell_(cell) {}
  detail::cell_base* cell_ = nullptr;
};

namespace detail {
/// The reply of a protocol entry that names none (a plain message type).
struct undeclared_reply {};
/// One protocol entry: a message type `T`, or `R(T)` for "T, answered with R".
template <class E>
struct protocol_entry {
  using message = E;
  using reply = undeclared_reply;
};
template <class R, class T>
struct protocol_entry<R(T)> {
  using message = std::remove_cvref_t<T>;
  using reply = R;
};
template <class T, class... Entries>
struct reply_lookup {
  using type = undeclared_reply;
};
template <class T, class E, class... Rest>
struct reply_lookup<T, E, Rest...> {
  using type = std::conditional_t<std::is_same_v<typename protocol_entry<E>::message, T>,
                                  typename protocol_entry<E>::reply, typename reply_lookup<T, Rest...>::type>;
};
}  // namespace detail

/// The messages an actor handles, for typed handles: `using protocol = strata::protocol<...>;`
/// inside the actor class. An entry is a message type (`stop_work`) or, as a function type, a
/// message with the type that answers it (`pong(ping)`, `void(reset)`): requests through a typed
/// handle then return that type without naming it, and a `typed_behavior` that answers with
/// another type does not compile.
template <class... Entries>
struct protocol {
  template <class T>
  static constexpr bool handles =
      (std::is_same_v<std::remove_cvref_t<T>, typename detail::protocol_entry<Entries>::message> || ...);
  /// The reply declared for `T` (`R` of an entry `R(T)`), or `detail::undeclared_reply`.
  template <class T>
  using reply_to = typename detail::reply_lookup<std::remove_cvref_t<T>, Entries...>::type;
  template <class T>
  static constexpr bool declares_reply = !std::is_same_v<reply_to<T>, detail::undeclared_reply>;
  /// True if a request for `T` may expect `R`: the declared reply, or any where none is declared.
  template <class T, class R>
  static constexpr bool answers_with = !declares_reply<T> || std::is_same_v<reply_to<T>, R>;
};

template <class Protocol>
class typed_actor;

/// A handle that knows its actor's protocol: sending a type outside the protocol through it does
/// not compile. Converts implicitly to `actor_ref` for monitoring, linking and comparisons.
template <class... Entries>
class typed_actor<protocol<Entries...>> {
public:
  using protocol_type = protocol<Entries...>;
  typed_actor() = default;
  explicit typed_actor(actor_ref ref) noexcept : ref_(std::move(ref)) {}

  template <class T>
  static constexpr bool handles = protocol_type::template handles<T>;

  const actor_ref& ref() const noexcept { return ref_; }
  operator const actor_ref&() const noexcept { return ref_; }  // NOLINT: intentional conversion
  explicit operator bool() const noexcept { return static_cast<bool>(ref_); }
  std::uint64_t id() const noexcept { return ref_.id(); }
  friend bool operator==(const typed_actor& a, const typed_actor& b) noexcept { return a.ref_ == b.ref_; }

private:
  actor_ref ref_;
};

namespace detail {
template <class T>
struct is_typed_actor : std::false_type {};
template <class P>
struct is_typed_actor<typed_actor<P>> : std::true_type {};

/// The sends and requests through a typed handle, written once for every sender (`actor`,
/// `actor_system`, `requester`): each checks the message against the receiver's protocol at
/// compile time and forwards to the sender's own untyped call, `send(const actor_ref&, msg)` or
/// `request<R>(const actor_ref&, timeout, msg)`, so it returns what that call returns. A sender
/// derives from `typed_calls<itself>` and names these with `using` beside its untyped calls.
template <class Sender>
class typed_calls {
public:
  template <class P, class T>
  auto send(const typed_actor<P>& to, T&& msg) {
    static_assert(P::template handles<T>, "the receiver's protocol does not handle this message type");
    return sender().send(to.ref(), std::forward<T>(msg));
  }
  /// A request expecting `R`, which must be the reply the protocol declares for `T` (if any).
  template <class R, class P, class T>
  auto request(const typed_actor<P>& to, std::chrono::nanoseconds timeout, T&& msg) {
    static_assert(P::template handles<T>, "the receiver's protocol does not handle this message type");
    static_assert(P::template answers_with<T, R>, "the receiver's protocol answers this message with another type");
    return sender().template request<R>(to.ref(), timeout, std::forward<T>(msg));
  }
  /// Through a typed handle whose protocol declares the reply (`R(T)`), `R` is not named:
  /// `request(calc, 1s, add{1, 2})`.
  template <class P, class T>
    requires(P::template declares_reply<T>)
  auto request(const typed_actor<P>& to, std::chrono::nanoseconds timeout, T&& msg) {
    return sender().template request<typename P::template reply_to<T>>(to.ref(), timeout, std::forward<T>(msg));
  }

private:
  Sender& sender() noexcept { return static_cast<Sender&>(*this); }
};
}  // namespace detail

}  // namespace strata

template <>
struct std::hash<strata::actor_ref> {
  std::size_t operator()(const strata::actor_ref& ref) const noexcept {
    return std::hash<std::uint64_t>{}(ref.id());
  }
};
