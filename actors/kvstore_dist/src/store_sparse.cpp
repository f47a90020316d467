// The worker's side of row-sparse values (docs/kvstore.md, "Distributed stores"): a push sends
// only the rows, a row_sparse_pull asks only for the rows named; a split key's rows are cut at the
// part boundaries and each piece goes to (comes from) its part's owner.

#include <algorithm>
#include <cstring>
#include <exception>
#include <future>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "strata/device/shape.hpp"
#include "worker.hpp"

namespace strata::kvstore_dist {

namespace {

error refused(const std::string& text) { return error(errc::invalid_argument, text); }

/// Row-sparse values go to the servers of dist_sync and dist_async, for keys they hold.
expected<void> sparse_usable(detail::worker_state& w, const char* op, const kvstore::key& key) {
  if (w.replica)
    return refused(std::string("kvstore dist_sync_allreduce ") + op + " of key " + key.to_string() +
                   ": row-sparse values go to dist_sync and dist_async stores only.");
  if (w.known.count(key) == 0)
    return refused(std::string("kvstore dist ") + op + ": key " + key.to_string() +
                   " was never initialised; call init first (every worker).");
  return {};
}

/// Refuses rows (or an output) of another dtype than the key's, which every rank learned at init
/// or load: before any part leaves, so that no owner refuses what the others take.
expected<void> of_key_type(const detail::worker_state& w, const char* op, const char* role, const kvstore::key& key,
                           dtype type) {
  auto kept = w.types.find(key);
  if (kept == w.types.end() || kept->second == type) return {};
  return refused(std::string("kvstore dist ") + op + ": the " + role + " for key " + key.to_string() + " has dtype " +
                 std::string(to_string(type)) + ", expected " + std::string(to_string(kept->second)) + ".");
}

/// `shape` with its first dimension `rows`: the shape of that many rows of a key of `shape`.
std::vector<std::int64_t> rows_of(std::vector<std::int64_t> shape, std::size_t rows) {
  shape[0] = static_cast<std::int64_t>(rows);
  return shape;
}

/// A split key's rows `ids` (each in range) as each part sees them: the ids that reach the part,
/// and for each the index into `ids`, in order.
struct part_rows {
  std::vector<std::int64_t> ids;
  std::vector<std::size_t> at;
  std::int64_t elements = 0;
};
std::vector<part_rows> cut_rows(const detail::split_layout& layout, const std::vector<std::int64_t>& ids,
                                std::int64_t row_length) {
  std::vector<part_rows> parts(static_cast<std::size_t>(layout.parts()));
  for (int p = 0; p < layout.parts(); ++p) {
    auto& part = parts[static_cast<std::size_t>(p)];
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto piece = detail::piece_in_part(ids[i], row_length, layout.offset(p), layout.size(p));
      if (piece.begin >= piece.end) continue;
      part.ids.push_back(ids[i]);
      part.at.push_back(i);
      part.elements += piece.end - piece.begin;
    }
  }
  return parts;
}

/// The first row id outside [0, rows), as the sentence that refuses it.
expected<void> ids_in_range(const char* op, const char* role, const kvstore::key& key, const std::vector<std::int64_t>& ids,
                            std::int64_t rows) {
  for (auto id : ids)
    if (id < 0 || id >= rows)
      return refused(std::string("kvstore dist ") + op + ": the " + role + " for key " + key.to_string() + " names row " +
                     std::to_string(id) + ", outside [0, " + std::to_string(rows) + ").");
  return {};
}

/// Waits until the rows rank `from` answered with are here, or says why they never came.
expected<void> arrival(const tensor& rows, const kvstore::key& key, int from) {
  try {
    rows.ready_event().synchronize();
  } catch (const std::exception& e) {
    return error(errc::runtime_failure, "kvstore dist row_sparse_pull: the rows of key " + key.to_string() + " from rank " +
                                            std::to_string(from) + " did not arrive: " + e.what());
  }
  return {};
}

}  // namespace

