// The behavior stack (become / unbecome) and the stash of an actor.

#include "strata/actor.hpp"

#include <string>
#include <utility>

#include "cell.hpp"

namespace strata {

void detail::requeue_stash(actor_cell* c) noexcept {
  if (c->stash.empty()) return;
  for (auto it = c->stash.rbegin(); it != c->stash.rend(); ++it) c->box.push_front_local(*it);
  if (c->capacity != 0) c->queued.fetch_add(c->stash.size(), std::memory_order_relaxed);
  c->stash.clear();
}

void detail::requeue_deferred(actor_cell* c) noexcept {
  if (c->deferred.empty()) return;
  for (auto it = c->deferred.rbegin(); it != c->deferred.rend(); ++it) c->box.push_front_local(*it);
  c->deferred.clear();  // still counted in `queued`: nothing to add back
}

void actor::become(behavior next) {
  changes_.push_back(detail::behavior_change{detail::behavior_change::op::replace, std::move(next)});
}

void actor::become(behavior next, keep_old_t) {
  changes_.push_back(detail::behavior_change{detail::behavior_change::op::push, std::move(next)});
  ++staged_depth_;
}

void actor::unbecome() {
  if (staged_depth_ == 0)
    throw error_exception(error(errc::invalid_argument,
                                "unbecome: actor " + detail::describe(cell_) +
                                    " has no earlier behavior to return to (no become(..., keep_old) is in effect)"));
  changes_.push_back(detail::behavior_change{detail::behavior_change::op::pop, behavior{}});
  --staged_depth_;
}

void actor::apply_behavior_changes() {
  // Runs after the handler returned: the behavior that ran it may be destroyed now.
  for (auto& change : changes_) {
    switch (change.what) {
      case detail::behavior_change::op::replace:
        behavior_ = std::move(change.next);
        break;
      case detail::behavior_change::op::push:
        earlier_.push_back(std::move(behavior_));
        behavior_ = std::move(change.next);
        break;
      case detail::behavior_change::op::pop:
        behavior_ = std::move(earlier_.back());
        earlier_.pop_back();
        break;
    }
  }
  changes_.clear();
}

void actor::stash() {
  if (current_ == nullptr || current_stashed_ || current_->kind != detail::message_kind::user) return;
  if (cell_->stash.size() >= cell_->stash_capacity)
    throw error_exception(error(errc::stash_full, "actor " + detail::describe(cell_) + " cannot stash a message of type " +
                                                      (current_->type ? current_->type->name : std::string("?")) +
                                                      ": its stash already holds its bound of " +
                                                      std::to_string(cell_->stash_capacity) + " messages"));
  cell_->stash.push_back(current_);
  current_stashed_ = true;
}

void actor::unstash_all() { detail::requeue_stash(cell_); }

std::size_t actor::stashed() const noexcept { return cell_ ? cell_->stash.size() : 0; }

}  // namespace strata
