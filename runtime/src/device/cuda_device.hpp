#pragma once
// Private: a cuda device of the device layer (a GPU, or one share of it).

#include <memory>
#include <vector>

#include "device/cuda_gpu.hpp"
#include "device/cuda_reporter.hpp"
#include "device/impl.hpp"

namespace strata::cuda_backend {

using detail::allocation;
using detail::event_impl;
using detail::pool_counters;
using detail::stream_impl;

/// Allocates from its GPU's stream-ordered pool (cudaMallocFromPoolAsync), frees in stream order
/// through the context's dispatcher, and reports observed work through its work_reporter.
class cuda_device final : public device_impl {
 public:
  cuda_device(device_properties p, std::shared_ptr<context> c, std::shared_ptr<gpu_state> g);

  std::shared_ptr<stream_impl> create_stream(stream_priority priority) override;
  std::shared_ptr<allocation> allocate(std::size_t bytes, const std::shared_ptr<stream_impl>& s) override;
  void release(void* ptr, std::size_t bytes, std::size_t capacity,
               std::vector<std::shared_ptr<stream_impl>> streams) noexcept override;
  memory_stats memory() const override;
  void trim() override;
  std::shared_ptr<event_impl> create_event(bool timing) override;

  const std::shared_ptr<context> ctx;
  const std::shared_ptr<gpu_state> gpu;
  pool_counters counters;
  work_reporter reporter;  // last: it stops before the observer goes
};

}  // namespace strata::cuda_backend
