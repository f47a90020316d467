#pragma once
// Keys split over several servers (MXNet's big arrays): how a key is cut into parts, and how the
// parts' checkpoint entries become one entry of the whole key and back.

#include <cstdint>
#include <optional>
#include <vector>

#include "strata/kvstore/checkpoint.hpp"

namespace strata::kvstore_dist::detail {

/// A key cut along its flattened elements into contiguous parts whose sizes differ by at most one
/// element (the first `numel % parts` parts one larger); part i lives on rank i under the key's
/// own name (each rank's shard holds at most one part of a key, so no other name is needed).
struct split_layout {
  std::vector<std::int64_t> shape;    // the whole key's
  std::vector<std::int64_t> offsets;  // parts() + 1 entries: part i is [offsets[i], offsets[i + 1])
  int parts() const noexcept { return static_cast<int>(offsets.size()) - 1; }
  std::int64_t offset(int part) const { return offsets[static_cast<std::size_t>(part)]; }
  std::int64_t size(int part) const { return offset(part + 1) - offset(part); }
};

/// The layout of a key of `shape` on `world` ranks when it has more than `bound` elements (and at
/// least two parts to make: min(world, numel) parts); none when the key stays whole.
std::optional<split_layout> split_of(const std::vector<std::int64_t>& shape, std::int64_t bound, int world);

/// The entries of the parts of one key (by part) joined into one entry of the key's shape: values,
/// optimizer states and master copies concatenated in part order; the version is the smallest.
kvstore::checkpoint_entry join_parts(std::vector<kvstore::checkpoint_entry> parts, const split_layout& layout);

/// Part `part` of the whole key's entry `whole` (shape {size}).
kvstore::checkpoint_entry cut_part(const kvstore::checkpoint_entry& whole, const split_layout& layout, int part);

}  // namespace strata::kvstore_dist::detail