expected<void> store::push_row_sparse(const kvstore::key& key, const std::vector<kvstore::row_sparse>& values) {
  auto& w = *state_;
  if (values.size() == 1) return push_row_sparse(key, values.front());
  if (auto r = sparse_usable(w, "push", key); !r) return r;
  if (values.empty())
    return refused("kvstore dist push: no row-sparse value for key " + key.to_string() + "; give at least one.");
  const auto& shape = values.front().shape;
  const dtype type = values.front().rows.valid() ? values.front().rows.dtype() : dtype::float32;
  if (shape.empty() || shape[0] < 0)
    return refused("kvstore dist push: the row-sparse values for key " + key.to_string() + " have shape " +
                   shape_text(shape) + "; expected a shape with rows along its first dimension.");
  std::size_t length = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) length *= static_cast<std::size_t>(std::max<std::int64_t>(shape[d], 0));
  // The sum by id, in the order given, in float32: the same additions the key's owner makes for
  // one value with repeated ids.
  std::map<std::int64_t, std::vector<float>> sums;
  for (const auto& v : values) {
    if (!v.rows.valid() || v.rows.get_device().kind() != device_kind::cpu || v.rows.dtype() != type || v.shape != shape)
      return refused("kvstore dist push: the row-sparse values for key " + key.to_string() +
                     " must have cpu rows of one dtype, over one key shape (the first value's: " + shape_text(shape) + ").");
    if (auto r = ids_in_range("push", "row-sparse value", key, v.row_ids, shape[0]); !r) return r;
    if (v.rows.shape() != rows_of(shape, v.row_ids.size()))
      return refused("kvstore dist push: a row-sparse value for key " + key.to_string() + " has rows of shape " +
                     shape_text(v.rows.shape()) + ", expected " + shape_text(rows_of(shape, v.row_ids.size())) +
                     " (one row per id).");
  }
  if (auto r = of_key_type(w, "push", "row-sparse value", key, type); !r) return r;
  for (const auto& v : values) {
    const std::vector<float> rows = detail::widened(w, v.rows);
    for (std::size_t i = 0; i < v.row_ids.size(); ++i) {
      const float* row = rows.data() + i * length;
      auto [at, fresh] = sums.try_emplace(v.row_ids[i]);
      if (fresh) at->second.assign(row, row + length);
      else
        for (std::size_t j = 0; j < length; ++j) at->second[j] += row[j];
    }
  }
  kvstore::row_sparse one;
  one.shape = shape;
  std::vector<float> flat;
  flat.reserve(sums.size() * length);
  for (const auto& [id, row] : sums) {
    one.row_ids.push_back(id);
    flat.insert(flat.end(), row.begin(), row.end());
  }
  one.rows = detail::rounded(flat, rows_of(shape, sums.size()), type, w.dev, w.s);
  return push_row_sparse(key, one);
}

expected<void> store::push_row_sparse(const kvstore::key& key, const kvstore::row_sparse& value) {
  auto& w = *state_;
  if (auto r = sparse_usable(w, "push", key); !r) return r;
  if (w.compression != kvstore::compression_type::none)
    return refused("kvstore dist push: gradient compression does not apply to row-sparse pushes (MXNet refuses them "
                   "too); turn gradient compression off first.");
  const tensor& rows = value.rows;
  if (!rows.valid() || rows.get_device().kind() != device_kind::cpu)
    return refused("kvstore dist push: the rows of the row-sparse value for key " + key.to_string() +
                   " must be a cpu tensor.");
  if (auto r = of_key_type(w, "push", "row-sparse value", key, rows.dtype()); !r) return r;
  const std::uint64_t seq = w.pushes[key] + 1;
  std::vector<std::future<expected<unit_t>>> replies;
  auto send = [&](int to, detail::sparse_push_msg m) {
    replies.push_back(w.sys->request<unit_t>(w.servers[static_cast<std::size_t>(to)], w.options.timeout, std::move(m)));
  };
  auto split = w.splits.find(key);
  if (split == w.splits.end()) {
    // The owner checks the value against the key (it alone knows the key's shape and dtype).
    send(owner(key), detail::sparse_push_msg{detail::to_wire(key), w.rank, seq, value.row_ids, value.shape, -1, 0,
                                               net::tensor_slice{rows, 0, rows.shape()}, rows.dtype()});
  } else {
    const auto& layout = split->second;
    if (value.shape != layout.shape)
      return refused("kvstore dist push: the row-sparse value for key " + key.to_string() + " has shape " +
                     shape_text(value.shape) + ", expected " + shape_text(layout.shape) + " (the stored shape).");
    if (auto r = ids_in_range("push", "row-sparse value", key, value.row_ids, layout.shape[0]); !r) return r;
    if (rows.shape() != rows_of(layout.shape, value.row_ids.size()))
      return refused("kvstore dist push: the row-sparse value for key " + key.to_string() + " has rows of shape " +
                     shape_text(rows.shape()) + ", expected " + shape_text(rows_of(layout.shape, value.row_ids.size())) +
                     " (one row per id).");
    // Each part gets the pieces of the rows that reach it, packed in id order (the owners check
    // the dtype); a part no row reaches gets none, and still counts the push.
    const std::int64_t length = layout.shape[0] == 0 ? 0 : layout.offset(layout.parts()) / layout.shape[0];
    const std::size_t element = size_of(rows.dtype());
    rows.ready_event().synchronize();
    const auto* from = static_cast<const std::byte*>(rows.raw_data());
    auto parts = cut_rows(layout, value.row_ids, length);
    for (int p = 0; p < layout.parts(); ++p) {
      auto& part = parts[static_cast<std::size_t>(p)];
      tensor packed;
      if (part.elements > 0) {
        packed = tensor::empty({part.elements}, rows.dtype(), w.dev, w.s);
        auto* to = static_cast<std::byte*>(packed.raw_data());
        for (std::size_t j = 0; j < part.ids.size(); ++j) {
          const auto piece = detail::piece_in_part(part.ids[j], length, layout.offset(p), layout.size(p));
          const auto n = static_cast<std::size_t>(piece.end - piece.begin) * element;
          std::memcpy(to, from + (part.at[j] * static_cast<std::size_t>(length) +
                                  static_cast<std::size_t>(piece.begin - part.ids[j] * length)) * element, n);
          to += n;
        }
      }
      send(p, detail::sparse_push_msg{detail::to_wire(key), w.rank, seq, std::move(part.ids), layout.shape,
                                        layout.offset(p), length, net::tensor_slice{packed, 0, {part.elements}},
                                        rows.dtype()});
    }
  }
  if (auto sent = detail::all_replies(replies); !sent) return sent;
  w.pushes[key] = seq;
  w.bytes_pushed += rows.bytes();
  return {};
}

