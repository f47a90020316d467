// Publish / subscribe groups within one actor system.

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cell.hpp"
#include "system_impl.hpp"
#include "strata/actor_system.hpp"
#include "strata/group.hpp"

namespace strata {

namespace detail {

// Lock order: a group's m, then a member cell's mu (terminate_actor takes them one at a time).
struct group_state : std::enable_shared_from_this<group_state> {
  explicit group_state(std::string n) : name(std::move(n)) {}
  const std::string name;
  std::mutex m;
  std::vector<actor_ref> members;
};

const std::string& group_name(const group_state& g) noexcept { return g.name; }

expected<void> group_subscribe(group_state& g, const actor_ref& member) {
  if (!member)
    return error(errc::invalid_argument, "cannot subscribe an empty actor handle to group '" + g.name + "'");
  if (member.cell()->remote)
    return error(errc::invalid_argument, "cannot subscribe a handle to an actor of another process to group '" +
                                             g.name + "' (groups are local to one process)");
  auto* c = as_cell(member.cell());
  std::lock_guard lock(g.m);
  if (std::find(g.members.begin(), g.members.end(), member) != g.members.end()) return {};
  {
    std::lock_guard cell_lock(c->mu);
    if (c->terminated)
      return error(errc::target_terminated, "cannot subscribe actor '" + c->name + "' to group '" + g.name +
                                                "': it has terminated");
    c->groups.push_back(g.weak_from_this());  // terminate_actor removes the member from here
  }
  g.members.push_back(member);
  return {};
}

bool group_unsubscribe(group_state& g, const actor_ref& member) {
  if (!member || member.cell()->remote) return false;
  auto* c = as_cell(member.cell());
  std::lock_guard lock(g.m);
  if (std::erase(g.members, member) == 0) return false;
  std::lock_guard cell_lock(c->mu);
  std::erase_if(c->groups, [&g](const std::weak_ptr<group_state>& w) { return w.lock().get() == &g; });
  return true;
}

std::size_t group_size(group_state& g) {
  std::lock_guard lock(g.m);
  return g.members.size();
}

std::size_t group_publish(group_state& g, envelope_factory make, const void* msg, bool urgent) {
  actor_cell* publisher = current_cell();
  actor_ref sender = publisher ? actor_ref::from_cell(publisher) : actor_ref{};
  std::size_t delivered = 0;
  // Delivering under the lock keeps it simple: one publisher's messages reach each member in
  // order, and an actor unsubscribed before publish returns receives nothing later.
  std::lock_guard lock(g.m);
  for (const auto& member : g.members) {
    envelope* e = make(msg);
    e->sender = sender;
    e->msg_id = next_message_id();
    e->urgent = urgent;
    if (deliver(member.cell(), e)) ++delivered;
  }
  return delivered;
}

void leave_groups(actor_cell* cell, std::vector<std::weak_ptr<group_state>>& groups) noexcept {
  for (auto& w : groups) {
    if (auto g = w.lock()) {
      std::lock_guard lock(g->m);
      std::erase_if(g->members, [cell](const actor_ref& m) { return m.cell() == cell; });
    }
  }
  groups.clear();
}

}  // namespace detail

strata::group actor_system::group(std::string_view name) {
  if (name.empty()) throw std::invalid_argument("actor_system::group: a group needs a non-empty name");
  std::lock_guard lock(impl_->groups_m);
  auto& slot = impl_->groups[std::string(name)];
  if (!slot) slot = std::make_shared<detail::group_state>(std::string(name));
  return strata::group(slot);
}

}  // namespace strata
