#pragma once

/// \file
/// Embedding lookup (gather rows of a table) and its gradient (scatter-add).

#include <cstddef>
#include <cstdint>

namespace strata::kernels::cpu {

/// out[n, :] = table[ids[n], :] for n in [0, count).
///
/// table is [vocab, dim], out is [count, dim] (overwritten), both row-major contiguous.
/// Thread-safe for concurrent calls on different outputs.
/// \throws std::invalid_argument if dim or vocab is 0, a pointer is null while count > 0, or
///         an id lies outside [0, vocab) (checked before anything is written).
void embedding_forward(std::size_t vocab, std::size_t dim, const float* table, std::size_t count,
                       const std::int32_t* ids, float* out);

/// d_table[ids[n], :] += d_out[n, :] for n in [0, count) — ADDS into d_table.
///
/// Repeated ids accumulate (in order of n, deterministically). Parallel over column blocks, so
/// no two threads touch the same element. Thread-safe for concurrent calls on different d_table.
/// \throws std::invalid_argument as embedding_forward().
void embedding_backward(std::size_t vocab, std::size_t dim, std::size_t count,
                        const std::int32_t* ids, const float* d_out, float* d_table);

}  // namespace strata::kernels::cpu
