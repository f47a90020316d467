// Members of strata::actor that are not messaging or requests (identity, links and monitors,
// behavior access for the runtime, timers); dispatch and the run loop are in actor.cpp.

#include "strata/actor.hpp"

#include <string>
#include <utility>

#include "cell.hpp"
#include "strata/extension/transport.hpp"
#include "system_impl.hpp"

namespace strata {

using detail::actor_cell;

// ---- actor members ------------------------------------------------------------------------------

actor::~actor() = default;

void actor::on_exit(const error&) {}

actor_ref actor::self() const noexcept { return actor_ref::from_cell(cell_); }
std::uint64_t actor::id() const noexcept { return cell_ ? cell_->id : 0; }
const std::string& actor::name() const noexcept {
  static const std::string none;
  return cell_ ? cell_->name : none;
}
actor_system& actor::system() const noexcept { return *sys_->pub; }

const actor_ref& actor::current_sender() const noexcept {
  static const actor_ref none;
  return current_ ? current_->sender : none;
}

void actor::quit(error reason) {
  if (!cell_->quit_pending) {
    cell_->quit_pending = true;
    cell_->quit_reason = std::move(reason);
  }
}


void actor::trap_exit(bool enabled) noexcept { cell_->trap_exit = enabled; }

void actor::monitor(const actor_ref& target) {
  if (!target) return;
  if (target.cell()->remote) static_cast<detail::remote_cell*>(target.cell())->watch(self(), false);
  else detail::add_watcher(target.cell(), self(), false);
}

void actor::link_to(const actor_ref& target) {
  if (!target || target.cell() == cell_) return;
  if (target.cell()->remote) {
    {
      std::lock_guard lock(cell_->mu);
      cell_->links.push_back(target);
    }
    static_cast<detail::remote_cell*>(target.cell())->watch(self(), true);
    return;
  }
  actor_cell* t = as_cell(target.cell());
  actor_cell* first = t->id < cell_->id ? t : cell_;
  actor_cell* second = first == t ? cell_ : t;
  error reason;
  {
    std::scoped_lock lock(first->mu, second->mu);
    if (!t->terminated) {
      t->links.push_back(self());
      cell_->links.push_back(target);
      return;
    }
    reason = t->stop_reason;
  }
  auto* e = new detail::typed_envelope<exit_msg>(exit_msg{target, std::move(reason)});
  e->sender = target;
  e->urgent = true;
  e->msg_id = detail::next_message_id();
  (void)detail::deliver(cell_, e);
}

void actor::unlink_from(const actor_ref& target) {
  if (!target) return;
  if (target.cell()->remote) {
    {
      std::lock_guard lock(cell_->mu);
      std::erase(cell_->links, target);
    }
    static_cast<detail::remote_cell*>(target.cell())->unwatch(self(), true);
    return;
  }
  actor_cell* t = as_cell(target.cell());
  actor_ref me = self();
  std::scoped_lock lock(t->mu, cell_->mu);
  std::erase(t->links, me);
  std::erase(cell_->links, target);
}

// ---- timers -------------------------------------------------------------------------------------

std::shared_ptr<detail::timer_state> detail::schedule_timer(system_impl* sys, std::chrono::nanoseconds delay,
                                                            std::chrono::nanoseconds period,
                                                            std::function<void()> fire) {
  return sys->timers.schedule(delay, period, std::move(fire));
}

void detail::cancel_timer(const std::shared_ptr<timer_state>& timer) noexcept {
  if (timer && timer->owner) timer->owner->cancel(timer);
}

bool detail::timer_active(const std::shared_ptr<timer_state>& timer) noexcept {
  return timer && !timer->cancelled.load(std::memory_order_acquire) && !timer->finished.load(std::memory_order_acquire);
}

}  // namespace strata
