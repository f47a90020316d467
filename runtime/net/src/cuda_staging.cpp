// The CUDA half of pinned staging (built only with STRATA_CUDA): page-locked memory from the
// device layer's cache and the copies between it and the GPU, as work items on strata streams so
// that they keep their place in the stream's order.

#include <cuda_runtime.h>

#include "device/cuda_device.hpp"
#include "staging.hpp"
#include "strata/device/device.hpp"
#include "strata/device/error.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/work.hpp"

namespace strata::net::detail {

std::shared_ptr<std::byte> take_pinned(const device& on, std::size_t bytes) {
  if (!on.valid() || on.kind() != device_kind::cuda)
    throw device_error(device_errc::invalid_argument, "pinned staging needs a cuda device");
  auto gpu = static_cast<cuda_backend::cuda_device&>(*on.impl()).gpu;
  std::size_t capacity = 0;
  void* p = gpu->take_pinned(bytes, capacity);
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                    [gpu, capacity](std::byte* q) { gpu->give_pinned(q, capacity); });
}

void enqueue_to_host(stream s, std::byte* dst, const tensor& src) {
  const std::size_t n = src.bytes();
  const void* from = src.raw_data();
  s.wait(src.ready_event());
  s.launch({.name = "net_stage_to_host",
            .kind = work_kind::copy,
            .bytes = 2.0 * static_cast<double>(n),
            .cuda = [dst, from, n](const cuda_launch_context& c) {
              cuda_backend::check(
                  cudaMemcpyAsync(dst, from, n, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(c.stream)),
                  "cudaMemcpyAsync (device to pinned host, strata::net)");
            }});
  src.storage().record_stream(s);
}

void enqueue_from_host(stream s, const tensor& dst, const std::byte* src) {
  const std::size_t n = dst.bytes();
  void* to = dst.raw_data();
  s.launch({.name = "net_unstage_to_device",
            .kind = work_kind::copy,
            .bytes = 2.0 * static_cast<double>(n),
            .cuda = [to, src, n](const cuda_launch_context& c) {
              cuda_backend::check(
                  cudaMemcpyAsync(to, src, n, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(c.stream)),
                  "cudaMemcpyAsync (pinned host to device, strata::net)");
            }});
}

}  // namespace strata::net::detail
