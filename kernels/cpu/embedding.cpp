#include "strata/kernels/embedding.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/checks.hpp"
#include "kernel_support.hpp"

namespace strata::kernels::cpu {
namespace {

void check_args(const char* who, std::size_t vocab, std::size_t dim, std::size_t count,
                const std::int32_t* ids, const void* in, const void* out) {
  common::check_embedding(who, vocab, dim, count, ids, in, out);
  common::check_ids(who, "ids", ids, count, vocab);
}

}  // namespace

void embedding_forward(std::size_t vocab, std::size_t dim, const float* table, std::size_t count,
                       const std::int32_t* ids, float* out) {
  check_args("embedding_forward", vocab, dim, count, ids, table, out);
  const std::size_t grain = std::max<std::size_t>(1, detail::memory_grain / dim);
  detail::parallel_blocks(count, grain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t n = lo; n < hi; ++n) {
      const float* src = table + static_cast<std::size_t>(ids[n]) * dim;
      std::copy(src, src + dim, out + n * dim);
    }
  });
}

void embedding_backward(std::size_t vocab, std::size_t dim, std::size_t count,
                        const std::int32_t* ids, const float* d_out, float* d_table) {
  check_args("embedding_backward", vocab, dim, count, ids, d_out, d_table);
  // Each task owns a block of columns for all rows: repeated ids never race and every element
  // sums its contributions in the order of n.
  const std::size_t work = count * dim;
  const std::size_t col_grain = work < detail::memory_grain ? dim : std::max<std::size_t>(16, dim / 8);
  detail::parallel_blocks(dim, col_grain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t n = 0; n < count; ++n) {
      float* dst = d_table + static_cast<std::size_t>(ids[n]) * dim;
      const float* src = d_out + n * dim;
      for (std::size_t j = lo; j < hi; ++j) dst[j] += src[j];
    }
  });
}

}  // namespace strata::kernels::cpu
