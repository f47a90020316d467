#pragma once
/// \file
/// `actor_system`: threads, spawning, sending from outside actors, shutdown.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/actor.hpp"
#include "strata/actor_ref.hpp"
#include "strata/error.hpp"
#include "strata/group.hpp"
#include "strata/pool.hpp"
#include "strata/supervisor.hpp"

namespace strata {

/// Settings of an actor system. Every field has a working default.
struct system_config {
  /// Scheduler threads; 0 means one per hardware thread.
  std::size_t worker_threads = 0;
  /// Messages an actor handles per turn before yielding its thread to other actors.
  std::size_t throughput = 128;
  /// Trace file to record into; empty means: the STRATA_TRACE environment variable if set,
  /// else no tracing.
  std::string trace_file{};
  /// Upper bound on recorded events (0: unbounded); events past it are counted as dropped.
  std::size_t trace_event_limit = 0;
  /// How long `shutdown(shutdown_mode::drain)` waits for mailboxes to empty.
  std::chrono::milliseconds drain_timeout{10'000};
  /// Messages an actor may hold in its stash (`actor::stash`) unless its spawn options say.
  std::size_t stash_capacity = 10'000;
  /// The mailbox bound of actors spawned with `spawn_options::mailbox_capacity` = 0 (0: unbounded),
  /// and what such a mailbox does when full. The runtime's own actors are never bounded.
  std::size_t mailbox_capacity = 0;
  overflow_policy mailbox_overflow = overflow_policy::fail;
  /// For tests: no thread runs actors or timers. A `strata::test_coordinator` on the system runs
  /// them one message at a time, in FIFO order of runnable actors, and moves a manual clock that
  /// delayed and periodic sends and request timeouts wait on (strata/test_coordinator.hpp).
  /// `worker_threads` is then ignored, and actors spawned with `dedicated_thread` run in the
  /// same FIFO as the others.
  bool deterministic = false;

  /// The defaults, overridden by the `STRATA_*` environment variables that are set (the table is
  /// in docs/runtime.md). A bad value is refused with one sentence naming the variable
  /// (`errc::invalid_argument`).
  static expected<system_config> from_env();
  /// `from_env()`, then overridden by the `--strata-*` flags among `argv` (`--strata-threads 4`
  /// or `--strata-threads=4`); other arguments are left to the program's own parser. A bad value
  /// is refused with one sentence naming the flag.
  static expected<system_config> from_args(int argc, const char* const* argv);
};

/// `spawn_options::mailbox_capacity` for an unbounded mailbox whatever the system's default.
inline constexpr std::size_t unbounded_mailbox = static_cast<std::size_t>(-1);

/// How one actor is placed and fed.
struct spawn_options {
  std::string name{};                  ///< For traces and error texts (default: "actor-<id>").
  bool dedicated_thread = false;       ///< Run on a thread of its own (e.g. a GPU owner keeps its CUDA context there).
  /// At most this many queued messages; 0: the system's default (`system_config::mailbox_capacity`
  /// and `mailbox_overflow`, unbounded unless configured); `strata::unbounded_mailbox`: unbounded.
  std::size_t mailbox_capacity = 0;
  overflow_policy overflow = overflow_policy::fail;
  std::size_t stash_capacity = 0;      ///< 0: `system_config::stash_capacity`; else at most this many stashed messages.
  /// Messages from other ranks (strata::net) that find this actor idle run its handlers at once
  /// on the communication thread that received them, instead of waking a scheduler thread: two
  /// thread hand-offs less per message (docs/distributed.md, "Latency-critical actors"). Only for
  /// short handlers that never block: while one runs, no MPI traffic of this process moves. A
  /// message carrying tensor data, or one that finds the actor busy, goes the usual way. Ignored
  /// with `dedicated_thread`, under the deterministic scheduler, and without strata::net.
  bool handle_remote_inline = false;
};

/// What shutdown does with messages still queued.
enum class shutdown_mode : std::uint8_t {
  drain,    ///< Let actors handle what is queued (timers not yet due are cancelled), then stop them.
  discard,  ///< Stop actors now; queued messages are discarded and counted.
};

/// Counts since the system started.
struct system_stats {
  std::size_t live_actors = 0;
  std::uint64_t spawned = 0;
  std::uint64_t terminated = 0;
  std::uint64_t failed = 0;             ///< Terminations by an exception or a linked failure.
  std::uint64_t restarts = 0;           ///< Supervisor restarts.
  std::uint64_t undeliverable = 0;      ///< Sent to a terminated actor or an empty handle.
  std::uint64_t unhandled = 0;          ///< No handler for the message type.
  std::uint64_t mailbox_full = 0;       ///< Refused by a bounded mailbox (policy fail).
  std::uint64_t dropped = 0;            ///< Dropped by a bounded mailbox (policy drop).
  std::uint64_t discarded = 0;          ///< Still queued when their actor terminated.
  std::uint64_t late_responses = 0;     ///< Responses that arrived after their request timed out.
  std::uint64_t unanswered_results = 0; ///< Handler results dropped: the message was a plain send, not a request.
  std::uint64_t messages_handled = 0;   ///< Messages taken from mailboxes (handled or not), all actors.
};

/// What `shutdown` did.
struct shutdown_report {
  shutdown_mode mode = shutdown_mode::drain;
  std::size_t actors_stopped = 0;       ///< Actors still alive when shutdown began.
  std::uint64_t messages_discarded = 0; ///< Queued messages dropped by the stop.
  std::uint64_t timers_cancelled = 0;
  bool drain_timed_out = false;
  system_stats stats{};                 ///< Final counts.
  std::string trace_file{};             ///< Written trace, if tracing was on.
  std::size_t trace_events = 0;
  std::size_t trace_events_dropped = 0;
  std::string trace_error{};            ///< Why the trace could not be written, if it could not.
};


namespace detail {
class pool_router;
template <class T>
concept has_protocol = requires { typename T::protocol; };
template <class T>
struct spawn_result {
  using type = actor_ref;
};
template <has_protocol T>
struct spawn_result<T> {
  using type = typed_actor<typename T::protocol>;
};
template <class P>
struct protocol_metas;
template <class... Ms>
struct protocol_metas<protocol<Ms...>> {
  static std::vector<const type_meta*> get() { return {type_of<typename protocol_entry<Ms>::message>()...}; }
};
/// The message types `T`'s first behavior must handle: its protocol's, if it declares one.
template <class T>
std::vector<const type_meta*> required_handlers() {
  if constexpr (has_protocol<T>) return protocol_metas<typename T::protocol>::get();
  else return {};
}
}  // namespace detail

/// The runtime: a fixed pool of scheduler threads, a timer thread, and the actors.
///
/// Thread-safety: every member may be called from any thread, except that `shutdown` and the
/// destructor must not be called from inside an actor.
///
/// Example:
/// \code
///   strata::actor_system sys;                       // one worker per hardware thread
///   auto counter = sys.spawn<counter_actor>();       // class-based
///   auto echo = sys.spawn([](strata::actor&) -> strata::behavior {
///     return {[](const std::string& s) { return s; }};
///   });                                              // function-based
///   auto reply = sys.request<std::string>(echo, 1s, std::string("hi")).get();
///   sys.shutdown();
/// \endcode
class actor_system : public detail::typed_calls<actor_system> {
public:
  explicit actor_system(system_config config = {});
  /// Shuts down (drain mode) if `shutdown` was not called. A trace that then cannot be written
  /// has nobody to receive `shutdown_report::trace_error`, so the destructor prints it as one
  /// line on stderr ("strata: cannot write trace file '...': ..."); call `shutdown` to handle
  /// the error yourself.
  ~actor_system();
  actor_system(const actor_system&) = delete;
  actor_system& operator=(const actor_system&) = delete;

