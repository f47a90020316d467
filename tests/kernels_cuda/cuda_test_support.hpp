#pragma once

// Helpers of the CUDA kernel tests: the "a GPU is present" precondition, device arrays, a
// stream + cuBLAS handle per test, seeded random data and the error measure.
//
// Every test that touches the GPU is declared with STRATA_GPU_TEST_CASE: without a device it
// is reported as skipped (not failed) and the program exits with 77 (gpu_requirement.hpp); where
// a GPU is expected, a skip is a failure.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "gpu_requirement.hpp"
#include "strata/kernels/cuda.hpp"

namespace strata::kernels::cuda::test {

inline constexpr double k_fp32_tol = 1e-4;

/// Precondition: a CUDA device is usable (gpu_requirement.hpp: skipped without one, a failure
/// where a GPU is expected).
inline boost::test_tools::assertion_result gpu_available(boost::unit_test::test_unit_id) {
  return ::strata::test::gpu_precondition(1);
}

#define STRATA_GPU_TEST_CASE(name)                                                   \
  BOOST_AUTO_TEST_CASE(name, *boost::unit_test::precondition(                       \
                                 ::strata::kernels::cuda::test::gpu_available))

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device array of T, freed on destruction.
template <class T>
class device_array {
 public:
  explicit device_array(std::size_t n) : n_(n) {
    if (n_ > 0) cuda_ok(cudaMalloc(&p_, n_ * sizeof(T)), "cudaMalloc");
  }
  explicit device_array(std::span<const T> host) : device_array(host.size()) { upload(host); }
  explicit device_array(const std::vector<T>& host) : device_array(std::span<const T>(host)) {}
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() {
    if (p_ != nullptr) cudaFree(p_);
  }
  void upload(std::span<const T> host) {
    if (!host.empty()) cuda_ok(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> h(n_);
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (n_ > 0) cuda_ok(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  [[nodiscard]] T* get() const noexcept { return p_; }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

using dfloats = device_array<float>;

/// A stream (not the default one, so stream handling is exercised) and a cuBLAS handle.
/// The stream is a blocking one on purpose: the tests' plain cudaMemcpy calls run on the
/// legacy default stream, which orders itself with blocking streams only.
class gpu_session {
 public:
  explicit gpu_session(gemm_math math = gemm_math::fp32) {
    cuda_ok(cudaStreamCreate(&stream_), "cudaStreamCreate");
    if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
    ctx_ = cuda_context{.stream = stream_, .blas = blas_, .math = math};
  }
  gpu_session(const gpu_session&) = delete;
  gpu_session& operator=(const gpu_session&) = delete;
  ~gpu_session() {
    cudaStreamSynchronize(stream_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }
  [[nodiscard]] const cuda_context& ctx() const noexcept { return ctx_; }
  void sync() const { cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cuda_context ctx_{};
};

/// Seeded random numbers, never a constant fill.
class random_source {
 public:
  explicit random_source(std::uint64_t seed) : engine_(seed) {}
  std::vector<float> values(std::size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(engine_);
    return v;
  }
  std::vector<std::int32_t> ids(std::size_t n, std::size_t bound) {
    std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(bound) - 1);
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = d(engine_);
    return v;
  }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(engine_); }

 private:
  std::mt19937_64 engine_;
};

/// max|a - ref| / max|ref| (the absolute error when ref is all zeros); infinite on a size
/// mismatch or a NaN.
inline double relative_error(std::span<const float> a, std::span<const float> ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(ref[i]));
    if (std::isnan(d)) return INFINITY;
    num = std::max(num, d);
    den = std::max(den, std::abs(static_cast<double>(ref[i])));
  }
  return den > 0.0 ? num / den : num;
}

inline double download_double(const device_array<double>& d) { return d.download().at(0); }

}  // namespace strata::kernels::cuda::test
