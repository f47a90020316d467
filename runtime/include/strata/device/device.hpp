#pragma once
/// \file
/// device: one compute device (a cpu arena, a GPU or a share of one, or a modelled device).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "strata/device/buffer.hpp"
#include "strata/device/event.hpp"
#include "strata/device/kind.hpp"
#include "strata/device/sim_profile.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/work.hpp"

namespace strata {

namespace detail {
class device_impl;
struct device_access;
}

/// Keeps a work observer added by `device::add_work_observer` installed: destroying the handle,
/// assigning to it or calling `remove()` removes that observer and leaves the device's others.
/// Movable, not copyable; a handle that outlives its device removes nothing.
///
/// Once `remove()` (or the destructor) returns, the observer is not running and is never called
/// again, so it may capture what dies right after the handle. remove() therefore waits for a call
/// in progress on another thread: do not remove an observer while holding something it waits for.
/// An observer may remove itself (that call is not waited for). The device's threads may call the
/// observer while another thread removes it; one handle object is used by one thread at a time.
///
///     std::atomic<std::int64_t> busy_ns{0};
///     auto timing = dev.add_work_observer([&](const strata::work_record& r) { busy_ns += (r.end - r.start).count(); });
///     ...  // work on dev's streams
///     timing.remove();  // or let it go out of scope before busy_ns does
class [[nodiscard]] work_observer_handle {
 public:
  work_observer_handle() noexcept = default;
  work_observer_handle(work_observer_handle&& other) noexcept;
  work_observer_handle& operator=(work_observer_handle&& other) noexcept;
  work_observer_handle(const work_observer_handle&) = delete;
  work_observer_handle& operator=(const work_observer_handle&) = delete;
  ~work_observer_handle();

  /// Removes the observer (waiting for a call in progress on another thread); then a no-op.
  void remove() noexcept;
  /// True while the handle holds an observer (not removed, moved from or default-constructed).
  bool active() const noexcept { return id_ != 0; }

 private:
  friend class device;
  work_observer_handle(std::weak_ptr<detail::device_impl> device, std::uint64_t id) noexcept
      : device_(std::move(device)), id_(id) {}

  std::weak_ptr<detail::device_impl> device_;
  std::uint64_t id_ = 0;
};

/// What a device is and can do. Fixed at creation.
struct device_properties {
  device_kind kind = device_kind::cpu;
  int index = 0;                     ///< position in the device set it was created with
  std::string name{};                ///< "cpu:0", "sim:3", "cuda:1", or "cuda:0#2" for shares of a GPU
  std::size_t total_memory = 0;      ///< cpu: physical host memory; cuda: the GPU's; sim: the profile's
  int concurrency = 1;               ///< cpu: arena threads; cuda: SM count; sim: 1
  int gpu_ordinal = -1;              ///< cuda: CUDA device ordinal
  int share_index = 0;               ///< cuda: which share of the GPU this device is
  int share_count = 1;               ///< cuda: how many devices share the GPU
  std::string hardware{};            ///< cuda: the GPU's name; cpu: "host"; sim: the profile's name
  std::optional<sim_profile> sim{};  ///< sim: the rates in force
};

/// A compute device: creates streams and events, owns a stream-ordered memory pool and copies
/// between memories. Created by device_manager::create() / make_devices().
///
/// - Handle with shared ownership; the device lives while any handle, stream, event or buffer of
///   it does. All member functions are thread-safe.
/// - Backends: cpu (a oneTBB task_arena; streams run their items one at a time inside it), sim
///   (no math; modelled time on the sim clock thread), cuda (a GPU or a share of one).
///
///     auto devices = strata::make_devices("cpu:2");
///     strata::stream s = devices[0].create_stream();
///     strata::buffer b = devices[0].allocate(1 << 20, s);
///     s.launch({.name = "zero", .bytes = 1 << 20, .cpu = [p = b.data()] { std::memset(p, 0, 1 << 20); }});
///     s.synchronize();
class device {
 public:
  device() noexcept = default;

  device_kind kind() const noexcept;
  int index() const noexcept;
  const std::string& name() const noexcept;
  const device_properties& properties() const noexcept;

  /// A new stream on this device.
  /// \throws device_error (backend_failure) if the backend cannot create one.
  stream create_stream(stream_priority priority = stream_priority::normal);

  /// A new, unrecorded event. `timing` enables elapsed_ms on cuda (cpu and sim always time).
  event create_event(bool timing = false);

  /// Allocates `bytes` (>= 0; 0 gives a valid empty buffer) ordered on `s`: the memory may be used
  /// by work submitted to `s` after this call (other streams: record_stream or an event). Alignment
  /// is at least 256 bytes. cpu: caching allocator; cuda: cudaMallocAsync from the GPU's pool;
  /// sim: counts bytes against the profile's capacity.
  /// \throws device_error (out_of_memory, invalid_argument if `s` is another device's).
  buffer allocate(std::size_t bytes, const stream& s);

  /// Same as `s.copy(dst, src, bytes)`; `s` must belong to this device.
  void copy(const buffer& dst, const buffer& src, const stream& s, std::size_t bytes = SIZE_MAX);

  /// True when work on this device can read `memory` where it is: host memory from a cpu device,
  /// memory of the same GPU from a cuda device (another share of that GPU included), and sim
  /// memory (which holds no data) from a sim device. Anything else must be copied into this
  /// device's own memory first (a peer copy between GPUs, PCIe between host and GPU).
  bool can_read_in_place(const buffer& memory) const;

  /// Snapshot of the memory pool's counters.
  memory_stats memory() const;

  /// Returns cached free blocks to the system (cpu) or trims the pool (cuda).
  void trim_memory();

  /// Adds a hook called for every completed work item, beside the device's other observers (a
  /// tracer and a per-stage clock can both watch one device). It stays installed until the handle
  /// is removed or destroyed. Observers run on the device's threads (work.hpp: the arena thread
  /// that ran the item, the sim clock thread, the cuda reporter thread), each record going to
  /// every observer one after another, possibly on several threads at once for several streams:
  /// an observer must be quick, thread-safe and must not throw (one that throws loses that record;
  /// the others still get it).
  /// \throws device_error (invalid_argument) on an empty device handle or an empty `observer`.
  work_observer_handle add_work_observer(work_observer observer);

  /// Installs the device's one "set" observer, replacing (or, with an empty function, removing)
  /// the one installed by the previous call; observers added with add_work_observer stay. A
  /// replaced observer is treated as by work_observer_handle::remove(): when this returns it is not
  /// running and is never called again.
  void set_work_observer(work_observer observer);

  bool valid() const noexcept { return impl_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  friend bool operator==(const device& a, const device& b) noexcept { return a.impl_ == b.impl_; }

 private:
  friend struct detail::device_access;  // the backends' one way to the implementation
  explicit device(std::shared_ptr<detail::device_impl> impl) noexcept : impl_(std::move(impl)) {}
  std::shared_ptr<detail::device_impl> impl_;
};

}  // namespace strata
