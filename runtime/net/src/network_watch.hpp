#pragma once
// Private: what wakes a sleeping communication thread when bytes arrive from another machine
// (docs/distributed.md, "Waking up").

#include <atomic>
#include <cstdint>
#include <thread>

#include "doorbell.hpp"

namespace strata::net::detail {

/// Rings this rank's doorbell as soon as bytes reach a TCP socket that Open MPI polls, so that a
/// message from a rank on another machine ends the communication thread's sleep at once, as a
/// node-mate's ring does.
///
/// Open MPI 4 has no blocking progress: a blocking call spins in opal_progress, with
/// `mpi_yield_when_idle` it spins through sched_yield (a core either way), and the TCP BTL's
/// sockets sit in a libevent epoll set that opal_progress polls without waiting. So a thread of
/// its own waits on that epoll set instead: at start it finds, in /proc/self/fd and fdinfo, every
/// epoll set of this process that holds a TCP socket (Open MPI's: the BTL's listening socket is
/// there from MPI_Init on, and each connection joins it as Open MPI makes it), nests them in an
/// epoll set of its own, edge-triggered, and blocks there; each arrival rings the bell (one
/// atomic add and, when the communication thread sleeps, one futex wake). Idle, it costs nothing.
///
/// Communication thread only (start, stop); the watcher thread only rings.
class network_watch {
public:
  network_watch() = default;
  network_watch(const network_watch&) = delete;
  network_watch& operator=(const network_watch&) = delete;
  ~network_watch() { stop(); }

  /// Starts watching, ringing `*bell` (read at each ring: the bell may move); false when this
  /// process has no epoll set with a TCP socket (no TCP transport) or the kernel refuses.
  bool start(std::atomic<doorbell*>& bell);
  void stop();
  bool running() const noexcept { return thread_.joinable(); }
  /// Arrivals that rang the bell so far.
  std::uint64_t rings() const noexcept { return rings_.load(std::memory_order_relaxed); }

private:
  void watch(std::atomic<doorbell*>& bell);

  int epoll_ = -1;
  int stop_ = -1;  // an eventfd: written once by stop()
  std::thread thread_;
  std::atomic<std::uint64_t> rings_{0};
};

}  // namespace strata::net::detail