  const system_config& config() const noexcept;
  /// Scheduler threads (0 in a deterministic system).
  std::size_t worker_count() const noexcept;

  /// Spawns a class-based actor `T` constructed from `args`. Returns a typed handle when `T`
  /// declares `using protocol = strata::protocol<...>`, else an `actor_ref`.
  template <class T, class... Args>
    requires std::derived_from<T, actor>
  typename detail::spawn_result<T>::type spawn(Args&&... args) {
    return spawn_with<T>(spawn_options{}, std::forward<Args>(args)...);
  }
  template <class T, class... Args>
    requires std::derived_from<T, actor>
  typename detail::spawn_result<T>::type spawn_with(spawn_options options, Args&&... args) {
    auto ref = spawn_instance(std::make_unique<T>(std::forward<Args>(args)...), with_defaults(std::move(options)), {},
                              {}, detail::required_handlers<T>());
    return typename detail::spawn_result<T>::type(std::move(ref));
  }
  /// Spawns a function-based actor: `fn(actor& self, args...)` returns its behavior.
  template <class F, class... Args>
    requires std::is_invocable_r_v<behavior, F&, actor&, Args&...>
  actor_ref spawn(F fn, Args... args) {
    return spawn_fn_with(spawn_options{}, std::move(fn), std::move(args)...);
  }
  template <class F, class... Args>
    requires std::is_invocable_r_v<behavior, F&, actor&, Args&...>
  actor_ref spawn_fn_with(spawn_options options, F fn, Args... args) {
    auto init = [fn = std::move(fn), ... args = std::move(args)](actor& self) mutable { return fn(self, args...); };
    return spawn_instance(std::make_unique<function_actor>(std::move(init)), with_defaults(std::move(options)), {}, {});
  }

