#pragma once
// Private: the state the cuda devices of one device_manager share: per GPU (memory pool, event and
// pinned staging caches, the clock and probe streams) and per manager (the dispatcher thread and
// the fault watch).

#include <array>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device/cuda_backend.hpp"
#include "device/cuda_completions.hpp"
#include "device/cuda_support.hpp"

namespace strata::cuda_backend {

/// One thread that issues CUDA calls for work that cannot be issued where it became ready: streams
/// resuming after a non-cuda event fired (possibly on CUDA's own callback thread, which must not
/// call CUDA), stream-ordered frees of buffers dropped anywhere, and completions that arrive after
/// a fault.
class dispatcher {
 public:
  dispatcher();
  ~dispatcher();
  dispatcher(const dispatcher&) = delete;
  dispatcher& operator=(const dispatcher&) = delete;
  void post(std::function<void()> fn);

 private:
  struct core;
  static void run(core& c);
  std::shared_ptr<core> core_;
  std::thread thread_;
};

/// What a pooled event is for; each use has its own creation flags and its own free list.
enum class event_use {
  ordering,   ///< cudaEventDisableTiming: plain event::record
  timing,     ///< cudaEventDefault: create_event(true) and clock calibration (waits spin)
  reporting,  ///< cudaEventBlockingSync: ends of observed items (the reporter thread sleeps in its waits)
};

inline event_use event_use_of(bool timing) noexcept { return timing ? event_use::timing : event_use::ordering; }

/// One GPU: its properties, memory pool and the caches its devices share.
struct gpu_state {
  explicit gpu_state(int o);
  ~gpu_state();
  gpu_state(const gpu_state&) = delete;
  gpu_state& operator=(const gpu_state&) = delete;

  cudaEvent_t take_event(event_use use);
  /// No CUDA call: safe on CUDA's callback thread. A pending record may still complete into `e`;
  /// recording it again later is allowed.
  void give_event(cudaEvent_t e, event_use use) noexcept;

  /// A stream that runs nothing but clock calibration records (so they complete at once), created
  /// on first use. Call with `clock_mu` held and the GPU current.
  cudaStream_t clock_stream();

  void* take_pinned(std::size_t n, std::size_t& capacity);
  /// No CUDA call: safe on CUDA's callback thread.
  void give_pinned(void* p, std::size_t capacity);

  /// The GPU's sticky error, if it has one (the fault_probe of its streams): queries an idle
  /// stream of its own, which reports the error of a failed context. Never throws.
  std::optional<std::string> failure() noexcept;

  const int ordinal;
  cudaDeviceProp prop{};
  cudaMemPool_t pool{};
  std::mutex mu;
  std::array<std::vector<cudaEvent_t>, 3> free_events;  // by event_use
  std::multimap<std::size_t, void*> free_pinned;
  std::mutex clock_mu;

 private:
  cudaStream_t clock_stream_{};
  std::mutex probe_mu_;
  cudaStream_t probe_stream_{};
};

class context {
 public:
  std::shared_ptr<gpu_state> gpu(int ordinal);
  dispatcher issuer;
  /// Completes the pending host functions of every stream of this manager once their GPU failed.
  const std::shared_ptr<fault_watch> watch = std::make_shared<fault_watch>();

 private:
  std::mutex mu_;
  std::map<int, std::shared_ptr<gpu_state>> gpus_;
};

}  // namespace strata::cuda_backend
