#pragma once
// The private state of an actor_system.

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cell.hpp"
#include "scheduler.hpp"
#include "strata/actor_system.hpp"
#include "timer_service.hpp"

namespace strata::detail {

struct system_impl {
  system_impl(actor_system* owner, system_config cfg);

  void register_cell(actor_cell* cell);
  void unregister_cell(actor_cell* cell);
  /// Snapshot of live actors (references held).
  std::vector<actor_ref> live_cells();
  void schedule(actor_cell* cell) noexcept;

  actor_system* pub;
  system_config config;
  scheduler sched;
  timer_service timers;

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

  std::mutex dedicated_m;
  std::vector<std::unique_ptr<dedicated_thread>> dedicated;

  std::mutex shutdown_m;
  bool shut_down = false;
  std::atomic<bool> accepting{true};
  shutdown_report report;
  bool tracing = false;
};

}  // namespace strata::detail
