#include "device/cpu_backend.hpp"

#include "device/queued_stream.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>

namespace strata::cpu_backend {

using namespace detail;

namespace {

// ---- process-wide state ---------------------------------------------------------------------------
// Arenas only get threads from oneTBB's global worker pool, which defaults to hardware threads - 1.
// Devices register their concurrency here and the pool is raised (never lowered below the default)
// so that every arena can be fully busy at once. One process-wide setting, because with several
// global_control objects alive oneTBB applies the smallest.
//
// Arena tasks may drop the last reference to a device, so a device can be destroyed on a worker
// thread just after the program's last synchronize(). At exit we wait (bounded) for tasks in flight
// to finish and release the global_control while oneTBB is still alive; otherwise a worker could be
// inside ~cpu_device while libtbb is being torn down. The state is leaked on purpose so that static
// destruction never races with those workers.
class cpu_runtime {
 public:
  static cpu_runtime& get() {
    static cpu_runtime* instance = [] {
      auto* r = new cpu_runtime;
      std::atexit([] { get().at_exit(); });
      return r;
    }();
    return *instance;
  }

  void reserve(int n) { update(n); }
  void unreserve(int n) { update(-n); }

  void task_started() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
  void task_finished() {
    if (in_flight_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lk(mu_);
      idle_.notify_all();
    }
  }

 private:
  void update(int delta) {
    std::lock_guard lk(mu_);
    reserved_ += delta;
    int want = reserved_ + 1;  // + the external threads that submit and wait
    if (reserved_ > 0 && want > tbb::info::default_concurrency()) {
      if (!control_ || wanted_ != want) {
        control_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                         static_cast<std::size_t>(want));
        wanted_ = want;
      }
    } else {
      control_.reset();
      wanted_ = 0;
    }
  }

  void at_exit() {
    std::unique_lock lk(mu_);
    idle_.wait_for(lk, std::chrono::seconds(5), [&] { return in_flight_.load() == 0; });
    control_.reset();
  }