  /// Spawns a supervisor: it restarts a failed child (a fresh instance behind the same handle,
  /// keeping the child's queued messages), with `restart_strategy::all_for_one` every other
  /// child too, with `rest_for_one` the children spawned after it, after the policy's backoff,
  /// until the policy's limit is exceeded; then the supervisor stops that child and
  /// fails itself with `errc::restart_limit`. Stopping the supervisor stops its children.
  /// A bad backoff (factor below 1, negative start, maximum below the start) throws
  /// `error_exception` (invalid_argument) with one sentence.
  actor_ref spawn_supervisor(restart_policy policy = {}, spawn_options options = {});
  /// Spawns a pool: `options.size` workers `T(args...)`, supervised (restarted on failure by
  /// `options.restarts`), behind one handle, the pool's router. Messages sent to the handle are
  /// routed by `options.strategy` with their sender and request id, so a worker's reply goes
  /// straight to the requester. The router answers `pool_resize` and `pool_size` itself. If the
  /// supervisor gives up, the router terminates too; stopping the router stops the workers.
  /// Bad options (no workers, consistent hashing without a key) throw `error_exception`
  /// (invalid_argument) with one sentence.
  template <class T, class... Args>
    requires std::derived_from<T, actor>
  actor_ref spawn_pool(pool_options options, Args... args) {
    return spawn_pool_from(std::move(options), [args...]() -> std::unique_ptr<actor> { return std::make_unique<T>(args...); });
  }
  /// Like `spawn_pool<T>`, with workers made by `factory`.
  actor_ref spawn_pool_from(pool_options options, std::function<std::unique_ptr<actor>()> factory);

  /// Spawns `T(args...)` supervised by `supervisor`; the arguments are kept to build restarts.
  template <class T, class... Args>
    requires std::derived_from<T, actor>
  typename detail::spawn_result<T>::type spawn_child(const actor_ref& supervisor, spawn_options options,
                                                     Args... args) {
    std::function<std::unique_ptr<actor>()> factory = [args...]() { return std::make_unique<T>(args...); };
    auto first = factory();
    auto ref = spawn_instance(std::move(first), with_defaults(std::move(options)), supervisor, std::move(factory),
                              detail::required_handlers<T>());
    return typename detail::spawn_result<T>::type(std::move(ref));
  }

  /// Sends `msg` to `to` from outside any actor (anonymous sender).
  template <class T>
  expected<void> send(const actor_ref& to, T&& msg) {
    return detail::deliver(to.cell(), make_envelope(std::forward<T>(msg), false), impl_.get());
  }
  /// Through a typed handle: checked against the receiver's protocol (detail::typed_calls).
  using detail::typed_calls<actor_system>::send;
  template <class T>
  expected<void> send_urgent(const actor_ref& to, T&& msg) {
    return detail::deliver(to.cell(), make_envelope(std::forward<T>(msg), true), impl_.get());
  }

