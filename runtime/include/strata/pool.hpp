#pragma once
/// \file
/// Worker pools behind one handle: how messages are routed (`routing`), the options of
/// `actor_system::spawn_pool`, and the messages a pool's router answers itself.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "strata/supervisor.hpp"
#include "strata/type_meta.hpp"

namespace strata {

/// How a pool's router picks the worker for a message.
enum class routing : std::uint8_t {
  round_robin,       ///< Each worker in turn.
  broadcast,         ///< Every worker gets a copy (the message type must be copyable).
  smallest_mailbox,  ///< The worker with the fewest queued messages (ties: in turn).
  consistent_hash,   ///< By `pool_options::key`: one key always reaches the same worker while
                     ///< the pool keeps its size; resizing moves only the keys of added or
                     ///< removed workers. Messages without a key go round-robin.
};

/// A routing key for `routing::consistent_hash`: the key of a message of a given type, or
/// nothing (see `hash_key`).
using routing_key = std::function<std::optional<std::uint64_t>(const type_meta* type, const void* payload)>;

/// The key function of messages of type `T`: `key(const T&)` returns an integer key; messages of
/// other types have no key.
/// \code
///   options.key = strata::hash_key<get>([](const get& g) { return std::hash<std::string>{}(g.name); });
/// \endcode
template <class T, class F>
routing_key hash_key(F key) {
  return [key](const type_meta* type, const void* payload) -> std::optional<std::uint64_t> {
    if (type != type_of<T>()) return std::nullopt;
    return static_cast<std::uint64_t>(key(*static_cast<const T*>(payload)));
  };
}

/// The shape of a pool (`actor_system::spawn_pool`).
struct pool_options {
  std::size_t size = 4;                ///< Workers at start (at least 1).
  routing strategy = routing::round_robin;
  routing_key key{};                   ///< Required for `routing::consistent_hash`.
  restart_policy restarts{};           ///< How the pool's supervisor restarts failed workers.
  std::string name = "pool";           ///< The router's name; workers are "<name>-worker-<i>".
};

/// Send to a pool's handle to change its number of workers (at least 1). Growing spawns fresh
/// workers; shrinking retires the newest ones after they handled what they had queued. As a
/// request it is answered with the new size, or an error for 0.
struct pool_resize {
  std::size_t workers{};
};

/// Request from a pool's handle: answered with its number of workers (`std::size_t`).
struct pool_size {};

}  // namespace strata
