#include "device/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>

namespace strata::cuda_backend {

using namespace device_detail;

namespace {

// ---- errors -------------------------------------------------------------------------------------
[[noreturn]] void fail(const std::string& call, cudaError_t e) {
  auto code = e == cudaErrorMemoryAllocation ? device_errc::out_of_memory : device_errc::backend_failure;
  throw device_error(code, call + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail(call, e);
}
void check(cublasStatus_t st, const char* call) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw device_error(device_errc::backend_failure, std::string(call) + " failed: " + cublasGetStatusName(st) +
                                                         " (" + cublasGetStatusString(st) + ")");
}

/// Makes `ordinal` the calling thread's current device for a scope.
class current_device {
 public:
  explicit current_device(int ordinal) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != ordinal) check(cudaSetDevice(ordinal), "cudaSetDevice");
    else previous_ = -1;
  }
  ~current_device() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  current_device(const current_device&) = delete;
  current_device& operator=(const current_device&) = delete;

 private:
  int previous_ = -1;
};

// ---- dispatcher ---------------------------------------------------------------------------------
// One thread that issues CUDA calls for work that cannot be issued where it became ready: streams
// resuming after a non-cuda event fired (possibly on CUDA's own callback thread, which must not call
// CUDA) and stream-ordered frees of buffers dropped anywhere.
class dispatcher {
 public:
  dispatcher() : core_(std::make_shared<core>()) {
    thread_ = std::thread([c = core_] { run(*c); });
  }
  ~dispatcher() {
    {
      std::lock_guard lk(core_->mu);
      core_->stop = true;
    }
    core_->cv.notify_one();
    if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
    else thread_.join();
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard lk(core_->mu);
      core_->queue.push_back(std::move(fn));
    }
    core_->cv.notify_one();
  }

 private:
  struct core {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    bool stop = false;
  };
  static void run(core& c) {
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
  std::shared_ptr<core> core_;
  std::thread thread_;
};

// ---- per-GPU state ------------------------------------------------------------------------------
struct gpu_state {
  explicit gpu_state(int o) : ordinal(o) {
    current_device cd(ordinal);
    check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
    check(cudaDeviceGetDefaultMemPool(&pool, ordinal), "cudaDeviceGetDefaultMemPool");
    // Keep freed memory in the pool (the CUDA default returns it at every synchronization).
    std::uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
  }
  ~gpu_state() {
    // Errors are ignored: at process exit the driver may already be shutting down.
    for (auto& list : free_events)
      for (auto e : list) cudaEventDestroy(e);
    for (auto& [n, p] : free_pinned) cudaFreeHost(p);
  }

  cudaEvent_t take_event(bool timing) {
    {
      std::lock_guard lk(mu);
      auto& list = free_events[timing ? 1 : 0];
      if (!list.empty()) {
        auto e = list.back();
        list.pop_back();
        return e;
      }
    }
    current_device cd(ordinal);
    cudaEvent_t e{};
    check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  // No CUDA call: safe on CUDA's callback thread.
  void give_event(cudaEvent_t e, bool timing) {
    std::lock_guard lk(mu);
    free_events[timing ? 1 : 0].push_back(e);
  }

  void* take_pinned(std::size_t n, std::size_t& capacity) {
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
  // No CUDA call: safe on CUDA's callback thread.
  void give_pinned(void* p, std::size_t capacity) {
    std::lock_guard lk(mu);
    free_pinned.emplace(capacity, p);
  }

  const int ordinal;
  cudaDeviceProp prop{};
  cudaMemPool_t pool{};
  std::mutex mu;
  std::vector<cudaEvent_t> free_events[2];
  std::multimap<std::size_t, void*> free_pinned;
};

}  // namespace

class context {
 public:
  std::shared_ptr<gpu_state> gpu(int ordinal) {
    std::lock_guard lk(mu_);
    auto& g = gpus_[ordinal];
    if (!g) g = std::make_shared<gpu_state>(ordinal);
    return g;
  }
  dispatcher issuer;

