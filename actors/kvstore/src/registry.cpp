// Store types by name (MXNet's KVStoreBase.register and mx.kv.create): a process-wide table of
// factories, with "local" and "device" (and MXNet's older names for them) built in.

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "strata/kvstore/kvstore.hpp"
#include "validation.hpp"

namespace strata::kvstore {

namespace {

/// The registered factories, the built-in types first.
struct type_table {
  std::mutex mu;
  std::map<std::string, store_factory> factories;

  type_table() {
    auto local = [](actor_system& system, const kvstore::options& o) {
      kvstore::options on_host = o;
      on_host.kind = kvstore::kind::local;
      return kvstore::spawn(system, std::move(on_host));
    };
    auto on_device = [](actor_system& system, const kvstore::options& o) {
      kvstore::options merged_on_device = o;
      merged_on_device.kind = kvstore::kind::device;
      return kvstore::spawn(system, std::move(merged_on_device));
    };
    // MXNet's names: "local" was "local_update_cpu" and "local_allreduce_cpu" (merged on the CPU,
    // updated there), "device" was "local_allreduce_device" (merged on the devices).
    for (const char* name : {"local", "local_update_cpu", "local_allreduce_cpu"}) factories[name] = local;
    for (const char* name : {"device", "local_allreduce_device"}) factories[name] = on_device;
  }
};

type_table& types() {
  static type_table table;
  return table;
}

}  // namespace

expected<void> register_type(const std::string& name, store_factory factory) {
  if (name.empty()) return internal::bad("kvstore::register_type: the name is empty; expected a store type's name.");
  if (!factory)
    return internal::bad("kvstore::register_type: the factory for \"" + name + "\" is empty; expected a function.");
  auto& table = types();
  std::lock_guard lock(table.mu);
  table.factories[name] = std::move(factory);
  return {};
}

expected<actor_ref> create(actor_system& system, const std::string& name, kvstore::options options) {
  store_factory factory;
  {
    auto& table = types();
    std::lock_guard lock(table.mu);
    auto it = table.factories.find(name);
    if (it == table.factories.end()) {
      std::string known;
      for (const auto& [n, f] : table.factories) known += (known.empty() ? "\"" : ", \"") + n + "\"";
      return expected<actor_ref>(internal::bad("kvstore::create: unknown store type \"" + name +
                                               "\"; the known types are " + known + "."));
    }
    factory = it->second;
  }
  options.type_name = name;
  try {  // outside the lock: a factory may register or create types itself
    return factory(system, options);
  } catch (const std::exception& e) {
    return expected<actor_ref>(internal::bad(e.what()));
  }
}

}  // namespace strata::kvstore
