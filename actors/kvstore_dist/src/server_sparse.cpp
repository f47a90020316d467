// A server shard's row-sparse pushes and pulls: a worker's rows checked whole on arrival, and the
// rows a pull asks for read into a tensor of their own (of a whole key, or of the part kept here).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server.hpp"
#include "strata/device/shape.hpp"

namespace strata::kvstore_dist::detail {

void server::on_sparse_push(sparse_push_msg& m) {
  auto key = from_wire(m.key);
  auto reply = make_response_promise<unit_t>();
  key_state* st = initialised(key, "push", reply);
  if (st == nullptr) return;
  auto value = sparse_value(key, *st, m, owned_part(m.rows, m.rank == rank_, dev_, stream_));
  if (!value) {
    reply.deliver(value.error());
    return;
  }
  take(key, *st, m.rank, m.seq, contribution{tensor(), std::move(*value), true}, reply);
}

expected<kvstore::row_sparse> server::sparse_value(const kvstore::key& key, const key_state& st, sparse_push_msg& m,
                                           tensor rows) {
  const std::string where = "kvstore dist push: the row-sparse value for key " + key.to_string();
  auto bad = [](std::string text) { return error(errc::invalid_argument, std::move(text)); };
  if (m.type != st.type || (rows.valid() && rows.dtype() != st.type))
    return bad(where + " has dtype " + std::string(to_string(rows.valid() ? rows.dtype() : m.type)) + ", expected " +
               std::string(to_string(st.type)) + ".");
  if (m.part_offset < 0) {
    if (st.shape.empty()) return bad(where + " names rows of a scalar key; row-sparse values need a key of rank 1 or more.");
    if (m.shape != st.shape)
      return bad(where + " has shape " + shape_text(m.shape) + ", expected " + shape_text(st.shape) + " (the stored shape).");
    for (auto id : m.row_ids)
      if (id < 0 || id >= st.shape[0])
        return bad(where + " names row " + std::to_string(id) + ", outside [0, " + std::to_string(st.shape[0]) + ").");
    auto want = st.shape;
    want[0] = static_cast<std::int64_t>(m.row_ids.size());
    if (!rows.valid() || rows.shape() != want)
      return bad(where + " has rows of shape " + shape_text(rows.valid() ? rows.shape() : std::vector<std::int64_t>{}) +
                 ", expected " + shape_text(want) + " (one row per id).");
    return kvstore::row_sparse{std::move(rows), std::move(m.row_ids), st.shape};
  }
  auto elements = part_elements(key, st, m.row_ids, m.part_offset, m.row_length, "push");
  if (!elements) return elements.error();
  const std::vector<std::int64_t> want{static_cast<std::int64_t>(elements->size())};
  if (rows.valid() ? rows.shape() != want : !elements->empty())
    return bad(where + " has " + std::to_string(rows.valid() ? rows.numel() : 0) + " elements for its part from element " +
               std::to_string(m.part_offset) + ", expected " + std::to_string(elements->size()) + ".");
  if (!rows.valid()) rows = tensor::empty(want, st.type, dev_, stream_);
  return kvstore::row_sparse{std::move(rows), std::move(*elements), st.shape};
}

expected<std::vector<std::int64_t>> server::part_elements(const kvstore::key& key, const key_state& st,
                                                         const std::vector<std::int64_t>& ids, std::int64_t offset,
                                                         std::int64_t row_length, const char* op) {
  std::vector<std::int64_t> elements;
  const std::int64_t size = st.shape.size() == 1 ? st.shape[0] : 0;
  for (auto id : ids) {
    const auto piece = piece_in_part(id, row_length, offset, size);
    if (row_length <= 0 || id < 0 || piece.begin >= piece.end)
      return error(errc::invalid_argument, std::string("kvstore dist ") + op + ": row " + std::to_string(id) + " of key " +
                                               key.to_string() + " does not reach the part from element " +
                                               std::to_string(offset) + " kept here.");
    for (auto e = piece.begin; e < piece.end; ++e) elements.push_back(e - offset);
  }
  return elements;
}

void server::on_sparse_pull(sparse_pull_msg& m) {
  auto key = from_wire(m.key);
  auto reply = make_response_promise<tensor>();
  key_state* st = initialised(key, "row_sparse_pull", reply);
  if (st == nullptr) return;
  if (st->done >= m.min_version) {
    send_rows(key, m, std::move(reply));
    return;
  }
  if (auto why = unreachable(key, *st, m.min_version)) return reply.deliver(std::move(*why));
  const std::uint64_t min_version = m.min_version;
  st->pulls.push_back(parked_pull{min_version, std::move(reply), std::move(m)});
}

void server::send_rows(const kvstore::key& key, const sparse_pull_msg& m, response_promise<tensor> reply) {
  const key_state& st = keys_[key];
  std::vector<std::int64_t> ids = m.row_ids;
  std::vector<std::int64_t> shape = st.shape;
  if (m.part_offset < 0) {
    if (shape.empty())
      return reply.deliver(error(errc::invalid_argument, "kvstore dist row_sparse_pull: key " + key.to_string() +
                                                              " is a scalar; row-sparse pulls need a key of rank 1 or more."));
    shape[0] = static_cast<std::int64_t>(ids.size());
  } else {
    auto elements = part_elements(key, st, m.row_ids, m.part_offset, m.row_length, "row_sparse_pull");
    if (!elements) return reply.deliver(elements.error());
    ids = std::move(*elements);
    shape = {static_cast<std::int64_t>(ids.size())};
  }
  tensor out = tensor::empty(shape, st.type, dev_, stream_);
  request<std::vector<tensor>>(store_, timeout_, kvstore::row_sparse_pull{{key}, {std::move(ids)}, {out}})
      .then([reply](std::vector<tensor> outs) mutable { reply.deliver(std::move(outs.front())); },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
}

}  // namespace strata::kvstore_dist::detail
