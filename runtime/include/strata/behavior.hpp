#pragma once
/// \file
/// `behavior`: the set of message handlers an actor runs, one per message type.

#include <functional>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/message.hpp"
#include "strata/type_meta.hpp"

namespace strata {

class actor;

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

/// Sends the handler's result back to the requester (defined in actor.hpp).
template <class R>
void reply_with(actor& self, envelope& request, R&& result);
void reply_unit(actor& self, envelope& request);

}  // namespace detail

/// The handlers of an actor. Each handler is a callable taking one message by value, `const T&`
/// or `T&` (the payload may be moved from). Its return value, if any, answers a request: a plain
/// value `R` or `expected<R>` (an error answers with a failed reply). A handler that returns
/// nothing answers requests with `unit` unless it took a response promise.
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
    requires(sizeof...(Fs) > 0 && (!std::is_same_v<std::remove_cvref_t<Fs>, behavior> && ...))
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

}  // namespace strata
