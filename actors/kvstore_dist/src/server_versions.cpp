// A server shard's versions: a push checked against its key, taken at once (dist_async) or into
// its version, which runs once every rank's value is there (dist_sync); after a rank left, the
// versions that can no longer complete and what waits for them.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include <exception>
#include <limits>
#include <optional>

#include "server.hpp"
#include "strata/device/shape.hpp"

namespace strata::kvstore_dist::detail {

server::key_state* server::pushable(const kvstore::key& key, const std::vector<std::int64_t>& shape, dtype type,
                    response_promise<unit_t>& reply) {
  key_state* st = initialised(key, "push", reply);
  if (st == nullptr) return nullptr;
  if (type != st->type) {
    reply.deliver(error(errc::invalid_argument, "kvstore dist push: the value for key " + key.to_string() +
                                                     " has dtype " + std::string(to_string(type)) + ", expected " +
                                                     std::string(to_string(st->type)) + "."));
    return nullptr;
  }
  if (shape != st->shape) {
    reply.deliver(error(errc::invalid_argument, "kvstore dist push: the value for key " + key.to_string() + " is " +
                                                     shape_text(shape) + ", expected " +
                                                     std::string(to_string(type)) + " " +
                                                     shape_text(st->shape) + "."));
    return nullptr;
  }
  return st;
}

void server::take(const kvstore::key& key, key_state& st, int rank, std::uint64_t seq, contribution value,
          response_promise<unit_t>& reply) {
  if (mode_ == kvstore_dist::mode::async) {
    if (!has_optimizer_) {
      reply.deliver(error(errc::invalid_argument,
                          "kvstore dist_async push: no optimizer is set; dist_async updates at every push and "
                          "needs set_optimizer first (as MXNet's)."));
      return;
    }
    std::vector<contribution> one;
    one.push_back(std::move(value));
    update(key, std::move(one))
        .then(
            [this, key, reply]() mutable {
              ++keys_[key].done;
              reply.deliver(unit_t{});
              serve_pulls(key);
            },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
    return;
  }
  if (rank < 0 || rank >= world_ || seq <= st.done) {
    reply.deliver(error(errc::invalid_argument, "kvstore dist push: push " + std::to_string(seq) + " of key " +
                                                     key.to_string() + " from rank " + std::to_string(rank) +
                                                     " is out of order."));
    return;
  }
  if (auto why = unreachable(key, st, seq)) {
    reply.deliver(std::move(*why));
    return;
  }
  auto& slots = st.versions[seq];
  if (slots.values.empty()) {
    slots.values.resize(static_cast<std::size_t>(world_));
    slots.have.assign(static_cast<std::size_t>(world_), 0);
  }
  if (slots.have[static_cast<std::size_t>(rank)] != 0) {
    reply.deliver(error(errc::invalid_argument, "kvstore dist push: rank " + std::to_string(rank) +
                                                     " pushed version " + std::to_string(seq) + " of key " +
                                                     key.to_string() + " twice."));
    return;
  }
  // As the one-process synchronous store: a version collects one kind of value.
  if (slots.count > 0 && slots.sparse != value.is_sparse) {
    reply.deliver(error(errc::invalid_argument, "kvstore dist push: key " + key.to_string() + " has " +
                                                     (slots.sparse ? "row-sparse" : "dense") + " values towards version " +
                                                     std::to_string(seq) +
                                                     "; a version collects dense or row-sparse values, not both."));
    return;
  }
  slots.sparse = value.is_sparse;
  // Answered once the value's bytes are here (received from another rank, or copied from this
  // rank's caller): then the pushing caller may reuse its tensor.
  const event landed = value.is_sparse ? value.sparse.rows.ready_event() : value.dense.ready_event();
  slots.values[static_cast<std::size_t>(rank)] = std::move(value);
  slots.have[static_cast<std::size_t>(rank)] = 1;
  ++slots.count;
  landed.then([reply, rank](std::exception_ptr failed) mutable {
    if (!failed) return reply.deliver(unit_t{});
    try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      reply.deliver(error(errc::runtime_failure, "kvstore dist push: the value from rank " + std::to_string(rank) +
                                                     " did not arrive: " + e.what()));
    } catch (...) {
      reply.deliver(error(errc::runtime_failure, "kvstore dist push: the value from rank " + std::to_string(rank) +
                                                     " did not arrive."));
    }
  });
  try_merge(key);
}

void server::try_merge(const kvstore::key& key) {
  key_state& st = keys_[key];
  if (st.merging) return;
  auto it = st.versions.find(st.done + 1);
  if (it == st.versions.end()) return;
  if (it->second.count < world_) return;
  std::vector<contribution> values = std::move(it->second.values);
  st.versions.erase(it);
  st.merging = true;
  update(key, std::move(values))
      .then(
          [this, key]() {
            key_state& s = keys_[key];
            s.merging = false;
            ++s.done;
            serve_pulls(key);
            try_merge(key);
          },
          [this, key](error e) {
            key_state& s = keys_[key];
            s.merging = false;
            for (auto& p : s.pulls) p.reply.deliver(e);
            s.pulls.clear();
          });
}

request_handle<void> server::update(const kvstore::key& key, std::vector<contribution> values) {
  std::vector<kvstore::key> keys(values.size(), key);
  if (!values.empty() && values.front().is_sparse) {
    std::vector<kvstore::row_sparse> rows;
    for (auto& v : values) rows.push_back(std::move(v.sparse));
    return request<void>(store_, timeout_, kvstore::push_row_sparse{std::move(keys), std::move(rows)});
  }
  std::vector<tensor> dense;
  for (auto& v : values) dense.push_back(std::move(v.dense));
  return request<void>(store_, timeout_, kvstore::push{std::move(keys), std::move(dense)});
}

std::uint64_t server::last_reachable(const key_state& st) const {
  if (left_.empty() || mode_ != kvstore_dist::mode::sync) return std::numeric_limits<std::uint64_t>::max();
  std::uint64_t v = st.done + (st.merging ? 1 : 0);
  for (;;) {
    auto it = st.versions.find(v + 1);
    if (it == st.versions.end() || it->second.have.empty()) return v;
    for (const auto& [r, why] : left_)
      if (it->second.have[static_cast<std::size_t>(r)] == 0) return v;
    ++v;
  }
}

std::optional<error> server::unreachable(const kvstore::key& key, const key_state& st, std::uint64_t version) const {
  const std::uint64_t reach = last_reachable(st);
  if (version <= reach) return std::nullopt;
  // Name the version a left rank's push is missing from: `version` itself when it lacks one,
  // else the first version that cannot complete (the later ones wait for it).
  auto missing_from = [&](std::uint64_t v) -> int {
    auto it = st.versions.find(v);
    for (const auto& [r, why] : left_)
      if (it == st.versions.end() || it->second.have.empty() || it->second.have[static_cast<std::size_t>(r)] == 0)
        return r;
    return -1;
  };
  std::uint64_t blocked = version;
  int r = missing_from(version);
  if (r < 0) {
    blocked = reach + 1;
    r = missing_from(blocked);
  }
  return error(errc::rank_down, "kvstore dist_sync: key " + key.to_string() + " cannot complete version " +
                                    std::to_string(blocked) + ": rank " + std::to_string(r) + " " + left_.at(r) + ".");
}

void server::give_up_unreachable(const kvstore::key& key, key_state& st) {
  const std::uint64_t reach = last_reachable(st);
  std::vector<parked_pull> waiting;
  for (auto& p : st.pulls) {
    if (p.min_version <= reach) waiting.push_back(std::move(p));
    else p.reply.deliver(*unreachable(key, st, p.min_version));
  }
  st.pulls = std::move(waiting);
  st.versions.erase(st.versions.upper_bound(reach), st.versions.end());
}

}  // namespace strata::kvstore_dist::detail
