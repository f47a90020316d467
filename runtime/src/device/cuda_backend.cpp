#include "device/cuda_backend.hpp"

#include <string>
#include <utility>

#include "device/cuda_device.hpp"
#include "device/cuda_gpu.hpp"
#include "device/cuda_stream.hpp"
#include "device/cuda_support.hpp"
#include "strata/extension/transport.hpp"

namespace strata::cuda_backend {

using namespace detail;

std::shared_ptr<context> make_context() { return std::make_shared<context>(); }

int gpu_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// ---- device -------------------------------------------------------------------------------------
cuda_device::cuda_device(device_properties p, std::shared_ptr<context> c, std::shared_ptr<gpu_state> g)
    : device_impl(std::move(p)), ctx(std::move(c)), gpu(std::move(g)), reporter(*this, gpu) {}

std::shared_ptr<stream_impl> cuda_device::create_stream(stream_priority priority) {
  return std::make_shared<cuda_stream>(shared_from_this(), priority);
}

std::shared_ptr<allocation> cuda_device::allocate(std::size_t bytes, const std::shared_ptr<stream_impl>& s) {
  auto& cs = static_cast<cuda_stream&>(*s);
  void* p = nullptr;
  if (bytes > 0) {
    current_device cd(gpu->ordinal);
    // Issued now even if the stream is gated: the pointer is needed now, and the memory only
    // becomes used by work issued after this call.
    auto e = cudaMallocFromPoolAsync(&p, bytes, gpu->pool, cs.handle());
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw device_error(device_errc::out_of_memory, props.name + ": cannot allocate " + std::to_string(bytes) +
                                                         " bytes (cudaMallocFromPoolAsync: out of memory)");
    }
    check(e, "cudaMallocFromPoolAsync");
  }
  counters.on_allocate(bytes, false);
  return std::make_shared<allocation>(s, p, bytes, bytes);
}

void cuda_device::release(void* ptr, std::size_t bytes, std::size_t, std::vector<std::shared_ptr<stream_impl>> streams) noexcept {
  try {
    // Never call CUDA here: the last reference may drop on CUDA's callback thread.
    auto me = std::static_pointer_cast<cuda_device>(shared_from_this());
    ctx->issuer.post([me, ptr, bytes, streams = std::move(streams)]() mutable {
      auto free_on = [me, ptr, bytes, alloc = std::static_pointer_cast<cuda_stream>(streams.front())] {
        me->counters.on_release(bytes);
        if (!ptr) return;
        alloc->submit([ptr, alloc] { check(cudaFreeAsync(ptr, alloc->handle()), "cudaFreeAsync"); });
      };
      if (streams.size() == 1) {
        free_on();  // ordered on the allocation stream itself
        return;
      }
      after_all(streams, [me, free_on] { me->ctx->issuer.post(free_on); });
    });
  } catch (...) {
  }
}

