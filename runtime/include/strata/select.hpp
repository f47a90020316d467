#pragma once
/// \file
/// Fan-out requests: `actor::select_all` (every response, in the order of the targets) and
/// `actor::select_any` (the first response), each with one timeout and one error continuation.
///
/// Example (inside a handler):
/// \code
///   self.select_all<int>(workers, 1s, count_words{text})
///       .then([this](std::vector<int>& counts) { total_ = std::accumulate(counts.begin(), counts.end(), 0); },
///             [this](const strata::error& err) { log(err); });
///   self.select_any<reply>(replicas, 200ms, lookup{key})
///       .then([this](reply& first) { use(first); }, [this](const strata::error& err) { retry(err); });
/// \endcode

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/actor.hpp"

namespace strata {

namespace detail {

/// What one select shares between the continuations of its requests (inside one actor: no
/// locking). Runtime-internal.
struct select_state_base {
  const char* what = "select";           // "select_all" / "select_any", for error texts
  std::uint64_t timer_id = 0;            // the pending entry that carries the one timeout
  std::vector<std::uint64_t> ids;        // one request per target, in target order
  std::vector<std::uint64_t> target_ids; // the targets' actor ids, for error texts
  std::size_t outstanding = 0;           // responses still expected
  std::size_t failures = 0;              // select_any: targets that failed so far
  bool done = false;                     // the continuation (value or error) has run
  error first_error;
};

template <class Response>
struct select_state : select_state_base {
  std::vector<std::optional<Response>> replies;  // select_all, by target
};

/// The error continuation: the user's, or one that fails the actor (errors are never dropped).
inline std::shared_ptr<std::function<void(const error&)>> select_error_sink() {
  return std::make_shared<std::function<void(const error&)>>([](const error& err) { throw error_exception(err); });
}
template <class G>
std::shared_ptr<std::function<void(const error&)>> select_error_sink(G on_error) {
  return std::make_shared<std::function<void(const error&)>>(
      [g = std::move(on_error)](const error& err) mutable { g(err); });
}

/// The timeout's (or a refused start's) error, as the select reports it.
inline error select_timer_error(const select_state_base& st, const error& err) {
  if (err.code() != errc::request_timeout) return err;
  const std::size_t n = st.ids.size();
  return error(errc::request_timeout, std::string(st.what) + " timed out with " + std::to_string(n - st.outstanding) +
                                          " of " + std::to_string(n) + " responses");
}

/// What `select_all_handle` and `select_any_handle` share: `then`, and the wiring of every
/// target's response and failure and of the one timeout into the actor's pending requests.
/// `Policy` says what one response or one failure means: `take` stores a response and says
/// whether the select is answered; `deliver` runs the value callback; `failed` says whether a
/// target's failure ends the select, with which error. Every continuation runs once: the first
/// to end the select finishes it, the others then see `done`.
template <class R, class Policy>
class select_handle {
public:
  using response = std::conditional_t<std::is_void_v<R>, unit_t, R>;
  select_handle(actor* self, std::shared_ptr<select_state<response>> state) : self_(self), state_(std::move(state)) {}

  template <class F, class G>
  void then(F on_value, G on_error) {
    wire(std::move(on_value), select_error_sink(std::move(on_error)));
  }
  template <class F>
  void then(F on_value) {
    wire(std::move(on_value), select_error_sink());
  }

private:
  template <class F>
  void wire(F on_value, std::shared_ptr<std::function<void(const error&)>> fail) {
    auto st = state_;
    actor* self = self_;
    auto done = std::make_shared<F>(std::move(on_value));
    const std::size_t n = st->ids.size();
    for (std::size_t i = 0; i < n; ++i) {
      auto on_reply = [st, self, done, i](void* p) {
        if (st->done) return;
        auto& r = *static_cast<response*>(p);
        if (!Policy::take(*st, i, r)) return;
        self->finish_select(*st);
        Policy::deliver(*st, *done, r);
      };
      auto on_failure = [st, self, fail, i, n](const error& err) {
        if (st->done) return;
        std::optional<error> reported = Policy::failed(*st, i, n, err);
        if (!reported) return;
        self->finish_select(*st);
        (*fail)(*reported);
      };
      self->set_request_callbacks(st->ids[i], std::move(on_reply), std::move(on_failure));
    }
    self->set_request_callbacks(st->timer_id, nullptr, [st, self, fail](const error& err) {
      if (st->done) return;
      error reported = select_timer_error(*st, err);
      self->finish_select(*st);
      (*fail)(reported);
    });
  }

