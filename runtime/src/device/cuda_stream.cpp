#include "device/cuda_stream.hpp"

#include <cstring>
#include <utility>

#include "device/cuda_device.hpp"

namespace strata::cuda_backend {

using detail::throw_invalid;

namespace {

/// What a host function carries: its entry in the ledger (which keeps the ledger alive).
struct host_call_arg {
  std::shared_ptr<completion_ledger> ledger;
  std::uint64_t ticket = 0;
};

// Host functions (cudaLaunchHostFunc) run on CUDA's callback thread and must not call CUDA. After a
// sticky error CUDA never runs them: their argument leaks and the fault watch completes the entry.
void CUDART_CB run_host_function(void* arg) {
  mark_cuda_callback_thread();  // for the destructors of what the completion holds
  std::unique_ptr<host_call_arg> call(static_cast<host_call_arg*>(arg));
  call->ledger->run(call->ticket);
}

}  // namespace

cuda_device& cuda_stream::dev() const { return static_cast<cuda_device&>(*device); }

cuda_stream::cuda_stream(std::shared_ptr<device_impl> d, stream_priority p) : stream_impl(std::move(d), p) {
  gpu_state_ = dev().gpu;
  reporter_ = &dev().reporter;
  gpu_ = gpu_state_->ordinal;
  ledger_ = std::make_shared<completion_ledger>(device->props.name + " stream " + std::to_string(id),
                                                [g = gpu_state_] { return g->failure(); }, dev().ctx->watch);
  current_device cd(gpu_);
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  int native_priority = p == stream_priority::high ? greatest : p == stream_priority::low ? least : (least + greatest) / 2;
  check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, native_priority), "cudaStreamCreateWithPriority");
  try {
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
  } catch (...) {
    if (blas_) cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

cuda_stream::~cuda_stream() {
  release_cuda_resources([gpu = gpu_, blas = blas_, stream = stream_] {
    current_device cd(gpu);
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);  // returns at once; resources go when work ends
  });
}

void cuda_stream::launch(kernel_work work) {
  if (!work.cuda)
    throw_invalid("stream::launch on " + device->props.name + ": kernel \"" + work.name +
                  "\" has no cuda implementation (kernel_work::cuda is empty)");
  // As on cpu: what the launcher throws becomes the stream's sticky error (synchronize, events
  // and callbacks report it), and items after it are skipped.
  submit([this, w = std::move(work)] {
    if (error_) return;
    try {
      issue_observed(w.name, w.kind, w.flops, w.bytes, [&] {
        cuda_launch_context c{.stream = stream_, .cublas = blas_, .gpu = gpu_};
        w.cuda(c);
        auto e = cudaGetLastError();
        if (e != cudaSuccess) fail("kernel \"" + w.name + "\" launch", e);
      });
      if (cuda_sync_mode()) {
        auto e = cudaStreamSynchronize(stream_);
        if (e != cudaSuccess) {
          cudaGetLastError();
          auto fault = stream_fault(ledger_->stream_name(), describe(e) + " in work item \"" + w.name +
                                                                 "\", found by STRATA_CUDA_SYNC=1 right after it");
          error_ = fault;
          // Off this lock: the completions may run user callbacks.
          dev().ctx->issuer.post([l = ledger_, fault] { l->fail(fault); });
        }
      }
    } catch (...) {
      error_ = std::current_exception();
      // In the debug mode the kernels' own launch check has synchronised: if the GPU failed, the
      // pending points and callbacks get this error, which names the kernel.
      if (cuda_sync_mode() && gpu_state_->failure()) dev().ctx->issuer.post([l = ledger_, e = error_] { l->fail(e); });
    }
  });
}

void cuda_stream::record_point(std::shared_ptr<event_point> p) {
  submit([this, p] { fire_later(p); });
}

void cuda_stream::on_complete(completion_callback cb) {
  submit([this, cb = std::move(cb)] {
    host_call([cb, err = error_](std::exception_ptr fault) { cb(fault ? fault : err); });
  });
}

