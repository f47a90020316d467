#pragma once
// Private: the cpu backend (oneTBB task arenas with ordered streams).

#include <memory>
#include <vector>

#include "device/impl.hpp"

namespace strata::cpu_backend {

/// Creates `count` cpu devices named "cpu:<first_index + i>", each a task arena of
/// `threads_per_device` threads (0 = max(1, hardware threads / count)).
std::vector<std::shared_ptr<detail::device_impl>> make_devices(int count, int first_index,
                                                                      int threads_per_device);

}  // namespace strata::cpu_backend
