#include "scheduler.hpp"

#include <chrono>

#include "cell.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata::detail {

namespace {
thread_local scheduler* tls_scheduler = nullptr;
thread_local void* tls_worker = nullptr;
constexpr std::size_t next_streak_limit = 32;  // fairness: at most this many "next" runs in a row
constexpr int spin_rounds = 64;
}  // namespace

scheduler::scheduler(std::size_t workers, std::size_t throughput) : throughput_(throughput ? throughput : 1) {
  if (workers == 0) workers = 1;
  for (std::size_t i = 0; i < workers; ++i) workers_.push_back(std::make_unique<worker>());
}

scheduler::~scheduler() { stop(); }

void scheduler::start() {
  if (started_) return;
  started_ = true;
  for (std::size_t i = 0; i < workers_.size(); ++i)
    workers_[i]->thread = std::thread([this, i] { run_worker(i); });
}

void scheduler::stop() {
  if (!started_) return;
  stopping_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  epoch_.notify_all();
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
  started_ = false;
}

void scheduler::wake_one() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_relaxed) > 0) {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    epoch_.notify_one();
  }
}

void scheduler::push_local(worker& w, actor_cell* cell) {
  {
    std::lock_guard lock(w.m);
    w.queue.push_back(cell);
    w.queue_size.store(w.queue.size(), std::memory_order_relaxed);
  }
  wake_one();
}

void* scheduler::tls_worker_of(const scheduler* s) noexcept { return tls_scheduler == s ? tls_worker : nullptr; }

void scheduler::release_next_if_busy() noexcept {
  auto& w = *static_cast<worker*>(tls_worker);
  if (++w.queued_sends != release_after || w.next == nullptr) return;
  push_local(w, std::exchange(w.next, nullptr));  // wakes a sleeper, which steals it
}

void scheduler::schedule(actor_cell* cell) noexcept {
  if (tls_scheduler == this) {
    auto& w = *static_cast<worker*>(tls_worker);
    w.scheduled.store(w.scheduled.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (w.queued_sends >= release_after) {
      // This turn is a long sender: an actor it wakes (again, after draining its mailbox on
      // another worker) would wait in the next slot until the turn ends. Stealable instead.
      push_local(w, cell);
      return;
    }
    if (w.next == nullptr) {
      w.next = cell;
      return;
    }
    actor_cell* previous = w.next;
    w.next = cell;
    push_local(w, previous);
    return;
  }
  external_scheduled_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(global_m_);
    global_.push_back(cell);
    global_size_.store(global_.size(), std::memory_order_relaxed);
  }
  wake_one();
}

actor_cell* scheduler::pop_global() {
  if (global_size_.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard lock(global_m_);
  if (global_.empty()) return nullptr;
  actor_cell* c = global_.front();
  global_.pop_front();
  global_size_.store(global_.size(), std::memory_order_relaxed);
  return c;
}

actor_cell* scheduler::steal(std::size_t thief) {
  const std::size_t n = workers_.size();
  for (std::size_t k = 1; k < n; ++k) {
    worker& victim = *workers_[(thief + k) % n];
    if (victim.queue_size.load(std::memory_order_relaxed) == 0) continue;
    std::unique_lock lock(victim.m, std::try_to_lock);
    if (!lock.owns_lock() || victim.queue.empty()) continue;
    actor_cell* c = victim.queue.back();
    victim.queue.pop_back();
    victim.queue_size.store(victim.queue.size(), std::memory_order_relaxed);
    return c;
  }
  return nullptr;
}

bool scheduler::any_work() {
  if (global_size_.load(std::memory_order_relaxed) != 0) return true;
  for (auto& w : workers_)
    if (w->queue_size.load(std::memory_order_relaxed) != 0) return true;
  return false;
}

actor_cell* scheduler::find_work(worker& self, std::size_t index) {
  if (self.next != nullptr) {
    if (self.next_streak < next_streak_limit) {
      ++self.next_streak;
      return std::exchange(self.next, nullptr);
    }
    push_local(self, std::exchange(self.next, nullptr));
  }
  self.next_streak = 0;
  if (self.queue_size.load(std::memory_order_relaxed) != 0) {
    actor_cell* c = nullptr;
    bool more = false;
    {
      std::lock_guard lock(self.m);
      if (!self.queue.empty()) {
        c = self.queue.front();
        self.queue.pop_front();
        self.queue_size.store(self.queue.size(), std::memory_order_relaxed);
        more = !self.queue.empty();
      }
    }
    if (more) wake_one();  // someone may steal the rest
    if (c) return c;
  }
  if (actor_cell* c = pop_global()) return c;
  return steal(index);
}

void scheduler::run_worker(std::size_t index) {
  tls_scheduler = this;
  worker& self = *workers_[index];
  tls_worker = &self;
  std::size_t tick = 0;
  while (!stopping_.load(std::memory_order_relaxed)) {
    actor_cell* c = nullptr;
    if (++tick % 61 == 0) c = pop_global();  // the injection queue is never starved
    if (!c) c = find_work(self, index);
    if (!c) {
      for (int i = 0; i < spin_rounds && !c; ++i) {
        STRATA_CPU_RELAX();
        if (any_work()) c = find_work(self, index);
      }
    }
    if (!c) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      std::uint32_t e = epoch_.load(std::memory_order_seq_cst);
      if (!any_work() && !stopping_.load(std::memory_order_seq_cst)) epoch_.wait(e, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      continue;
    }
    self.queued_sends = 0;
    run_result r = run_actor(c, throughput_);
    if (r == run_result::reschedule) {
      push_local(self, c);
    } else {
      self.completed.store(self.completed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  tls_scheduler = nullptr;
  tls_worker = nullptr;
}

bool scheduler::quiescent() {
  auto snapshot = [this] {
    std::uint64_t s = external_scheduled_.load(std::memory_order_acquire);
    std::uint64_t c = external_completed_.load(std::memory_order_acquire);
    for (auto& w : workers_) {
      s += w->scheduled.load(std::memory_order_acquire);
      c += w->completed.load(std::memory_order_acquire);
    }
    return std::pair{s, c};
  };
  auto a = snapshot();
  if (a.first != a.second) return false;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto b = snapshot();
  return b.first == b.second && b.first == a.first;
}

// ---- dedicated threads ------------------------------------------------------------------------

dedicated_thread::dedicated_thread(actor_cell* cell) : cell_(cell) {
  thread_ = std::thread([this] { loop(); });
}

dedicated_thread::~dedicated_thread() { join(); }

void dedicated_thread::notify(actor_cell*) noexcept {
  std::lock_guard lock(m_);
  ready_ = true;
  busy_.store(true, std::memory_order_release);
  cv_.notify_one();
}

void dedicated_thread::join() {
  {
    std::lock_guard lock(m_);
    exit_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void dedicated_thread::loop() {
  for (;;) {
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [this] { return ready_ || exit_; });
      if (!ready_) return;
      ready_ = false;
    }
    run_result r;
    do {
      r = run_actor(cell_, ~std::size_t{0});
    } while (r == run_result::reschedule);
    std::lock_guard lock(m_);
    if (!ready_) busy_.store(false, std::memory_order_release);
  }
}

}  // namespace strata::detail