 private:
  std::mutex mu_;
  std::map<int, std::shared_ptr<gpu_state>> gpus_;
};

std::shared_ptr<context> make_context() { return std::make_shared<context>(); }

int gpu_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

namespace {

// Host functions (cudaLaunchHostFunc) run on CUDA's callback thread and must not call CUDA.
void CUDART_CB run_host_function(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  try {
    (*fn)();
  } catch (...) {
    // Documented: callbacks must not throw; nothing may escape into the CUDA runtime.
  }
}

class cuda_device;

// ---- stream -------------------------------------------------------------------------------------
// Operations are issued to the CUDA stream at once, under `mu_`, in submission order. A wait for a
// non-cuda event (or a cuda record not yet issued) gates the stream: later operations queue in
// `pending_` and the dispatcher thread issues them once the event fires.
class cuda_stream final : public stream_impl {
 public:
  cuda_stream(std::shared_ptr<device_impl> dev, stream_priority p);
  ~cuda_stream() override {
    try {
      current_device cd(gpu_);
      if (blas_) cublasDestroy(blas_);
      if (stream_) cudaStreamDestroy(stream_);  // returns at once; resources go when work ends
    } catch (...) {
    }
  }

  void launch(kernel_work work) override {
    if (!work.cuda)
      throw_invalid("stream::launch on " + device->props.name + ": kernel \"" + work.name +
                    "\" has no cuda implementation (kernel_work::cuda is empty)");
    submit([this, w = std::move(work)] {
      cuda_launch_context c{.stream = stream_, .cublas = blas_, .gpu = gpu_};
      w.cuda(c);
      auto e = cudaGetLastError();
      if (e != cudaSuccess) fail("kernel \"" + w.name + "\" launch", e);
    });
  }

  void copy(const std::shared_ptr<allocation>& dst, const std::shared_ptr<allocation>& src, std::size_t n) override;
  void copy_from_host(const std::shared_ptr<allocation>& dst, const void* src, std::size_t n) override;
  void copy_to_host(void* dst, const std::shared_ptr<allocation>& src, std::size_t n) override;

  void record(event_impl& e) override;
  void record_point(std::shared_ptr<event_point> p) override {
    submit([this, p] { fire_later(p); });
  }
  void wait(std::shared_ptr<event_point> p) override;
  void on_complete(completion_callback cb) override {
    submit([this, cb = std::move(cb)] {
      host_call([cb, err = error_] { cb(err); });
    });
  }
  void synchronize() override {
    auto p = std::make_shared<event_point>();
    record_point(p);
    while (!p->wait_for(std::chrono::milliseconds(100))) {
      // A sticky CUDA error stops host functions: surface it instead of waiting forever.
      auto e = cudaStreamQuery(stream_);
      if (e != cudaSuccess && e != cudaErrorNotReady) fail("cudaStreamQuery", e);
    }
    current_device cd(gpu_);
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (auto e = error()) std::rethrow_exception(e);
  }
  std::exception_ptr error() const override {
    std::lock_guard lk(mu_);
    return error_;
  }
  void* native() const noexcept override { return stream_; }

  /// Issues `issue` now (under the lock, with the GPU current) or, while gated, queues it.
  void submit(std::function<void()> issue) {
    std::lock_guard lk(mu_);
    if (gated_) {
      pending_.push_back(std::move(issue));
      return;
    }
    current_device cd(gpu_);
    issue();
  }

  cudaStream_t handle() const noexcept { return stream_; }
  int gpu() const noexcept { return gpu_; }

 private:
  cuda_device& dev() const;
  std::shared_ptr<cuda_stream> self() { return std::static_pointer_cast<cuda_stream>(shared_from_this()); }

  // Called with mu_ held from an issue function.
  void host_call(std::function<void()> fn) {
    auto* arg = new std::function<void()>(std::move(fn));
    auto e = cudaLaunchHostFunc(stream_, &run_host_function, arg);
    if (e != cudaSuccess) {
      delete arg;
      fail("cudaLaunchHostFunc", e);
    }
  }
  void fire_later(std::shared_ptr<event_point> p) {
    host_call([p, err = error_] { p->fire(err); });
  }

