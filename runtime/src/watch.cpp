// Monitors and links that code outside the actor adds (strata::net, for watchers on other ranks).

#include <utility>

#include "cell.hpp"
#include "strata/extension/transport.hpp"
#include "strata/message.hpp"

namespace strata {

using detail::actor_cell;
using detail::envelope;
using detail::typed_envelope;

void detail::add_watcher(cell_base* target, const actor_ref& watcher, bool link) {
  actor_cell* t = detail::as_cell(target);
  error reason;
  {
    std::lock_guard lock(t->mu);
    if (!t->terminated) {
      (link ? t->links : t->watchers).push_back(watcher);
      return;
    }
    reason = t->stop_reason;
  }
  actor_ref source = actor_ref::from_cell(target);
  envelope* e = link ? static_cast<envelope*>(new typed_envelope<exit_msg>(exit_msg{source, std::move(reason)}))
                     : new typed_envelope<down_msg>(down_msg{source, std::move(reason)});
  e->sender = std::move(source);
  e->urgent = link;
  e->msg_id = detail::next_message_id();
  (void)detail::deliver(watcher.cell(), e);
}

void detail::remove_link(cell_base* target, const actor_ref& watcher) {
  actor_cell* t = detail::as_cell(target);
  std::lock_guard lock(t->mu);
  std::erase(t->links, watcher);
}

}  // namespace strata
