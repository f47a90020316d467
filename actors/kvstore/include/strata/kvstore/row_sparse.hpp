#pragma once
/// \file
/// MXNet's row-sparse values for a kvstore: a gradient that touches a few rows of a large key
/// (an embedding's) travels as those rows and their ids, and a worker pulls only the rows it
/// needs. docs/kvstore.md, "Row-sparse values".

#include <cstdint>
#include <vector>

#include "strata/device/tensor.hpp"

namespace strata::kvstore {

class key;

/// MXNet's `row_sparse` array: of a tensor of `shape` (rows along the first dimension; float32, or
/// float16 / bfloat16 for a key of that dtype),
/// the rows named by `row_ids`, stacked in that order in `rows` (shape `[row_ids.size(),
/// shape[1], ...]`); every other row is zero. Ids are in `[0, shape[0])`; a push may repeat one
/// (its rows are summed).
struct row_sparse {
  tensor rows{};
  std::vector<std::int64_t> row_ids{};
  std::vector<std::int64_t> shape{};
};

}  // namespace strata::kvstore
