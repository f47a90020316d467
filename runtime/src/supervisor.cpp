// Supervision: restart a failed child behind the same handle (one-for-one), or every child
// (all-for-one), within limits.

#include <chrono>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "cell.hpp"
#include "supervisor_msgs.hpp"
#include "system_impl.hpp"
#include "strata/actor_system.hpp"

namespace strata {

namespace {

class supervisor_actor final : public actor {
public:
  explicit supervisor_actor(restart_policy policy) : policy_(policy) {}

  behavior make_behavior() override {
    return {
        [this](const detail::child_added& m) { children_.push_back(m.child); },
        [this](detail::child_failed& m) { on_child_failed(m); },
        [this](const detail::child_suspended& m) { on_sibling_suspended(m.child); },
    };
  }

  void on_exit(const error& reason) override {
    for (auto& child : children_)
      system().stop(child, error(errc::stopped, "its supervisor '" + name() + "' terminated (" + reason.to_string() + ")"));
  }

private:
  bool all_for_one() const noexcept { return policy_.strategy == restart_strategy::all_for_one; }

  void on_child_failed(detail::child_failed& m) {
    auto* c = detail::as_cell(m.child.cell());
    auto now = std::chrono::steady_clock::now();
    // All for one: the group shares one restart history (key 0, never an actor id).
    auto& history = history_[all_for_one() ? 0 : m.child.id()];
    while (!history.empty() && now - history.front() > policy_.within) history.pop_front();
    if (c->stop_requested.load(std::memory_order_acquire)) {
      error reason;
      {
        std::lock_guard lock(c->mu);
        reason = c->stop_reason;
      }
      forget(m.child);
      detail::terminate_actor(c, std::move(reason));
      return;
    }
    if (history.size() >= policy_.max_restarts) {
      std::string child_name = c->name;
      forget(m.child);
      detail::terminate_actor(c, m.reason);
      quit(error(errc::restart_limit,
                 "supervisor '" + name() + "' gave up: child '" + child_name + "' failed more than " +
                     std::to_string(policy_.max_restarts) + " times within " + std::to_string(policy_.within.count()) +
                     " ms; last failure: " + m.reason.message()));
      return;
    }
    history.push_back(now);
    if (!detail::restart_actor(c)) {
      forget(m.child);
      detail::terminate_actor(c, error(errc::unhandled_exception,
                                       "could not restart '" + c->name + "' after: " + m.reason.message()));
      return;
    }
    if (!all_for_one()) return;
    // Each sibling suspends itself between two handlers and comes back as child_suspended.
    for (const auto& sibling : children_) {
      if (sibling == m.child) continue;
      auto* e = new detail::typed_envelope<detail::suspend_for_restart>(detail::suspend_for_restart{m.reason});
      e->kind = detail::message_kind::control;
      e->urgent = true;
      e->msg_id = detail::next_message_id();
      e->sender = self();
      (void)detail::deliver(sibling.cell(), e);  // a sibling that has terminated needs no restart
    }
  }

  void on_sibling_suspended(const actor_ref& child) {
    auto* c = detail::as_cell(child.cell());
    if (c->stop_requested.load(std::memory_order_acquire)) {
      error reason;
      {
        std::lock_guard lock(c->mu);
        reason = c->stop_reason;
      }
      forget(child);
      detail::terminate_actor(c, std::move(reason));
      return;
    }
    if (!detail::restart_actor(c)) {
      forget(child);
      detail::terminate_actor(c, error(errc::unhandled_exception,
                                       "could not restart '" + c->name + "' with its failed sibling"));
    }
  }

  void forget(const actor_ref& child) {
    std::erase(children_, child);
    if (!all_for_one()) history_.erase(child.id());
  }

  restart_policy policy_;
  std::vector<actor_ref> children_;
  std::unordered_map<std::uint64_t, std::deque<std::chrono::steady_clock::time_point>> history_;
};

}  // namespace

actor_ref actor_system::spawn_supervisor(restart_policy policy, spawn_options options) {
  if (options.name.empty()) options.name = "supervisor";
  return spawn_instance(std::make_unique<supervisor_actor>(policy), std::move(options), {}, {});
}

}  // namespace strata
