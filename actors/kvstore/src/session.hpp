#pragma once
// The session actor of a kvstore::client: forwards the client's calls to the store one message at
// a time, so that they reach it in call order. Private to strata::kvstore.

#include <chrono>

#include "strata/actor_ref.hpp"
#include "strata/actor_system.hpp"

namespace strata::kvstore::internal {

/// Spawns a session that forwards `detail::call`s to `store`, each with `timeout`, and stops once
/// `detail::session_close` has arrived and the calls in flight are answered.
actor_ref spawn_session(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout);

}  // namespace strata::kvstore::internal
