#pragma once
// Private: the implementation interfaces behind the device layer's handles.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "strata/device/buffer.hpp"
#include "strata/device/device.hpp"
#include "strata/device/error.hpp"
#include "strata/device/event.hpp"
#include "strata/device/stream.hpp"

namespace strata::detail {

using steady = std::chrono::steady_clock;

/// One recorded point of an event. Fires once; waiters registered before run on the firing thread.
class event_point {
 public:
  /// Marks the point complete, carrying `error`; runs the waiters outside the lock.
  void fire(std::exception_ptr error);
  bool done() const noexcept { return done_.load(std::memory_order_acquire); }
  /// Stores `fn` to run when the point fires and returns true; returns false (fn not stored, not
  /// called) if it has fired already.
  bool on_fire(std::function<void()> fn);
  /// Blocks until fired.
  void wait();
  /// Blocks until fired or `timeout` passed; returns done().
  bool wait_for(std::chrono::milliseconds timeout);
  std::exception_ptr error() const;
  steady::time_point fired_at() const;

  /// sim: modelled time (s) of the point; -1 until the record is processed.
  std::atomic<double> modelled{-1.0};
  /// cuda: the native cudaEvent_t recorded for this point (owned through native_owner).
  void* native = nullptr;
  int native_gpu = -1;
  bool native_timing = false;
  std::atomic<bool> native_recorded{false};
  /// cuda: the recording stream's sticky error when the record was issued (written before
  /// native_recorded is set), adopted by streams that wait on the native event.
  std::exception_ptr native_error;
  std::shared_ptr<void> native_owner;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  steady::time_point fired_at_{};
  std::vector<std::function<void()>> waiters_;
};

/// An event: the device it was created on and its current point.
class event_impl {
 public:
  event_impl(device_kind k, int gpu_ordinal, bool with_timing) : kind(k), gpu(gpu_ordinal), timing(with_timing) {}
  std::shared_ptr<event_point> current() const {
    std::lock_guard lk(mu_);
    return current_;
  }
  void set_current(std::shared_ptr<event_point> p) {
    std::lock_guard lk(mu_);
    current_ = std::move(p);
  }
  const device_kind kind;
  const int gpu;
  const bool timing;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<event_point> current_;
};

class device_impl;
class stream_impl;

/// A pool allocation. Its destructor starts the stream-ordered release.
struct allocation {
  allocation(std::shared_ptr<stream_impl> s, void* p, std::size_t n, std::size_t cap)
      : ptr(p), bytes(n), capacity(cap), stream(std::move(s)) {}
  ~allocation();
  allocation(const allocation&) = delete;
  allocation& operator=(const allocation&) = delete;

  void* const ptr;
  const std::size_t bytes;
  const std::size_t capacity;
  const std::shared_ptr<stream_impl> stream;  // allocated on; owns the device
  std::mutex mu;
  std::vector<std::weak_ptr<stream_impl>> uses;  // record_stream()
};

/// A stream's backend.
class stream_impl : public std::enable_shared_from_this<stream_impl> {
 public:
  stream_impl(std::shared_ptr<device_impl> dev, stream_priority priority);
  virtual ~stream_impl();

  virtual void launch(kernel_work work) = 0;
  virtual void copy(const std::shared_ptr<allocation>& dst, const std::shared_ptr<allocation>& src,
                    std::size_t bytes) = 0;
  virtual void copy_from_host(const std::shared_ptr<allocation>& dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const std::shared_ptr<allocation>& src, std::size_t bytes) = 0;
  /// Records `e` here (checks the backend matches) and makes the new point e's current one.
  virtual void record(event_impl& e);
  /// Fires `p` once all work submitted before has completed.
  virtual void record_point(std::shared_ptr<event_point> p) = 0;
  /// Later work waits for `p` (never null, maybe done).
  virtual void wait(std::shared_ptr<event_point> p) = 0;
  virtual void on_complete(completion_callback cb) = 0;
  virtual void synchronize();
  virtual std::exception_ptr error() const = 0;
  virtual void* native() const noexcept { return nullptr; }

  const std::shared_ptr<device_impl> device;
  const stream_priority priority;
  const std::uint64_t id;
};

/// A device's backend.
class device_impl : public std::enable_shared_from_this<device_impl> {
 public:
  explicit device_impl(device_properties properties) : props(std::move(properties)) {}
  virtual ~device_impl() = default;

