#pragma once
// Private: how a cuda device reports its completed work to its work observer (GPU times converted
// to steady-clock times through a calibrated clock anchor).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "device/cuda_gpu.hpp"
#include "device/impl.hpp"

namespace strata::cuda_backend {

using detail::device_impl;
using detail::steady;

/// A pooled event, given back to its GPU's pool when dropped (no CUDA call: safe on any thread).
class pooled_event {
 public:
  pooled_event() = default;
  pooled_event(std::shared_ptr<gpu_state> g, event_use use)
      : event_(g->take_event(use)), use_(use), gpu_(std::move(g)) {}
  pooled_event(pooled_event&& o) noexcept
      : event_(std::exchange(o.event_, nullptr)), use_(o.use_), gpu_(std::move(o.gpu_)) {}
  pooled_event& operator=(pooled_event&& o) noexcept {
    pooled_event old(std::move(*this));
    event_ = std::exchange(o.event_, nullptr);
    use_ = o.use_;
    gpu_ = std::move(o.gpu_);
    return *this;
  }
  ~pooled_event() {
    if (event_) gpu_->give_event(event_, use_);
  }
  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_{};
  event_use use_ = event_use::timing;
  std::shared_ptr<gpu_state> gpu_;
};

/// A recorded clock event and the steady-clock time at which the GPU reached it: event times are
/// converted to steady-clock times through cudaEventElapsedTime from it.
struct clock_anchor {
  pooled_event event;
  std::chrono::nanoseconds at{0};  // since the steady_clock epoch
  steady::time_point taken{};      // when it was measured (anchors are renewed after a second)
};

/// Reports the completed work of one cuda device to its work observer. An observed item is
/// bracketed by two pooled events on its stream (begin/finish, on the issuing thread). One thread
/// per device, started by the first observed item, takes the items in issue order, waits for each
/// end event (blocking-sync events: it sleeps), converts the event times to steady-clock times
/// through a clock_anchor and calls the observer. Nothing here runs on CUDA's callback thread.
/// Destruction drops undelivered items and never waits for the GPU: the thread is detached and
/// leaves after its current wait, touching only its shared core.
class work_reporter {
 public:
  /// An observed item whose start event has been recorded.
  struct span {
    pooled_event start, end;
    std::shared_ptr<const clock_anchor> anchor;
  };

  work_reporter(const device_impl& device, std::shared_ptr<gpu_state> g)
      : core_(std::make_shared<core>(device, std::move(g))) {}

  ~work_reporter();
  work_reporter(const work_reporter&) = delete;
  work_reporter& operator=(const work_reporter&) = delete;

  /// Records the start event of an observed item on `s` (GPU current). Never throws: an item that
  /// cannot be timed is not reported.
  std::optional<span> begin(cudaStream_t s) noexcept;

  /// Records the end event on `s` and queues the item; returns its sequence number (0 if dropped).
  std::uint64_t finish(span t, cudaStream_t s, std::uint64_t stream_id, const std::string& name, work_kind kind,
                       double flops, double bytes) noexcept;

  /// Blocks until the items up to `seq` have been delivered (or dropped).
  void wait_delivered(std::uint64_t seq);

 private:
  struct item {
    span times;
    std::string name;
    std::uint64_t stream_id = 0;
    work_kind kind = work_kind::pointwise;
    double flops = 0;
    double bytes = 0;
    std::uint64_t seq = 0;
  };

  struct core {
    core(const device_impl& d, std::shared_ptr<gpu_state> g)
        : device(&d), device_index(d.props.index), gpu(std::move(g)) {}
    const device_impl* const device;  // valid until `stop`; used only with `notifying` set
    const int device_index;
    const std::shared_ptr<gpu_state> gpu;
    std::mutex mu;
    std::condition_variable work;      // queue or stop changed
    std::condition_variable progress;  // delivered or notifying changed
    std::deque<item> queue;
    std::uint64_t issued = 0;
    std::uint64_t delivered = 0;
    bool stop = false;
    bool notifying = false;
    std::thread::id thread;  // set when the thread starts
  };

  /// The current anchor, renewed when older than a second so that cudaEventElapsedTime (a float
  /// of milliseconds) stays precise. Renewing waits for a record on the idle clock stream only.
  std::shared_ptr<const clock_anchor> anchor();

  /// Steady-clock start and end of a completed item; nullopt if CUDA cannot tell (a failed context).
  static std::optional<std::pair<std::chrono::nanoseconds, std::chrono::nanoseconds>> times(const span& t) noexcept;

  static void run(const std::shared_ptr<core>& k);

  const std::shared_ptr<core> core_;
  std::mutex anchor_mu_;
  std::shared_ptr<const clock_anchor> anchor_;
};

}  // namespace strata::cuda_backend