  std::mutex mu_;
  std::condition_variable idle_;
  std::atomic<int> in_flight_{0};
  int reserved_ = 0;
  int wanted_ = 0;
  std::unique_ptr<tbb::global_control> control_;
};

// ---- caching host allocator -------------------------------------------------------------------
constexpr std::size_t alignment = 256;
// Blocks of 4 MiB and more are whole 2 MiB pages, 2 MiB aligned, and ask the kernel for
// transparent huge pages: big tensors (weights, a KVStore's embeddings) are then one TLB entry per
// 2 MiB, which random row access and streaming kernels both feel. A kernel that declines
// (THP off) leaves them as small pages.
constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr std::size_t huge_from = std::size_t{4} << 20;

/// The alignment of a block of `capacity` bytes (what its allocation and release both use).
std::size_t alignment_of(std::size_t capacity) { return capacity >= huge_from ? huge_page : alignment; }

/// `bytes` rounded up to the block the pool hands out.
std::size_t block_size(std::size_t bytes) {
  const std::size_t need = (std::max<std::size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  return need >= huge_from ? (need + huge_page - 1) / huge_page * huge_page : need;
}

void* new_block(std::size_t capacity) {
  void* p = ::operator new(capacity, std::align_val_t(alignment_of(capacity)));
  if (capacity >= huge_from) (void)::madvise(p, capacity, MADV_HUGEPAGE);  // advice only: failure is harmless
  return p;
}

void delete_block(void* p, std::size_t capacity) { ::operator delete(p, std::align_val_t(alignment_of(capacity))); }

class host_pool {
 public:
  ~host_pool() { trim(); }

  void* allocate(std::size_t bytes, std::size_t& capacity, bool& hit) {
    const std::size_t need = block_size(bytes);
    {
      std::lock_guard lk(mu_);
      // Best fit, but never hand out a block more than twice the request (it would waste memory).
      auto it = free_.lower_bound(need);
      if (it != free_.end() && it->first <= 2 * need) {
        capacity = it->first;
        void* p = it->second;
        free_.erase(it);
        cached_ -= capacity;
        hit = true;
        return p;
      }
    }
    hit = false;
    capacity = need;
    try {
      return new_block(need);
    } catch (const std::bad_alloc&) {
      trim();
      try {
        return new_block(need);
      } catch (const std::bad_alloc&) {
        throw device_error(device_errc::out_of_memory,
                           "cpu device: cannot allocate " + std::to_string(bytes) + " bytes of host memory");
      }
    }
  }

  void release(void* p, std::size_t capacity) {
    std::lock_guard lk(mu_);
    free_.emplace(capacity, p);
    cached_ += capacity;
  }

  void trim() {
    std::multimap<std::size_t, void*> blocks;
    {
      std::lock_guard lk(mu_);
      blocks.swap(free_);
      cached_ = 0;
    }
    for (auto& [n, p] : blocks) delete_block(p, n);
  }

  std::size_t cached() const {
    std::lock_guard lk(mu_);
    return cached_;
  }

 private:
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> free_;
  std::size_t cached_ = 0;
};

std::size_t physical_memory() {
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

class cpu_stream;
class cpu_device;

// The function object an arena runs for one scheduled stream turn (oneTBB calls it as const).
struct arena_task {
  mutable std::shared_ptr<cpu_device> device;
  cpu_runtime* runtime;
  void operator()() const;
};

#if defined(__SANITIZE_THREAD__)
// Debian's libtbb is not built with -fsanitize=thread: ThreadSanitizer cannot see a task_arena's
// hand-off (the task made on the submitting thread, run on a worker) and would report every stream
// turn. Under TSan a device runs its turns on `concurrency` std::threads of its own instead (made
// at the first turn), so every hand-off between device work and the threads around it is one TSan
// sees (docs/reliability.md). No other build changes.
class turn_threads {
 public:
  turn_threads(int concurrency, unsigned) : concurrency_(std::max(1, concurrency)) {}
  turn_threads(const turn_threads&) = delete;
  turn_threads& operator=(const turn_threads&) = delete;
  ~turn_threads() {
    {
      std::lock_guard lk(shared_->mu);
      shared_->stop = true;
    }
    shared_->cv.notify_all();
    // A turn may drop the device's last reference: that thread cannot join itself, and returns to
    // its loop (which holds `shared_`) to find the queue empty and stop.
    for (auto& t : threads_)
      if (t.get_id() == std::this_thread::get_id()) t.detach();
      else t.join();
  }

  void enqueue(arena_task task) {
    {
      std::lock_guard lk(shared_->mu);
      shared_->queue.push_back(std::move(task));
      if (threads_.empty())
        for (int i = 0; i < concurrency_; ++i) threads_.emplace_back([s = shared_] { s->loop(); });
    }
    shared_->cv.notify_one();
  }

 private:
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<arena_task> queue;
    bool stop = false;
    void loop() {
      for (;;) {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stopped and drained
        arena_task task = std::move(queue.front());
        queue.pop_front();
        lk.unlock();
        task();
      }
    }
  };
  int concurrency_;
  std::shared_ptr<state> shared_ = std::make_shared<state>();
  std::vector<std::thread> threads_;  // guarded by shared_->mu (made by the first enqueue)
};
using turn_executor = turn_threads;
#else
using turn_executor = tbb::task_arena;
#endif

// ---- device -------------------------------------------------------------------------------------
class cpu_device final : public device_impl {
 public:
  cpu_device(device_properties p)
      : device_impl(std::move(p)), arena_(props.concurrency, 0) {
    cpu_runtime::get().reserve(props.concurrency);
  }
  ~cpu_device() override {
    // Pending tasks hold the device, so none is queued here; the arena may still be winding down
    // (its destructor does not wait), which oneTBB allows.
    cpu_runtime::get().unreserve(props.concurrency);
  }

  std::shared_ptr<stream_impl> create_stream(stream_priority priority) override;

  std::shared_ptr<allocation> allocate(std::size_t bytes, const std::shared_ptr<stream_impl>& s) override {
    std::size_t capacity = 0;
    bool hit = false;
    void* p = pool_.allocate(bytes, capacity, hit);
    counters_.on_allocate(capacity, hit);
    return std::make_shared<allocation>(s, p, bytes, capacity);
  }

  void release(void* ptr, std::size_t, std::size_t capacity,
               std::vector<std::shared_ptr<stream_impl>> streams) noexcept override {
    try {
      // The last stream to finish may belong to another device: hold this one explicitly.
      auto me = std::static_pointer_cast<cpu_device>(shared_from_this());
      after_all(streams, [me, ptr, capacity] {
        me->counters_.on_release(capacity);
        me->pool_.release(ptr, capacity);
      });
    } catch (...) {
      // Only allocation failure can land here; leaking the block is the safe choice.
    }
  }

  memory_stats memory() const override {
    return {.bytes_in_use = counters_.in_use.load(),
            .peak_bytes_in_use = counters_.peak.load(),
            .bytes_cached = pool_.cached(),
            .allocations = counters_.allocations.load(),
            .cache_hits = counters_.cache_hits.load()};
  }

  void trim() override { pool_.trim(); }

  /// Queues `s` (which has runnable work and is not queued or running) and one arena task for it.
  void schedule(std::shared_ptr<cpu_stream> s);

 private:
  friend struct arena_task;
  void run_one();

  turn_executor arena_;
  host_pool pool_;
  pool_counters counters_;
  std::mutex ready_mu_;
  std::deque<std::shared_ptr<cpu_stream>> ready_[3];  // by stream_priority
};

// ---- stream -------------------------------------------------------------------------------------
// A FIFO of operations executed one at a time by arena tasks. `scheduled_` is true while the stream
// is queued in the device, running, or parked on a wait; only that owner pops operations, so the
// stream never runs on two threads at once.
class cpu_stream final : public queued_stream {
 public:
  using queued_stream::queued_stream;

  void launch(kernel_work work) override {
    if (!work.cpu)
      throw_invalid("stream::launch on " + device->props.name + ": kernel \"" + work.name +
                    "\" has no cpu implementation (kernel_work::cpu is empty)");
    submit(op{.type = op_type::run, .work = std::move(work)});
  }

  void copy(const std::shared_ptr<allocation>& dst, const std::shared_ptr<allocation>& src, std::size_t n) override {
    auto dk = dst->stream->device->props.kind;
    auto sk = src->stream->device->props.kind;
    if (dk == device_kind::cuda || sk == device_kind::cuda)
      throw_invalid("stream::copy on " + device->props.name +
                    ": a cpu stream cannot reach cuda memory; copy on a stream of the cuda device");
    if (dk == device_kind::sim || sk == device_kind::sim) return;  // sim buffers hold no data
    launch_copy([dst, src, n] { std::memcpy(dst->ptr, src->ptr, n); }, n);
  }

  void copy_from_host(const std::shared_ptr<allocation>& dst, const void* src, std::size_t n) override {
    auto dk = dst->stream->device->props.kind;
    if (dk == device_kind::cuda)
      throw_invalid("stream::copy_from_host on " + device->props.name +
                    ": a cpu stream cannot reach cuda memory; copy on a stream of the cuda device");
    if (dk == device_kind::sim) return;
    // Staged so the caller may reuse `src` at once, as documented.
    auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                           static_cast<const std::byte*>(src) + n);
    launch_copy([dst, staged, n] { std::memcpy(dst->ptr, staged->data(), n); }, n);
  }

  void copy_to_host(void* dst, const std::shared_ptr<allocation>& src, std::size_t n) override {
    auto sk = src->stream->device->props.kind;
    if (sk == device_kind::cuda)
      throw_invalid("stream::copy_to_host on " + device->props.name +
                    ": a cpu stream cannot reach cuda memory; copy on a stream of the cuda device");
    if (sk == device_kind::sim) return;
    launch_copy([dst, src, n] { std::memcpy(dst, src->ptr, n); }, n);
  }

  /// Runs queued operations: any number of cheap ones, at most one work item, then yields the
  /// thread (re-queueing itself) so that other streams of the device get a turn.
  void run_batch();

 private:
  void launch_copy(std::function<void()> fn, std::size_t n) {
    submit(op{.type = op_type::run,
              .work = kernel_work{.name = "copy", .kind = work_kind::copy, .bytes = 2.0 * static_cast<double>(n),
                                  .cpu = std::move(fn)}});
  }

  cpu_device& dev() const { return static_cast<cpu_device&>(*device); }
  std::shared_ptr<cpu_stream> self() { return std::static_pointer_cast<cpu_stream>(shared_from_this()); }

  void submit(op o) override {
    bool kick = false;
    {
      std::lock_guard lk(mu_);
      ops_.push_back(std::move(o));
      if (!scheduled_) kick = scheduled_ = true;
    }
    if (kick) dev().schedule(self());
  }

  void adopt(std::exception_ptr e) {
    if (!e) return;
    std::lock_guard lk(mu_);
    if (!error_) error_ = std::move(e);
  }

  void run_work(kernel_work& w) {
    auto start = steady::now();
    try {
      w.cpu();
    } catch (...) {
      adopt(std::current_exception());
    }
    auto end = steady::now();
    if (device->observed())
      device->notify({.name = &w.name,
                      .kind = device_kind::cpu,
                      .device_index = device->props.index,
                      .stream_id = id,
                      .work = w.kind,
                      .start = std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()),
                      .end = std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()),
                      .flops = w.flops,
                      .bytes = w.bytes,
                      .modelled = false});
  }

  std::deque<op> ops_;
  bool scheduled_ = false;
};