expected<void> store::row_sparse_pull(const kvstore::key& key, tensor& out, const std::vector<std::int64_t>& row_ids) {
  auto& w = *state_;
  if (auto r = sparse_usable(w, "row_sparse_pull", key); !r) return r;
  if (!out.valid() || out.get_device().kind() != device_kind::cpu)
    return refused("kvstore dist row_sparse_pull: the output for key " + key.to_string() + " must be a cpu tensor.");
  if (auto r = of_key_type(w, "row_sparse_pull", "output", key, out.dtype()); !r) return r;
  const std::uint64_t min_version = w.options.mode == mode::sync ? w.pushes[key] : 0;
  auto wrong_output = [&](dtype type, const std::vector<std::int64_t>& shape) {
    return refused("kvstore dist row_sparse_pull: the output for key " + key.to_string() + " is " +
                   std::string(to_string(out.dtype())) + " " + shape_text(out.shape()) + ", expected " +
                   std::string(to_string(type)) + " " + shape_text(shape) + " (one row per id).");
  };
  auto split = w.splits.find(key);
  if (split == w.splits.end()) {
    auto got = ask<tensor>(w, w.servers[static_cast<std::size_t>(owner(key))],
                           detail::sparse_pull_msg{detail::to_wire(key), row_ids, -1, 0, min_version});
    if (!got) return got.error();
    if (got->dtype() != out.dtype() || got->shape() != out.shape()) return wrong_output(got->dtype(), got->shape());
    if (auto arrived = arrival(*got, key, owner(key)); !arrived) return arrived;
    out.ready_event().synchronize();
    std::memcpy(out.raw_data(), got->raw_data(), out.bytes());
    return {};
  }
  const auto& layout = split->second;
  if (auto r = ids_in_range("row_sparse_pull", "row ids", key, row_ids, layout.shape[0]); !r) return r;
  const auto want = rows_of(layout.shape, row_ids.size());
  if (out.shape() != want) return wrong_output(out.dtype(), want);
  const std::int64_t length = layout.shape[0] == 0 ? 0 : layout.offset(layout.parts()) / layout.shape[0];
  auto parts = cut_rows(layout, row_ids, length);
  std::vector<std::future<expected<tensor>>> replies(parts.size());
  for (int p = 0; p < layout.parts(); ++p)
    if (!parts[static_cast<std::size_t>(p)].ids.empty())
      replies[static_cast<std::size_t>(p)] = w.sys->request<tensor>(
          w.servers[static_cast<std::size_t>(p)], w.options.timeout,
          detail::sparse_pull_msg{detail::to_wire(key), parts[static_cast<std::size_t>(p)].ids, layout.offset(p),
                                    length, min_version});
  // Every answer is checked before `out` is written.
  std::vector<tensor> got(parts.size());
  expected<void> first;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    if (!replies[p].valid()) continue;
    auto answer = replies[p].get();
    if (!first) continue;
    if (!answer) first = answer.error();
    else if (answer->dtype() != out.dtype()) first = wrong_output(answer->dtype(), want);
    else if (answer->numel() != parts[p].elements)
      first = error(errc::runtime_failure, "kvstore dist row_sparse_pull: rank " + std::to_string(p) + " answered " +
                                               std::to_string(answer->numel()) + " elements of key " + key.to_string() +
                                               ", expected " + std::to_string(parts[p].elements) + ".");
    else got[p] = std::move(*answer);
  }
  if (!first) return first;
  const std::size_t element = size_of(out.dtype());
  out.ready_event().synchronize();
  auto* to = static_cast<std::byte*>(out.raw_data());
  for (int p = 0; p < layout.parts(); ++p) {
    const auto& part = parts[static_cast<std::size_t>(p)];
    if (part.ids.empty()) continue;
    const tensor& answer = got[static_cast<std::size_t>(p)];
    if (auto arrived = arrival(answer, key, p); !arrived) return arrived;
    const auto* from = static_cast<const std::byte*>(answer.raw_data());
    for (std::size_t j = 0; j < part.ids.size(); ++j) {
      const auto piece = detail::piece_in_part(part.ids[j], length, layout.offset(p), layout.size(p));
      const auto n = static_cast<std::size_t>(piece.end - piece.begin) * element;
      std::memcpy(to + (part.at[j] * static_cast<std::size_t>(length) +
                        static_cast<std::size_t>(piece.begin - part.ids[j] * length)) * element,
                  from, n);
      from += n;
    }
  }
  return {};
}

}  // namespace strata::kvstore_dist
