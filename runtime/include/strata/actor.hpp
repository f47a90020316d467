#pragma once
/// \file
/// `actor`: the base class of every actor, and what a handler may do (send, request, timers,
/// monitors, links, quitting).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/actor_ref.hpp"
#include "strata/behavior.hpp"
#include "strata/error.hpp"
#include "strata/message.hpp"

namespace strata {

class actor_system;
class actor;

/// What a bounded mailbox does with a message that does not fit.
enum class overflow_policy : std::uint8_t {
  fail,  ///< The send returns `errc::mailbox_full` (a request gets a failed reply).
  drop,  ///< The message is dropped and counted (and traced); the send reports success.
};

namespace detail {
struct system_impl;
struct actor_cell;
struct timer_state;
struct actor_access;

/// Puts `e` into `target`'s mailbox and wakes the actor. On failure (empty handle, terminated
/// actor, full mailbox) the message is counted, traced, deleted, and a request among them gets
/// a failed reply; the error is returned. Takes ownership of `e` in every case. A message to an
/// empty handle is counted in the sender's system, or in `origin` when there is no sending actor.
expected<void> deliver(cell_base* target, envelope* e, system_impl* origin = nullptr) noexcept;

/// Runs `fire` after `delay`, then every `period` if `period` is non-zero, on the system's timer
/// thread, until cancelled.
std::shared_ptr<timer_state> schedule_timer(system_impl* sys, std::chrono::nanoseconds delay,
                                            std::chrono::nanoseconds period, std::function<void()> fire);
void cancel_timer(const std::shared_ptr<timer_state>& timer) noexcept;
bool timer_active(const std::shared_ptr<timer_state>& timer) noexcept;

/// The system that owns actor `cell` (runtime-internal).
system_impl* system_of(cell_base* cell) noexcept;
actor_system& public_system(system_impl* sys) noexcept;
}  // namespace detail

/// Tag for `actor::become(next, strata::keep_old)`: push `next` on the behavior stack, keeping
/// the current behavior for `unbecome()`.
struct keep_old_t {
  explicit keep_old_t() = default;
};
inline constexpr keep_old_t keep_old{};

/// A request timeout that never expires: no timer is armed for the request.
inline constexpr std::chrono::nanoseconds no_timeout = std::chrono::nanoseconds::max();

/// A cancellable delayed or periodic send. Cancelling is thread-safe and takes effect at once: a
/// cancelled timer delivers nothing more. Destroying the handle does not cancel.
class timer_handle {
public:
  timer_handle() = default;
  explicit timer_handle(std::shared_ptr<detail::timer_state> state) : state_(std::move(state)) {}
  void cancel() noexcept {
    if (state_) detail::cancel_timer(state_);
  }
  /// True until the timer fired for the last time or was cancelled.
  bool active() const noexcept { return state_ && detail::timer_active(state_); }

private:
  std::shared_ptr<detail::timer_state> state_;
};

/// Answers one request later, from any handler of the actor that took it (or any thread).
/// Delivering twice delivers once.
template <class R>
class response_promise {
public:
  response_promise() = default;
  response_promise(actor_ref requester, std::uint64_t request_id, actor_ref self)
      : requester_(std::move(requester)), request_id_(request_id), self_(std::move(self)) {}

  /// True while a response is still owed.
  bool pending() const noexcept { return static_cast<bool>(requester_); }

