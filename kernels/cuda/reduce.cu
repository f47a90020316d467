// cuda::global_norm and cuda::clip_grad_norm: fixed-shape partial sums (deterministic), the
// norm kept on the device and the clipping factor computed there (no host synchronisation).
#include "support.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/checks.hpp"
#include "device_math.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr unsigned norm_threads = 256;
constexpr std::size_t tensors_per_launch = 32;

// A group of tensors by value: blockIdx.y picks the tensor (256 + 256 bytes of parameters).
struct tensor_group {
  float* p[tensors_per_launch];
  std::size_t n[tensors_per_launch];
};

// partials[(first + y) * P + x] = sum of squares of block x's share of tensor y, in double.
__global__ void __launch_bounds__(norm_threads)
    sum_squares_kernel(tensor_group g, std::size_t first, double* __restrict__ partials) {
  __shared__ double scratch[32];
  const float* x = g.p[blockIdx.y];
  const std::size_t n = g.n[blockIdx.y];
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  double s = 0.0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const auto v = static_cast<double>(x[i]);
    s += v * v;
  }
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) partials[(first + blockIdx.y) * gridDim.x + blockIdx.x] = s;
}

// total = sqrt(sum of the partials), to *slot and *norm (if not null).
__global__ void __launch_bounds__(1024)
    norm_total_kernel(std::size_t count, const double* __restrict__ partials, double* slot, double* norm) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (std::size_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const double total = sqrt(s);
    *slot = total;
    if (norm != nullptr) *norm = total;
  }
}

// Multiplies every element by max_norm / (total + 1e-6) when that is < 1 or total is not
// finite (torch.nn.utils.clip_grad_norm_); reads total on the device.
__global__ void clip_kernel(tensor_group g, const double* __restrict__ total, double max_norm) {
  const double t = *total;
  const double coef = max_norm / (t + 1e-6);
  if (!(coef < 1.0 || !isfinite(t))) return;
  const auto f = static_cast<float>(coef);
  float* x = g.p[blockIdx.y];
  const std::size_t n = g.n[blockIdx.y];
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] *= f;
}

// Calls launch(group, first, count) for each group of up to tensors_per_launch tensors.
template <class Span, class Launch>
void for_groups(Span tensors, const Launch& launch) {
  for (std::size_t first = 0; first < tensors.size(); first += tensors_per_launch) {
    const std::size_t count = std::min(tensors_per_launch, tensors.size() - first);
    tensor_group g{};
    for (std::size_t j = 0; j < count; ++j) {
      g.p[j] = const_cast<float*>(tensors[first + j].data());  // read only in sum_squares_kernel
      g.n[j] = tensors[first + j].size();
    }
    launch(g, first, count);
  }
}

// Shared by global_norm and clip_grad_norm: checks, partial sums, total. Returns the device
// slot that holds the total.
template <class Span>
double* norm_into_workspace(const char* who, const cuda_context& ctx, Span tensors,
                            float* workspace, std::size_t workspace_size, double* norm) {
  common::require(workspace != nullptr && workspace_size >= global_norm_workspace_size(tensors.size()), who,
                  "the workspace must hold cuda::global_norm_workspace_size(tensor count) floats");
  common::require(reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) == 0, who,
                  "the workspace must be 8-byte aligned");
  for (const auto& t : tensors) {
    common::require(t.empty() || t.data() != nullptr, who, "a tensor with elements must not be null");
  }
  auto* partials = reinterpret_cast<double*>(workspace);
  double* slot = partials + norm_partials_per_tensor * tensors.size();
  cudaStream_t s = ctx.stream;
  for_groups(tensors, [&](const tensor_group& g, std::size_t first, std::size_t count) {
    const dim3 grid(static_cast<unsigned>(norm_partials_per_tensor), static_cast<unsigned>(count));
    sum_squares_kernel<<<grid, norm_threads, 0, s>>>(g, first, partials);
    detail::check_launch("sum_squares_kernel", s);
  });
  norm_total_kernel<<<1, 1024, 0, s>>>(norm_partials_per_tensor * tensors.size(), partials, slot, norm);
  detail::check_launch("norm_total_kernel", s);
  return slot;
}

}  // namespace

void global_norm(const cuda_context& ctx, std::span<const std::span<const float>> tensors,
                 float* workspace, std::size_t workspace_size, double* norm) {
  constexpr const char* who = "cuda::global_norm";
  common::require(norm != nullptr, who, "norm must not be null");
  norm_into_workspace(who, ctx, tensors, workspace, workspace_size, norm);
}

void clip_grad_norm(const cuda_context& ctx, std::span<const std::span<float>> grads,
                    double max_norm, float* workspace, std::size_t workspace_size,
                    double* total_norm) {
  constexpr const char* who = "cuda::clip_grad_norm";
  common::check_clip_grad_norm(who, max_norm);
  const double* total = norm_into_workspace(who, ctx, grads, workspace, workspace_size, total_norm);
  for_groups(grads, [&](const tensor_group& g, std::size_t, std::size_t count) {
    const dim3 grid(static_cast<unsigned>(norm_partials_per_tensor), static_cast<unsigned>(count));
    clip_kernel<<<grid, norm_threads, 0, ctx.stream>>>(g, total, max_norm);
    detail::check_launch("clip_kernel", ctx.stream);
  });
}

}  // namespace strata::kernels::cuda
