#pragma once
/// \file
/// `behavior`: the set of message handlers an actor runs, one per message type.

#include <functional>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/actor_ref.hpp"
#include "strata/message.hpp"
#include "strata/type_meta.hpp"

namespace strata {

class actor;
template <class R>
class response_promise;

namespace detail {

template <class F>
struct callable_traits : callable_traits<decltype(&std::remove_cvref_t<F>::operator())> {};
template <class C, class R, class... Args>
struct callable_traits<R (C::*)(Args...) const> {
  using result = R;
  using args = std::tuple<Args...>;
};
template <class C, class R, class... Args>
struct callable_traits<R (C::*)(Args...)> {
  using result = R;
  using args = std::tuple<Args...>;
};
template <class R, class... Args>
struct callable_traits<R (*)(Args...)> {
  using result = R;
  using args = std::tuple<Args...>;
};

template <class T>
struct is_expected : std::false_type {};
template <class T>
struct is_expected<expected<T>> : std::true_type {};

template <class T>
struct is_response_promise : std::false_type {};
template <class T>
struct is_response_promise<response_promise<T>> : std::true_type {};

/// What a handler answers a request with: its result, the value of an `expected`, or the type
/// of the `response_promise` it returns.
template <class R>
struct answer_of {
  using type = R;
};
template <class T>
struct answer_of<expected<T>> {
  using type = T;
};
template <class T>
struct answer_of<response_promise<T>> {
  using type = T;
};
template <class F>
using handler_message_t = std::remove_cvref_t<std::tuple_element_t<0, typename callable_traits<F>::args>>;
template <class F>
using handler_answer_t = typename answer_of<typename callable_traits<F>::result>::type;
template <class M, class... Fs>
inline constexpr bool some_handler_takes = (std::is_same_v<M, handler_message_t<Fs>> || ...);
/// True unless `P` declares a reply for `F`'s message and `F` answers with another type.
template <class P, class F>
constexpr bool answers_as_declared() {
  using message = handler_message_t<F>;
  if constexpr (!P::template declares_reply<message>) {
    return true;
  } else {
    using declared = typename P::template reply_to<message>;
    using answer = handler_answer_t<F>;
    return std::is_same_v<declared, answer> || (std::is_void_v<declared> && std::is_same_v<answer, unit_t>);
  }
}
struct typed_behavior_tag {};

/// Sends the handler's result back to the requester (defined in actor.hpp).
template <class R>
void reply_with(actor& self, envelope& request, R&& result);
void reply_unit(actor& self, envelope& request);

}  // namespace detail

/// The handlers of an actor. Each handler is a callable taking one message by value, `const T&`
/// or `T&` (the payload may be moved from). Its return value, if any, answers a request: a plain
/// value `R` or `expected<R>` (an error answers with a failed reply). A handler that returns
/// nothing answers requests with `unit` unless it took a response promise; a handler may also
/// return the `response_promise<R>` it took, which then answers (for `typed_behavior`'s checks).
///
/// Example:
/// \code
///   strata::behavior b{
///     [](const ping& p) { return pong{p.n}; },
///     [this](const add& a) { total_ += a.value; },
///   };
/// \endcode
class behavior {
public:
  struct handler {
    const type_meta* type;
    std::function<void(actor&, detail::envelope&)> invoke;
  };

  behavior() = default;

  template <class... Fs>
    requires(sizeof...(Fs) > 0 && (!std::is_same_v<std::remove_cvref_t<Fs>, behavior> && ...) &&
             (!std::is_base_of_v<detail::typed_behavior_tag, std::remove_cvref_t<Fs>> && ...))
  behavior(Fs&&... fs) {  // NOLINT: implicit from handlers on purpose
    handlers_.reserve(sizeof...(Fs));
    (add(std::forward<Fs>(fs)), ...);
  }

  /// The handler for `type`, or nullptr.
  const handler* find(const type_meta* type) const noexcept {
    for (const auto& h : handlers_)
      if (h.type == type) return &h;
    return nullptr;
  }
  bool empty() const noexcept { return handlers_.empty(); }
  std::size_t size() const noexcept { return handlers_.size(); }

private:
  template <class F>
  void add(F&& f) {
    using traits = detail::callable_traits<F>;
    static_assert(std::tuple_size_v<typename traits::args> == 1,
                  "a message handler takes exactly one argument: the message");
    using arg = std::tuple_element_t<0, typename traits::args>;
    using message = std::remove_cvref_t<arg>;
    using result = typename traits::result;
    const type_meta* type = type_of<message>();
    for (const auto& h : handlers_)
      if (h.type == type) throw std::invalid_argument("behavior: two handlers for message type " + type->name);
    handlers_.push_back(handler{
        type, [fn = std::forward<F>(f)](actor& self, detail::envelope& env) mutable {
          auto& msg = *static_cast<message*>(env.payload());
          if constexpr (std::is_void_v<result>) {
            if constexpr (std::is_lvalue_reference_v<arg>) fn(msg);
            else fn(std::move(msg));
            detail::reply_unit(self, env);
          } else if constexpr (std::is_lvalue_reference_v<arg>) {
            detail::reply_with(self, env, fn(msg));
          } else {
            detail::reply_with(self, env, fn(std::move(msg)));
          }
        }});
  }

  std::vector<handler> handlers_;
};

/// A behavior checked against a protocol at compile time: every handler takes a message of
/// `Protocol`, every message of `Protocol` has a handler, and a handler of an entry `R(T)`
/// answers with `R` (returning `R`, `expected<R>` or the `response_promise<R>` it took; `void`,
/// `expected<void>` or `unit_t` for `void(T)`). Converts to `behavior`, so `make_behavior`
/// returns it as it is:
/// \code
///   using protocol = strata::protocol<int(add), void(reset)>;
///   strata::behavior make_behavior() override {
///     return strata::typed_behavior<protocol>{
///         [this](const add& a) { return total_ += a.value; },
///         [this](const reset&) { total_ = 0; }};
///   }
/// \endcode
template <class Protocol>
class typed_behavior;

template <class... Entries>
class typed_behavior<protocol<Entries...>> : detail::typed_behavior_tag {
public:
  using protocol_type = protocol<Entries...>;

  template <class... Fs>
    requires(sizeof...(Fs) > 0 && (!std::is_base_of_v<detail::typed_behavior_tag, std::remove_cvref_t<Fs>> && ...))
  typed_behavior(Fs&&... fs) : untyped_(std::forward<Fs>(fs)...) {  // NOLINT: implicit, as behavior's
    static_assert((protocol_type::template handles<detail::handler_message_t<Fs>> && ...),
                  "typed_behavior: a handler takes a message outside its protocol");
    static_assert((detail::some_handler_takes<typename detail::protocol_entry<Entries>::message, Fs...> && ...),
                  "typed_behavior: a message of its protocol has no handler");
    static_assert((detail::answers_as_declared<protocol_type, Fs>() && ...),
                  "typed_behavior: a handler answers with another type than its protocol declares");
  }

  operator behavior() const& { return untyped_; }  // NOLINT: implicit on purpose
  operator behavior() && { return std::move(untyped_); }

private:
  behavior untyped_;
};

}  // namespace strata