void cuda_stream::synchronize() {
  auto p = std::make_shared<event_point>();
  record_point(p);
  p->wait();  // bounded: if the GPU fails, the fault watch completes the point with the fault
  if (auto f = ledger_->fault()) {
    std::lock_guard lk(mu_);
    adopt_fault();
    std::rethrow_exception(error_);
  }
  current_device cd(gpu_);
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  std::uint64_t reported = 0;
  {
    std::lock_guard lk(mu_);
    reported = reported_;
  }
  reporter_->wait_delivered(reported);  // the observer has seen this stream's work
  if (auto e = error()) std::rethrow_exception(e);
}

std::exception_ptr cuda_stream::error() const {
  std::lock_guard lk(mu_);
  return error_ ? error_ : ledger_->fault();
}

void cuda_stream::submit(std::function<void()> issue) {
  std::lock_guard lk(mu_);
  adopt_fault();
  if (gated_) {
    pending_.push_back(std::move(issue));
    return;
  }
  current_device cd(gpu_);
  issue();
}

void cuda_stream::adopt_fault() {
  if (!error_)
    if (auto f = ledger_->fault()) error_ = f;
}

void cuda_stream::host_call(completion c) {
  auto ticket = ledger_->add(std::move(c));
  if (ticket == 0) {  // the GPU has failed: complete it now, off this lock
    dev().ctx->issuer.post([c = std::move(c), f = ledger_->fault()] { c(f); });
    return;
  }
  auto* arg = new host_call_arg{ledger_, ticket};
  auto e = cudaLaunchHostFunc(stream_, &run_host_function, arg);
  if (e != cudaSuccess) {
    delete arg;
    cudaGetLastError();
    // CUDA refuses host functions only on a broken stream: complete everything with that error.
    auto fault = stream_fault(ledger_->stream_name(), "cudaLaunchHostFunc: " + describe(e));
    if (!error_) error_ = fault;
    dev().ctx->issuer.post([l = ledger_, fault] { l->fail(fault); });
  }
}

void cuda_stream::fire_later(std::shared_ptr<event_point> p) {
  host_call([p, err = error_](std::exception_ptr fault) { p->fire(fault ? fault : err); });
}

void cuda_stream::resume(const std::shared_ptr<event_point>& p) {
  std::lock_guard lk(mu_);
  if (auto e = p->error(); e && !error_) error_ = e;
  gated_ = false;
  try {
    current_device cd(gpu_);
    while (!gated_ && !pending_.empty()) {
      auto issue = std::move(pending_.front());
      pending_.pop_front();
      try {
        issue();
      } catch (...) {
        if (!error_) error_ = std::current_exception();  // asynchronous now: kept by the stream
      }
    }
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
}

void cuda_stream::record(event_impl& e) {
  if (e.kind != device_kind::cuda || e.gpu != gpu_)
    throw_invalid("stream::record on " + device->props.name + ": the event was created on a " +
                  std::string(to_string(e.kind)) + " device" +
                  (e.kind == device_kind::cuda ? " of GPU " + std::to_string(e.gpu) : std::string()) +
                  "; expected an event of GPU " + std::to_string(gpu_));
  auto p = std::make_shared<event_point>();
  auto g = gpu_state_;
  bool timing = e.timing;
  cudaEvent_t native = g->take_event(event_use_of(timing));
  p->native = native;
  p->native_gpu = gpu_;
  p->native_timing = timing;
  p->native_owner =
      std::shared_ptr<void>(nullptr, [g, native, timing](void*) { g->give_event(native, event_use_of(timing)); });
  submit([this, p, native] {
    // After a fault the native event is never recorded: streams that wait for it wait on the host
    // side, for the point, which completes with the fault.
    if (!ledger_->fault()) {
      check(cudaEventRecord(native, stream_), "cudaEventRecord");
      p->native_error = error_;
      p->native_recorded.store(true, std::memory_order_release);
    }
    fire_later(p);
  });
  e.set_current(std::move(p));
}
void cuda_stream::wait(std::shared_ptr<event_point> p) {
  submit([this, p] {
    if (p->done()) {
      if (auto e = p->error(); e && !error_) error_ = e;
      return;
    }
    if (p->native && p->native_recorded.load(std::memory_order_acquire)) {
      check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(p->native), 0), "cudaStreamWaitEvent");
      if (p->native_error && !error_) error_ = p->native_error;  // a stream that waits adopts the error
      return;
    }
    // Another backend's event (or a cuda record still queued): hold later work on the host side.
    gated_ = true;
    auto me = self();
    if (!p->on_fire([me, p] { me->dev().ctx->issuer.post([me, p] { me->resume(p); }); })) {
      gated_ = false;
      if (auto e = p->error(); e && !error_) error_ = e;
    }
  });
}