  virtual std::shared_ptr<stream_impl> create_stream(stream_priority priority) = 0;
  virtual std::shared_ptr<event_impl> create_event(bool timing) {
    return std::make_shared<event_impl>(props.kind, props.gpu_ordinal, timing);
  }
  virtual std::shared_ptr<allocation> allocate(std::size_t bytes, const std::shared_ptr<stream_impl>& s) = 0;
  /// Called once from ~allocation: free `a`'s memory after `streams` (the allocation stream first)
  /// have completed the work submitted so far. Must not throw.
  virtual void release(void* ptr, std::size_t bytes, std::size_t capacity,
                       std::vector<std::shared_ptr<stream_impl>> streams) noexcept = 0;
  virtual memory_stats memory() const = 0;
  virtual void trim() {}

  /// Adds an observer; returns its id (> 0) for remove_observer.
  std::uint64_t add_observer(work_observer o);
  /// Removes observer `id` (unknown ids: nothing), waiting for its calls on other threads.
  void remove_observer(std::uint64_t id) noexcept;
  /// Replaces the set_work_observer slot (id 0); an empty `o` empties it.
  void set_observer(work_observer o);
  bool observed() const noexcept { return observed_.load(std::memory_order_relaxed); }
  /// Gives `r` to every observer, in the order they were installed (the set slot first).
  void notify(const work_record& r) const;

  const device_properties props;

 private:
  /// One installed observer. `running` counts its calls in progress; once `removed` is set no
  /// call starts, and retire() waits for the running ones (seq_cst on both: a call either sees
  /// `removed` or is counted before retire() reads `running`).
  struct observer_entry {
    std::uint64_t id = 0;
    work_observer fn;
    mutable std::atomic<int> running{0};
    std::atomic<bool> removed{false};
    void call(const work_record& r) const;
    void retire() noexcept;
  };
  using observer_list = std::vector<std::shared_ptr<observer_entry>>;
  /// Publishes `list` (copy on write: notify reads a snapshot without holding the lock).
  void publish(observer_list list);

  std::atomic<bool> observed_{false};
  mutable std::mutex observer_mu_;
  std::shared_ptr<const observer_list> observers_ = std::make_shared<const observer_list>();
  std::uint64_t next_observer_id_ = 1;
};

/// Runs `done` once every stream in `streams` has completed the work submitted so far (through
/// on_complete callbacks). `done` runs on whichever backend thread completes last.
void after_all(const std::vector<std::shared_ptr<stream_impl>>& streams, std::function<void()> done);

/// Shared counters for pools.
struct pool_counters {
  std::atomic<std::size_t> in_use{0};
  std::atomic<std::size_t> peak{0};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> cache_hits{0};
  void on_allocate(std::size_t n, bool hit) noexcept;
  void on_release(std::size_t n) noexcept { in_use.fetch_sub(n, std::memory_order_relaxed); }
};

[[noreturn]] void throw_invalid(const std::string& what);

#if STRATA_HAS_CUDA
/// cudaEventElapsedTime between two native points (defined in the cuda backend).
double cuda_elapsed_ms(const event_point& start, const event_point& end);
#endif

/// The backends' one way from a handle to its implementation and back (befriended by device,
/// stream, event and buffer, whose members for this are private).
struct device_access {
  static const std::shared_ptr<device_impl>& impl(const device& d) noexcept { return d.impl_; }
  static const std::shared_ptr<stream_impl>& impl(const stream& s) noexcept { return s.impl_; }
  static const std::shared_ptr<event_impl>& impl(const event& e) noexcept { return e.impl_; }
  static const std::shared_ptr<allocation>& impl(const buffer& b) noexcept { return b.impl_; }
  static device handle(std::shared_ptr<device_impl> p) noexcept { return device(std::move(p)); }
  static stream handle(std::shared_ptr<stream_impl> p) noexcept { return stream(std::move(p)); }
  static event handle(std::shared_ptr<event_impl> p) noexcept { return event(std::move(p)); }
  static buffer handle(std::shared_ptr<allocation> p) noexcept { return buffer(std::move(p)); }
};

/// The implementation behind handle `h` (null for an empty handle).
template <class Handle>
const auto& impl_of(const Handle& h) noexcept {
  return device_access::impl(h);
}
/// A handle to the implementation `p`.
template <class Impl>
auto handle_of(std::shared_ptr<Impl> p) noexcept {
  return device_access::handle(std::move(p));
}

}  // namespace strata::detail
