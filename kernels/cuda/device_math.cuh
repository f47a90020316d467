#pragma once

// Device-side helpers of the CUDA kernels (only .cu files include this): activations and
// block-wide reductions in a fixed order (deterministic for a given block size).

#include <cuda_runtime.h>

#include <cstddef>

namespace strata::kernels::cuda::detail {

// Accurate expf/tanhf (no --use_fast_math): within a few ulp, like the CPU approximations.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// Grid-stride index range helpers.
__device__ __forceinline__ std::size_t global_thread() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_threads() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

/// Sum over the block of `v` (blockDim.x a multiple of 32, at most 1024), returned to every
/// thread. Fixed reduction tree: deterministic. Ends with a __syncthreads, so `scratch` may be
/// reused right after.
template <class T>
__device__ T block_sum(T v, T* scratch /* [32] shared */) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < warps ? scratch[lane] : T(0);
  for (int off = 16; off > 0; off /= 2) r += __shfl_xor_sync(0xffffffffu, r, off);
  __syncthreads();
  return r;
}

/// Maximum over the block, as block_sum.
__device__ __forceinline__ float block_max(float v, float* scratch /* [32] shared */) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  for (int off = 16; off > 0; off /= 2) r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, off));
  __syncthreads();
  return r;
}

}  // namespace strata::kernels::cuda::detail
