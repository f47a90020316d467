#pragma once
/// \file
/// Device completion as actor messages: an actor never blocks on device work; it asks to be told.

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/actor.hpp"
#include "strata/actor_ref.hpp"
#include "strata/device/stream.hpp"
#include "strata/message.hpp"

namespace strata {

/// The text of a failed work item's error (its `what()`), or "device work failed" when it is not a
/// std::exception.
inline std::string device_failure_text(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "device work failed";
  }
}

/// Delivered instead of the completion message when work on the stream failed.
struct device_failure {
  std::string what{};  ///< The failed work item's error text.
};

/// Sends `msg` to `to` once all work submitted to `s` so far has completed; if that work failed,
/// sends `on_failure(error)` instead: a message of the caller's own type built from the stream's
/// error itself (e.g. to tell whose error it is, or which step and instance it belongs to).
/// `on_failure` runs on the backend's completion thread and must not block.
template <class T, class F>
  requires std::is_invocable_v<F&, std::exception_ptr>
void send_on_complete(stream& s, const actor_ref& to, T msg, F on_failure) {
  s.on_complete([to, msg = std::move(msg), on_failure = std::move(on_failure)](std::exception_ptr failure) mutable {
    detail::envelope* e = nullptr;
    if (!failure) {
      e = new detail::typed_envelope<T>(std::move(msg));
    } else {
      using failed_t = std::decay_t<std::invoke_result_t<F&, std::exception_ptr>>;
      e = new detail::typed_envelope<failed_t>(on_failure(std::move(failure)));
    }
    e->msg_id = detail::next_message_id();
    (void)detail::deliver(to.cell(), e);
  });
}

/// Sends `msg` to `to` once all work submitted to `s` so far has completed; if that work failed,
/// sends `device_failure` instead. The message is posted from the backend's completion thread
/// (see `stream::on_complete`) without blocking it; order with other messages from that thread is
/// submission order.
///
/// Example, inside a stage actor's handler:
/// \code
///   stream_.launch(forward_work);                       // asynchronous
///   strata::send_on_complete(stream_, self(), forward_done{micro_batch});
///   // ... the handler returns; forward_done arrives as a message when the device is done.
/// \endcode
template <class T>
void send_on_complete(stream& s, const actor_ref& to, T msg) {
  send_on_complete(s, to, std::move(msg),
                   [](std::exception_ptr failure) { return device_failure{device_failure_text(failure)}; });
}

}  // namespace strata