  void resume(const std::shared_ptr<event_point>& p) {
    std::lock_guard lk(mu_);
    if (auto e = p->error(); e && !error_) error_ = e;
    gated_ = false;
    try {
      current_device cd(gpu_);
      while (!gated_ && !pending_.empty()) {
        auto issue = std::move(pending_.front());
        pending_.pop_front();
        try {
          issue();
        } catch (...) {
          if (!error_) error_ = std::current_exception();  // asynchronous now: kept by the stream
        }
      }
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
  }

  std::shared_ptr<gpu_state> gpu_state_;
  int gpu_ = 0;
  cudaStream_t stream_{};
  cublasHandle_t blas_{};
  mutable std::mutex mu_;
  bool gated_ = false;
  std::deque<std::function<void()>> pending_;
  std::exception_ptr error_;
};

// ---- device -------------------------------------------------------------------------------------
class cuda_device final : public device_impl {
 public:
  cuda_device(device_properties p, std::shared_ptr<context> c, std::shared_ptr<gpu_state> g)
      : device_impl(std::move(p)), ctx(std::move(c)), gpu(std::move(g)) {}

  std::shared_ptr<stream_impl> create_stream(stream_priority priority) override {
    return std::make_shared<cuda_stream>(shared_from_this(), priority);
  }