  void deliver(R value) {
    if (!requester_) return;
    auto* e = new detail::typed_envelope<R>(std::move(value));
    finish(e, detail::message_kind::response);
  }
  void deliver(error err) {
    if (!requester_) return;
    auto* e = new detail::typed_envelope<error>(std::move(err));
    finish(e, detail::message_kind::error_response);
  }

private:
  void finish(detail::envelope* e, detail::message_kind kind) {
    e->kind = kind;
    e->request_id = request_id_;
    e->sender = std::move(self_);
    e->msg_id = detail::next_message_id();
    (void)detail::deliver(requester_.cell(), e);
    requester_ = actor_ref{};
  }
  actor_ref requester_;
  std::uint64_t request_id_ = 0;
  actor_ref self_;
};

namespace detail {
/// A change of behavior requested by a handler, applied after it returns.
struct behavior_change {
  enum class op : std::uint8_t { replace, push, pop };
  op what;
  behavior next;
};

struct pending_request {
  const type_meta* type = nullptr;
  std::function<void(void*)> on_value;
  std::function<void(const error&)> on_error;
  std::shared_ptr<timer_state> timer;
};
}  // namespace detail

/// The continuation of a request: call `then` in the same handler that made the request.
/// The callbacks run inside the requesting actor, one message at a time like any handler.
template <class R>
class request_handle {
public:
  request_handle(actor* self, std::uint64_t id) : self_(self), id_(id) {}

  /// `on_value(R&)` (or `on_value()` for `request<void>`) runs with the response; `on_error(const
  /// error&)` with a timeout, a failed reply, or an undeliverable request. Without `on_error`, an
  /// error fails the requesting actor (errors are never dropped silently).
  template <class F, class G>
  void then(F on_value, G on_error);
  template <class F>
  void then(F on_value);
  /// Like `then`, and until the response (or the error) has been handled this actor handles no
  /// other message: they wait in arrival order and come next (CAF's `await`). A linked actor's
  /// exit and a stop still act at once. With `no_timeout` and a target that never answers, the
  /// actor waits for ever: give awaited requests a timeout.
  template <class F, class G>
  void await(F on_value, G on_error);
  template <class F>
  void await(F on_value);

private:
  actor* self_;
  std::uint64_t id_;
};

template <class R>
class select_all_handle;
template <class R>
class select_any_handle;
namespace detail {
struct select_state_base;
template <class R, class Policy>
class select_handle;
}  // namespace detail

/// Base class of actors. An actor has private state and handlers; it runs one message at a time
/// on a scheduler thread (or its dedicated thread) and must never block it.
///
/// Override `make_behavior()` to return the handlers; it runs once when the actor starts (and
/// again after a supervisor restarts it, on a new instance). Everything a handler may do is a
/// member function here. Member functions are for use inside the actor's own handlers only.
///
/// Example:
/// \code
///   struct add { int value; };
///   class counter : public strata::actor {
///   public:
///     using protocol = strata::protocol<add>;   // optional: enables typed handles
///     strata::behavior make_behavior() override {
///       return {[this](const add& a) { return total_ += a.value; }};
///     }
///   private:
///     int total_ = 0;
///   };
/// \endcode
class actor : public detail::typed_calls<actor> {
public:
  actor() = default;
  actor(const actor&) = delete;
  actor& operator=(const actor&) = delete;
  virtual ~actor();

  /// The handlers this actor starts with.
  virtual behavior make_behavior() = 0;
  /// Called once when the actor terminates, with the reason, before monitors are told.
  virtual void on_exit(const error& reason);

  // ---- identity ---------------------------------------------------------------------------
  actor_ref self() const noexcept;
  std::uint64_t id() const noexcept;
  const std::string& name() const noexcept;
  actor_system& system() const noexcept;

  // ---- messaging --------------------------------------------------------------------------
  /// Sends `msg` to `to`, asynchronously. Messages from one sender to one receiver arrive in
  /// the order sent. Returns an error only if the message could not be enqueued.
  template <class T>
  expected<void> send(const actor_ref& to, T&& msg) {
    return detail::deliver(to.cell(), make_envelope(std::forward<T>(msg), false));
  }
  /// Through a typed handle: checked against the receiver's protocol (detail::typed_calls).
  using detail::typed_calls<actor>::send;
  /// Like `send`, in the receiver's urgent lane: handled before its normal messages.
  template <class T>
  expected<void> send_urgent(const actor_ref& to, T&& msg) {
    return detail::deliver(to.cell(), make_envelope(std::forward<T>(msg), true));
  }

