#pragma once
/// \file
/// event: a point on a stream that other streams and the host can wait for.

#include <exception>
#include <functional>
#include <memory>

namespace strata {

namespace detail {
class event_impl;
struct device_access;
}

/// A marker recorded on a stream: it completes when all work submitted to that stream before the
/// record has completed. Created by device::create_event() or stream::record().
///
/// - Value semantics with shared ownership: copies refer to the same event; copying is cheap and
///   thread-safe, so an event can travel inside an actor message (see tensor::ready_event()).
/// - Recording again moves the event to a new point; waits, queries and callbacks that already
///   started keep referring to the point recorded when they were issued (CUDA semantics).
/// - A default-constructed event, or one never recorded, counts as complete.
/// - Any stream may wait for any event, of any device and backend (stream::wait); no host thread
///   blocks for that.
/// - All member functions are thread-safe.
///
///     strata::event done = producer.record();     // after the producer's work
///     consumer.wait(done);                        // consumer's later work runs after it
///     if (done.query()) { ... }                   // non-blocking check
class event {
 public:
  /// A null event: complete, carries no error.
  event() noexcept = default;

  /// True unless default-constructed.
  bool valid() const noexcept { return impl_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  /// Non-blocking: has the recorded point completed? True if never recorded.
  bool query() const;

  /// Blocks the calling thread until the recorded point completes, then rethrows the error of the
  /// recording stream, if any. For tests and program edges; never call it on a backend thread.
  void synchronize() const;

  /// The error the recording stream carried when the point completed (null if none or not yet).
  std::exception_ptr error() const;

  /// Calls `callback(error)` once when the currently recorded point completes: immediately on the
  /// calling thread if it already has (or was never recorded), otherwise on the thread that
  /// completes it (cpu: an arena thread; sim: the sim clock thread; cuda: the CUDA callback
  /// thread, which must not call CUDA). The callback must be quick and must not throw.
  void then(std::function<void(std::exception_ptr)> callback) const;

  /// Milliseconds between two completed events. cpu: host time at which each point was reached;
  /// sim: modelled time; cuda: cudaEventElapsedTime (both events created with timing = true).
  /// \throws device_error (invalid_argument) if either is not recorded, not complete, or the
  ///   two belong to different backends.
  static double elapsed_ms(const event& start, const event& end);

  /// Sim events: the modelled time (seconds since the sim clock's epoch) of the recorded point,
  /// known as soon as the record is processed, before the point completes in wall time.
  /// -1 for other backends, unrecorded events, or a record still queued behind a wait.
  double modelled_time() const;

  friend bool operator==(const event& a, const event& b) noexcept { return a.impl_ == b.impl_; }

 private:
  friend struct detail::device_access;  // the backends' one way to the implementation
  explicit event(std::shared_ptr<detail::event_impl> impl) noexcept : impl_(std::move(impl)) {}
  std::shared_ptr<detail::event_impl> impl_;
};

}  // namespace strata
