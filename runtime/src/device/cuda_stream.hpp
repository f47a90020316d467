#pragma once
// Private: a cuda stream of the device layer: one CUDA stream and one cuBLAS handle, work issued
// in submission order, completions delivered through host functions kept in a completion_ledger.

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "device/cuda_completions.hpp"
#include "device/cuda_gpu.hpp"
#include "device/cuda_reporter.hpp"
#include "device/impl.hpp"

namespace strata::cuda_backend {

using detail::allocation;
using detail::event_impl;
using detail::event_point;
using detail::stream_impl;

class cuda_device;

/// Operations are issued to the CUDA stream at once, under `mu_`, in submission order. A wait for a
/// non-cuda event (or a cuda record not yet issued) gates the stream: later operations queue in
/// `pending_` and the dispatcher thread issues them once the event fires.
///
/// Event points, on_complete callbacks and staging copies run as host functions registered in the
/// stream's completion_ledger: when the GPU fails (a sticky error, after which CUDA runs no queued
/// host function), the context's fault_watch completes them with a device_error naming the stream,
/// and the stream keeps that error (later work is skipped, synchronize() rethrows it).
///
/// With STRATA_CUDA_SYNC=1 every work item is followed by cudaStreamSynchronize, so that a fault
/// is reported by the item that caused it (a debug mode: it serialises host and GPU).
class cuda_stream final : public stream_impl {
 public:
  cuda_stream(std::shared_ptr<device_impl> dev, stream_priority p);
  ~cuda_stream() override;

  void launch(kernel_work work) override;
  void copy(const std::shared_ptr<allocation>& dst, const std::shared_ptr<allocation>& src, std::size_t n) override;
  void copy_from_host(const std::shared_ptr<allocation>& dst, const void* src, std::size_t n) override;
  void copy_to_host(void* dst, const std::shared_ptr<allocation>& src, std::size_t n) override;

  void record(event_impl& e) override;
  void record_point(std::shared_ptr<event_point> p) override;
  void wait(std::shared_ptr<event_point> p) override;
  void on_complete(completion_callback cb) override;
  void synchronize() override;
  std::exception_ptr error() const override;
  void* native() const noexcept override { return stream_; }

  /// Issues `issue` now (under the lock, with the GPU current) or, while gated, queues it.
  void submit(std::function<void()> issue);

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

  /// Called with mu_ held from an issue function: runs `c` after the work issued so far, as a host
  /// function kept in the ledger (c(nullptr)), or with the stream's fault once the GPU failed.
  void host_call(completion c);
  void fire_later(std::shared_ptr<event_point> p);
  void resume(const std::shared_ptr<event_point>& p);
  /// With mu_ held: the ledger's fault becomes the stream's sticky error.
  void adopt_fault();

  std::shared_ptr<gpu_state> gpu_state_;
  work_reporter* reporter_ = nullptr;  // the device's, which this stream keeps alive
  int gpu_ = 0;
  cudaStream_t stream_{};
  cublasHandle_t blas_{};
  std::shared_ptr<completion_ledger> ledger_;
  mutable std::mutex mu_;
  bool gated_ = false;
  std::deque<std::function<void()>> pending_;
  std::exception_ptr error_;
  std::uint64_t reported_ = 0;  // sequence number of this stream's last observed item
};

}  // namespace strata::cuda_backend