  /// Sends a request expecting a response of type `R` (`void` for handlers that return
  /// nothing) within `timeout`. Continue with `.then(...)` in the same handler. With
  /// `strata::no_timeout` no timer is armed (about 1 us less per request): the request waits
  /// for its response, or for the error of a request that cannot be delivered or handled.
  template <class R, class T>
  request_handle<R> request(const actor_ref& to, std::chrono::nanoseconds timeout, T&& msg);
  /// Through a typed handle (detail::typed_calls): `request<R>(typed, timeout, msg)` checks `R`
  /// against the protocol; where the protocol declares the reply (`R(T)`), `R` is not named:
  /// `request(calc, 1s, add{1, 2}).then([](int& sum) { ... })`.
  using detail::typed_calls<actor>::request;

  /// Fan-out: sends a copy of `msg` as a request to every target and continues, through
  /// `.then(on_value, on_error)` in the same handler, with all the responses as one
  /// `std::vector<R>` in the order of `targets` (`on_value()` for `R = void`). One timeout covers
  /// them all (`strata::no_timeout`: none). The first error (a target that cannot take or answer
  /// the request, a response of another type, the timeout) reaches `on_error` once, naming the
  /// target; the other responses are then dropped as late. No targets is an error
  /// (`invalid_argument`). Without `on_error`, an error fails this actor. See `strata/select.hpp`.
  template <class R, class T>
  select_all_handle<R> select_all(const std::vector<actor_ref>& targets, std::chrono::nanoseconds timeout,
                                  const T& msg);
  template <class R, class P, class T>
  select_all_handle<R> select_all(const std::vector<typed_actor<P>>& targets, std::chrono::nanoseconds timeout,
                                  const T& msg);
  /// Fan-out that continues with the first response (`on_value(R&)`); the others are dropped as
  /// late. Errors of single targets are tolerated while another may still answer: `on_error`
  /// runs once, when every target has failed (with the first error's category) or the timeout
  /// passed first.
  template <class R, class T>
  select_any_handle<R> select_any(const std::vector<actor_ref>& targets, std::chrono::nanoseconds timeout,
                                  const T& msg);
  template <class R, class P, class T>
  select_any_handle<R> select_any(const std::vector<typed_actor<P>>& targets, std::chrono::nanoseconds timeout,
                                  const T& msg);

  /// Delivers `msg` to `to` after `delay` (sender: this actor).
  template <class T>
  timer_handle delayed_send(const actor_ref& to, std::chrono::nanoseconds delay, T msg) {
    return timer_handle(detail::schedule_timer(sys_, delay, std::chrono::nanoseconds{0},
                                               make_timer_fire(to, std::move(msg))));
  }
  /// Delivers a copy of `msg` to `to` every `period`, first after one period, until cancelled.
  template <class T>
  timer_handle periodic_send(const actor_ref& to, std::chrono::nanoseconds period, T msg) {
    return timer_handle(detail::schedule_timer(sys_, period, period, make_timer_fire(to, std::move(msg))));
  }

  /// The sender of the message being handled (empty outside a handler or for anonymous sends).
  const actor_ref& current_sender() const noexcept;

  /// Takes over answering the request being handled; the handler's own return is then ignored.
  /// Outside a request, returns a promise that delivers nothing.
  template <class R>
  response_promise<R> make_response_promise();

  // ---- lifecycle --------------------------------------------------------------------------
  /// Terminates this actor after the current handler returns (reason `normal_exit` by default).
  void quit(error reason = error(errc::normal_exit, "the actor quit"));
  /// Replaces the current behavior (the top of the behavior stack), from the next message on.
  void become(behavior next);
  /// Pushes `next` on the behavior stack, from the next message on; `unbecome()` returns to the
  /// behavior it covers.
  void become(behavior next, keep_old_t);
  /// Pops the behavior stack, from the next message on: the behavior that the last
  /// `become(..., keep_old)` covered handles again. With nothing to return to (the stack holds
  /// only the first behavior) it throws `error_exception` (`invalid_argument`) with one
  /// sentence; escaping the handler, that fails the actor with the sentence as its reason.
  /// Changes requested in one handler apply in the order requested.
  void unbecome();

