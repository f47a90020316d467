#pragma once
// Private: the completions a cuda stream hands to CUDA as host functions, and the watch that
// completes them with an error once the GPU has failed. Host-only (no CUDA header): the fault path
// is tested without a GPU (tests/kernels_cuda/completion_test.cpp).
//
// Why: event points, on_complete and send_on_complete complete only through cudaLaunchHostFunc,
// and after a sticky device error (an illegal address in a kernel, say) CUDA never runs the host
// functions already queued. Without this, every wait on such a point would block forever.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace strata::cuda_backend {

/// What a host function does: called once with nullptr when CUDA runs it, or with the stream's
/// fault when the GPU failed before it could run.
using completion = std::function<void(std::exception_ptr fault)>;

/// Asks the GPU whether it has failed: nullopt while healthy, else CUDA's description of the
/// sticky error ("cudaErrorIllegalAddress (an illegal memory access was encountered)"). Called on
/// the watch's thread; never throws.
using fault_probe = std::function<std::optional<std::string>()>;

class fault_watch;

/// The host functions one stream has queued that have not completed yet. Each entry completes
/// exactly once: through run() (CUDA ran the host function) or through fail() (the GPU faulted).
/// While entries are pending the ledger is on its fault_watch, which probes the GPU.
/// Thread-safe; completions run on the calling thread with no lock held.
class completion_ledger : public std::enable_shared_from_this<completion_ledger> {
 public:
  /// `stream_name` names the stream in fault messages ("cuda:0 stream 7"); `watch` may be null
  /// (nothing probes: only an explicit fail() completes entries early).
  completion_ledger(std::string stream_name, fault_probe probe, std::shared_ptr<fault_watch> watch);
  completion_ledger(const completion_ledger&) = delete;
  completion_ledger& operator=(const completion_ledger&) = delete;

  /// Keeps `c` and returns its ticket for run(); once the stream has faulted, returns 0 and leaves
  /// `c` with the caller, who completes it with fault() (off any lock).
  std::uint64_t add(completion&& c);
  /// CUDA ran the host function of `ticket`: runs its completion with nullptr, unless fail() has
  /// taken it. Exceptions from the completion are swallowed (nothing may reach CUDA).
  void run(std::uint64_t ticket) noexcept;
  /// Records `fault` (the first one stays) and completes every pending entry with it, in ticket
  /// order. Later add() calls return 0.
  void fail(std::exception_ptr fault) noexcept;
  /// Probes the GPU once: on a failure, fail()s with a device_error naming the stream. Returns
  /// whether the ledger still needs watching (entries pending, no fault); when it returns false,
  /// the next add() puts the ledger back on the watch.
  bool check() noexcept;

  /// The fault recorded by fail(), or nullptr.
  std::exception_ptr fault() const;
  std::size_t pending() const;
  const std::string& stream_name() const noexcept { return stream_name_; }

 private:
  const std::string stream_name_;
  const fault_probe probe_;
  const std::shared_ptr<fault_watch> watch_;
  mutable std::mutex mu_;
  std::map<std::uint64_t, completion> entries_;
  std::uint64_t next_ticket_ = 1;
  std::exception_ptr fault_;
  bool watched_ = false;
};

/// The device_error a stream's pending work completes with after the GPU failed: names the stream,
/// CUDA's description and how to find the failing kernel.
std::exception_ptr stream_fault(const std::string& stream_name, const std::string& description);

/// One thread that, every `interval` while any ledger has pending entries, calls check() on each:
/// a GPU failure therefore completes every pending point and callback within about one interval.
/// The thread starts with the first watched ledger and sleeps while none is watched. Destruction
/// stops it (detached when the last owner lets go on the thread itself).
class fault_watch {
 public:
  explicit fault_watch(std::chrono::milliseconds interval = std::chrono::milliseconds(100));
  ~fault_watch();
  fault_watch(const fault_watch&) = delete;
  fault_watch& operator=(const fault_watch&) = delete;

  /// Adds `ledger` to the ledgers checked each interval (called by completion_ledger::add).
  void watch(std::weak_ptr<completion_ledger> ledger);

 private:
  struct core;
  static void run(const std::shared_ptr<core>& c);
  std::shared_ptr<core> core_;
};

}  // namespace strata::cuda_backend
