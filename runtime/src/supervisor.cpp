// Supervision: restart a failed child behind the same handle (one-for-one), or every child
// (all-for-one), within limits.

#include <algorithm>
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
        [this](detail::restart_due& m) { on_restart_due(m); },
    };
  }

  void on_exit(const error& reason) override {
    // Children waiting out a backoff are suspended and belong to this supervisor: nobody else
    // would ever run them again, so they terminate here.
    for (auto& [id, wait] : waiting_) {
      wait.timer.cancel();
      detail::terminate_actor(detail::as_cell(wait.child.cell()),
                              error(errc::stopped, "its supervisor '" + name() + "' terminated while it waited to restart (" +
                                                       reason.to_string() + ")"));
    }
    waiting_.clear();
    for (auto& child : children_)
      system().stop(child, error(errc::stopped, "its supervisor '" + name() + "' terminated (" + reason.to_string() + ")"));
  }

private:
  bool all_for_one() const noexcept { return policy_.strategy == restart_strategy::all_for_one; }

  void on_child_failed(detail::child_failed& m) {
    auto* c = detail::as_cell(m.child.cell());
    auto now = c->sys->now();  // a deterministic system's manual clock in tests
    // All for one: the group shares one restart history (key 0, never an actor id).
    auto& history = history_[all_for_one() ? 0 : m.child.id()];
    while (!history.empty() && now - history.front() > policy_.within) history.pop_front();
    if (ended_by_stop(m.child, c)) return;
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
    const auto delay = backoff_delay(history.size());
    history.push_back(now);
    if (delay.count() > 0) {
      // The child stays suspended (owned by this supervisor) until the reminder comes back.
      auto timer = delayed_send(self(), delay, detail::restart_due{m.child, m.reason});
      waiting_[m.child.id()] = waiting{m.child, std::move(timer)};
      return;
    }
    restart_now(m.child, m.reason);
  }

  /// A child whose stop was requested while it failed or waited for its restart ends with the
  /// stop's reason instead of restarting. Returns true if it did.
  bool ended_by_stop(const actor_ref& child, detail::actor_cell* c) {
    if (!c->stop_requested.load(std::memory_order_acquire)) return false;
    error reason;
    {
      std::lock_guard lock(c->mu);
      reason = c->stop_reason;
    }
    forget(child);
    detail::terminate_actor(c, std::move(reason));
    return true;
  }

  /// The wait before the `k`-th restart (from 0) within the window.
  std::chrono::milliseconds backoff_delay(std::size_t k) const {
    const auto& b = policy_.backoff;
    if (b.initial.count() <= 0) return std::chrono::milliseconds{0};
    double ms = static_cast<double>(b.initial.count());
    const double cap = static_cast<double>(b.max.count());
    for (std::size_t i = 0; i < k && ms < cap; ++i) ms *= b.factor;
    return std::chrono::milliseconds{static_cast<std::chrono::milliseconds::rep>(std::min(ms, cap))};
  }

  void on_restart_due(detail::restart_due& m) {
    if (waiting_.erase(m.child.id()) == 0) return;
    auto* c = detail::as_cell(m.child.cell());
    if (ended_by_stop(m.child, c)) return;
    restart_now(m.child, m.reason);
  }

  void restart_now(const actor_ref& child, const error& failure) {
    auto* c = detail::as_cell(child.cell());
    if (!detail::restart_actor(c)) {
      forget(child);
      detail::terminate_actor(c, error(errc::unhandled_exception,
                                       "could not restart '" + c->name + "' after: " + failure.message()));
      return;
    }
    if (policy_.strategy == restart_strategy::one_for_one) return;
    // Each sibling to restart suspends itself between two handlers and comes back as
    // child_suspended: all of them (all for one), or those started after the failed child
    // (rest for one; children_ is in spawn order).
    auto first = children_.begin();
    if (policy_.strategy == restart_strategy::rest_for_one) {
      first = std::find(children_.begin(), children_.end(), child);
      if (first != children_.end()) ++first;
    }
    for (auto it = first; it != children_.end(); ++it) {
      const auto& sibling = *it;
      if (sibling == child) continue;
      auto* e = new detail::typed_envelope<detail::suspend_for_restart>(detail::suspend_for_restart{failure});
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

  struct waiting {
    actor_ref child;
    timer_handle timer;
  };

  restart_policy policy_;
  std::unordered_map<std::uint64_t, waiting> waiting_;  // children waiting out their backoff
  std::vector<actor_ref> children_;
  std::unordered_map<std::uint64_t, std::deque<std::chrono::steady_clock::time_point>> history_;
};

}  // namespace

actor_ref actor_system::spawn_supervisor(restart_policy policy, spawn_options options) {
  if (options.name.empty()) options.name = "supervisor";
  const auto& b = policy.backoff;
  if (b.initial.count() < 0 || !(b.factor >= 1.0) || b.max < b.initial)
    throw error_exception(error(errc::invalid_argument,
                                "supervisor '" + options.name + "': restart backoff needs initial >= 0 ms, factor >= 1 "
                                "and max >= initial (got initial " + std::to_string(b.initial.count()) + " ms, factor " +
                                std::to_string(b.factor) + ", max " + std::to_string(b.max.count()) + " ms)"));
  return spawn_instance(std::make_unique<supervisor_actor>(policy), std::move(options), {}, {});
}

}  // namespace strata
