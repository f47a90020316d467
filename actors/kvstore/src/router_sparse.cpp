#include "router_actor.hpp"

#include <algorithm>

// A sharded store's row-sparse requests (docs/kvstore.md, "Row-sparse values"). Chunks are
// contiguous element ranges that need not break on row boundaries: a row is cut into one piece
// per chunk it reaches, each piece summed and updated by the chunk's shard. The rules are
// elementwise and each element's pieces are summed in the order one store sums its rows, so the
// results equal one store's bit for bit.
namespace strata::kvstore::internal {

std::vector<row_pieces> kvstore_router::pieces_by_chunk(const placement& pl, const tensor& t,
                                                        const std::vector<std::int64_t>& ids) {
  const std::size_t cols = row_length(pl.shape);
  std::vector<row_pieces> out(pl.chunks.size(), row_pieces{t, {}});
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const std::size_t begin = static_cast<std::size_t>(ids[r]) * cols, end = begin + cols;
    // The last chunk starting at or before the row's first element, then those after it that
    // start inside the row.
    auto it = std::upper_bound(pl.chunks.begin(), pl.chunks.end(), begin,
                               [](std::size_t at, const chunk& c) { return at < c.offset; });
    for (std::size_t c = static_cast<std::size_t>(it - pl.chunks.begin()) - 1;
         c < pl.chunks.size() && pl.chunks[c].offset < end; ++c) {
      const chunk& ch = pl.chunks[c];
      const std::size_t lo = std::max(begin, ch.offset), hi = std::min(end, ch.offset + ch.length);
      if (lo < hi) out[c].pieces.push_back({ids[r], lo - ch.offset, hi - lo, r * cols + (lo - begin)});
    }
  }
  return out;
}

expected<void> kvstore_router::count_round(const char* op, const std::vector<kvstore::key>& keys, bool sparse) {
  const std::size_t need = options_.contributions_per_version;
  if (need == 0) return {};
  for (const auto& key : keys)
    if (auto it = rounds_.find(key); it != rounds_.end() && it->second.values > 0 && it->second.sparse != sparse)
      return mixed_round(op, key, sparse);
  for (const auto& key : keys) {
    auto& r = rounds_[key];
    r.sparse = sparse;
    if (++r.values == need) r.values = 0;
  }
  return {};
}

bool kvstore_router::on_push_row_sparse(kvstore::push_row_sparse& m, response_promise<unit_t>& p,
                                        std::uint64_t origin) {
  step st;
  for (const auto& v : m.values) st.uses.push_back({allocation_of(v.rows), false});
  if (conflicts(st.uses)) return false;
  if (auto r = row_sparse_supported("push", place_, compressed_); !r) return p.deliver(r.error()), true;
  if (auto r = check_row_sparse_push(m, shape_of(), place_, int_keys_); !r) return p.deliver(r.error()), true;
  if (auto r = count_round("push", m.keys, true); !r) return p.deliver(r.error()), true;
  st.sparse_parts.resize(shards_.size(), shard_row_sparse{.priority = m.priority, .origin = origin});
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    const placement& pl = keys_.at(m.keys[i]);
    auto pieces = pieces_by_chunk(pl, m.values[i].rows, m.values[i].row_ids);
    for (std::size_t c = 0; c < pl.chunks.size(); ++c) {  // every chunk, reached or not
      auto& part = st.sparse_parts[pl.chunks[c].shard];
      part.push_keys.emplace_back(pl.chunks[c].sub_key);
      part.values.push_back(std::move(pieces[c]));
    }
  }
  auto j = std::make_shared<job>();
  j->steps.push_back(std::move(st));
  j->done = answer(p);
  start(std::move(j));
  return true;
}

bool kvstore_router::on_row_sparse_pull(kvstore::row_sparse_pull& m, response_promise<std::vector<tensor>>& p,
                                        std::uint64_t origin) {
  auto uses = uses_of(m.outs, true);
  if (conflicts(uses)) return false;
  if (auto r = check_row_sparse_pull(m, shape_of(), place_, int_keys_); !r) return p.deliver(r.error()), true;
  // Shards write disjoint elements of an output, unless two keys name one output: then, as one
  // store writes its outputs in order, one step per key.
  std::vector<const void*> outs;
  for (const auto& u : uses) outs.push_back(u.allocation);
  std::sort(outs.begin(), outs.end());
  const bool shared = std::adjacent_find(outs.begin(), outs.end()) != outs.end();
  auto j = std::make_shared<job>();
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    if (i == 0 || shared) {
      auto& st = j->steps.emplace_back();
      st.sparse_parts.resize(shards_.size(), shard_row_sparse{.min_version = m.min_version, .priority = m.priority,
                                                              .origin = origin});
      st.waits = m.min_version > 0;
    }
    step& st = j->steps.back();
    st.uses.push_back(uses[i]);
    const placement& pl = keys_.at(m.keys[i]);
    auto pieces = pieces_by_chunk(pl, m.outs[i], m.row_ids[i]);
    for (std::size_t c = 0; c < pl.chunks.size(); ++c) {
      // A pull asks only the chunks its rows reach (and, to wait for a version, the first).
      if (pieces[c].pieces.empty() && (c > 0 || m.min_version == 0)) continue;
      auto& part = st.sparse_parts[pl.chunks[c].shard];
      part.pull_keys.emplace_back(pl.chunks[c].sub_key);
      part.outs.push_back(std::move(pieces[c]));
    }
  }
  j->holds = shared && m.keys.size() > 1 && m.min_version == 0;
  j->done = answer_with(p, std::move(m.outs));
  start(std::move(j));
  return true;
}

}  // namespace strata::kvstore::internal
