#include "device/cuda_support.hpp"

#include <cstdlib>
#include <thread>
#include <utility>

#include "strata/device/error.hpp"

namespace strata::cuda_backend {

void fail(const std::string& call, cudaError_t e) {
  auto code = e == cudaErrorMemoryAllocation ? device_errc::out_of_memory : device_errc::backend_failure;
  throw device_error(code, call + " failed: " + describe(e));
}

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail(call, e);
}

void check(cublasStatus_t st, const char* call) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw device_error(device_errc::backend_failure, std::string(call) + " failed: " + cublasGetStatusName(st) +
                                                         " (" + cublasGetStatusString(st) + ")");
}

std::string describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

current_device::current_device(int ordinal) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != ordinal) check(cudaSetDevice(ordinal), "cudaSetDevice");
  else previous_ = -1;
}

current_device::~current_device() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

namespace {
thread_local bool callback_thread = false;
}  // namespace

bool on_cuda_callback_thread() noexcept { return callback_thread; }
void mark_cuda_callback_thread() noexcept { callback_thread = true; }

void release_cuda_resources(std::function<void()> release) noexcept {
  try {
    if (!callback_thread) return release();
    std::thread(std::move(release)).detach();
  } catch (...) {
    // No thread (or a failing call): the resources leak, which beats calling CUDA here.
  }
}

bool parse_cuda_sync(const char* value) {
  if (value == nullptr) return false;
  const std::string v(value);
  if (v.empty() || v == "0") return false;
  if (v == "1") return true;
  throw device_error(device_errc::invalid_argument,
                     "STRATA_CUDA_SYNC is \"" + v + "\"; expected 1 (synchronise after every work item) or 0");
}

bool cuda_sync_mode() {
  static const bool on = parse_cuda_sync(std::getenv("STRATA_CUDA_SYNC"));
  return on;
}

}  // namespace strata::cuda_backend
