// One-for-one supervision: restart a failed child behind the same handle, within limits.

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
    };
  }

  void on_exit(const error& reason) override {
    for (auto& child : children_)
      system().stop(child, error(errc::stopped, "its supervisor '" + name() + "' terminated (" + reason.to_string() + ")"));
  }

private:
  void on_child_failed(detail::child_failed& m) {
    auto* c = detail::as_cell(m.child.cell());
    auto now = std::chrono::steady_clock::now();
    auto& history = history_[m.child.id()];
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
    }
  }

  void forget(const actor_ref& child) {
    std::erase(children_, child);
    history_.erase(child.id());
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