void cuda_stream::copy(const std::shared_ptr<allocation>& dst, const std::shared_ptr<allocation>& src, std::size_t n) {
  auto dk = dst->stream->device->props.kind;
  auto sk = src->stream->device->props.kind;
  if (dk == device_kind::sim || sk == device_kind::sim) return;  // sim buffers hold no data
  auto g = gpu_state_;
  submit([this, dst, src, n, dk, sk, g] {
    issue_copy(n, [&] {
      if (dk == device_kind::cuda && sk == device_kind::cuda) {
        int dg = dst->stream->device->props.gpu_ordinal;
        int sg = src->stream->device->props.gpu_ordinal;
        if (dg == sg)
          check(cudaMemcpyAsync(dst->ptr, src->ptr, n, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
        else
          check(cudaMemcpyPeerAsync(dst->ptr, dg, src->ptr, sg, n, stream_), "cudaMemcpyPeerAsync");
      } else if (dk == device_kind::cuda) {  // from a cpu buffer, read in stream order through pinned staging
        std::size_t cap = 0;
        void* pin = g->take_pinned(n, cap);
        host_call([pin, src, n](std::exception_ptr fault) {
          if (!fault) std::memcpy(pin, src->ptr, n);
        });
        check(cudaMemcpyAsync(dst->ptr, pin, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
        host_call([g, pin, cap](std::exception_ptr fault) {
          if (!fault) g->give_pinned(pin, cap);  // after a fault a copy may still use it: leaked
        });
      } else if (sk == device_kind::cuda) {  // to a cpu buffer
        std::size_t cap = 0;
        void* pin = g->take_pinned(n, cap);
        check(cudaMemcpyAsync(pin, src->ptr, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
        host_call([g, pin, cap, dst, n](std::exception_ptr fault) {
          if (fault) return;
          std::memcpy(dst->ptr, pin, n);
          g->give_pinned(pin, cap);
        });
      } else {
        host_call([dst, src, n](std::exception_ptr fault) {
          if (!fault) std::memcpy(dst->ptr, src->ptr, n);
        });
      }
    });
    // Keep both buffers alive until the copy has run (their release is ordered on their own streams).
    host_call([dst, src](std::exception_ptr) {});
  });
}

void cuda_stream::copy_from_host(const std::shared_ptr<allocation>& dst, const void* src, std::size_t n) {
  auto dk = dst->stream->device->props.kind;
  if (dk == device_kind::sim) return;
  auto g = gpu_state_;
  std::size_t cap = 0;
  void* pin = g->take_pinned(n, cap);
  std::memcpy(pin, src, n);  // read now, as documented; the caller may reuse `src`
  submit([this, dst, n, dk, g, pin, cap] {
    issue_copy(n, [&] {
      if (dk == device_kind::cuda)
        check(cudaMemcpyAsync(dst->ptr, pin, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
      else
        host_call([dst, pin, n](std::exception_ptr fault) {
          if (!fault) std::memcpy(dst->ptr, pin, n);
        });
    });
    host_call([g, pin, cap, dst](std::exception_ptr fault) {
      if (!fault) g->give_pinned(pin, cap);
    });
  });
}

void cuda_stream::copy_to_host(void* dst, const std::shared_ptr<allocation>& src, std::size_t n) {
  auto sk = src->stream->device->props.kind;
  if (sk == device_kind::sim) return;
  auto g = gpu_state_;
  submit([this, dst, src, n, sk, g] {
    issue_copy(n, [&] {
      if (sk == device_kind::cuda) {
        std::size_t cap = 0;
        void* pin = g->take_pinned(n, cap);
        check(cudaMemcpyAsync(pin, src->ptr, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
        host_call([g, pin, cap, dst, n, src](std::exception_ptr fault) {
          if (fault) return;
          std::memcpy(dst, pin, n);
          g->give_pinned(pin, cap);
        });
      } else {
        host_call([dst, src, n](std::exception_ptr fault) {
          if (!fault) std::memcpy(dst, src->ptr, n);
        });
      }
    });
  });
}

}  // namespace strata::cuda_backend
