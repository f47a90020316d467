#include "sparse_rows.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"

// Row pieces, the checks of row-sparse requests and the sum by id (docs/kvstore.md, "Row-sparse
// values").
namespace strata::kvstore::internal {

std::size_t row_length(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) n *= static_cast<std::size_t>(shape[d]);
  return n;
}

row_pieces pieces_within(const tensor& t, const std::vector<std::int64_t>& row_ids, std::size_t cols, std::size_t begin,
                         std::size_t end) {
  row_pieces out{t, {}};
  for (std::size_t r = 0; r < row_ids.size(); ++r) {
    const std::size_t row_begin = static_cast<std::size_t>(row_ids[r]) * cols;
    const std::size_t lo = std::max(row_begin, begin), hi = std::min(row_begin + cols, end);
    if (lo < hi) out.pieces.push_back({row_ids[r], lo - begin, hi - lo, r * cols + (lo - row_begin)});
  }
  return out;
}

namespace {

/// The shape `rows` must have for `ids` of a key of `shape`: `[ids, shape[1], ...]`.
std::vector<std::int64_t> rows_shape(std::size_t ids, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s{static_cast<std::int64_t>(ids)};
  s.insert(s.end(), shape.begin() + 1, shape.end());
  return s;
}

/// One key's rows and ids against its stored layout: ids in range, rows of the right shape, a cpu
/// tensor of the key's dtype.
expected<void> check_rows(const char* op, const char* role, const kvstore::key& key, const tensor& rows,
                          const std::vector<std::int64_t>& ids, const key_layout& layout) {
  const auto& shape = *layout.shape;
  const std::string type(to_string(layout.type));
  const std::string where = std::string("kvstore ") + op + ": the " + role + " for key " + key.to_string();
  if (shape.empty()) return bad(where + " names rows of a scalar key; row-sparse values need a key of rank 1 or more.");
  for (auto id : ids)
    if (id < 0 || id >= shape[0])
      return bad(where + " names row " + std::to_string(id) + ", outside [0, " + std::to_string(shape[0]) + ").");
  if (!rows.valid()) return bad(where + " is an empty tensor; expected a " + type + " tensor.");
  if (rows.dtype() != layout.type)
    return bad(where + " has dtype " + std::string(to_string(rows.dtype())) + ", expected " + type + ".");
  const auto expected_shape = rows_shape(ids.size(), shape);
  if (rows.shape() != expected_shape)
    return bad(where + " has shape " + shape_text(rows.shape()) + ", expected " + shape_text(expected_shape) +
               " (one row per id).");
  if (rows.storage().kind() != device_kind::cpu)
    return bad(where + " is on " + rows.get_device().name() + "; row-sparse values are cpu tensors.");
  return {};
}

/// The key's stored layout, or the sentence for a key not initialised.
expected<key_layout> initialised_key(const char* op, const kvstore::key& key, const shape_lookup& shape_of,
                                     std::optional<bool> int_keys) {
  if (auto r = check_kind(op, key, int_keys); !r) return r.error();
  const key_layout layout = shape_of(key);
  if (!layout.shape) return bad(std::string("kvstore ") + op + ": key " + key.to_string() + " is not initialised; call init first.");
  return layout;
}

}  // namespace

expected<void> row_sparse_supported(const char* op, const store_place& place, bool compressed) {
  const std::string what = std::string("kvstore ") + op + ": ";
  if (place.kind != device_kind::cpu && place.kind != device_kind::cuda)
    return bad(what + "row-sparse values run on cpu and cuda stores only (this store merges on " + place.name + ").");
  if (compressed)
    return bad(what + "gradient compression does not apply to row-sparse pushes (MXNet refuses them too); "
                      "turn gradient compression off first.");
  return {};
}

error mixed_round(const char* op, const kvstore::key& key, bool sparse) {
  return bad(std::string("kvstore ") + op + ": key " + key.to_string() + " has " + (sparse ? "dense" : "row-sparse") +
             " values towards its next version; a version collects dense or row-sparse values, not both.");
}

