#pragma once
// Delayed and periodic deliveries on Asio steady timers, run by one thread.

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

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
};

class timer_service {
public:
  timer_service();
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

private:
  void arm(const std::shared_ptr<timer_state>& t);
  void finish(timer_state* t) noexcept;

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::mutex m_;
  std::unordered_map<timer_state*, std::shared_ptr<timer_state>> active_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace strata::detail
