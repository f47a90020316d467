#pragma once
// The private state of an actor_system.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cell.hpp"
#include "deterministic_scheduler.hpp"
#include "scheduler.hpp"
#include "strata/actor_system.hpp"
#include "timer_service.hpp"

namespace strata::detail {

/// Removes the terminating `cell` from `groups` (the groups it was a member of).
void leave_groups(actor_cell* cell, std::vector<std::weak_ptr<group_state>>& groups) noexcept;

struct system_impl {
  system_impl(actor_system* owner, system_config cfg);

  void register_cell(actor_cell* cell);
  void unregister_cell(actor_cell* cell);
  /// Snapshot of live actors (references held).
  std::vector<actor_ref> live_cells();
  void schedule(actor_cell* cell) noexcept;
  /// A message queued for `cell` without waking it (see scheduler::note_queued_send).
  void note_queued_send(const actor_cell* cell) noexcept {
    if (cell->runner == nullptr) sched.note_queued_send();
  }
  /// The system's clock: the steady clock, or a deterministic system's manual clock (which
  /// starts at the clock's epoch and moves only when the test moves it).
  std::chrono::steady_clock::time_point now() noexcept;
  /// Deterministic systems only: runs messages on the calling thread until nothing is runnable
  /// or `done()` holds; returns how many ran.
  template <class Done>
  std::size_t run_deterministic(Done done) {
    std::size_t n = 0;
    while (!done() && det->run_once()) ++n;
    return n;
  }

  /// Offers `e` (not delivered or not handled for `reason`) to the dead-letter subscribers.
  /// Call only when `dead_letter_subscribers` is non-zero; `e` is not consumed.
  void offer_dead_letter(const envelope& e, const actor_ref& receiver, const error& reason) noexcept;
  /// Removes the registry entries of the terminating `cell`.
  void forget_names(actor_cell* cell) noexcept;

  actor_system* pub;
  system_config config;
  scheduler sched;  // not started in a deterministic system
  timer_service timers;
  // Null unless `config.deterministic`: then every actor's runner, and nothing runs by itself.
  std::unique_ptr<deterministic_scheduler> det;

  struct alignas(64) registry_shard {
    std::mutex m;
    actor_cell* head = nullptr;
  };
  std::array<registry_shard, 16> registry;

  std::atomic<std::uint64_t> next_id{1};
  std::atomic<std::size_t> live{0};
  std::mutex live_m;
  std::condition_variable live_cv;

  std::atomic<std::uint64_t> spawned{0}, terminated{0}, failed{0}, restarts{0}, undeliverable{0},
      unhandled{0}, mailbox_full{0}, dropped{0}, discarded{0}, late_responses{0},
      unanswered_results{0};
  alignas(64) std::atomic<std::uint64_t> handled{0};  // added once per actor turn

  // Registry: name -> actor (and its protocol when registered typed). Guarded by `names_m`;
  // lock order: names_m, then a cell's mu.
  struct name_entry {
    actor_ref ref;
    bool typed = false;
    std::vector<const type_meta*> protocol;
  };
  mutable std::mutex names_m;
  std::map<std::string, name_entry, std::less<>> names;

  // Dead letters: the count is read (relaxed) on failed sends only; the list under its mutex.
  std::atomic<std::size_t> dead_letter_subscribers{0};
  std::mutex dead_letter_m;
  std::vector<actor_ref> dead_letter_watchers;

  // Groups by name, created at first use, kept for the life of the system.
  std::mutex groups_m;
  std::unordered_map<std::string, std::shared_ptr<group_state>> groups;

  std::mutex dedicated_m;
  std::vector<std::unique_ptr<dedicated_thread>> dedicated;

  std::mutex shutdown_m;
  bool shut_down = false;
  std::atomic<bool> accepting{true};
  shutdown_report report;
  bool tracing = false;
};

}  // namespace strata::detail
