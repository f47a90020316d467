#pragma once

/// \file
/// Memory-bound vector operations: fill, scale, axpy, and the sum of K arrays.
///
/// All take n contiguous float32 elements, run vectorised and, above a size threshold, in
/// parallel in the caller's oneTBB arena. Thread-safe for concurrent calls on different outputs.

#include <cstddef>
#include <span>

namespace strata::kernels::cpu {

/// x[i] = value. \throws std::invalid_argument if x is null while n > 0.
void fill(std::size_t n, float value, float* x);

/// x[i] *= alpha. \throws std::invalid_argument if x is null while n > 0.
void scale(std::size_t n, float alpha, float* x);

/// y[i] += alpha * x[i]. x and y must not partially overlap.
/// \throws std::invalid_argument if x or y is null while n > 0.
void axpy(std::size_t n, float alpha, const float* x, float* y);

/// out[i] = inputs[0][i] + inputs[1][i] + ... + inputs[K-1][i] (summed in that order).
///
/// For merging K gradient copies (parameter server). `out` may be one of the inputs (exactly
/// the same pointer), not a partial overlap. K == 0 fills out with zeros. Works on cache-sized
/// blocks so each input is read once and out written once; approaches memory bandwidth.
/// \throws std::invalid_argument if out or an input is null while n > 0.
void sum_arrays(std::span<const float* const> inputs, std::size_t n, float* out);

}  // namespace strata::kernels::cpu
