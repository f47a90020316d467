#include "device/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

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

/// True on CUDA's callback thread (set by run_host_function), where CUDA calls are not allowed.
thread_local bool on_cuda_callback_thread = false;

/// Runs `release` (CUDA calls that free resources) now, or, when the last owner lets go on CUDA's
/// callback thread (a host function's captures, e.g. a device dropped with work in flight), on a
/// thread of its own. Errors are ignored: at process exit the driver may already be shutting down.
void release_cuda_resources(std::function<void()> release) noexcept {
  try {
    if (!on_cuda_callback_thread) return release();
    std::thread(std::move(release)).detach();
  } catch (...) {
    // No thread (or a failing call): the resources leak, which beats calling CUDA here.
  }
}

// ---- per-GPU state ------------------------------------------------------------------------------
/// What a pooled event is for; each use has its own creation flags and its own free list.
enum class event_use {
  ordering,   ///< cudaEventDisableTiming: plain event::record
  timing,     ///< cudaEventDefault: create_event(true) and clock calibration (waits spin)
  reporting,  ///< cudaEventBlockingSync: ends of observed items (the reporter thread sleeps in its waits)
};

unsigned event_flags(event_use u) noexcept {
  switch (u) {
    case event_use::ordering: return cudaEventDisableTiming;
    case event_use::timing: return cudaEventDefault;
    case event_use::reporting: return cudaEventBlockingSync;
  }
  return cudaEventDefault;
}

