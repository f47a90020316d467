#pragma once
/// \file
/// The exception the device layer throws at its synchronous edges.

#include <stdexcept>
#include <string>

namespace strata {

/// What went wrong, so callers can branch without parsing messages.
enum class device_errc {
  invalid_argument,   ///< a caller broke a documented requirement (wrong device, size, dtype)
  unavailable,        ///< the requested hardware or backend is not present in this process
  out_of_memory,      ///< the device's memory (or a sim profile's capacity) is exhausted
  backend_failure,    ///< the backend (e.g. a CUDA call) reported an error
  work_failed,        ///< a work item threw or failed; carried by streams and events
};

/// Thrown by the device layer. The message is one sentence naming the input and what was
/// expected, or the failing backend call (e.g. "cudaMallocAsync failed: cudaErrorMemoryAllocation
/// (out of memory)").
///
/// Asynchronous failures are not thrown where they happen: a failing work item's exception is
/// captured by its stream and handed to later completion callbacks, events and synchronize().
class device_error : public std::runtime_error {
 public:
  device_error(device_errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  /// The category of the failure.
  device_errc code() const noexcept { return code_; }

 private:
  device_errc code_;
};

}  // namespace strata