expected<void> check_row_sparse_push(const kvstore::push_row_sparse& m, const shape_lookup& shape_of,
                                     const store_place& place, std::optional<bool> int_keys) {
  if (auto r = row_sparse_supported("push", place, false); !r) return r;
  if (m.keys.size() != m.values.size() || m.keys.empty())
    return bad("kvstore push: " + std::to_string(m.keys.size()) + " keys and " + std::to_string(m.values.size()) +
               " row-sparse values; expected one value per key, at least one.");
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    auto layout = initialised_key("push", m.keys[i], shape_of, int_keys);
    if (!layout) return layout.error();
    if (m.values[i].shape != *layout->shape)
      return bad("kvstore push: the row-sparse value for key " + m.keys[i].to_string() + " has shape " +
                 shape_text(m.values[i].shape) + ", expected " + shape_text(*layout->shape) + " (the stored shape).");
    if (auto r = check_rows("push", "row-sparse value", m.keys[i], m.values[i].rows, m.values[i].row_ids, *layout); !r)
      return r;
  }
  return {};
}

expected<void> check_row_sparse_pull(const kvstore::row_sparse_pull& m, const shape_lookup& shape_of,
                                     const store_place& place, std::optional<bool> int_keys) {
  if (auto r = row_sparse_supported("row_sparse_pull", place, false); !r) return r;
  if (m.keys.size() != m.row_ids.size() || m.keys.size() != m.outs.size() || m.keys.empty())
    return bad("kvstore row_sparse_pull: " + std::to_string(m.keys.size()) + " keys, " +
               std::to_string(m.row_ids.size()) + " row id lists and " + std::to_string(m.outs.size()) +
               " outputs; expected one of each per key, at least one.");
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    auto layout = initialised_key("row_sparse_pull", m.keys[i], shape_of, int_keys);
    if (!layout) return layout.error();
    if (auto r = check_rows("row_sparse_pull", "output", m.keys[i], m.outs[i], m.row_ids[i], *layout); !r)
      return r;
  }
  return {};
}

std::vector<ordered_piece> sum_order(const std::vector<row_pieces>& lists) {
  std::vector<ordered_piece> order;
  for (const auto& list : lists)
    for (const auto& p : list.pieces) order.push_back({&p, &list});
  auto by_id = [](const ordered_piece& a, const ordered_piece& b) { return a.piece->id < b.piece->id; };
  if (!std::is_sorted(order.begin(), order.end(), by_id)) std::stable_sort(order.begin(), order.end(), by_id);
  return order;
}

summed_rows sum_by_id(const std::vector<row_pieces>& lists) {
  using part = ordered_piece;
  const std::vector<part> order = sum_order(lists);
  // Rows of one float32 piece are used where they are (the common push: each id once); the others
  // (repeated ids, 16-bit pieces widened) are summed into `data`, sized first so that it never moves.
  auto group_end = [&](std::size_t i) {
    std::size_t j = i + 1;
    while (j < order.size() && order[j].piece->id == order[i].piece->id) ++j;
    return j;
  };
  auto in_place = [&](std::size_t i, std::size_t end) {
    return end == i + 1 && order[i].list->data.dtype() == dtype::float32;
  };
  std::size_t owned = 0;
  for (std::size_t i = 0; i < order.size();) {
    const std::size_t end = group_end(i);
    if (!in_place(i, end)) owned += order[i].piece->length;
    i = end;
  }
  summed_rows out;
  out.data.resize(owned);
  std::size_t filled = 0;
  std::vector<float> widened;  // a 16-bit piece widened (exactly) to float32
  auto source = [&](const part& x) -> const float* {
    const tensor& data = x.list->data;
    if (data.dtype() == dtype::float32) return data.device_data<float>() + x.piece->at;
    widened.resize(x.piece->length);
    kernels::cpu::widen(data.dtype(), x.piece->length,
                        static_cast<const std::uint16_t*>(data.raw_data()) + x.piece->at, widened.data());
    return widened.data();
  };
  for (std::size_t i = 0; i < order.size();) {
    const std::size_t end = group_end(i);
    const row_piece& p = *order[i].piece;
    out.offsets.push_back(p.offset);
    out.lengths.push_back(p.length);
    if (in_place(i, end)) {
      out.rows.push_back(source(order[i]));
    } else {
      float* into = out.data.data() + filled;
      const float* first = source(order[i]);
      std::copy(first, first + p.length, into);
      for (std::size_t k = i + 1; k < end; ++k) {
        const float* from = source(order[k]);
        for (std::size_t c = 0; c < p.length; ++c) into[c] += from[c];
      }
      out.rows.push_back(into);
      filled += p.length;
    }
    i = end;
  }
  return out;
}

}  // namespace strata::kvstore::internal
