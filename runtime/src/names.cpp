// The registry: actors by name, removed when they terminate.

#include <string>
#include <utility>
#include <vector>

#include "cell.hpp"
#include "system_impl.hpp"
#include "strata/actor_system.hpp"

namespace strata {

void detail::system_impl::forget_names(actor_cell* cell) noexcept {
  std::lock_guard lock(names_m);
  std::erase_if(names, [cell](const auto& entry) { return entry.second.ref.cell() == cell; });
}

expected<void> actor_system::register_name_impl(const actor_ref& ref, std::string name,
                                                const std::vector<const type_meta*>* protocol) {
  if (!ref)
    return error(errc::invalid_argument, "cannot register an empty actor handle under the name '" + name + "'");
  if (ref.cell()->remote)
    return error(errc::invalid_argument, "cannot register '" + name + "': the handle is to an actor of another process");
  auto* c = detail::as_cell(ref.cell());
  if (c->sys != impl_)
    return error(errc::invalid_argument, "cannot register actor " + describe(c) + " under '" + name +
                                             "': it belongs to another actor system");
  if (name.empty()) return error(errc::invalid_argument, "cannot register actor " + describe(c) + " under an empty name");
  std::lock_guard lock(impl_->names_m);
  if (auto it = impl_->names.find(name); it != impl_->names.end()) {
    const auto* owner = detail::as_cell(it->second.ref.cell());
    return error(errc::invalid_argument, "the name '" + name + "' is already registered to actor " + describe(owner));
  }
  {
    std::lock_guard cell_lock(c->mu);
    if (c->terminated)
      return error(errc::target_terminated, "cannot register actor " + describe(c) + " under '" + name +
                                                "': it has terminated");
    c->named = true;  // terminate_actor then removes its entries (it reads the flag under mu)
  }
  detail::system_impl::name_entry entry{ref, protocol != nullptr, protocol ? *protocol : std::vector<const type_meta*>{}};
  impl_->names.emplace(std::move(name), std::move(entry));
  return {};
}

bool actor_system::unregister_name(std::string_view name) {
  std::lock_guard lock(impl_->names_m);
  auto it = impl_->names.find(name);
  if (it == impl_->names.end()) return false;
  impl_->names.erase(it);
  return true;
}

expected<actor_ref> actor_system::lookup_impl(std::string_view name,
                                              const std::vector<const type_meta*>* protocol) const {
  std::lock_guard lock(impl_->names_m);
  auto it = impl_->names.find(name);
  if (it == impl_->names.end())
    return error(errc::not_found, "no actor is registered under the name '" + std::string(name) + "'");
  const auto& entry = it->second;
  if (protocol != nullptr) {
    if (!entry.typed)
      return error(errc::type_mismatch, "the actor registered as '" + std::string(name) +
                                            "' was registered without a protocol; look it up untyped");
    for (const type_meta* t : *protocol) {
      bool found = false;
      for (const type_meta* have : entry.protocol) found = found || have == t;
      if (!found)
        return error(errc::type_mismatch, "the actor registered as '" + std::string(name) +
                                              "' does not handle " + t->name + " (not in its protocol)");
    }
  }
  return entry.ref;
}

std::vector<std::string> actor_system::registered_names() const {
  std::vector<std::string> out;
  std::lock_guard lock(impl_->names_m);
  out.reserve(impl_->names.size());
  for (const auto& [name, entry] : impl_->names) out.push_back(name);
  return out;
}

}  // namespace strata
