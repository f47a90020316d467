#pragma once
// Row-sparse values inside a store: the pieces of rows a store or a shard reads and writes, the
// checks of row-sparse requests (shared by a store and a sharded store's router), and the sum by
// row id. docs/kvstore.md, "Row-sparse values". Private to strata::kvstore.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "merge.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "validation.hpp"

namespace strata::kvstore::internal {

/// A piece of one row of a key held by a store: elements [offset, offset + length) of the
/// stored value (the whole key on one store, a chunk of it on a shard), read from or written to
/// the elements from `at` of its list's tensor. On one store a piece is a whole row; on a
/// sharded store a row that crosses a chunk boundary is one piece per chunk, each sent to the
/// chunk's shard. Pieces of one id in one stored value cover the same elements.
struct row_piece {
  std::int64_t id = 0;  // the caller's row id: pushed pieces are summed by it
  std::size_t offset = 0;
  std::size_t length = 0;
  std::size_t at = 0;
};
/// Pieces whose data is in one tensor: a caller's rows or output, or a store's staging copy.
struct row_pieces {
  tensor data;
  std::vector<row_piece> pieces;
};

/// Elements per row of a key of `shape`: the product of `shape[1...]`.
std::size_t row_length(const std::vector<std::int64_t>& shape);

/// The pieces of `row_ids` (the rows of `t`, stacked in order) within elements [begin, end) of
/// their key, of `cols` elements per row; offsets relative to `begin`.
row_pieces pieces_within(const tensor& t, const std::vector<std::int64_t>& row_ids, std::size_t cols,
                                     std::size_t begin, std::size_t end);

/// A row-sparse push against the keys held (`shape_of`) on a store at `place`: one value per
/// key, keys initialised, each value of the key's shape with rows `[row_ids.size(), shape[1],
/// ...]` of cpu tensors of the key's dtype (float32, float16 or bfloat16) and ids in
/// `[0, shape[0])`.
expected<void> check_row_sparse_push(const kvstore::push_row_sparse& m, const shape_lookup& shape_of,
                                     const store_place& place, std::optional<bool> int_keys);
/// A row_sparse_pull, likewise: one id list and one output per key, outputs as the push's rows.
/// Both refuse a key of the other kind than the store's (`int_keys`) as a dense request does.
expected<void> check_row_sparse_pull(const kvstore::row_sparse_pull& m, const shape_lookup& shape_of,
                                     const store_place& place, std::optional<bool> int_keys);

/// A store at `place` takes row-sparse values (cpu and cuda stores; sim stores hold no data) with
/// compression off (`compressed`), as MXNet, which refuses compression of row_sparse pushes.
expected<void> row_sparse_supported(const char* op, const store_place& place, bool compressed);

/// The refusal of a `sparse` (else dense) value for `key` whose next synchronous version has
/// values of the other kind.
error mixed_round(const char* op, const kvstore::key& key, bool sparse);

/// A piece of one of the lists given to `sum_order`, with the list that holds its data.
struct ordered_piece {
  const row_piece* piece;
  const row_pieces* list;
};
/// The pieces of `lists` in the order `sum_by_id` adds them: by id, increasing, and pieces of one
/// id in the order given (lists first, then pieces). A cuda store sums in the same order (the
/// pointers are into `lists`).
std::vector<ordered_piece> sum_order(const std::vector<row_pieces>& lists);

/// Row-sparse rows summed by id: for each distinct id in increasing order, the elements of the
/// stored value its pieces cover and their sum.
struct summed_rows {
  std::vector<std::size_t> offsets;
  std::vector<std::size_t> lengths;
  std::vector<const float*> rows;  // each id's sum: in `data`, or the pushed piece itself
  std::vector<float> data;
};
/// Sums the pieces of `lists` (cpu data: float32, or float16 / bfloat16 widened exactly) by id in
/// float32, pieces of one id added in the order given: the same order, element for element, as
/// one store adding whole rows, so sharded sums are bit for bit. An id with one float32 piece is
/// not copied: its row points into that piece's tensor, which must outlive the result.
summed_rows sum_by_id(const std::vector<row_pieces>& lists);

}  // namespace strata::kvstore::internal