event_use event_use_of(bool timing) noexcept { return timing ? event_use::timing : event_use::ordering; }

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
    release_cuda_resources([events = std::move(free_events), pinned = std::move(free_pinned), clock = clock_stream_] {
      for (const auto& list : events)
        for (auto e : list) cudaEventDestroy(e);
      for (const auto& [n, p] : pinned) cudaFreeHost(p);
      if (clock) cudaStreamDestroy(clock);
    });
  }

  cudaEvent_t take_event(event_use use) {
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
  // No CUDA call: safe on CUDA's callback thread. A pending record may still complete into `e`;
  // recording it again later is allowed.
  void give_event(cudaEvent_t e, event_use use) noexcept {
    try {
      std::lock_guard lk(mu);
      free_events[static_cast<int>(use)].push_back(e);
    } catch (...) {
      // Out of memory: the event leaks, which is harmless.
    }
  }

  /// A stream that runs nothing but clock calibration records (so they complete at once), created
  /// on first use. Call with `clock_mu` held and the GPU current.
  cudaStream_t clock_stream() {
    if (!clock_stream_)
      check(cudaStreamCreateWithFlags(&clock_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return clock_stream_;
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
  std::array<std::vector<cudaEvent_t>, 3> free_events;  // by event_use
  std::multimap<std::size_t, void*> free_pinned;
  std::mutex clock_mu;

 private:
  cudaStream_t clock_stream_{};
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
  on_cuda_callback_thread = true;  // for the destructors of what the function holds
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  try {
    (*fn)();
  } catch (...) {
    // Documented: callbacks must not throw; nothing may escape into the CUDA runtime.
  }
}

// ---- work reporting -----------------------------------------------------------------------------
/// A pooled event, given back to its GPU's pool when dropped (no CUDA call: safe on any thread).
class pooled_event {
 public:
  pooled_event() = default;
  pooled_event(std::shared_ptr<gpu_state> g, event_use use)
      : event_(g->take_event(use)), use_(use), gpu_(std::move(g)) {}
  pooled_event(pooled_event&& o) noexcept
      : event_(std::exchange(o.event_, nullptr)), use_(o.use_), gpu_(std::move(o.gpu_)) {}
  pooled_event& operator=(pooled_event&& o) noexcept {
    pooled_event old(std::move(*this));
    event_ = std::exchange(o.event_, nullptr);
    use_ = o.use_;
    gpu_ = std::move(o.gpu_);
    return *this;
  }
  ~pooled_event() {
    if (event_) gpu_->give_event(event_, use_);
  }
  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_{};
  event_use use_ = event_use::timing;
  std::shared_ptr<gpu_state> gpu_;
};

/// A recorded clock event and the steady-clock time at which the GPU reached it: event times are
/// converted to steady-clock times through cudaEventElapsedTime from it.
struct clock_anchor {
  pooled_event event;
  std::chrono::nanoseconds at{0};  // since the steady_clock epoch
  steady::time_point taken{};      // when it was measured (anchors are renewed after a second)
};

std::chrono::nanoseconds from_ms(float ms) {
  return std::chrono::nanoseconds(std::llround(static_cast<double>(ms) * 1e6));
}

/// Measures a new anchor: a record on the idle clock stream, bracketed by steady-clock reads; the
/// tightest of three brackets wins. A recent `previous` anchor is carried forward on the GPU clock
/// and moved a quarter of the way to the new measurement: bracket noise averages out and slow drift
/// between the clocks (NTP slews steady_clock) is followed without visible jumps. Call with the GPU
/// current.
std::shared_ptr<const clock_anchor> measure_anchor(const std::shared_ptr<gpu_state>& g, const clock_anchor* previous) {
  std::lock_guard lk(g->clock_mu);
  cudaStream_t s = g->clock_stream();
  pooled_event best(g, event_use::timing), trial(g, event_use::timing);
  auto width = steady::duration::max();
  steady::time_point middle{};
  for (int i = 0; i < 3; ++i) {
    auto before = steady::now();
    check(cudaEventRecord(trial.get(), s), "cudaEventRecord");
    check(cudaEventSynchronize(trial.get()), "cudaEventSynchronize");
    auto after = steady::now();
    if (after - before < width) {
      width = after - before;
      middle = before + width / 2;
      std::swap(best, trial);
    }
  }
  auto a = std::make_shared<clock_anchor>();
  a->at = std::chrono::duration_cast<std::chrono::nanoseconds>(middle.time_since_epoch());
  a->taken = steady::now();
  float ms = 0;
  if (previous && a->taken - previous->taken < std::chrono::seconds(10)) {
    if (cudaEventElapsedTime(&ms, previous->event.get(), best.get()) == cudaSuccess) {
      auto carried = previous->at + from_ms(ms);
      auto off = a->at - carried;
      if (std::chrono::abs(off) < std::chrono::milliseconds(1)) a->at = carried + off / 4;
    } else {
      cudaGetLastError();
    }
  }
  a->event = std::move(best);
  return a;
}

/// Reports the completed work of one cuda device to its work observer. An observed item is
/// bracketed by two pooled events on its stream (begin/finish, on the issuing thread). One thread
/// per device, started by the first observed item, takes the items in issue order, waits for each
/// end event (blocking-sync events: it sleeps), converts the event times to steady-clock times
/// through a clock_anchor and calls the observer. Nothing here runs on CUDA's callback thread.
/// Destruction drops undelivered items and never waits for the GPU: the thread is detached and
/// leaves after its current wait, touching only its shared core.
class work_reporter {
 public:
  /// An observed item whose start event has been recorded.
  struct span {
    pooled_event start, end;
    std::shared_ptr<const clock_anchor> anchor;
  };

  work_reporter(const device_impl& device, std::shared_ptr<gpu_state> g)
      : core_(std::make_shared<core>(device, std::move(g))) {}

  ~work_reporter() {
    std::unique_lock lk(core_->mu);
    core_->stop = true;
    core_->work.notify_all();
    // The device goes after this returns: the thread must not be inside the observer. (On the
    // thread itself, the observer is what dropped the device; it checks `stop` when it returns.)
    if (core_->thread != std::this_thread::get_id()) core_->progress.wait(lk, [&] { return !core_->notifying; });
    core_->queue.clear();
  }
  work_reporter(const work_reporter&) = delete;
  work_reporter& operator=(const work_reporter&) = delete;

  /// Records the start event of an observed item on `s` (GPU current). Never throws: an item that
  /// cannot be timed is not reported.
  std::optional<span> begin(cudaStream_t s) noexcept {
    try {
      span t{pooled_event(core_->gpu, event_use::timing), pooled_event(core_->gpu, event_use::reporting), anchor()};
      check(cudaEventRecord(t.start.get(), s), "cudaEventRecord");
      return t;
    } catch (...) {
      cudaGetLastError();  // not the launch's error
      return std::nullopt;
    }
  }

  /// Records the end event on `s` and queues the item; returns its sequence number (0 if dropped).
  std::uint64_t finish(span t, cudaStream_t s, std::uint64_t stream_id, const std::string& name, work_kind kind,
                       double flops, double bytes) noexcept {
    auto& c = *core_;
    std::uint64_t seq = 0;
    try {
      check(cudaEventRecord(t.end.get(), s), "cudaEventRecord");
      std::lock_guard lk(c.mu);
      if (c.stop) return 0;
      if (c.thread == std::thread::id{}) {
        std::thread th([k = core_] { run(k); });
        c.thread = th.get_id();
        th.detach();
      }
      seq = c.issued + 1;
      c.queue.push_back(item{std::move(t), name, stream_id, kind, flops, bytes, seq});
      c.issued = seq;
    } catch (...) {
      cudaGetLastError();
      return 0;
    }
    c.work.notify_one();
    return seq;
  }

  /// Blocks until the items up to `seq` have been delivered (or dropped).
  void wait_delivered(std::uint64_t seq) {
    if (seq == 0) return;
    std::unique_lock lk(core_->mu);
    if (core_->thread == std::this_thread::get_id()) return;  // an observer synchronizing a stream
    core_->progress.wait(lk, [&] { return core_->stop || core_->delivered >= seq; });
  }

 private:
  struct item {
    span times;
    std::string name;
    std::uint64_t stream_id = 0;
    work_kind kind = work_kind::pointwise;
    double flops = 0;
    double bytes = 0;
    std::uint64_t seq = 0;
  };

  struct core {
    core(const device_impl& d, std::shared_ptr<gpu_state> g)
        : device(&d), device_index(d.props.index), gpu(std::move(g)) {}
    const device_impl* const device;  // valid until `stop`; used only with `notifying` set
    const int device_index;
    const std::shared_ptr<gpu_state> gpu;
    std::mutex mu;
    std::condition_variable work;      // queue or stop changed
    std::condition_variable progress;  // delivered or notifying changed
    std::deque<item> queue;
    std::uint64_t issued = 0;
    std::uint64_t delivered = 0;
    bool stop = false;
    bool notifying = false;
    std::thread::id thread;  // set when the thread starts
  };

  /// The current anchor, renewed when older than a second so that cudaEventElapsedTime (a float
  /// of milliseconds) stays precise. Renewing waits for a record on the idle clock stream only.
  std::shared_ptr<const clock_anchor> anchor() {
    std::lock_guard lk(anchor_mu_);
    if (!anchor_ || steady::now() - anchor_->taken > std::chrono::seconds(1))
      anchor_ = measure_anchor(core_->gpu, anchor_.get());
    return anchor_;
  }

  /// Steady-clock start and end of a completed item; nullopt if CUDA cannot tell (a failed context).
  static std::optional<std::pair<std::chrono::nanoseconds, std::chrono::nanoseconds>> times(const span& t) noexcept {
    float to_start = 0, length = 0;
    if (cudaEventSynchronize(t.end.get()) != cudaSuccess ||
        cudaEventElapsedTime(&to_start, t.anchor->event.get(), t.start.get()) != cudaSuccess ||
        cudaEventElapsedTime(&length, t.start.get(), t.end.get()) != cudaSuccess) {
      cudaGetLastError();
      return std::nullopt;
    }
    auto start = t.anchor->at + from_ms(to_start);
    return std::pair{start, start + from_ms(length)};
  }

  static void run(const std::shared_ptr<core>& k) {
    auto& c = *k;
    if (cudaSetDevice(c.gpu->ordinal) != cudaSuccess) cudaGetLastError();  // then every wait fails: items dropped
    // Per stream, the end of its last item: rounding must not make a stream's items overlap.
    std::unordered_map<std::uint64_t, std::chrono::nanoseconds> last_end;
    std::unique_lock lk(c.mu);
    for (;;) {
      c.work.wait(lk, [&] { return c.stop || !c.queue.empty(); });
      if (c.stop) break;
      item it = std::move(c.queue.front());
      c.queue.pop_front();
      lk.unlock();
      auto t = times(it.times);
      lk.lock();
      if (c.stop) break;
      if (t && c.device->observed()) {
        auto& last = last_end[it.stream_id];
        auto start = std::max(t->first, last);
        last = std::max(t->second, start);
        work_record r{.name = &it.name,
                      .kind = device_kind::cuda,
                      .device_index = c.device_index,
                      .stream_id = it.stream_id,
                      .work = it.kind,
                      .start = start,
                      .end = last,
                      .flops = it.flops,
                      .bytes = it.bytes,
                      .modelled = false};
        c.notifying = true;
        lk.unlock();
        try {
          c.device->notify(r);
        } catch (...) {
          // Documented: observers must not throw. Swallowing keeps the reporter alive.
        }
        lk.lock();
        c.notifying = false;
        if (last_end.size() > 1024)  // streams that went quiet long ago
          std::erase_if(last_end, [&](const auto& e) { return e.second < start - std::chrono::seconds(10); });
      }
      c.delivered = it.seq;
      c.progress.notify_all();
      if (c.stop) break;
    }
    c.queue.clear();  // dropped: the device is gone
    c.progress.notify_all();
  }

  const std::shared_ptr<core> core_;
  std::mutex anchor_mu_;
  std::shared_ptr<const clock_anchor> anchor_;
};

class cuda_device;

// ---- stream -------------------------------------------------------------------------------------
// Operations are issued to the CUDA stream at once, under `mu_`, in submission order. A wait for a
// non-cuda event (or a cuda record not yet issued) gates the stream: later operations queue in
// `pending_` and the dispatcher thread issues them once the event fires.
class cuda_stream final : public stream_impl {
 public:
  cuda_stream(std::shared_ptr<device_impl> dev, stream_priority p);
  ~cuda_stream() override {
    release_cuda_resources([gpu = gpu_, blas = blas_, stream = stream_] {
      current_device cd(gpu);
      if (blas) cublasDestroy(blas);
      if (stream) cudaStreamDestroy(stream);  // returns at once; resources go when work ends
    });
  }

  void launch(kernel_work work) override {
    if (!work.cuda)
      throw_invalid("stream::launch on " + device->props.name + ": kernel \"" + work.name +
                    "\" has no cuda implementation (kernel_work::cuda is empty)");
    // As on cpu: what the launcher throws becomes the stream's sticky error (synchronize, events
    // and callbacks report it), and items after it are skipped.
    submit([this, w = std::move(work)] {
      if (error_) return;
      try {
        issue_observed(w.name, w.kind, w.flops, w.bytes, [&] {
          cuda_launch_context c{.stream = stream_, .cublas = blas_, .gpu = gpu_};
          w.cuda(c);
          auto e = cudaGetLastError();
          if (e != cudaSuccess) fail("kernel \"" + w.name + "\" launch", e);
        });
      } catch (...) {
        error_ = std::current_exception();
      }
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
    std::uint64_t reported = 0;
    {
      std::lock_guard lk(mu_);
      reported = reported_;
    }
    reporter_->wait_delivered(reported);  // the observer has seen this stream's work
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

  // Called with mu_ held from an issue function: runs `issue`; when the device has a work observer,
  // brackets what it enqueues with the reporter's events so that the observer gets its GPU times.
  template <class Issue>
  void issue_observed(const std::string& name, work_kind kind, double flops, double bytes, Issue&& issue) {
    if (!device->observed()) {
      issue();
      return;
    }
    auto timed = reporter_->begin(stream_);
    issue();
    if (timed)
      if (auto seq = reporter_->finish(std::move(*timed), stream_, id, name, kind, flops, bytes)) reported_ = seq;
  }
  // As the cpu backend: a copy is reported as "copy" with read plus written bytes.
  template <class Issue>
  void issue_copy(std::size_t n, Issue&& issue) {
    static const std::string name = "copy";
    issue_observed(name, work_kind::copy, 0, 2.0 * static_cast<double>(n), std::forward<Issue>(issue));
  }

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
  work_reporter* reporter_ = nullptr;  // the device's, which this stream keeps alive
  int gpu_ = 0;
  cudaStream_t stream_{};
  cublasHandle_t blas_{};
  mutable std::mutex mu_;
  bool gated_ = false;
  std::deque<std::function<void()>> pending_;
  std::exception_ptr error_;
  std::uint64_t reported_ = 0;  // sequence number of this stream's last observed item
};

// ---- device -------------------------------------------------------------------------------------
class cuda_device final : public device_impl {
 public:
  cuda_device(device_properties p, std::shared_ptr<context> c, std::shared_ptr<gpu_state> g)
      : device_impl(std::move(p)), ctx(std::move(c)), gpu(std::move(g)), reporter(*this, gpu) {}

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
  work_reporter reporter;  // last: it stops before the observer goes
};

cuda_device& cuda_stream::dev() const { return static_cast<cuda_device&>(*device); }

cuda_stream::cuda_stream(std::shared_ptr<device_impl> d, stream_priority p) : stream_impl(std::move(d), p) {
  gpu_state_ = dev().gpu;
  reporter_ = &dev().reporter;
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
  cudaEvent_t native = g->take_event(event_use_of(timing));
  p->native = native;
  p->native_gpu = gpu_;
  p->native_timing = timing;
  p->native_owner =
      std::shared_ptr<void>(nullptr, [g, native, timing](void*) { g->give_event(native, event_use_of(timing)); });
  submit([this, p, native] {
    check(cudaEventRecord(native, stream_), "cudaEventRecord");
    p->native_error = error_;
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
      if (p->native_error && !error_) error_ = p->native_error;  // a stream that waits adopts the error
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
    issue_copy(n, [&] {
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
    });
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
    issue_copy(n, [&] {
      if (dk == device_kind::cuda)
        check(cudaMemcpyAsync(dst->ptr, pin, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
      else
        host_call([dst, pin, n] { std::memcpy(dst->ptr, pin, n); });
    });
    host_call([g, pin, cap, dst] { g->give_pinned(pin, cap); });
  });
}

void cuda_stream::copy_to_host(void* dst, const std::shared_ptr<allocation>& src, std::size_t n) {
  auto sk = src->stream->device->props.kind;
  if (sk == device_kind::sim) return;
  auto g = gpu_state_;
  submit([this, dst, src, n, sk, g] {
    issue_copy(n, [&] {
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
