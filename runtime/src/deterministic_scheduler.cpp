#include "deterministic_scheduler.hpp"

#include "cell.hpp"

namespace strata::detail {

void deterministic_scheduler::notify(actor_cell* cell) noexcept {
  std::lock_guard lock(m_);
  fifo_.push_back(cell);
}

actor_cell* deterministic_scheduler::pop() noexcept {
  std::lock_guard lock(m_);
  if (fifo_.empty()) return nullptr;
  actor_cell* c = fifo_.front();
  fifo_.pop_front();
  return c;
}

bool deterministic_scheduler::run_once() {
  while (actor_cell* c = pop()) {
    const std::uint64_t before = handled_.load(std::memory_order_relaxed);
    run_result r = run_actor(c, 1);
    // A budget of one stops before looking at the mailbox again: block it here if it is empty,
    // so that the FIFO holds only actors with a message (and `runnable()` counts them).
    if (r == run_result::reschedule && !c->box.has_local() && !c->box.fetch() && c->box.try_block())
      r = run_result::idle;
    if (r == run_result::reschedule) notify(c);
    if (handled_.load(std::memory_order_relaxed) != before) return true;
  }
  return false;
}

std::size_t deterministic_scheduler::runnable() const {
  std::lock_guard lock(m_);
  return fifo_.size();
}

actor_cell* deterministic_scheduler::front() const {
  std::lock_guard lock(m_);
  return fifo_.empty() ? nullptr : fifo_.front();
}

void deterministic_scheduler::clear() noexcept {
  std::lock_guard lock(m_);
  fifo_.clear();
}

}  // namespace strata::detail
