#include "device/cuda_gpu.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace strata::cuda_backend {

// ---- dispatcher ---------------------------------------------------------------------------------
struct dispatcher::core {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stop = false;
};

dispatcher::dispatcher() : core_(std::make_shared<core>()) {
  thread_ = std::thread([c = core_] { run(*c); });
}

dispatcher::~dispatcher() {
  {
    std::lock_guard lk(core_->mu);
    core_->stop = true;
  }
  core_->cv.notify_one();
  if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
  else thread_.join();
}

void dispatcher::post(std::function<void()> fn) {
  {
    std::lock_guard lk(core_->mu);
    core_->queue.push_back(std::move(fn));
  }
  core_->cv.notify_one();
}

void dispatcher::run(core& c) {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock lk(c.mu);
      c.cv.wait(lk, [&] { return c.stop || !c.queue.empty(); });
      if (c.queue.empty()) return;
      fn = std::move(c.queue.front());
      c.queue.pop_front();
    }
    try {
      fn();
    } catch (...) {
      // Each posted function records its own failures; nothing may escape the thread.
    }
  }
}

// ---- per-GPU state ------------------------------------------------------------------------------
namespace {
unsigned event_flags(event_use u) noexcept {
  switch (u) {
    case event_use::ordering: return cudaEventDisableTiming;
    case event_use::timing: return cudaEventDefault;
    case event_use::reporting: return cudaEventBlockingSync;
  }
  return cudaEventDefault;
}
}  // namespace

gpu_state::gpu_state(int o) : ordinal(o) {
  current_device cd(ordinal);
  check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  check(cudaDeviceGetDefaultMemPool(&pool, ordinal), "cudaDeviceGetDefaultMemPool");
  // Keep freed memory in the pool (the CUDA default returns it at every synchronization).
  std::uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
  check(cudaStreamCreateWithFlags(&probe_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

gpu_state::~gpu_state() {
  release_cuda_resources([events = std::move(free_events), pinned = std::move(free_pinned), clock = clock_stream_,
                          probe = probe_stream_] {
    for (const auto& list : events)
      for (auto e : list) cudaEventDestroy(e);
    for (const auto& [n, p] : pinned) cudaFreeHost(p);
    if (clock) cudaStreamDestroy(clock);
    if (probe) cudaStreamDestroy(probe);
  });
}

cudaEvent_t gpu_state::take_event(event_use use) {
  {
    std::lock_guard lk(mu);
    auto& list = free_events[static_cast<int>(use)];
    if (!list.empty()) {
      auto e = list.back();
      list.pop_back();
      return e;
    }
  }
  current_device cd(ordinal);
  cudaEvent_t e{};
  check(cudaEventCreateWithFlags(&e, event_flags(use)), "cudaEventCreateWithFlags");
  return e;
}

void gpu_state::give_event(cudaEvent_t e, event_use use) noexcept {
  try {
    std::lock_guard lk(mu);
    free_events[static_cast<int>(use)].push_back(e);
  } catch (...) {
    // Out of memory: the event leaks, which is harmless.
  }
}

cudaStream_t gpu_state::clock_stream() {
  if (!clock_stream_)
    check(cudaStreamCreateWithFlags(&clock_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return clock_stream_;
}

void* gpu_state::take_pinned(std::size_t n, std::size_t& capacity) {
  std::size_t need = (std::max<std::size_t>(n, 1) + 4095) / 4096 * 4096;
  {
    std::lock_guard lk(mu);
    auto it = free_pinned.lower_bound(need);
    if (it != free_pinned.end() && it->first <= 2 * need) {
      capacity = it->first;
      void* p = it->second;
      free_pinned.erase(it);
      return p;
    }
  }
  current_device cd(ordinal);
  void* p = nullptr;
  check(cudaHostAlloc(&p, need, cudaHostAllocPortable), "cudaHostAlloc");
  capacity = need;
  return p;
}

void gpu_state::give_pinned(void* p, std::size_t capacity) {
  std::lock_guard lk(mu);
  free_pinned.emplace(capacity, p);
}

std::optional<std::string> gpu_state::failure() noexcept {
  try {
    std::lock_guard lk(probe_mu_);
    if (cudaSetDevice(ordinal) != cudaSuccess) {
      // A failed context fails this too: report what the stream query says below.
      cudaGetLastError();
    }
    auto e = cudaStreamQuery(probe_stream_);
    if (e == cudaSuccess || e == cudaErrorNotReady) return std::nullopt;
    cudaGetLastError();
    return describe(e);
  } catch (...) {
    return std::nullopt;
  }
}

std::shared_ptr<gpu_state> context::gpu(int ordinal) {
  std::lock_guard lk(mu_);
  auto& g = gpus_[ordinal];
  if (!g) g = std::make_shared<gpu_state>(ordinal);
  return g;
}

}  // namespace strata::cuda_backend
