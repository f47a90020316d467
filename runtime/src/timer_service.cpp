#include "timer_service.hpp"

#include <asio/post.hpp>

namespace strata::detail {

timer_service::timer_service(bool manual_clock) : work_(asio::make_work_guard(io_)), manual_(manual_clock) {
  if (!manual_) thread_ = std::thread([this] { io_.run(); });
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
    if (delay < std::chrono::nanoseconds{0}) delay = std::chrono::nanoseconds{0};
    active_.emplace(t.get(), t);
    if (manual_) {
      t->due = now_ + delay;
      enqueue_locked(t);
      return t;
    }
  }
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

void timer_service::enqueue_locked(const std::shared_ptr<timer_state>& t) noexcept {
  t->seq = next_seq_++;
  due_.emplace(due_key{t->due, t->seq}, t);
}

void timer_service::cancel(const std::shared_ptr<timer_state>& t) noexcept {
  if (t->cancelled.exchange(true, std::memory_order_acq_rel)) return;
  if (manual_) {
    std::shared_ptr<timer_state> keep;  // released after the lock (declared first, destroyed last)
    {
      std::lock_guard lock(m_);
      auto it = due_.find(due_key{t->due, t->seq});
      if (it != due_.end() && it->second == t) {
        keep = std::move(it->second);
        due_.erase(it);
      }
    }
    finish(t.get());
    return;
  }
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
  if (manual_) {
    // Released after the lock: their handlers hold actor handles (see below).
    std::map<due_key, std::shared_ptr<timer_state>> due;
    std::unordered_map<timer_state*, std::shared_ptr<timer_state>> active;
    std::lock_guard lock(m_);
    due.swap(due_);
    active.swap(active_);
    return;
  }
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

// ---- manual clock -------------------------------------------------------------------------------

std::chrono::nanoseconds timer_service::now() noexcept {
  std::lock_guard lock(m_);
  return now_;
}

std::uint64_t timer_service::arm_count() noexcept {
  std::lock_guard lock(m_);
  return next_seq_;
}

void timer_service::advance_to(std::chrono::nanoseconds t) noexcept {
  std::lock_guard lock(m_);
  if (t > now_) now_ = t;
}

bool timer_service::fire_next(std::chrono::nanoseconds limit, std::uint64_t armed_before) {
  std::shared_ptr<timer_state> t;
  {
    std::lock_guard lock(m_);
    auto it = due_.begin();
    while (it != due_.end() && it->first.first <= limit && it->first.second >= armed_before) ++it;
    if (it == due_.end() || it->first.first > limit) return false;
    t = std::move(it->second);
    due_.erase(it);
    if (t->due > now_) now_ = t->due;
  }
  t->fire();
  if (t->period > std::chrono::nanoseconds{0}) {
    std::lock_guard lock(m_);
    // Checked under the lock: a cancel() that set the flag later finds the timer queued again.
    if (!stopped_ && !t->cancelled.load(std::memory_order_acquire)) {
      t->due += t->period;
      enqueue_locked(t);
      return true;
    }
  }
  finish(t.get());
  return true;
}

}  // namespace strata::detail