  /// Requests from outside any actor: the future holds the response or the error (timeout,
  /// failed reply, undeliverable). Never blocks a scheduler thread; do not wait on the future
  /// inside an actor.
  template <class R, class T>
  std::future<expected<std::conditional_t<std::is_void_v<R>, unit_t, R>>> request(
      const actor_ref& to, std::chrono::nanoseconds timeout, T msg);
  /// Through a typed handle (detail::typed_calls): `R` checked against the protocol, or not
  /// named where the protocol declares the reply (`R(T)`).
  using detail::typed_calls<actor_system>::request;

  /// Delivers `msg` to `to` after `delay`; cancellable.
  template <class T>
  timer_handle delayed_send(const actor_ref& to, std::chrono::nanoseconds delay, T msg) {
    return timer_handle(detail::schedule_timer(impl_.get(), delay, std::chrono::nanoseconds{0},
                                               make_timer_fire(to, std::move(msg))));
  }
  template <class T>
  timer_handle periodic_send(const actor_ref& to, std::chrono::nanoseconds period, T msg) {
    return timer_handle(detail::schedule_timer(impl_.get(), period, period, make_timer_fire(to, std::move(msg))));
  }

  /// Stops `target` (reason `stopped` unless given): it handles no further message.
  void stop(const actor_ref& target, error reason = error(errc::stopped, "the actor was stopped"));

  /// Blocks until the system is idle: no actor runnable or running and no timer pending (delayed
  /// and periodic sends, request timeouts), or until `timeout` passed; true if idle. Work queued
  /// on device streams is not seen: wait for the message it sends. Call it from outside actors
  /// (from inside one it throws std::logic_error: the caller's own turn is never idle).
  /// A deterministic system runs what is runnable on the calling thread instead of waiting; it
  /// fires no timer, so it is idle only when no timer is pending.
  bool await_idle(std::chrono::nanoseconds timeout);

  /// Blocks until every actor has terminated. A deterministic system runs what is runnable on
  /// the calling thread instead of waiting; if actors are still alive when nothing is runnable,
  /// it throws `error_exception` (runtime_failure) rather than hang.
  void await_all();
  /// Blocks until every actor has terminated or `timeout` passed; true if all terminated.
  /// A deterministic system runs what is runnable, as `await_all`, and never waits.
  bool await_all_for(std::chrono::nanoseconds timeout);

  /// Stops the system: handles or discards what is queued (see `shutdown_mode`), stops every
  /// actor, joins the threads, writes the trace. Idempotent: later calls return the first report.
  /// A trace that could not be written is reported in `trace_error` (check it: the runtime
  /// prints nothing when you called `shutdown`).
  shutdown_report shutdown(shutdown_mode mode = shutdown_mode::drain);

  system_stats stats() const;

  // ---- registry -------------------------------------------------------------------------------
  /// Registers `ref` under `name`; the entry goes away by itself when the actor terminates.
  /// Refused with one sentence: an empty handle or name (`invalid_argument`), a name already
  /// taken (`invalid_argument`), an actor that has terminated (`target_terminated`), or one of
  /// another system or process. A typed handle records its protocol for `lookup<P>`.
  expected<void> register_name(const actor_ref& ref, std::string name) {
    return register_name_impl(ref, std::move(name), nullptr);
  }
  template <class P>
  expected<void> register_name(const typed_actor<P>& ref, std::string name) {
    const std::vector<const type_meta*> metas = detail::protocol_metas<P>::get();
    return register_name_impl(ref.ref(), std::move(name), &metas);
  }
  /// Removes the entry `name`; false if there was none.
  bool unregister_name(std::string_view name);
  /// The actor registered under `name`, or `errc::not_found`.
  expected<actor_ref> lookup(std::string_view name) const { return lookup_impl(name, nullptr); }
  /// Typed: the actor must have been registered with a typed handle whose protocol handles every
  /// message type of `P` (else `errc::type_mismatch`, naming the first type missing).
  template <class P>
  expected<typed_actor<P>> lookup(std::string_view name) const {
    const std::vector<const type_meta*> metas = detail::protocol_metas<P>::get();
    auto found = lookup_impl(name, &metas);
    if (!found) return found.error();
    return typed_actor<P>(std::move(*found));
  }
  /// Every registered name, sorted.
  std::vector<std::string> registered_names() const;

