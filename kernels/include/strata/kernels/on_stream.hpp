#pragma once
/// \file
/// Runs a kernel call on a device's stream: the one adapter between the raw-pointer kernels
/// (`strata::kernels::cpu`, `strata::kernels::cuda`) and the runtime's streams.
///
/// A call site writes its kernel call once, as a callable taking a *target*: `cpu_target` on cpu
/// devices (call `kernels::cpu::f` on host memory, inside the device's arena) or `cuda_target` on
/// cuda devices (call `kernels::cuda::f(target.context, ...)`, which only enqueues on the device's
/// stream). `on_stream` fills a `kernel_work` with the implementation of the stream's device kind
/// and launches it; sim devices run neither (they model the item's flops and bytes). Pointers come
/// from `tensor::device_data<T>()`, which checks the element type. Why the raw-pointer kernels stay
/// the base layer: docs/kernels.md, "Kernels on streams".
///
/// \code
///   auto x = t.device_data<float>();
///   strata::kernels::on_stream(s, {.name = "scale", .flops = 1.0 * n, .bytes = 8.0 * n},
///                              [x, n](auto target) {
///                                if constexpr (strata::kernels::is_cuda_target<decltype(target)>)
///                                  strata::kernels::cuda::scale(target.context, n, 2.0f, x);
///                                else
///                                  strata::kernels::cpu::scale(n, 2.0f, x);
///                              });
/// \endcode
/// Without CUDA (STRATA_HAS_CUDA unset) the cuda branch is never instantiated, so a call site
/// links without the CUDA kernels.

#include <type_traits>
#include <utility>

#include "strata/device/device.hpp"
#include "strata/device/kind.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/work.hpp"
#include "strata/kernels/cuda.hpp"

namespace strata::kernels {

/// What a kernel call receives on a cpu device: nothing; it calls `kernels::cpu` on host memory.
struct cpu_target {};

/// What a kernel call receives on a cuda device: the stream and cuBLAS handle of the strata
/// stream it runs on, for `kernels::cuda` calls (which only enqueue work).
struct cuda_target {
  cuda::cuda_context context;
  explicit cuda_target(const cuda_launch_context& launch) noexcept
      : context{.stream = static_cast<cuda::cuda_stream>(launch.stream),
                .blas = static_cast<cuda::cublas_handle>(launch.cublas)} {}
};

/// True for `cuda_target` (const or reference too), for `if constexpr` in a generic call.
template <class Target>
inline constexpr bool is_cuda_target = std::is_same_v<std::remove_cvref_t<Target>, cuda_target>;

/// Gives `work` the implementation of `call` for a device of `kind`: `call(cpu_target{})` as
/// `work.cpu` on cpu, `call(cuda_target{...})` as `work.cuda` on cuda (CUDA builds only); sim
/// gets neither. `call` is copied into the work item: capture pointers and sizes by value, and
/// keep the memory alive until the stream has run the item (tensors captured by value do).
template <class Call>
void attach(kernel_work& work, device_kind kind, Call call) {
  if (kind == device_kind::cpu) work.cpu = [call]() mutable { call(cpu_target{}); };
#if STRATA_HAS_CUDA
  if (kind == device_kind::cuda)
    work.cuda = [call](const cuda_launch_context& launch) mutable { call(cuda_target{launch}); };
#endif
}

/// Launches `call` on `s` as one work item described by `work` (name, kind, flops, bytes), with
/// the implementation of `s`'s device kind (see attach). Ordered on `s` like any launch: the call
/// must not assume more than what was enqueued on `s` before it (wait on ready events first).
template <class Call>
void on_stream(stream& s, kernel_work work, Call call) {
  attach(work, s.get_device().kind(), std::move(call));
  s.launch(std::move(work));
}

}  // namespace strata::kernels
