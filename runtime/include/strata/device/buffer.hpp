#pragma once
/// \file
/// buffer: shared ownership of one allocation from a device's stream-ordered memory pool.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata/device/kind.hpp"

namespace strata {

class device;
class stream;

namespace detail {
struct allocation;
struct device_access;
}

/// Counters of a device's memory pool. Snapshot; thread-safe to obtain.
struct memory_stats {
  std::size_t bytes_in_use = 0;       ///< bytes held by live buffers
  std::size_t peak_bytes_in_use = 0;  ///< high-water mark of bytes_in_use
  std::size_t bytes_cached = 0;       ///< freed bytes kept for reuse (cpu pool); CUDA pool's reserved-but-unused
  std::uint64_t allocations = 0;      ///< number of allocate() calls that succeeded
  std::uint64_t cache_hits = 0;       ///< allocations served from freed blocks (cpu pool)
};

/// A contiguous allocation on one device, obtained from device::allocate(). Shared ownership:
/// copies refer to the same memory; the memory returns to the pool when the last copy is dropped.
///
/// Release is stream-ordered: the block becomes reusable only after all work submitted, before
/// the release, to the stream it was allocated on, and to every stream named with
/// record_stream(), has completed. So a buffer can be dropped right after enqueueing work that
/// uses it.
///
/// cpu buffers are host memory (data() is dereferenceable on the host); cuda buffers are device
/// pointers; sim buffers hold no memory (data() is null) but count towards the profile's capacity.
/// Handles are thread-safe to copy; concurrent record_stream() calls are safe.
class buffer {
 public:
  buffer() noexcept = default;

  /// Start of the allocation (see class comment for what it points to).
  void* data() const noexcept;
  /// Bytes requested.
  std::size_t size() const noexcept;
  /// Backend of the owning device.
  device_kind kind() const noexcept;
  /// True for cpu buffers.
  bool host_accessible() const noexcept;
  /// The owning device. Include strata/device/device.hpp to use it.
  device get_device() const;
  /// Declares that `s` uses this buffer: the release also waits for `s`'s work submitted before
  /// the release (PyTorch's record_stream).
  void record_stream(const stream& s) const;

  bool valid() const noexcept { return impl_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  /// An opaque key naming the allocation: equal for copies of one buffer, different for any two
  /// live allocations (sim buffers too, whose data() is null), null for an empty buffer. For
  /// telling buffers apart or ordering them in a container; never dereference it.
  const void* identity() const noexcept { return impl_.get(); }

 private:
  friend struct detail::device_access;  // the backends' one way to the implementation
  explicit buffer(std::shared_ptr<detail::allocation> impl) noexcept : impl_(std::move(impl)) {}
  std::shared_ptr<detail::allocation> impl_;
};

}  // namespace strata
