#pragma once
/// Two kvstores that merge on sim devices, which hold no data: one store on sim:0 and two shards
/// on sim:0 and sim:1 (with a stream of sim:0 for their tensors). The tests that check what sim
/// stores refuse share them.

#include <array>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"

namespace strata::test {

struct sim_stores {
  device_manager sims{device_options{.sim_time_scale = 0}};
  std::vector<device> sim = sims.create("sim:2");
  stream sim_stream = sim[0].create_stream();
  kvstore::client one;
  kvstore::client shards;

  explicit sim_stores(actor_system& sys)
      : one(sys, kvstore::spawn(sys, {.kind = kvstore::kind::device, .merge_device = sim[0]})),
        shards(sys, kvstore::spawn(sys, {.shards = 2, .shard_devices = sim})) {}

  /// Both stores, for a loop over them.
  std::array<kvstore::client*, 2> both() { return {&one, &shards}; }
};

}  // namespace strata::test