memory_stats cuda_device::memory() const {
  memory_stats m{.bytes_in_use = counters.in_use.load(),
                 .peak_bytes_in_use = counters.peak.load(),
                 .bytes_cached = 0,
                 .allocations = counters.allocations.load(),
                 .cache_hits = 0};
  std::uint64_t reserved = 0, used = 0;
  if (cudaMemPoolGetAttribute(gpu->pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess &&
      cudaMemPoolGetAttribute(gpu->pool, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess && reserved > used)
    m.bytes_cached = reserved - used;
  return m;
}

void cuda_device::trim() { check(cudaMemPoolTrimTo(gpu->pool, 0), "cudaMemPoolTrimTo"); }

std::shared_ptr<event_impl> cuda_device::create_event(bool timing) {
  return std::make_shared<event_impl>(device_kind::cuda, gpu->ordinal, timing);
}

namespace {

void enable_peer_access(const std::vector<std::shared_ptr<gpu_state>>& gpus) {
  for (const auto& a : gpus)
    for (const auto& b : gpus) {
      if (a == b) continue;
      int can = 0;
      check(cudaDeviceCanAccessPeer(&can, a->ordinal, b->ordinal), "cudaDeviceCanAccessPeer");
      if (!can) continue;  // copies still work, staged by the driver through the host
      current_device cd(a->ordinal);
      auto e = cudaDeviceEnablePeerAccess(b->ordinal, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
      else check(e, "cudaDeviceEnablePeerAccess");
      // Let GPU a read and write allocations from GPU b's pool.
      cudaMemAccessDesc desc{};
      desc.location.type = cudaMemLocationTypeDevice;
      desc.location.id = a->ordinal;
      desc.flags = cudaMemAccessFlagsProtReadWrite;
      check(cudaMemPoolSetAccess(b->pool, &desc, 1), "cudaMemPoolSetAccess");
    }
}

}  // namespace

std::vector<std::shared_ptr<device_impl>> make_devices(const std::shared_ptr<context>& ctx, const device_spec& spec,
                                                       int first_index) {
  const std::string text = spec.text.empty() ? spec.to_string() : spec.text;
  cuda_sync_mode();  // a bad STRATA_CUDA_SYNC fails here, before any work
  int count = 0;
  auto e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw device_error(device_errc::unavailable,
                       "cannot create devices for \"" + text + "\": no CUDA device is available (cudaGetDeviceCount: " +
                           (e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ", " + cudaGetErrorString(e)
                                             : std::string("0 devices")) +
                           ")");
  }
  std::vector<std::shared_ptr<gpu_state>> gpus;
  for (const auto& share : spec.gpus) {
    if (share.ordinal >= count)
      throw device_error(device_errc::unavailable, "cannot create devices for \"" + text + "\": GPU " +
                                                       std::to_string(share.ordinal) + " does not exist; this machine has " +
                                                       std::to_string(count) + " CUDA device(s)");
    gpus.push_back(ctx->gpu(share.ordinal));
  }
  enable_peer_access(gpus);
  std::vector<std::shared_ptr<device_impl>> out;
  int index = first_index;
  for (std::size_t k = 0; k < spec.gpus.size(); ++k) {
    const auto& share = spec.gpus[k];
    for (int i = 0; i < share.devices; ++i) {
      device_properties p;
      p.kind = device_kind::cuda;
      p.index = index++;
      p.name = "cuda:" + std::to_string(share.ordinal);
      if (share.devices > 1) p.name += "#" + std::to_string(i);
      p.total_memory = gpus[k]->prop.totalGlobalMem;
      p.concurrency = gpus[k]->prop.multiProcessorCount;
      p.gpu_ordinal = share.ordinal;
      p.share_index = i;
      p.share_count = share.devices;
      p.hardware = gpus[k]->prop.name;
      out.push_back(std::make_shared<cuda_device>(std::move(p), ctx, gpus[k]));
    }
  }
  return out;
}

}  // namespace strata::cuda_backend

namespace strata::detail {

double cuda_elapsed_ms(const event_point& start, const event_point& end) {
  if (!start.native || !end.native || !start.native_timing || !end.native_timing)
    throw_invalid("event::elapsed_ms on cuda: create both events with device::create_event(true)");
  float ms = 0;
  cuda_backend::check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.native),
                                           static_cast<cudaEvent_t>(end.native)),
                      "cudaEventElapsedTime");
  return ms;
}

std::shared_ptr<std::byte> pinned_host_memory(const device& on, std::size_t bytes) {
  if (!on.valid() || on.kind() != device_kind::cuda) throw_invalid("pinned staging needs a cuda device");
  auto gpu = static_cast<cuda_backend::cuda_device&>(*impl_of(on)).gpu;
  std::size_t capacity = 0;
  void* p = gpu->take_pinned(bytes, capacity);
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                    [gpu, capacity](std::byte* q) { gpu->give_pinned(q, capacity); });
}

}  // namespace strata::detail
