#pragma once
// Private: what wakes a sleeping communication thread when bytes arrive from another machine
// (docs/distributed.md, "Waking up").

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <unordered_map>

#include "doorbell.hpp"

namespace strata::net::detail {

/// Rings this rank's doorbell as soon as bytes reach a TCP socket that Open MPI polls, so that a
/// message from a rank on another machine ends the communication thread's sleep at once, as a
/// node-mate's ring does.
///
/// Open MPI 4 has no blocking progress: a blocking call spins in opal_progress, with
/// `mpi_yield_when_idle` it spins through sched_yield (a core either way), and the TCP BTL reads
/// its sockets only when opal_progress polls them (libevent with `poll`, without waiting). So a
/// thread of its own waits on those sockets instead: it finds this process's TCP sockets in
/// /proc/self/fd (the BTL's listening socket and its connections; also the launcher's, which
/// are quiet), adds each to an epoll set of its own, edge-triggered, and blocks there; each
/// arrival rings the bell (one atomic add and, when the communication thread sleeps, one futex
/// wake). Open MPI connects to a peer at the first message between them, so the watcher looks
/// for new sockets every `rescan_every` (a read of /proc/self/fd and one fstat per descriptor
/// it has not seen: tens of microseconds); until then a new connection's messages wait for the
/// next poll, as without the watch. Idle, it wakes ten times a second.
///
/// Communication thread only (start, stop); the watcher thread only rings.
class network_watch {
public:
  network_watch() = default;
  network_watch(const network_watch&) = delete;
  network_watch& operator=(const network_watch&) = delete;
  ~network_watch() { stop(); }

  static constexpr std::chrono::milliseconds rescan_every{100};

  /// Without a thread: the communication thread itself sleeps in the epoll set (`wait`), which
  /// saves a thread's wake-up per message. For a rank without node-mates, whose bell only its
  /// own threads ring: they write `wake_fd()` instead (endpoint_state::wake_locked).
  bool start_inline();
  /// The eventfd that ends `wait` (inline mode).
  int wake_fd() const noexcept { return stop_; }
  /// Inline mode: sleeps until bytes arrive on a watched socket, `wake_fd` is written, or
  /// `up_to` passes; looks for new sockets every `rescan_every`. True when bytes arrived.
  bool wait(std::chrono::microseconds up_to);

  /// Starts watching, ringing `*bell` (read at each ring: the bell may move) and counting each
  /// ring in `rings`; false when the kernel refuses an epoll set or an eventfd.
  bool start(std::atomic<doorbell*>& bell, std::atomic<std::uint64_t>& rings);
  void stop();
  bool running() const noexcept { return thread_.joinable(); }

  /// TCP sockets watched now.
  std::size_t sockets() const noexcept { return sockets_.load(std::memory_order_relaxed); }

private:
  void watch(std::atomic<doorbell*>& bell, std::atomic<std::uint64_t>& rings);
  /// Adds the TCP sockets of this process not watched yet.
  void rescan();

  int epoll_ = -1;
  int stop_ = -1;  // an eventfd: written once by stop()
  std::thread thread_;
  std::atomic<std::size_t> sockets_{0};
  std::unordered_map<int, std::uint64_t> seen_;  // descriptor -> inode of the socket seen there
  std::chrono::steady_clock::time_point scanned_{};
};

}  // namespace strata::net::detail
