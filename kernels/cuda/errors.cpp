#include "support.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "common/checks.hpp"

namespace strata::kernels::cuda::detail {

std::string error_message(const char* call, const char* status_name, const char* status_text) {
  return std::string("strata::kernels::cuda: ") + call + " failed: " + status_name + " (" +
         status_text + ")";
}

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw cuda_error(call, static_cast<int>(status),
                   error_message(call, cudaGetErrorName(status), cudaGetErrorString(status)));
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw cuda_error(call, static_cast<int>(status),
                   error_message(call, cublasGetStatusName(status), cublasGetStatusString(status)));
}

bool parse_launch_sync(const char* value) {
  if (value == nullptr || *value == '\0' || std::string(value) == "0") return false;
  if (std::string(value) == "1") return true;
  throw std::invalid_argument(std::string("strata::kernels::cuda: STRATA_CUDA_SYNC is \"") + value +
                              "\"; expected 1 (synchronise after every kernel launch) or 0");
}

void check_launch(const char* kernel, cudaStream_t s) {
  check(cudaGetLastError(), kernel);
  static const bool sync = parse_launch_sync(std::getenv("STRATA_CUDA_SYNC"));
  if (!sync) return;
  const cudaError_t status = cudaStreamSynchronize(s);
  if (status == cudaSuccess) return;
  const std::string call = std::string(kernel) + " (STRATA_CUDA_SYNC=1: synchronised after the launch)";
  throw cuda_error(call, static_cast<int>(status),
                   error_message(call.c_str(), cudaGetErrorName(status), cudaGetErrorString(status)));
}

cublasHandle_t blas_on_stream(const cuda_context& ctx, const char* who) {
  common::require(ctx.blas != nullptr, who, "ctx.blas must not be null (matrix products need a cuBLAS handle)");
  cudaStream_t bound = nullptr;
  check(cublasGetStream(ctx.blas, &bound), "cublasGetStream");
  if (bound != ctx.stream) check(cublasSetStream(ctx.blas, ctx.stream), "cublasSetStream");
  return ctx.blas;
}

void copy_or_zero(cudaStream_t s, const float* src, float* dst, std::size_t n) {
  if (n == 0) return;
  if (src != nullptr) {
    if (src != dst) {
      check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    }
  } else {
    check(cudaMemsetAsync(dst, 0, n * sizeof(float), s), "cudaMemsetAsync");
  }
}

}  // namespace strata::kernels::cuda::detail
