// cuda::embedding_forward (gather) and cuda::embedding_backward (atomicAdd scatter).
#include "support.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "device_math.cuh"

namespace strata::kernels::cuda {
namespace {

__device__ __forceinline__ bool valid_id(std::int32_t id, std::size_t vocab) {
  return id >= 0 && static_cast<std::size_t>(id) < vocab;
}

// One thread per output element (or per float4 when dim % 4 == 0 and both arrays are 16-byte
// aligned: `vec` is then 4 and dim, the row length, counts float4s).
template <class T>
__global__ void embedding_gather(std::size_t vocab, std::size_t dim, const T* __restrict__ table,
                                 std::size_t count, const std::int32_t* __restrict__ ids,
                                 T* __restrict__ out) {
  const std::size_t total = count * dim;
  const std::size_t stride = detail::grid_threads();
  for (std::size_t e = detail::global_thread(); e < total; e += stride) {
    const std::size_t n = e / dim, j = e % dim;
    const std::int32_t id = ids[n];
    if (valid_id(id, vocab)) {
      out[e] = table[static_cast<std::size_t>(id) * dim + j];
    } else {
      // An out-of-range id poisons its row: the error reaches the loss instead of memory.
      if constexpr (sizeof(T) == sizeof(float)) {
        out[e] = NAN;
      } else {
        out[e] = make_float4(NAN, NAN, NAN, NAN);
      }
    }
  }
}

__global__ void embedding_scatter_add(std::size_t vocab, std::size_t dim, std::size_t count,
                                      const std::int32_t* __restrict__ ids,
                                      const float* __restrict__ d_out, float* __restrict__ d_table) {
  const std::size_t total = count * dim;
  const std::size_t stride = detail::grid_threads();
  for (std::size_t e = detail::global_thread(); e < total; e += stride) {
    const std::size_t n = e / dim, j = e % dim;
    const std::int32_t id = ids[n];
    if (valid_id(id, vocab)) atomicAdd(d_table + static_cast<std::size_t>(id) * dim + j, d_out[e]);
  }
}

bool aligned16(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void embedding_forward(const cuda_context& ctx, std::size_t vocab, std::size_t dim,
                       const float* table, std::size_t count, const std::int32_t* ids, float* out) {
  // Ids are not range-checked here (device memory): the gather writes NaN rows for bad ones.
  common::check_embedding("cuda::embedding_forward", vocab, dim, count, ids, table, out);
  if (count == 0) return;
  if (dim % 4 == 0 && aligned16(table) && aligned16(out)) {
    const std::size_t d4 = dim / 4;
    embedding_gather<float4><<<detail::blocks_for(count * d4), detail::block_threads, 0, ctx.stream>>>(
        vocab, d4, reinterpret_cast<const float4*>(table), count, ids, reinterpret_cast<float4*>(out));
  } else {
    embedding_gather<float><<<detail::blocks_for(count * dim), detail::block_threads, 0, ctx.stream>>>(
        vocab, dim, table, count, ids, out);
  }
  detail::check_launch("embedding_gather", ctx.stream);
}

void embedding_backward(const cuda_context& ctx, std::size_t vocab, std::size_t dim,
                        std::size_t count, const std::int32_t* ids, const float* d_out,
                        float* d_table) {
  common::check_embedding("cuda::embedding_backward", vocab, dim, count, ids, d_out, d_table);
  if (count == 0) return;
  embedding_scatter_add<<<detail::blocks_for(count * dim), detail::block_threads, 0, ctx.stream>>>(
      vocab, dim, count, ids, d_out, d_table);
  detail::check_launch("embedding_scatter_add", ctx.stream);
}

}  // namespace strata::kernels::cuda
