#include "strata/device/event.hpp"

#include <string>

#include "device/impl.hpp"
#include "strata/device/error.hpp"
#include "strata/extension/transport.hpp"

namespace strata {
namespace detail {

void event_point::fire(std::exception_ptr error) {
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard lk(mu_);
    if (done_.load(std::memory_order_relaxed)) return;
    error_ = std::move(error);
    fired_at_ = steady::now();
    done_.store(true, std::memory_order_release);
    waiters.swap(waiters_);
  }
  cv_.notify_all();
  for (auto& w : waiters) w();
}

bool event_point::on_fire(std::function<void()> fn) {
  std::lock_guard lk(mu_);
  if (done_.load(std::memory_order_relaxed)) return false;
  waiters_.push_back(std::move(fn));
  return true;
}

void event_point::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_.load(std::memory_order_relaxed); });
}

bool event_point::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return done_.load(std::memory_order_relaxed); });
}

std::exception_ptr event_point::error() const {
  std::lock_guard lk(mu_);
  return error_;
}

steady::time_point event_point::fired_at() const {
  std::lock_guard lk(mu_);
  return fired_at_;
}

[[noreturn]] void throw_invalid(const std::string& what) {
  throw device_error(device_errc::invalid_argument, what);
}

// ---- manual_event (strata/extension/transport.hpp) -----------------------------------------------

manual_event::manual_event() : point_(std::make_shared<event_point>()) {
  auto impl = std::make_shared<event_impl>(device_kind::cpu, -1, false);
  impl->set_current(point_);
  ready_ = handle_of(std::move(impl));
}

void manual_event::complete(std::exception_ptr failure) const { point_->fire(std::move(failure)); }

}  // namespace detail

using detail::event_point;

namespace {
std::shared_ptr<event_point> point_of(const std::shared_ptr<detail::event_impl>& impl) {
  return impl ? impl->current() : nullptr;
}
}  // namespace

bool event::query() const {
  auto p = point_of(impl_);
  return !p || p->done();
}

void event::synchronize() const {
  auto p = point_of(impl_);
  if (!p) return;
  p->wait();
  if (auto e = p->error()) std::rethrow_exception(e);
}

std::exception_ptr event::error() const {
  auto p = point_of(impl_);
  return p && p->done() ? p->error() : nullptr;
}

void event::then(std::function<void(std::exception_ptr)> callback) const {
  auto p = point_of(impl_);
  if (!p) {
    callback(nullptr);
    return;
  }
  // The wrapper is shared so that, if on_fire refuses (already fired), we still own the callback.
  auto cb = std::make_shared<std::function<void(std::exception_ptr)>>(std::move(callback));
  if (!p->on_fire([cb, p] { (*cb)(p->error()); })) (*cb)(p->error());
}

double event::modelled_time() const {
  auto p = point_of(impl_);
  return p ? p->modelled.load() : -1.0;
}

double event::elapsed_ms(const event& start, const event& end) {
  auto a = point_of(start.impl_);
  auto b = point_of(end.impl_);
  if (!a || !b) detail::throw_invalid("event::elapsed_ms: both events must have been recorded");
  if (!a->done() || !b->done())
    detail::throw_invalid("event::elapsed_ms: both events must have completed (query() is true)");
  if (start.impl_->kind != end.impl_->kind)
    detail::throw_invalid("event::elapsed_ms: the two events belong to different backends");
  switch (start.impl_->kind) {
    case device_kind::sim: return (b->modelled.load() - a->modelled.load()) * 1e3;
    case device_kind::cpu:
      return std::chrono::duration<double, std::milli>(b->fired_at() - a->fired_at()).count();
    case device_kind::cuda:
#if STRATA_HAS_CUDA
      return detail::cuda_elapsed_ms(*a, *b);
#else
      break;
#endif
  }
  throw device_error(device_errc::unavailable, "event::elapsed_ms: this build has no CUDA support");
}

}  // namespace strata