  std::shared_ptr<allocation> allocate(std::size_t bytes, const std::shared_ptr<stream_impl>& s) override {
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

  void release(void* ptr, std::size_t bytes, std::size_t, std::vector<std::shared_ptr<stream_impl>> streams) noexcept override {
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

  memory_stats memory() const override {
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

  void trim() override { check(cudaMemPoolTrimTo(gpu->pool, 0), "cudaMemPoolTrimTo"); }

  std::shared_ptr<event_impl> create_event(bool timing) override {
    return std::make_shared<event_impl>(device_kind::cuda, gpu->ordinal, timing);
  }

  const std::shared_ptr<context> ctx;
  const std::shared_ptr<gpu_state> gpu;
  pool_counters counters;
};

cuda_device& cuda_stream::dev() const { return static_cast<cuda_device&>(*device); }

cuda_stream::cuda_stream(std::shared_ptr<device_impl> d, stream_priority p) : stream_impl(std::move(d), p) {
  gpu_state_ = dev().gpu;
  gpu_ = gpu_state_->ordinal;
  current_device cd(gpu_);
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  int native_priority = p == stream_priority::high ? greatest : p == stream_priority::low ? least : (least + greatest) / 2;
  check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, native_priority), "cudaStreamCreateWithPriority");
  try {
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
  } catch (...) {
    if (blas_) cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

void cuda_stream::record(event_impl& e) {
  if (e.kind != device_kind::cuda || e.gpu != gpu_)
    throw_invalid("stream::record on " + device->props.name + ": the event was created on a " +
                  std::string(to_string(e.kind)) + " device" +
                  (e.kind == device_kind::cuda ? " of GPU " + std::to_string(e.gpu) : std::string()) +
                  "; expected an event of GPU " + std::to_string(gpu_));
  auto p = std::make_shared<event_point>();
  auto g = gpu_state_;
  bool timing = e.timing;
  cudaEvent_t native = g->take_event(timing);
  p->native = native;
  p->native_gpu = gpu_;
  p->native_timing = timing;
  p->native_owner = std::shared_ptr<void>(nullptr, [g, native, timing](void*) { g->give_event(native, timing); });
  submit([this, p, native] {
    check(cudaEventRecord(native, stream_), "cudaEventRecord");
    p->native_recorded.store(true, std::memory_order_release);
    fire_later(p);
  });
  e.set_current(std::move(p));
}

void cuda_stream::wait(std::shared_ptr<event_point> p) {
  submit([this, p] {
    if (p->done()) {
      if (auto e = p->error(); e && !error_) error_ = e;
      return;
    }
    if (p->native && p->native_recorded.load(std::memory_order_acquire)) {
      check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(p->native), 0), "cudaStreamWaitEvent");
      return;
    }
    // Another backend's event (or a cuda record still queued): hold later work on the host side.
    gated_ = true;
    auto me = self();
    if (!p->on_fire([me, p] { me->dev().ctx->issuer.post([me, p] { me->resume(p); }); })) {
      gated_ = false;
      if (auto e = p->error(); e && !error_) error_ = e;
    }
  });
}

void cuda_stream::copy(const std::shared_ptr<allocation>& dst, const std::shared_ptr<allocation>& src, std::size_t n) {
  auto dk = dst->stream->device->props.kind;
  auto sk = src->stream->device->props.kind;
  if (dk == device_kind::sim || sk == device_kind::sim) return;  // sim buffers hold no data
  auto g = gpu_state_;
  submit([this, dst, src, n, dk, sk, g] {
    if (dk == device_kind::cuda && sk == device_kind::cuda) {
      int dg = dst->stream->device->props.gpu_ordinal;
      int sg = src->stream->device->props.gpu_ordinal;
      if (dg == sg)
        check(cudaMemcpyAsync(dst->ptr, src->ptr, n, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
      else
        check(cudaMemcpyPeerAsync(dst->ptr, dg, src->ptr, sg, n, stream_), "cudaMemcpyPeerAsync");
    } else if (dk == device_kind::cuda) {  // from a cpu buffer, read in stream order through pinned staging
      std::size_t cap = 0;
      void* pin = g->take_pinned(n, cap);
      host_call([pin, src, n] { std::memcpy(pin, src->ptr, n); });
      check(cudaMemcpyAsync(dst->ptr, pin, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
      host_call([g, pin, cap] { g->give_pinned(pin, cap); });
    } else if (sk == device_kind::cuda) {  // to a cpu buffer
      std::size_t cap = 0;
      void* pin = g->take_pinned(n, cap);
      check(cudaMemcpyAsync(pin, src->ptr, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
      host_call([g, pin, cap, dst, n] {
        std::memcpy(dst->ptr, pin, n);
        g->give_pinned(pin, cap);
      });
    } else {
      host_call([dst, src, n] { std::memcpy(dst->ptr, src->ptr, n); });
    }
    // Keep both buffers alive until the copy has run (their release is ordered on their own streams).
    host_call([dst, src] {});
  });
}

void cuda_stream::copy_from_host(const std::shared_ptr<allocation>& dst, const void* src, std::size_t n) {
  auto dk = dst->stream->device->props.kind;
  if (dk == device_kind::sim) return;
  auto g = gpu_state_;
  std::size_t cap = 0;
  void* pin = g->take_pinned(n, cap);
  std::memcpy(pin, src, n);  // read now, as documented; the caller may reuse `src`
  submit([this, dst, n, dk, g, pin, cap] {
    if (dk == device_kind::cuda)
      check(cudaMemcpyAsync(dst->ptr, pin, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    else
      host_call([dst, pin, n] { std::memcpy(dst->ptr, pin, n); });
    host_call([g, pin, cap, dst] { g->give_pinned(pin, cap); });
  });
}

void cuda_stream::copy_to_host(void* dst, const std::shared_ptr<allocation>& src, std::size_t n) {
  auto sk = src->stream->device->props.kind;
  if (sk == device_kind::sim) return;
  auto g = gpu_state_;
  submit([this, dst, src, n, sk, g] {
    if (sk == device_kind::cuda) {
      std::size_t cap = 0;
      void* pin = g->take_pinned(n, cap);
      check(cudaMemcpyAsync(pin, src->ptr, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
      host_call([g, pin, cap, dst, n, src] {
        std::memcpy(dst, pin, n);
        g->give_pinned(pin, cap);
      });
    } else {
      host_call([dst, src, n] { std::memcpy(dst, src->ptr, n); });
    }
  });
}

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

namespace strata::device_detail {

double cuda_elapsed_ms(const event_point& start, const event_point& end) {
  if (!start.native || !end.native || !start.native_timing || !end.native_timing)
    throw_invalid("event::elapsed_ms on cuda: create both events with device::create_event(true)");
  float ms = 0;
  cuda_backend::check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.native),
                                           static_cast<cudaEvent_t>(end.native)),
                      "cudaEventElapsedTime");
  return ms;
}

}  // namespace strata::device_detail
