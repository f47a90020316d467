#pragma once
// Private: how a tensor's bytes travel between ranks (docs/distributed.md, "CUDA tensors across
// ranks"). Debian's Open MPI is not CUDA-aware, so MPI only ever sees host memory: a cpu tensor's
// own buffer (zero copy), or page-locked host memory a cuda tensor is staged through.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "strata/device/kind.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"

namespace strata::net::detail {

/// Where a tensor's bytes leave from, or land in.
enum class staging : std::uint8_t {
  direct,       ///< the tensor's own host buffer (cpu): MPI reads or writes it in place
  pinned_host,  ///< page-locked host memory, copied from or to the GPU on a stream of its device
};

/// The sender's path for a tensor on a device of kind `kind` (named `device_name` in the error).
/// \returns invalid_argument for a tensor that cannot cross ranks: sim (it holds no data), or
///   cuda in a build without CUDA (such a tensor cannot exist there).
expected<staging> send_staging(device_kind kind, const std::string& device_name);
/// The receiver's path for `endpoint_config::receive_device` of kind `kind`.
/// \returns invalid_argument for a device that cannot hold received bytes (sim).
expected<staging> receive_staging(device_kind kind, const std::string& device_name);

#if STRATA_HAS_CUDA
/// Page-locked host memory of at least `bytes` bytes from the pinned cache of the GPU of `on` (a
/// cuda device: the device layer's cache, which its own host copies use). It goes back to the
/// cache when the last owner drops it, with no CUDA call, so any thread may drop it.
/// \throws device_error (invalid_argument) if `on` is not a cuda device; CUDA's error when
///   cudaHostAlloc fails.
std::shared_ptr<std::byte> take_pinned(const device& on, std::size_t bytes);
/// Enqueues on `s` (a stream of `src`'s device): wait for `src`'s ready event, then copy its bytes
/// to host memory `dst`, which must stay allocated until the work is done. The buffer of `src` is
/// released after the copy even if every handle drops sooner.
void enqueue_to_host(stream s, std::byte* dst, const tensor& src);
/// Enqueues on `s` (a stream of `dst`'s device): copy `dst.bytes()` bytes from host memory `src`
/// into `dst`. Does not wait for `dst`'s ready event.
void enqueue_from_host(stream s, const tensor& dst, const std::byte* src);
#endif

}  // namespace strata::net::detail