  actor* self_;
  std::shared_ptr<select_state<response>> state_;
};

/// select_all: every response, in target order; the first failure ends the select.
struct select_all_policy {
  template <class Response>
  static bool take(select_state<Response>& st, std::size_t i, Response& r) {
    st.replies[i].emplace(std::move(r));
    return --st.outstanding == 0;
  }
  template <class Response, class F>
  static void deliver(select_state<Response>& st, F& on_value, Response&) {
    if constexpr (std::is_invocable_v<F&, std::vector<Response>&>) {
      std::vector<Response> all;
      all.reserve(st.replies.size());
      for (auto& r : st.replies) all.push_back(std::move(*r));
      on_value(all);
    } else {
      static_assert(std::is_invocable_v<F&>, "select_all's value callback takes std::vector<R>& (or nothing for R = void)");
      on_value();
    }
  }
  static std::optional<error> failed(const select_state_base& st, std::size_t i, std::size_t n, const error& err) {
    return error(err.code(), std::string(st.what) + ": target " + std::to_string(i) + " of " + std::to_string(n) +
                                 " (actor id " + std::to_string(st.target_ids[i]) + "): " + err.message());
  }
};

/// select_any: the first response; the select fails once every target has failed.
struct select_any_policy {
  template <class Response>
  static bool take(select_state<Response>&, std::size_t, Response&) {
    return true;
  }
  template <class Response, class F>
  static void deliver(select_state<Response>&, F& on_value, Response& r) {
    if constexpr (std::is_invocable_v<F&, Response&>) {
      on_value(r);
    } else {
      static_assert(std::is_invocable_v<F&>, "select_any's value callback takes R& (or nothing for R = void)");
      on_value();
    }
  }
  static std::optional<error> failed(select_state_base& st, std::size_t i, std::size_t n, const error& err) {
    if (st.failures++ == 0)
      st.first_error = error(err.code(), "target " + std::to_string(i) + " (actor id " +
                                             std::to_string(st.target_ids[i]) + "): " + err.message());
    --st.outstanding;
    if (st.failures != n) return std::nullopt;
    return error(st.first_error.code(), std::string(st.what) + ": all " + std::to_string(n) +
                                            " requests failed; the first, " + st.first_error.message());
  }
};

}  // namespace detail

/// The continuation of `actor::select_all`: call `then` in the same handler.
/// `then(on_value, on_error)`: `on_value(std::vector<R>&)` (or `on_value()` for `R = void`) runs
/// once with every response; `on_error(const error&)` once with the first error.
template <class R>
class select_all_handle : public detail::select_handle<R, detail::select_all_policy> {
public:
  using detail::select_handle<R, detail::select_all_policy>::select_handle;
};

/// The continuation of `actor::select_any`: call `then` in the same handler.
/// `then(on_value, on_error)`: `on_value(R&)` (or `on_value()` for `R = void`) runs once with the
/// first response; `on_error(const error&)` once, when every target failed or the timeout passed
/// first.
template <class R>
class select_any_handle : public detail::select_handle<R, detail::select_any_policy> {
public:
  using detail::select_handle<R, detail::select_any_policy>::select_handle;
};

// ---- actor's fan-out members ------------------------------------------------------------------

template <class R, class T>
select_all_handle<R> actor::select_all(const std::vector<actor_ref>& targets, std::chrono::nanoseconds timeout,
                                       const T& msg) {
  using response = typename select_all_handle<R>::response;
  auto st = std::make_shared<detail::select_state<response>>();
  st->replies.resize(targets.size());
  start_select(*st, targets, timeout, type_of<response>(), [this, &msg] { return make_envelope(T(msg), false); },
               "select_all");
  return select_all_handle<R>(this, std::move(st));
}

template <class R, class P, class T>
select_all_handle<R> actor::select_all(const std::vector<typed_actor<P>>& targets, std::chrono::nanoseconds timeout,
                                       const T& msg) {
  static_assert(P::template handles<T>, "the receivers' protocol does not handle this message type");
  static_assert(P::template answers_with<T, R>, "the receivers' protocol answers this message with another type");
  return select_all<R>(std::vector<actor_ref>(targets.begin(), targets.end()), timeout, msg);
}

template <class R, class T>
select_any_handle<R> actor::select_any(const std::vector<actor_ref>& targets, std::chrono::nanoseconds timeout,
                                       const T& msg) {
  using response = typename select_any_handle<R>::response;
  auto st = std::make_shared<detail::select_state<response>>();
  start_select(*st, targets, timeout, type_of<response>(), [this, &msg] { return make_envelope(T(msg), false); },
               "select_any");
  return select_any_handle<R>(this, std::move(st));
}

template <class R, class P, class T>
select_any_handle<R> actor::select_any(const std::vector<typed_actor<P>>& targets, std::chrono::nanoseconds timeout,
                                       const T& msg) {
  static_assert(P::template handles<T>, "the receivers' protocol does not handle this message type");
  static_assert(P::template answers_with<T, R>, "the receivers' protocol answers this message with another type");
  return select_any<R>(std::vector<actor_ref>(targets.begin(), targets.end()), timeout, msg);
}

}  // namespace strata
