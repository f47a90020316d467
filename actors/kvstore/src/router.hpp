#pragma once
// A sharded store's router: the actor in front of the shards. Private to strata::kvstore.

#include <vector>

#include "strata/actor_ref.hpp"
#include "strata/actor_system.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "validation.hpp"

namespace strata::kvstore::internal {

/// Spawns the router named `options.name` in front of `shards` (store actors whose values live on
/// `place`); stopping it stops the shards.
actor_ref spawn_router(actor_system& system, kvstore::options options, std::vector<actor_ref> shards,
                       store_place place);

}  // namespace strata::kvstore::internal