void cpu_stream::run_batch() {
  bool ran_work = false;
  for (;;) {
    op o;
    std::exception_ptr err;
    {
      std::lock_guard lk(mu_);
      if (ops_.empty()) {
        scheduled_ = false;
        return;
      }
      if (ran_work && ops_.front().type == op_type::run) break;
      o = std::move(ops_.front());
      ops_.pop_front();
      err = error_;
    }
    switch (o.type) {
      case op_type::run:
        ran_work = true;
        if (!err) run_work(o.work);  // a failed stream skips later work
        break;
      case op_type::record:
        o.point->fire(err);
        break;
      case op_type::notify:
        try {
          o.callback(err);
        } catch (...) {
          // Documented: callbacks must not throw. Swallowing keeps the stream alive.
        }
        break;
      case op_type::wait: {
        auto p = o.point;
        auto me = self();
        if (p->on_fire([me, p] {
              me->adopt(p->error());
              me->dev().schedule(me);  // still owned (scheduled_ stayed true)
            }))
          return;  // parked until p fires
        adopt(p->error());
        break;
      }
    }
  }
  dev().schedule(self());  // yield after one work item; scheduled_ stays true
}

std::shared_ptr<stream_impl> cpu_device::create_stream(stream_priority priority) {
  return std::make_shared<cpu_stream>(shared_from_this(), priority);
}