  /// Defers the message being handled: it leaves the mailbox for this actor's stash and is
  /// answered later, when `unstash_all()` re-delivers it (the handler's return is ignored now).
  /// At most `spawn_options::stash_capacity` messages wait; one more throws `error_exception`
  /// (`errc::stash_full`), which fails the actor with that reason unless the handler catches it.
  /// Outside a handler of a message (or for a message already stashed) it does nothing.
  /// A supervisor's restart re-delivers the stash to the fresh instance; a terminating actor's
  /// stash is discarded like its queued messages (counted, requests answered with an error).
  void stash();
  /// Re-delivers every stashed message, in the order they were stashed, before any message not
  /// yet handled (urgent ones keep their lane). Typically called right after a `become`.
  void unstash_all();
  /// Messages waiting in the stash.
  std::size_t stashed() const noexcept;
  /// Receive `down_msg` when `target` terminates (at once if it already has).
  void monitor(const actor_ref& target);
  /// Links this actor with `target`: when one terminates with a failure, the other receives
  /// `exit_msg` (if trapping exits) or terminates too.
  void link_to(const actor_ref& target);
  void unlink_from(const actor_ref& target);
  /// Receive `exit_msg` from links as messages instead of terminating.
  void trap_exit(bool enabled) noexcept;

private:
  friend struct detail::actor_cell;
  friend struct detail::system_impl;
  friend struct detail::actor_access;
  template <class R>
  friend class request_handle;
  template <class R, class Policy>
  friend class detail::select_handle;
  template <class R>
  friend void detail::reply_with(actor& self, detail::envelope& request, R&& result);
  friend void detail::reply_unit(actor& self, detail::envelope& request);

  template <class T>
  detail::envelope* make_envelope(T&& msg, bool urgent) {
    auto* e = new detail::typed_envelope<std::decay_t<T>>(std::forward<T>(msg));
    e->sender = self();
    e->msg_id = detail::next_message_id();
    e->urgent = urgent;
    return e;
  }
  template <class T>
  std::function<void()> make_timer_fire(const actor_ref& to, T msg) {
    return [to, msg = std::move(msg), from = self()]() {
      auto* e = new detail::typed_envelope<T>(msg);
      e->sender = from;
      e->msg_id = detail::next_message_id();
      (void)detail::deliver(to.cell(), e);
    };
  }
  std::uint64_t register_request(const type_meta* type, std::chrono::nanoseconds timeout);
  void set_request_callbacks(std::uint64_t id, std::function<void(void*)> on_value,
                             std::function<void(const error&)> on_error);
  void send_response(detail::envelope& request, detail::envelope* response) noexcept;
  void handle_response(detail::envelope& response);
  void handle_timeout(std::uint64_t request_id);
  void call_error(detail::pending_request& entry, const error& err);
  void apply_behavior_changes();
  /// Fan-out bookkeeping (requests.cpp): the requests of one select, and their end.
  void start_select(detail::select_state_base& state, const std::vector<actor_ref>& targets,
                    std::chrono::nanoseconds timeout, const type_meta* response,
                    const std::function<detail::envelope*()>& make_request, const char* what);
  void finish_select(detail::select_state_base& state) noexcept;

