#pragma once
// The scheduler of a deterministic system (`system_config::deterministic`): no threads; a FIFO of
// runnable actors that the test steps one message at a time (`strata::test_coordinator`).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

#include "scheduler.hpp"

namespace strata::detail {

class deterministic_scheduler final : public cell_runner {
public:
  /// `handled`: the system's count of messages taken from mailboxes (tells a turn that ran one
  /// message from a turn that only found the mailbox empty or the actor stopped).
  explicit deterministic_scheduler(std::atomic<std::uint64_t>& handled) noexcept : handled_(handled) {}

  /// Appends `cell` to the FIFO. Any thread.
  void notify(actor_cell* cell) noexcept override;

  /// Runs one message of the first runnable actor on the calling thread; an actor with more
  /// messages goes to the back of the FIFO. False if no actor had a message.
  bool run_once();
  /// Actors waiting in the FIFO.
  std::size_t runnable() const;
  /// The first runnable actor, or null.
  actor_cell* front() const;
  /// Forgets the runnable actors without running them (shutdown, after every actor stopped).
  void clear() noexcept;

private:
  actor_cell* pop() noexcept;

  std::atomic<std::uint64_t>& handled_;
  mutable std::mutex m_;
  std::deque<actor_cell*> fifo_;
};

}  // namespace strata::detail
