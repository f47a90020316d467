#include "strata/kvstore/kvstore.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "router.hpp"
#include "store.hpp"

namespace strata::kvstore {

actor_ref spawn(actor_system& system, kvstore::options options) {
  // Any kind merges: cpu, sim, and cuda (a store of that GPU, taking cuda tensors of any GPU); cpu
  // and cuda stores take float32 tensors of each other's kind too (crossing.hpp).
  auto check_merge_device = [](const device& d, const char* what) {
    if (!d.valid())
      throw std::invalid_argument(std::string("kvstore::spawn: a device store needs ") + what + "; none was given.");
  };
  if (options.kind == kvstore::kind::device && options.shard_devices.empty())
    check_merge_device(options.merge_device, "kvstore::options::merge_device");
  if (options.shards == 0)
    throw std::invalid_argument("kvstore::spawn: kvstore::options::shards is 0; expected at least 1.");
  if (options.max_in_flight == 0)
    throw std::invalid_argument("kvstore::spawn: kvstore::options::max_in_flight is 0; expected at least 1.");
  for (const auto& d : options.shard_devices) {
    check_merge_device(d, "a device in every entry of kvstore::options::shard_devices");
    if (d.kind() != options.shard_devices.front().kind())
      throw std::invalid_argument("kvstore::spawn: kvstore::options::shard_devices mixes " +
                                  options.shard_devices.front().name() + " and " + d.name() +
                                  "; expected devices of one kind.");
  }
  // Store actors run on threads of their own: a request of many keys or chunks keeps its handler
  // busy for a while (enqueueing a work item per chunk), and on the scheduler's threads a few
  // shards doing so held every thread, so that no timeout or other actor ran until they were done.
  auto name = options.name;
  if (options.shards == 1 && options.shard_devices.empty())
    return system.spawn_with<internal::kvstore_actor>(spawn_options{.name = std::move(name), .dedicated_thread = true},
                                                      std::move(options));

  std::vector<actor_ref> shards;
  internal::store_place place{device_kind::cpu, "cpu:0"};  // a local shard's own device
  if (options.kind == kvstore::kind::device) place = internal::store_place{options.merge_device.kind(), options.merge_device.name()};
  if (!options.shard_devices.empty())
    place = internal::store_place{options.shard_devices.front().kind(), options.shard_devices.front().name()};
  for (std::size_t i = 0; i < options.shards; ++i) {
    kvstore::options shard = options;
    shard.shards = 1;
    shard.shard_devices.clear();
    shard.name = options.name + "/shard" + std::to_string(i);
    if (!options.shard_devices.empty()) {
      shard.kind = kvstore::kind::device;
      shard.merge_device = options.shard_devices[i % options.shard_devices.size()];
    }
    auto shard_name = shard.name;
    shards.push_back(system.spawn_with<internal::kvstore_actor>(spawn_options{.name = std::move(shard_name), .dedicated_thread = true}, std::move(shard)));
  }
  return internal::spawn_router(system, std::move(options), std::move(shards), std::move(place));
}

}  // namespace strata::kvstore
