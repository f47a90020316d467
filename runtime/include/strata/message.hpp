#pragma once
/// \file
/// Message envelopes and the system messages every actor may receive.

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/actor_ref.hpp"
#include "strata/error.hpp"
#include "strata/type_meta.hpp"

namespace strata {

/// Delivered to a monitoring actor when the monitored actor terminates.
struct down_msg {
  actor_ref source{};  ///< The actor that terminated.
  error reason{};      ///< Why (`normal_exit` when it quit on its own).
};

/// Delivered to a linked actor when its link partner terminates. Actors that do not trap exits
/// terminate too (reason `linked_exit`) unless the partner's reason is normal.
struct exit_msg {
  actor_ref source{};
  error reason{};
};

/// A message that could not be delivered or handled, offered to the actors subscribed with
/// `actor_system::subscribe_dead_letters`. The payload itself is not kept.
struct dead_letter {
  std::string type_name{};  ///< The message's C++ type, e.g. "app::ping".
  actor_ref sender{};       ///< Its sender (empty for anonymous sends).
  actor_ref receiver{};     ///< The intended receiver (empty when sent to an empty handle).
  /// Why: `target_terminated` (sent to a terminated actor, or still queued when it terminated),
  /// `invalid_argument` (empty handle), `mailbox_full` (refused or dropped by a bounded mailbox),
  /// `unhandled_message` (the receiver has no handler for the type); the text says which.
  error reason{};
  bool request = false;     ///< True if it was a request (its requester received `reason` as well).
};

/// The reply of a request whose handler returns nothing.
struct unit_t {
  friend bool operator==(unit_t, unit_t) noexcept { return true; }
};
inline constexpr unit_t unit{};

namespace detail {

enum class message_kind : std::uint8_t {
  user,            ///< A message for the actor's behavior.
  response,        ///< The value answering request `request_id`.
  error_response,  ///< An `error` answering request `request_id`.
  request_timeout, ///< Request `request_id` of the receiver timed out.
  stop,            ///< Wakes an actor whose stop flag was set.
  control,         ///< Runtime-internal closure run inside the actor.
};

/// One message in flight: header plus payload (see `typed_envelope`). Allocated from a
/// scalable allocator; owned by the mailbox until dispatched, then by the dispatcher.
struct envelope {
  envelope* next = nullptr;
  const type_meta* type = nullptr;
  actor_ref sender;
  std::uint64_t msg_id = 0;
  std::uint64_t request_id = 0;  ///< Non-zero: a request (user kind) or the request answered.
  message_kind kind = message_kind::user;
  bool urgent = false;

  envelope() = default;
  envelope(const envelope&) = delete;
  envelope& operator=(const envelope&) = delete;
  virtual ~envelope() = default;
  virtual void* payload() noexcept { return nullptr; }
  /// A copy of the payload in a fresh envelope (header fields default), or nullptr when the
  /// payload type cannot be copied (used by broadcasting routers).
  virtual envelope* clone_payload() const { return nullptr; }

  static void* operator new(std::size_t size);
  static void operator delete(void* ptr) noexcept;
};

template <class T>
struct typed_envelope final : envelope {
  template <class... Args>
  explicit typed_envelope(Args&&... args) : value(std::forward<Args>(args)...) {
    type = type_of<T>();
  }
  void* payload() noexcept override { return &value; }
  envelope* clone_payload() const override {
    if constexpr (std::is_copy_constructible_v<T>) return new typed_envelope<T>(value);
    else return nullptr;
  }
  T value;
};

/// A fresh message id, unique in the process (thread-local counter; no shared atomics).
std::uint64_t next_message_id() noexcept;

}  // namespace detail
}  // namespace strata
