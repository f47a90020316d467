#include "timer_service.hpp"

#include <asio/post.hpp>

namespace strata::detail {

timer_service::timer_service() : work_(asio::make_work_guard(io_)) {
  thread_ = std::thread([this] { io_.run(); });
}

timer_service::~timer_service() { stop(); }

std::shared_ptr<timer_state> timer_service::schedule(std::chrono::nanoseconds delay, std::chrono::nanoseconds period,
                                                     std::function<void()> fire) {
  auto t = std::make_shared<timer_state>(io_);
  t->fire = std::move(fire);
  t->period = period;
  t->owner = this;
  {
    std::lock_guard lock(m_);
    if (stopped_) {
      t->cancelled = true;
      t->finished = true;
      return t;
    }
    active_.emplace(t.get(), t);
  }
  if (delay < std::chrono::nanoseconds{0}) delay = std::chrono::nanoseconds{0};
  // The io thread touches this timer only once async_wait is registered, so arming from here is safe.
  t->timer.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(delay));
  arm(t);
  return t;
}

void timer_service::arm(const std::shared_ptr<timer_state>& t) {
  t->timer.async_wait([this, t](const asio::error_code& ec) {
    if (ec || t->cancelled.load(std::memory_order_acquire)) {
      finish(t.get());
      return;
    }
    t->fire();
    if (t->period > std::chrono::nanoseconds{0} && !t->cancelled.load(std::memory_order_acquire)) {
      t->timer.expires_at(t->timer.expiry() + std::chrono::duration_cast<asio::steady_timer::duration>(t->period));
      arm(t);
    } else {
      finish(t.get());
    }
  });
}

void timer_service::finish(timer_state* t) noexcept {
  t->finished.store(true, std::memory_order_release);
  std::shared_ptr<timer_state> keep;  // released after the lock (declared first, destroyed last)
  std::lock_guard lock(m_);
  auto it = active_.find(t);
  if (it != active_.end()) {
    keep = std::move(it->second);
    active_.erase(it);
  }
}

void timer_service::cancel(const std::shared_ptr<timer_state>& t) noexcept {
  if (t->cancelled.exchange(true, std::memory_order_acq_rel)) return;
  try {
    asio::post(io_, [t] { t->timer.cancel(); });
  } catch (...) {
    // The flag alone already stops delivery.
  }
}

std::size_t timer_service::pending() noexcept {
  std::lock_guard lock(m_);
  std::size_t n = 0;
  for (auto& [ptr, t] : active_)
    if (!t->cancelled.load() && !t->finished.load()) ++n;
  return n;
}

std::uint64_t timer_service::cancel_all() noexcept {
  std::vector<std::shared_ptr<timer_state>> all;
  {
    std::lock_guard lock(m_);
    all.reserve(active_.size());
    for (auto& [ptr, t] : active_) all.push_back(t);
  }
  std::uint64_t n = 0;
  for (auto& t : all) {
    if (!t->cancelled.load() && !t->finished.load()) ++n;
    cancel(t);
  }
  return n;
}

void timer_service::stop() noexcept {
  {
    std::lock_guard lock(m_);
    if (stopped_) return;
    stopped_ = true;
  }
  cancel_all();
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
  // Run what stop() left queued (the cancellations and the aborted waits): their handlers hold
  // actor handles, and an actor's handle keeps the system's state alive (a cycle otherwise).
  io_.restart();
  io_.run();
  std::lock_guard lock(m_);
  active_.clear();
}

}  // namespace strata::detail
