#pragma once
// Delayed and periodic deliveries on Asio steady timers, run by one thread; or, for a
// deterministic system, on a manual clock that only the test moves (no thread).

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

namespace strata::detail {

class timer_service;

struct timer_state {
  explicit timer_state(asio::io_context& io) : timer(io) {}
  asio::steady_timer timer;
  std::function<void()> fire;
  std::chrono::nanoseconds period{0};
  std::atomic<bool> cancelled{false};
  std::atomic<bool> finished{false};
  timer_service* owner = nullptr;
  // Manual clock only: when it is due, and its place among timers due at the same time.
  std::chrono::nanoseconds due{0};
  std::uint64_t seq = 0;
};

class timer_service {
public:
  /// `manual_clock`: no thread; time moves only by `advance_to` and `fire_next`.
  explicit timer_service(bool manual_clock = false);
  ~timer_service();
  timer_service(const timer_service&) = delete;
  timer_service& operator=(const timer_service&) = delete;

  std::shared_ptr<timer_state> schedule(std::chrono::nanoseconds delay, std::chrono::nanoseconds period,
                                        std::function<void()> fire);
  void cancel(const std::shared_ptr<timer_state>& t) noexcept;
  /// Cancels every active timer; returns how many.
  std::uint64_t cancel_all() noexcept;
  /// Timers neither cancelled nor finished (a periodic timer stays until cancelled).
  std::size_t pending() noexcept;
  /// Ends the timer thread (pending timers are cancelled).
  void stop() noexcept;

  // ---- manual clock only (the calls below assume it) ----
  /// Time since the service started.
  std::chrono::nanoseconds now() noexcept;
  /// Fires the earliest pending timer, due at or before `limit` and armed before the
  /// `armed_before`-th arming (see `arm_count`), moving the clock to its due time if that is
  /// later; timers due at the same time fire in the order they were armed. False if none.
  bool fire_next(std::chrono::nanoseconds limit, std::uint64_t armed_before);
  /// How many armings so far (a periodic timer's every period counts).
  std::uint64_t arm_count() noexcept;
  /// Moves the clock forward to `t` (never back).
  void advance_to(std::chrono::nanoseconds t) noexcept;

private:
  using due_key = std::pair<std::chrono::nanoseconds, std::uint64_t>;
  void enqueue_locked(const std::shared_ptr<timer_state>& t) noexcept;
  void arm(const std::shared_ptr<timer_state>& t);
  void finish(timer_state* t) noexcept;

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::mutex m_;
  std::unordered_map<timer_state*, std::shared_ptr<timer_state>> active_;
  std::thread thread_;
  bool stopped_ = false;
  const bool manual_;
  std::chrono::nanoseconds now_{0};
  std::uint64_t next_seq_ = 0;
  std::map<due_key, std::shared_ptr<timer_state>> due_;  // manual clock: pending timers by due time
};

}  // namespace strata::detail
