#pragma once
/// \file
/// stream: an ordered queue of asynchronous work on one device.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>

#include "strata/device/buffer.hpp"
#include "strata/device/event.hpp"
#include "strata/device/kind.hpp"
#include "strata/device/work.hpp"

namespace strata {

class device;

namespace detail {
class stream_impl;
struct device_access;
}

/// Scheduling priority of a stream. cuda: cudaStreamCreateWithPriority (high = greatest);
/// cpu: a ready high-priority stream is served before lower ones by the device's arena;
/// sim: ignored (streams do not contend in the model).
enum class stream_priority { low, normal, high };

/// Called when all work submitted before it has completed; the argument is the stream's error
/// (null on success). See stream::on_complete for the thread it runs on.
using completion_callback = std::function<void(std::exception_ptr)>;

/// Ordered asynchronous execution on one device, like a CUDA stream. Work submitted to a stream
/// (launch, copies, record, wait, on_complete) takes effect in submission order; work of different
/// streams may run concurrently. Submitting never blocks on device work.
///
/// - Handle with shared ownership; thread-safe: several threads may submit, each call is one
///   atomic step in the order (interleaving between threads is theirs to arrange).
/// - Errors: when a work item fails (a cpu function throws), the stream keeps the first error;
///   later work items on it are skipped, events recorded after it complete carrying the error,
///   completion callbacks receive it, synchronize() rethrows it. A stream that waits for an event
///   carrying an error adopts it. Invalid submissions (wrong device, missing implementation)
///   throw device_error at the call.
///
///     strata::stream s = dev.create_stream();
///     s.launch({.name = "fill", .bytes = 4.0 * n, .cpu = [=] { std::fill_n(p, n, 1.f); }});
///     s.on_complete([](std::exception_ptr e) { /* post a message; do not block */ });
class stream {
 public:
  stream() noexcept = default;

  /// The owning device. Include strata/device/device.hpp to use it.
  device get_device() const;
  /// Unique (per process) id, for traces.
  std::uint64_t id() const noexcept;
  stream_priority priority() const noexcept;

  /// Enqueues a work item (see kernel_work for what each backend runs).
  /// \throws device_error (invalid_argument) if this backend's implementation is missing.
  void launch(kernel_work work);

  /// Enqueues a copy of `bytes` bytes (default: all of `src`) from `src` to `dst`; they may be on
  /// this stream's device, the host (cpu buffers) or, on cuda, another GPU (peer copy). sim
  /// buffers hold no data: a sim stream models the copy's time, other streams skip it.
  /// \throws device_error (invalid_argument) if sizes do not fit or this backend cannot reach a
  ///   buffer (e.g. a cpu stream with a cuda buffer).
  void copy(const buffer& dst, const buffer& src, std::size_t bytes = SIZE_MAX);
  /// Enqueues a copy from host memory. The bytes are read before this call returns on cpu and
  /// cuda (staged), so `src` may be reused at once.
  void copy_from_host(const buffer& dst, const void* src, std::size_t bytes);
  /// Enqueues a copy to host memory; `dst` must stay valid until the work completes (record an
  /// event after it, or use on_complete).
  void copy_to_host(void* dst, const buffer& src, std::size_t bytes);

  /// Moves `e` to this point of the stream. `e` must come from a device of the same backend (and,
  /// for cuda, the same GPU). \throws device_error (invalid_argument) otherwise.
  void record(const event& e);
  /// Creates an event on this stream's device, records it here and returns it.
  event record();

  /// Work submitted after this call starts only after `e`'s recorded point has completed. `e` may
  /// belong to any stream, device and backend. No host thread blocks: cuda uses
  /// cudaStreamWaitEvent (or defers submission for a non-cuda event); cpu defers the stream's next
  /// item until `e` fires; sim moves the stream's modelled clock to `e`'s modelled time.
  void wait(const event& e);

  /// Calls `callback(error)` once, after all work submitted before it has completed, in submission
  /// order with other callbacks and work of this stream. Thread:
  /// - cpu: the arena thread that finished the preceding work;
  /// - sim: the sim clock thread (one per device_manager), at the modelled completion time;
  /// - cuda: CUDA's host-callback thread (cudaLaunchHostFunc); the callback must not call CUDA or
  ///   submit to cuda streams; it should post a message or notify and return.
  /// On every backend the callback must be quick, must not block and must not throw.
  void on_complete(completion_callback callback);

  /// Blocks until all submitted work has completed, then rethrows the stream's error if any.
  /// For tests and program edges; never call it on a backend thread.
  void synchronize();

  /// The first error of a failed work item on this stream (null if none).
  std::exception_ptr error() const;

  /// cuda: the cudaStream_t; otherwise null.
  void* native_handle() const noexcept;

  bool valid() const noexcept { return impl_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  friend bool operator==(const stream& a, const stream& b) noexcept { return a.impl_ == b.impl_; }

 private:
  friend struct detail::device_access;  // the backends' one way to the implementation
  explicit stream(std::shared_ptr<detail::stream_impl> impl) noexcept : impl_(std::move(impl)) {}
  std::shared_ptr<detail::stream_impl> impl_;
};

}  // namespace strata
