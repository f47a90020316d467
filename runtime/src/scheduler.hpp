#pragma once
// A fixed pool of worker threads running actors.
//
// Each worker has a one-entry "next" slot (the actor most recently woken by this worker runs
// next, on the same thread, without any lock or wake-up: this keeps request/response pairs and
// pipelines on a warm cache), a local run queue that other workers steal from, and all share an
// injection queue for wake-ups from outside the pool. Idle workers spin briefly, then sleep on a
// futex; a worker wakes a sleeper only when it has more runnable actors than it can run next.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::detail {

struct actor_cell;

/// What runs an actor instead of the worker pool (`actor_cell::runner`): a dedicated thread, or
/// the deterministic scheduler of a test. The pool's own actors have none, so the pool's path
/// pays no virtual call.
class cell_runner {
public:
  virtual ~cell_runner() = default;
  /// Makes `cell` runnable. Any thread.
  virtual void notify(actor_cell* cell) noexcept = 0;
};

class scheduler {
public:
  scheduler(std::size_t workers, std::size_t throughput);
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  void start();
  /// Joins the workers; runnable actors left in queues are not run.
  void stop();

  /// Makes `cell` runnable. Any thread.
  void schedule(actor_cell* cell) noexcept;

  /// A message was queued for an actor that was already runnable (no wake-up). On a worker
  /// thread, the `release_after`-th such send of one turn moves the actor in this worker's next
  /// slot to its local queue, where an idle worker (woken) can take it: a long handler that keeps
  /// feeding the actor it woke no longer holds it until the handler returns; for the rest of
  /// that turn, actors it wakes go to the local queue, not the next slot. Elsewhere: nothing.
  void note_queued_send() noexcept {
    if (tls_worker_of(this) != nullptr) release_next_if_busy();
  }
  static constexpr std::size_t release_after = 256;

  /// True when no actor is runnable or running (checked twice over a short pause).
  bool quiescent();

  std::size_t size() const noexcept { return workers_.size(); }

private:
  struct alignas(64) worker {
    std::mutex m;
    std::deque<actor_cell*> queue;
    std::atomic<std::size_t> queue_size{0};
    actor_cell* next = nullptr;  // owner-only
    std::size_t next_streak = 0; // owner-only
    std::size_t queued_sends = 0; // owner-only: sends without a wake-up in the current turn
    std::atomic<std::uint64_t> scheduled{0};
    std::atomic<std::uint64_t> completed{0};
    std::thread thread;
  };

  /// This thread's worker when it is one of this scheduler's, else null.
  static void* tls_worker_of(const scheduler* s) noexcept;
  void release_next_if_busy() noexcept;
  void run_worker(std::size_t index);
  actor_cell* find_work(worker& self, std::size_t index);
  actor_cell* pop_global();
  actor_cell* steal(std::size_t thief);
  bool any_work();
  void wake_one() noexcept;
  void push_local(worker& w, actor_cell* cell);

  std::vector<std::unique_ptr<worker>> workers_;
  std::size_t throughput_;

  std::mutex global_m_;
  std::deque<actor_cell*> global_;
  std::atomic<std::size_t> global_size_{0};

  alignas(64) std::atomic<std::uint32_t> epoch_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  alignas(64) std::atomic<std::uint64_t> external_scheduled_{0};
  std::atomic<std::uint64_t> external_completed_{0};
  std::atomic<bool> stopping_{false};
  bool started_ = false;

  friend class dedicated_thread;
};

/// A thread that runs exactly one actor (spawn option `dedicated_thread`).
class dedicated_thread final : public cell_runner {
public:
  explicit dedicated_thread(actor_cell* cell);
  ~dedicated_thread() override;
  void notify(actor_cell* cell) noexcept override;
  /// Asks the loop to end after the actor terminated; joins.
  void join();
  bool busy() const noexcept { return busy_.load(std::memory_order_acquire); }

private:
  void loop();
  actor_cell* cell_;
  std::mutex m_;
  std::condition_variable cv_;
  bool ready_ = false;
  bool exit_ = false;
  std::atomic<bool> busy_{false};
  std::thread thread_;
};

}  // namespace strata::detail
