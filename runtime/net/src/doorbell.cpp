#include "doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

namespace strata::net::detail {

namespace {
// Shared futexes (not FUTEX_PRIVATE_FLAG): the word may be in memory several processes map.
long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}
}  // namespace

void doorbell::ring() noexcept {
  rings.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) != 0) futex(&rings, FUTEX_WAKE, 1, nullptr);
}

bool doorbell::sleep(std::uint32_t seen, std::chrono::microseconds up_to) noexcept {
  // Either the ringer sees `sleeping` and wakes the futex, or this thread sees the new count
  // (both sides order their store before their load): no ring is lost.
  sleeping.store(1, std::memory_order_seq_cst);
  if (rings.load(std::memory_order_seq_cst) == seen) {
    const auto us = up_to.count();
    const timespec timeout{static_cast<time_t>(us / 1'000'000), static_cast<long>(us % 1'000'000) * 1000};
    futex(&rings, FUTEX_WAIT, seen, &timeout);  // returns at once if the count moved meanwhile
  }
  sleeping.store(0, std::memory_order_relaxed);
  return rings.load(std::memory_order_acquire) != seen;
}

}  // namespace strata::net::detail
