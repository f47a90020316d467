#pragma once
/// \file
/// The description of one unit of device work, filled by kernels for every backend at once.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "strata/device/kind.hpp"

namespace strata {

/// Which of a sim profile's compute rates a work item runs at.
enum class work_kind {
  pointwise,  ///< elementwise / reductions: sim_profile::vector_flops
  matmul,     ///< GEMM-like (tensor cores on GPUs): sim_profile::matmul_flops
  copy,       ///< a memory copy; set by the device layer for its own copies
};

/// What a cuda launcher receives. Pointers are type-erased so that public headers need no CUDA
/// headers: cast `stream` to `cudaStream_t` and `cublas` to `cublasHandle_t`.
struct cuda_launch_context {
  void* stream = nullptr;  ///< cudaStream_t of the strata stream
  void* cublas = nullptr;  ///< cublasHandle_t bound to that stream (one per strata stream)
  int gpu = -1;            ///< CUDA device ordinal; it is the current device during the call
};

/// One unit of work for stream::launch, describing the same kernel for every backend so that a
/// call site need not know which backend runs it:
///
///     s.launch({.name = "axpy", .kind = work_kind::pointwise,
///               .flops = 2.0 * n, .bytes = 12.0 * n,
///               .cpu = [=] { for (int64_t i = 0; i < n; ++i) y[i] += a * x[i]; },
///               .cuda = [=](const cuda_launch_context& c) { launch_axpy(c, n, a, x, y); }});
///
/// - cpu streams call `cpu` on an arena thread (it may use oneTBB parallel algorithms: they run
///   inside the device's arena). A cpu stream rejects work without `cpu`.
/// - cuda streams call `cuda` on the submitting thread; it must only enqueue work on
///   `context.stream` (kernel launches, cuBLAS calls), never synchronize.
/// - sim streams run neither; they model `max(flops / rate, bytes / bandwidth) + latency`.
/// Exceptions thrown by `cpu` are captured by the stream (see stream::error()).
struct kernel_work {
  std::string name{};            ///< for traces and error messages
  work_kind kind = work_kind::pointwise;
  double flops = 0;              ///< floating point operations (sim cost model)
  double bytes = 0;              ///< bytes read plus written in device memory (sim cost model)
  std::function<void()> cpu{};   ///< host implementation
  std::function<void(const cuda_launch_context&)> cuda{};  ///< CUDA launcher
};

/// Start and end of one completed work item, given to a device's work observer (for tracing).
/// Times are nanoseconds: for cpu and cuda since the std::chrono::steady_clock epoch (real times:
/// cpu reads the clock on the arena thread; cuda measures with CUDA events and converts them to
/// steady-clock times, to a few microseconds), for sim since the sim clock's epoch (modelled times;
/// `modelled` is true). Copies done by the device layer are reported too, named "copy"
/// (work_kind::copy; on cpu and cuda `bytes` counts read plus written bytes).
struct work_record {
  const std::string* name = nullptr;  ///< the kernel_work's name; valid during the call only
  device_kind kind = device_kind::cpu;
  int device_index = 0;
  std::uint64_t stream_id = 0;
  work_kind work = work_kind::pointwise;
  std::chrono::nanoseconds start{0};
  std::chrono::nanoseconds end{0};
  double flops = 0;
  double bytes = 0;
  bool modelled = false;
};

/// A hook called once per completed work item, on the thread that completes it (cpu: the arena
/// thread that ran it; sim: the sim clock thread; cuda: the device's reporter thread, shortly after
/// the GPU finished the item, in issue order — after events recorded behind the item may already
/// have fired, but before stream::synchronize() returns). It must be quick and must not throw
/// (one that throws loses that record, on every backend).
/// Items issued while no observer is set are not timed and never reported.
using work_observer = std::function<void(const work_record&)>;

}  // namespace strata
