#pragma once

/// \file
/// Dropout with masks drawn from a counter-based generator: whether an element is kept is a pure
/// function of (key, the element's position), so the same mask comes out whatever thread, device
/// or pipeline split computes it, and backward recomputes it instead of storing it.
///
/// A block is the [rows, cols, dim] part of a larger [*, total_cols, dim] activation (seq-major
/// time steps, batch columns, features) that starts at (row0, col0): element (r, c, f) of the
/// block has the global index ((row0 + r) * total_cols + col0 + c) * dim + f, and is kept when
/// dropout_keeps(key, index, p). Kept elements are scaled by 1 / (1 - p) (inverted dropout, as
/// torch.nn.Dropout), the others become 0. Forward and backward are the same operation.
///
/// Example: the mask of site `site` (an activation of the model) in training step `step`:
/// \code
///   kernels::dropout_block b{.rows = T, .cols = B, .dim = H, .total_cols = B};
///   kernels::cpu::dropout(b, {kernels::dropout_key(seed, step, site), 0.3f}, x, y);
/// \endcode

#include <cstddef>
#include <cstdint>

namespace strata::kernels {

/// SplitMix64's finaliser: a bijection of 64-bit values whose outputs pass as independent
/// uniform bits for consecutive inputs. constexpr, so CUDA device code calls it too.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The key of one mask: a seed, a step and a site (which activation), mixed.
constexpr std::uint64_t dropout_key(std::uint64_t seed, std::uint64_t step, std::uint64_t site) noexcept {
  return mix64(mix64(mix64(seed) ^ step) ^ site);
}

/// True when element `index` of the mask `key` is kept at drop probability `p`: the top 24 bits
/// of mix64(key + index), read as a uniform number in [0, 1), are at least p.
constexpr bool dropout_keeps(std::uint64_t key, std::uint64_t index, float p) noexcept {
  return static_cast<float>(mix64(key + index) >> 40) * 0x1p-24f >= p;
}

/// Where a block lies in the activation its mask covers (see the file comment).
struct dropout_block {
  std::size_t rows = 0, cols = 0, dim = 0;
  std::size_t row0 = 0, col0 = 0;
  std::size_t total_cols = 0;  ///< columns of the whole activation (>= col0 + cols)
};

/// Which mask, and how much it drops.
struct dropout_mask {
  std::uint64_t key = 0;
  float p = 0;  ///< drop probability, in [0, 1)
};

}  // namespace strata::kernels

namespace strata::kernels::cpu {

/// y = x * mask / (1 - p) over the block's rows * cols * dim contiguous elements; y may be x
/// (in place), not a partial overlap. Thread-safe for concurrent calls on different outputs.
/// \throws std::invalid_argument if p is outside [0, 1), col0 + cols exceeds total_cols, or x or
///         y is null while the block has elements.
void dropout(const dropout_block& block, const dropout_mask& mask, const float* x, float* y);

}  // namespace strata::kernels::cpu