  // ---- dead letters -----------------------------------------------------------------------------
  /// `subscriber` receives a `dead_letter` for every message from now on that cannot be delivered
  /// or handled (see `dead_letter::reason`). Costs nothing on successful sends; with no
  /// subscriber, a failed send pays one relaxed atomic load. A subscriber that terminates is
  /// dropped at its first dead letter (undeliverable dead letters are never offered again).
  /// Refused for an empty handle (`invalid_argument`). Subscribing twice keeps one subscription.
  expected<void> subscribe_dead_letters(const actor_ref& subscriber);
  /// False if `subscriber` was not subscribed.
  bool unsubscribe_dead_letters(const actor_ref& subscriber);

  // ---- publish / subscribe ------------------------------------------------------------------------
  /// The group (topic) `name`, created at first use; the same name gives the same group.
  /// An empty name is refused with `std::invalid_argument`.
  strata::group group(std::string_view name);

private:
  expected<void> register_name_impl(const actor_ref& ref, std::string name,
                                    const std::vector<const type_meta*>* protocol);
  expected<actor_ref> lookup_impl(std::string_view name, const std::vector<const type_meta*>* protocol) const;

  friend struct detail::system_impl;
  friend class detail::pool_router;
  friend class test_coordinator;
  /// `required`: message types the first behavior must handle (a typed actor's protocol); a
  /// missing one throws error_exception (invalid_argument) and the actor is not started.
  actor_ref spawn_instance(std::unique_ptr<actor> instance, spawn_options options, const actor_ref& supervisor,
                           std::function<std::unique_ptr<actor>()> factory,
                           const std::vector<const type_meta*>& required = {});

  /// A user's spawn options with the system's mailbox default applied.
  spawn_options with_defaults(spawn_options options) const;

  template <class T>
  detail::envelope* make_envelope(T&& msg, bool urgent) {
    auto* e = new detail::typed_envelope<std::decay_t<T>>(std::forward<T>(msg));
    e->msg_id = detail::next_message_id();
    e->urgent = urgent;
    return e;
  }
  template <class T>
  std::function<void()> make_timer_fire(const actor_ref& to, T msg) {
    return [to, msg = std::move(msg)]() {
      auto* e = new detail::typed_envelope<T>(msg);
      e->msg_id = detail::next_message_id();
      (void)detail::deliver(to.cell(), e);
    };
  }

  // Shared with every actor's control block: a handle (or a device callback holding one) that
  // outlives the system still finds valid counters; its sends fail as undeliverable.
  std::shared_ptr<detail::system_impl> impl_;
};

// ---- template definitions -------------------------------------------------------------------

namespace detail {
/// One-shot actor that makes a request on behalf of non-actor code and fulfils a promise.
template <class Response, class T>
class request_proxy final : public actor {
public:
  request_proxy(actor_ref target, std::chrono::nanoseconds timeout, T msg,
                std::shared_ptr<std::promise<expected<Response>>> promise)
      : target_(std::move(target)), timeout_(timeout), msg_(std::move(msg)), promise_(std::move(promise)) {}
  behavior make_behavior() override {
    auto promise = promise_;
    this->request<Response>(target_, timeout_, std::move(msg_))
        .then(
            [this, promise](Response& r) {
              promise->set_value(expected<Response>(std::move(r)));
              quit();
            },
            [this, promise](const error& e) {
              promise->set_value(expected<Response>(e));
              quit();
            });
    return {[](const unit_t&) {}};
  }

private:
  actor_ref target_;
  std::chrono::nanoseconds timeout_;
  T msg_;
  std::shared_ptr<std::promise<expected<Response>>> promise_;
};
}  // namespace detail

template <class R, class T>
std::future<expected<std::conditional_t<std::is_void_v<R>, unit_t, R>>> actor_system::request(
    const actor_ref& to, std::chrono::nanoseconds timeout, T msg) {
  using response = std::conditional_t<std::is_void_v<R>, unit_t, R>;
  auto promise = std::make_shared<std::promise<expected<response>>>();
  auto future = promise->get_future();
  spawn_instance(std::make_unique<detail::request_proxy<response, T>>(to, timeout, std::move(msg), promise),
                 spawn_options{.name = "request-proxy"}, {}, {});
  return future;
}

}  // namespace strata
