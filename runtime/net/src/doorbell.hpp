#pragma once
// Private: the word a communication thread sleeps on (docs/distributed.md, "Doorbells").

#include <atomic>
#include <chrono>
#include <cstdint>

namespace strata::net::detail {

/// A communication thread sleeps on its doorbell; any thread of its process rings it when there
/// is something to send, and the communication threads of ranks on the same machine ring it
/// after each message they post to it (their bells live in POSIX shared memory, bells.cpp's
/// share_bells). MPI itself wakes no one: without the bell a message to a sleeping rank waits for
/// that rank's next poll (for another machine's messages the network watch rings it, or replaces
/// it: network_watch.hpp). Lock-free atomics and shared futexes, so that the same bytes work
/// from several processes.
struct doorbell {
  // Apart: the owner's process bumps `rings` at every message it queues, while its peers read
  // `sleeping` after every message they post to it.
  alignas(64) std::atomic<std::uint32_t> rings{0};
  alignas(64) std::atomic<std::uint32_t> sleeping{0};

  /// Wakes the sleeper, if any (a futex wake only when it sleeps).
  void ring() noexcept;
  /// Rings only when the owner sleeps now: one read of its line, no write, on the hot path of
  /// ranks that poll. The owner may be about to sleep and miss it: it then sleeps one back-off
  /// step, as it would with no bell.
  void ring_if_asleep() noexcept {
    if (sleeping.load(std::memory_order_seq_cst) != 0) ring();
  }
  /// Sleeps for at most `up_to` unless the bell rang since `rings` read `seen`; true when it
  /// rang (before or during the sleep).
  bool sleep(std::uint32_t seen, std::chrono::microseconds up_to) noexcept;
  std::uint32_t seen() const noexcept { return rings.load(std::memory_order_acquire); }
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

}  // namespace strata::net::detail