void cpu_device::schedule(std::shared_ptr<cpu_stream> s) {
  auto prio = static_cast<int>(s->priority);
  {
    std::lock_guard lk(ready_mu_);
    ready_[prio].push_back(std::move(s));
  }
  auto me = std::static_pointer_cast<cpu_device>(shared_from_this());
  auto& runtime = cpu_runtime::get();
  runtime.task_started();
  arena_.enqueue(arena_task{std::move(me), &runtime});
}

void arena_task::operator()() const {
  struct finished {
    cpu_runtime& r;
    ~finished() { r.task_finished(); }
  } guard{*runtime};
  auto d = std::move(device);  // released before `guard`: a destruction here still counts as in flight
  d->run_one();
}

void cpu_device::run_one() {
  std::shared_ptr<cpu_stream> s;
  {
    std::lock_guard lk(ready_mu_);
    for (int p = 2; p >= 0 && !s; --p)
      if (!ready_[p].empty()) {
        s = std::move(ready_[p].front());
        ready_[p].pop_front();
      }
  }
  if (s) s->run_batch();
}

}  // namespace

std::vector<std::shared_ptr<device_impl>> make_devices(int count, int first_index, int threads_per_device) {
  int threads = threads_per_device > 0
                    ? threads_per_device
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, count));
  std::vector<std::shared_ptr<device_impl>> out;
  for (int i = 0; i < count; ++i) {
    device_properties p;
    p.kind = device_kind::cpu;
    p.index = first_index + i;
    p.name = "cpu:" + std::to_string(p.index);
    p.total_memory = physical_memory();
    p.concurrency = threads;
    p.hardware = "host";
    out.push_back(std::make_shared<cpu_device>(std::move(p)));
  }
  return out;
}

}  // namespace strata::cpu_backend
