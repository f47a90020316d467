#pragma once
// Private: what the cpu and sim streams share. Both queue every call as an `op` (a work item, an
// event point to record or to wait for, a completion callback) in submission order, and keep the
// stream's first error under one lock; they differ in how they run the queue (arena tasks for
// cpu, modelled time on the clock thread for sim).

#include <exception>
#include <memory>
#include <mutex>

#include "device/impl.hpp"
#include "strata/device/work.hpp"

namespace strata::detail {

class queued_stream : public stream_impl {
 public:
  using stream_impl::stream_impl;

  void record_point(std::shared_ptr<event_point> p) final { submit(op{.type = op_type::record, .point = std::move(p)}); }
  void wait(std::shared_ptr<event_point> p) final { submit(op{.type = op_type::wait, .point = std::move(p)}); }
  void on_complete(completion_callback cb) final { submit(op{.type = op_type::notify, .callback = std::move(cb)}); }

  std::exception_ptr error() const final {
    std::lock_guard lk(mu_);
    return error_;
  }

 protected:
  enum class op_type { run, record, wait, notify };
  struct op {
    op_type type = op_type::run;
    kernel_work work;
    double seconds = 0;  // sim, work: modelled duration
    std::shared_ptr<event_point> point;
    completion_callback callback;
  };

  /// Queues `o` behind everything submitted before it.
  virtual void submit(op o) = 0;

  mutable std::mutex mu_;
  std::exception_ptr error_;  // the first failure; later work is skipped, later points carry it
};

}  // namespace strata::detail
