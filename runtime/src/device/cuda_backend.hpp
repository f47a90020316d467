#pragma once
// Private: the cuda backend (compiled only when STRATA_HAS_CUDA).

#include <memory>
#include <vector>

#include "device/impl.hpp"
#include "strata/device/spec.hpp"

namespace strata::cuda_backend {

/// What the cuda devices of one device_manager share: per-GPU state (memory pool, event and pinned
/// staging caches) and the dispatcher thread that issues CUDA calls deferred behind foreign waits.
class context;

std::shared_ptr<context> make_context();

/// Creates the devices of a cuda spec, enabling peer access between the listed GPUs.
/// \throws device_error (unavailable) without a GPU or for a GPU ordinal that does not exist.
std::vector<std::shared_ptr<detail::device_impl>> make_devices(const std::shared_ptr<context>& ctx,
                                                                      const device_spec& spec, int first_index);

/// cudaGetDeviceCount, 0 on any error.
int gpu_count() noexcept;

}  // namespace strata::cuda_backend
