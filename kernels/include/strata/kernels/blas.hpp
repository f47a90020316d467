#pragma once

/// \file
/// Control of the BLAS library behind the CPU kernels (OpenBLAS).
///
/// OpenBLAS keeps one process-wide thread count. The CPU kernels parallelise with oneTBB in
/// the caller's task arena; when OpenBLAS runs single-threaded (recommended, see
/// docs/kernels.md) the GEMM wrapper splits large products into oneTBB tasks itself, so that
/// a CPU device's arena bounds all the threads its work uses.

namespace strata::kernels::cpu {

/// Threads OpenBLAS uses for one call (its process-wide setting).
/// Thread-safe.
[[nodiscard]] int blas_threads() noexcept;

/// Sets OpenBLAS's process-wide thread count to `threads`.
///
/// Call it once at start-up, before kernels run concurrently; it changes process-wide state
/// that every OpenBLAS user in the process sees. `set_blas_threads(1)` hands all parallelism
/// to oneTBB (the strata default recommendation).
/// \throws std::invalid_argument if `threads` < 1.
void set_blas_threads(int threads);

}  // namespace strata::kernels::cpu
