// The CUDA half of pinned staging (built only with STRATA_CUDA): page-locked memory from the
// device layer's cache (through the transport extension) and the copies between it and the GPU,
// as work items on strata streams so that they keep their place in the stream's order.

#include <cuda_runtime.h>

#include <string>

#include "staging.hpp"
#include "strata/device/device.hpp"
#include "strata/device/error.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/work.hpp"
#include "strata/extension/transport.hpp"

namespace strata::net::detail {

namespace {
/// Throws device_error for a failed CUDA call, as the device layer words it.
void check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  auto code = e == cudaErrorMemoryAllocation ? device_errc::out_of_memory : device_errc::backend_failure;
  throw device_error(code, std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
}  // namespace

std::shared_ptr<std::byte> take_pinned(const device& on, std::size_t bytes) {
  return strata::detail::pinned_host_memory(on, bytes);
}

void enqueue_to_host(stream s, std::byte* dst, const tensor& src) {
  const std::size_t n = src.bytes();
  const void* from = src.raw_data();
  s.wait(src.ready_event());
  s.launch({.name = "net_stage_to_host",
            .kind = work_kind::copy,
            .bytes = 2.0 * static_cast<double>(n),
            .cuda = [dst, from, n](const cuda_launch_context& c) {
              check(
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
              check(
                  cudaMemcpyAsync(to, src, n, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(c.stream)),
                  "cudaMemcpyAsync (pinned host to device, strata::net)");
            }});
}

}  // namespace strata::net::detail