  detail::actor_cell* cell_ = nullptr;
  detail::system_impl* sys_ = nullptr;
  detail::envelope* current_ = nullptr;
  behavior behavior_;                                // the top of the behavior stack
  std::vector<behavior> earlier_;                    // the behaviors below it, oldest first
  std::vector<detail::behavior_change> changes_;     // requested by the running handler
  std::size_t staged_depth_ = 0;                     // earlier_.size() once changes_ apply
  bool current_stashed_ = false;                     // the running handler stashed its message
  std::unordered_map<std::uint64_t, detail::pending_request> pending_;
  std::vector<std::uint64_t> awaited_;               // requests awaited (request(...).await)
  std::uint64_t next_request_id_ = 0;
  bool promise_taken_ = false;
};

/// An actor defined by a function returning its behavior (see `actor_system::spawn`).
class function_actor final : public actor {
public:
  explicit function_actor(std::function<behavior(actor&)> init) : init_(std::move(init)) {}
  behavior make_behavior() override { return init_(*this); }

private:
  std::function<behavior(actor&)> init_;
};

// ---- template definitions -------------------------------------------------------------------

template <class R, class T>
request_handle<R> actor::request(const actor_ref& to, std::chrono::nanoseconds timeout, T&& msg) {
  using response = std::conditional_t<std::is_void_v<R>, unit_t, R>;
  auto id = register_request(type_of<response>(), timeout);
  auto* e = make_envelope(std::forward<T>(msg), false);
  e->request_id = id;
  (void)detail::deliver(to.cell(), e);  // failures come back as an error response
  return request_handle<R>(this, id);
}

template <class R>
template <class F, class G>
void request_handle<R>::then(F on_value, G on_error) {
  using response = std::conditional_t<std::is_void_v<R>, unit_t, R>;
  std::function<void(void*)> value_fn;
  if constexpr (std::is_invocable_v<F&, response&>) {
    value_fn = [f = std::move(on_value)](void* p) mutable { f(*static_cast<response*>(p)); };
  } else {
    static_assert(std::is_invocable_v<F&>, "the value callback takes the response (or nothing for request<void>)");
    value_fn = [f = std::move(on_value)](void*) mutable { f(); };
  }
  self_->set_request_callbacks(id_, std::move(value_fn),
                               [g = std::move(on_error)](const error& err) mutable { g(err); });
}

template <class R>
template <class F>
void request_handle<R>::then(F on_value) {
  using response = std::conditional_t<std::is_void_v<R>, unit_t, R>;
  std::function<void(void*)> value_fn;
  if constexpr (std::is_invocable_v<F&, response&>) {
    value_fn = [f = std::move(on_value)](void* p) mutable { f(*static_cast<response*>(p)); };
  } else {
    value_fn = [f = std::move(on_value)](void*) mutable { f(); };
  }
  self_->set_request_callbacks(id_, std::move(value_fn), nullptr);
}

template <class R>
template <class F, class G>
void request_handle<R>::await(F on_value, G on_error) {
  then(std::move(on_value), std::move(on_error));
  self_->awaited_.push_back(id_);
}

template <class R>
template <class F>
void request_handle<R>::await(F on_value) {
  then(std::move(on_value));
  self_->awaited_.push_back(id_);
}

template <class R>
response_promise<R> actor::make_response_promise() {
  if (!current_ || current_->request_id == 0 || !current_->sender) return {};
  promise_taken_ = true;
  return response_promise<R>(current_->sender, current_->request_id, self());
}

namespace detail {
/// Counts a handler's result that answers nothing (the message was a plain send).
void count_unanswered_result() noexcept;

template <class R>
void reply_with(actor& self, envelope& request, R&& result) {
  using value = std::remove_cvref_t<R>;
  if (self.current_stashed_) return;  // answered when the stash re-delivers it
  if constexpr (is_response_promise<value>::value) {
    self.promise_taken_ = false;  // the returned promise answers the request itself
  } else {
    if (request.request_id == 0 || !request.sender) {
      count_unanswered_result();
      return;
    }
    if (self.promise_taken_) {
      self.promise_taken_ = false;
      return;
    }
    envelope* e;
    if constexpr (is_expected<value>::value) {
      if (result.has_value()) {
        if constexpr (std::is_void_v<typename value::value_type>) e = new typed_envelope<unit_t>();
        else e = new typed_envelope<typename value::value_type>(std::move(*result));
        e->kind = message_kind::response;
      } else {
        e = new typed_envelope<error>(result.error());
        e->kind = message_kind::error_response;
      }
    } else {
      e = new typed_envelope<value>(std::forward<R>(result));
      e->kind = message_kind::response;
    }
    self.send_response(request, e);
  }
}
}  // namespace detail

}  // namespace strata

#include "strata/select.hpp"  // select_all / select_any (needs the complete actor)
