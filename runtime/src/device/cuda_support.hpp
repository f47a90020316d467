#pragma once
// Private: what every unit of the cuda backend uses: CUDA and cuBLAS status checks, the scoped
// current GPU, the CUDA callback thread's rules, and the STRATA_CUDA_SYNC debug mode.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace strata::cuda_backend {

/// Throws device_error (out_of_memory for cudaErrorMemoryAllocation, else backend_failure)
/// naming `call` and CUDA's error.
[[noreturn]] void fail(const std::string& call, cudaError_t e);
void check(cudaError_t e, const char* call);
void check(cublasStatus_t st, const char* call);

/// "cudaErrorIllegalAddress (an illegal memory access was encountered)".
std::string describe(cudaError_t e);

/// Makes `ordinal` the calling thread's current device for a scope.
class current_device {
 public:
  explicit current_device(int ordinal);
  ~current_device();
  current_device(const current_device&) = delete;
  current_device& operator=(const current_device&) = delete;

 private:
  int previous_ = -1;
};

/// True on CUDA's callback thread (set by the host functions), where CUDA calls are not allowed.
bool on_cuda_callback_thread() noexcept;
/// Marks the calling thread as CUDA's callback thread (called first by every host function).
void mark_cuda_callback_thread() noexcept;

/// Runs `release` (CUDA calls that free resources) now, or, when the last owner lets go on CUDA's
/// callback thread (a host function's captures, e.g. a device dropped with work in flight), on a
/// thread of its own. Errors are ignored: at process exit the driver may already be shutting down.
void release_cuda_resources(std::function<void()> release) noexcept;

/// The STRATA_CUDA_SYNC debug mode for a value of the variable: "1" synchronises the stream after
/// every work item (so a fault names the item that caused it), "0", "" or no variable leave launches
/// asynchronous. \throws device_error (invalid_argument) for any other value.
bool parse_cuda_sync(const char* value);
/// parse_cuda_sync(getenv("STRATA_CUDA_SYNC")), read once per process.
bool cuda_sync_mode();

}  // namespace strata::cuda_backend
