// A server shard of a distributed store: one per rank, in front of a kvstore actor. It orders
// the workers' pushes into versions (dist_sync) or forwards each at once (dist_async), parks
// pulls until their version, and coordinates barriers (rank 0's shard). It monitors the other
// ranks' shards: a rank that leaves fails at once what would wait for it.

#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "protocol.hpp"
#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"

namespace strata::kvstore_dist::detail {

wire_key to_wire(const kvstore::key& key) {
  wire_key w;
  if (key.is_int()) {
    w.is_int = 1;
    w.number = std::get<std::int64_t>(key.value());
  } else {
    w.is_int = 0;
    w.text = std::get<std::string>(key.value());
  }
  return w;
}

kvstore::key from_wire(const wire_key& key) {
  if (key.is_int != 0) return kvstore::key(key.number);
  return kvstore::key(key.text);
}

namespace {

/// A copy of `slice`'s elements, enqueued on `s` after its base is ready.
tensor copy_of(const net::tensor_slice& slice, device& dev, stream& s) {
  tensor part = tensor::empty(slice.shape, slice.base.dtype(), dev, s);
  s.wait(slice.base.ready_event());
  const std::size_t element = size_of(part.dtype());
  s.launch({.name = "kvstore_dist.part",
            .bytes = static_cast<double>(part.bytes()),
            .cpu = [to = part.raw_data(), from = static_cast<const std::byte*>(slice.base.raw_data()) +
                                                 static_cast<std::size_t>(slice.offset) * element,
                    n = part.bytes(), hold = slice.base] { std::memcpy(to, from, n); }});
  part.set_ready_event(s.record());
  return part;
}

/// A slice's elements as a tensor of their own: the base itself when the slice is all of it (a
/// message from another rank always is: the slice crossed as a tensor); else (from this rank's own
/// worker, delivered without serialization) a copy of the part, enqueued on `s` after the base.
tensor part_of(net::tensor_slice& slice, device& dev, stream& s) {
  if (!slice.base.valid() || (slice.offset == 0 && slice.base.shape() == slice.shape)) return std::move(slice.base);
  return copy_of(slice, dev, s);
}

/// `slice` as a tensor the server owns: a message from this rank's own worker arrives unserialized,
/// and its slice is the caller's own tensor, which the caller may reuse once its push is answered
/// (as with the one-process store), while a dist_sync version keeps its value until every rank's
/// is in: that one is copied even when whole. A slice from another rank is a received tensor.
tensor owned_part(net::tensor_slice& slice, bool from_this_rank, device& dev, stream& s) {
  if (from_this_rank && slice.base.valid()) return copy_of(slice, dev, s);
  return part_of(slice, dev, s);
}

/// Local only: the watch of rank `rank`'s shard saw it go down, for `reason`.
struct peer_down_msg {
  int rank = -1;
  error reason;
};

class server final : public actor {
public:
  server(int rank, int world, kvstore_dist::mode mode, std::chrono::nanoseconds timeout, device dev)
      : rank_(rank), world_(world), mode_(mode), timeout_(timeout), dev_(std::move(dev)) {}

  behavior make_behavior() override {
    stream_ = dev_.create_stream();
    store_ = kvstore::spawn(system(), kvstore::options{.name = "kvstore_dist.shard"});
    return {
        [this](init_msg& m) { on_init(m); },
        [this](push_msg& m) { on_push(m); },
        [this](compressed_push_msg& m) { on_compressed_push(m); },
        [this](sparse_push_msg& m) { on_sparse_push(m); },
        [this](const pull_msg& m) { on_pull(m); },
        [this](sparse_pull_msg& m) { on_sparse_pull(m); },
        [this](const barrier_msg& m) { on_barrier(m); },
        [this](peers_msg& m) { on_peers(m); },
        [this](const peer_down_msg& m) { on_peer_down(m); },
        [this](optimizer_msg& m) { on_optimizer(m); },
        [this](const learning_rate_msg& m) {
          auto reply = make_response_promise<unit_t>();
          request<void>(store_, timeout_, kvstore::set_learning_rate{m.lr})
              .then([reply]() mutable { reply.deliver(unit_t{}); }, [reply](error e) mutable { reply.deliver(std::move(e)); });
        },
        [this](const save_msg& m) { on_save(m); },
        [this](load_msg& m) { on_load(m); },
    };
  }

  void on_exit(const error&) override {
    system().stop(store_);
    for (auto& w : watches_) system().stop(w);
  }

private:
  struct parked_pull {
    std::uint64_t min_version = 0;
    response_promise<tensor> reply;
    std::optional<sparse_pull_msg> rows;  // a row_sparse_pull's request, else a pull of the value
  };
  /// One worker's value of a key: dense, or row-sparse (`is_sparse`).
  struct contribution {
    tensor dense;
    kvstore::row_sparse sparse;
    bool is_sparse = false;
  };
  struct version_slots {
    std::vector<contribution> values;  // by rank
    std::vector<char> have;
    int count = 0;
    bool sparse = false;  // the kind of the values it collects (the first one's)
  };
  struct key_state {
    std::vector<std::int64_t> shape;
    dtype type = dtype::float32;                         // the dtype the key was initialised with
    std::uint64_t done = 0;                              // updates applied
    std::map<std::uint64_t, version_slots> versions;     // dist_sync: the values of each version
    bool merging = false;
    std::vector<parked_pull> pulls;
  };

  void on_init(init_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<unit_t>();
    if (keys_.count(key) != 0) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist init: key " + key.to_string() + " exists already."));
      return;
    }
    tensor value = part_of(m.value, dev_, stream_);
    auto shape = value.shape();
    const dtype type = value.dtype();
    request<void>(store_, timeout_, kvstore::init{{key}, {std::move(value)}})
        .then(
            [this, key, shape, type, reply]() mutable {
              keys_[key].shape = shape;
              keys_[key].type = type;
              reply.deliver(unit_t{});
            },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_push(push_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<unit_t>();
    key_state* st = pushable(key, m.value.shape, m.value.base.dtype(), reply);
    if (st == nullptr) return;
    take(key, *st, m.rank, m.seq, contribution{owned_part(m.value, m.rank == rank_, dev_, stream_)}, reply);
  }

  // A worker's compressed push: its codes become the floats they stand for (in the key's dtype,
  // which must hold them exactly), then as a push.
  void on_compressed_push(compressed_push_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<unit_t>();
    key_state* st = pushable(key, m.shape, m.value_type, reply);
    if (st == nullptr) return;
    std::size_t n = 1;
    for (auto d : m.shape) n *= static_cast<std::size_t>(d);
    if (m.type == kvstore::compression_type::none || m.type > kvstore::compression_type::two_bit ||
        m.codes.size() != kvstore::packed_words(m.type, n)) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist push: the compressed value for key " + key.to_string() +
                                                       " has " + std::to_string(m.codes.size()) +
                                                       " code words, not those of a 1bit or 2bit " + shape_text(m.shape) +
                                                       " value."));
      return;
    }
    std::vector<float> floats(n);
    kvstore::decompress(m.type, m.threshold, m.codes.data(), floats.data(), n);
    if (kernels::is_half(st->type))
      for (float x : floats)
        if (kernels::half_value(st->type, kernels::half_bits(st->type, x)) != x) {
          reply.deliver(error(errc::invalid_argument, "kvstore dist push: key " + key.to_string() + " is " +
                                                           std::string(to_string(st->type)) +
                                                           ", which does not hold the 2bit threshold " +
                                                           std::to_string(m.threshold) +
                                                           " exactly; choose one it holds (such as 0.5 or 0.25)."));
          return;
        }
    take(key, *st, m.rank, m.seq, contribution{rounded(floats, m.shape, st->type, dev_, stream_)}, reply);
  }

  // A worker's row-sparse value: checked whole on arrival (a synchronous version keeps it until
  // the others' are there), so that a bad one is refused with nothing changed.
  void on_sparse_push(sparse_push_msg& m) {
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

  /// The kvstore's row-sparse value of `m` for this shard's key: the rows as they came for a whole
  /// key; for a part (a 1-D key here) each element of the pieces a row of its own.
  expected<kvstore::row_sparse> sparse_value(const kvstore::key& key, const key_state& st, sparse_push_msg& m,
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

  /// The elements of this shard's part (from element `offset` of the whole key) that the whole
  /// key's rows `ids` of `row_length` elements reach, in id order, as indices into the part.
  static expected<std::vector<std::int64_t>> part_elements(const kvstore::key& key, const key_state& st,
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

  /// The state of `key`, or null when it was never initialised (the reply to `op` gets why).
  template <class R>
  key_state* initialised(const kvstore::key& key, const char* op, response_promise<R>& reply) {
    auto it = keys_.find(key);
    if (it != keys_.end()) return &it->second;
    reply.deliver(error(errc::invalid_argument, std::string("kvstore dist ") + op + ": key " + key.to_string() +
                                                     " was never initialised; call init first (every worker)."));
    return nullptr;
  }

  /// The key's state when a push of `shape` and `type` fits it; else the reply gets the reason.
  key_state* pushable(const kvstore::key& key, const std::vector<std::int64_t>& shape, dtype type,
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

  /// One worker's value of `key`: an update at once (dist_async) or a slot of its version.
  void take(const kvstore::key& key, key_state& st, int rank, std::uint64_t seq, contribution value,
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

  // dist_sync: the next version of `key` runs once every worker's value is there, summed in rank
  // order by one kvstore push (values of one key are summed in the order given).
  void try_merge(const kvstore::key& key) {
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

  /// One update of `key` from `values` (of one kind), summed in the order given by one request
  /// to the kvstore: dense ones by element, row-sparse ones by row id, the rule run on the union.
  request_handle<void> update(const kvstore::key& key, std::vector<contribution> values) {
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

  void on_pull(const pull_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<tensor>();
    key_state* st = initialised(key, "pull", reply);
    if (st == nullptr) return;
    if (st->done >= m.min_version) {
      send_value(key, std::move(reply));
      return;
    }
    if (auto why = unreachable(key, *st, m.min_version)) return reply.deliver(std::move(*why));
    st->pulls.push_back(parked_pull{m.min_version, std::move(reply)});
  }

  void on_sparse_pull(sparse_pull_msg& m) {
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

  /// The rows `m` asks for, read by the kvstore into a tensor of their own: of a whole key
  /// `[ids, shape[1], ...]`, of a part its elements that the rows reach (1-D).
  void send_rows(const kvstore::key& key, const sparse_pull_msg& m, response_promise<tensor> reply) {
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

  void serve_pulls(const kvstore::key& key) {
    key_state& st = keys_[key];
    std::vector<parked_pull> waiting;
    for (auto& p : st.pulls) {
      if (p.min_version > st.done) waiting.push_back(std::move(p));
      else if (p.rows) send_rows(key, *p.rows, std::move(p.reply));
      else send_value(key, std::move(p.reply));
    }
    st.pulls = std::move(waiting);
  }

  void send_value(const kvstore::key& key, response_promise<tensor> reply) {
    tensor out = tensor::empty(keys_[key].shape, keys_[key].type, dev_, stream_);
    request<std::vector<tensor>>(store_, timeout_, kvstore::pull{{key}, {out}})
        .then([reply](std::vector<tensor> outs) mutable { reply.deliver(std::move(outs.front())); },
              [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_barrier(const barrier_msg& m) {
    auto reply = make_response_promise<unit_t>();
    if (m.rank >= 0 && m.rank < world_) {
      auto& reached = barriers_reached_[static_cast<std::size_t>(m.rank)];
      reached = std::max(reached, m.generation);
    }
    auto& arrived = barriers_[m.generation];
    arrived.push_back(std::move(reply));
    if (fail_barrier_without_left_ranks(m.generation)) return;
    if (static_cast<int>(arrived.size()) < world_) return;
    for (auto& r : arrived) r.deliver(unit_t{});
    barriers_.erase(m.generation);
  }

  /// Barrier `generation`, when a rank that left never reached it: every rank waiting there is
  /// told so, and true.
  bool fail_barrier_without_left_ranks(std::uint64_t generation) {
    for (const auto& [r, why] : left_) {
      if (barriers_reached_[static_cast<std::size_t>(r)] >= generation) continue;
      const error e(errc::rank_down, "kvstore dist barrier: barrier " + std::to_string(generation) +
                                         " cannot complete: rank " + std::to_string(r) + " " + why + ".");
      for (auto& reply : barriers_[generation]) reply.deliver(e);
      barriers_.erase(generation);
      return true;
    }
    return false;
  }

  // One watch per other rank, each monitoring that rank's shard: a down message names its rank by
  // who gets it. (The shard's handle in a down message need not equal the one looked up by name:
  // a rank that learns a shard's id from its watch before the name's resolution makes a second
  // handle for it.)
  void on_peers(peers_msg& m) {
    for (int r = 0; r < static_cast<int>(m.servers.size()); ++r) {
      if (r == rank_ || !m.servers[static_cast<std::size_t>(r)]) continue;
      watches_.push_back(system().spawn([peer = m.servers[static_cast<std::size_t>(r)], r, server = self()](actor& w) -> behavior {
        w.monitor(peer);
        return {[&w, r, server](const down_msg& d) {
          (void)w.send(server, peer_down_msg{r, d.reason});
          w.quit();
        }};
      }));
    }
  }

  // Another rank's shard went down: with its rank (`rank_down`) or because that rank closed its
  // store (`stopped`: the store's destructor, or the end of its actor system). Either way that
  // rank's worker pushes no more, so what waits for its pushes or its barriers fails now. A shard
  // that failed in a handler is not a rank leaving (its worker may still push) and is ignored.
  void on_peer_down(const peer_down_msg& m) {
    const int r = m.rank;
    if (r < 0 || r >= world_ || r == rank_ || left_.count(r) != 0) return;
    if (m.reason.code() == errc::rank_down) left_[r] = "has left the job";
    else if (m.reason.code() == errc::stopped) left_[r] = "has closed this store";
    else return;
    if (mode_ == kvstore_dist::mode::sync)
      for (auto& [key, st] : keys_) give_up_unreachable(key, st);
    std::vector<std::uint64_t> waiting;
    for (const auto& [generation, arrived] : barriers_) waiting.push_back(generation);
    for (auto generation : waiting) fail_barrier_without_left_ranks(generation);
  }

  /// dist_sync: the last version of `key` that can still complete: every version after the ones
  /// applied (and the one being applied) needs the pushes of every rank, and a rank that left
  /// pushes no more. All versions when no rank has left.
  std::uint64_t last_reachable(const key_state& st) const {
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

  /// Why version `version` of `key` can never complete (a rank whose push it needs has left), or
  /// nothing when it still can.
  std::optional<error> unreachable(const kvstore::key& key, const key_state& st, std::uint64_t version) const {
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

  /// After a rank left: the pulls of `key` parked for versions that can no longer complete fail,
  /// and the values collected for those versions are dropped.
  void give_up_unreachable(const kvstore::key& key, key_state& st) {
    const std::uint64_t reach = last_reachable(st);
    std::vector<parked_pull> waiting;
    for (auto& p : st.pulls) {
      if (p.min_version <= reach) waiting.push_back(std::move(p));
      else p.reply.deliver(*unreachable(key, st, p.min_version));
    }
    st.pulls = std::move(waiting);
    st.versions.erase(st.versions.upper_bound(reach), st.versions.end());
  }

  void on_optimizer(optimizer_msg& m) {
    auto reply = make_response_promise<unit_t>();
    request<void>(store_, timeout_, std::move(m.rule))
        .then(
            [this, reply]() mutable {
              has_optimizer_ = true;
              reply.deliver(unit_t{});
            },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_save(const save_msg& m) {
    auto reply = make_response_promise<unit_t>();
    request<void>(store_, timeout_, kvstore::save{m.path})
        .then([reply]() mutable { reply.deliver(unit_t{}); }, [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_load(load_msg& m) {
    auto reply = make_response_promise<unit_t>();
    request<void>(store_, timeout_, kvstore::load{m.path})
        .then(
            [this, reply, keys = std::move(m.keys)]() mutable {
              // The store's keys are the file's now: pulls parked for the old ones cannot be served.
              for (auto& [key, st] : keys_)
                for (auto& p : st.pulls)
                  p.reply.deliver(error(errc::invalid_argument, "kvstore dist pull of key " + key.to_string() +
                                                                     ": a checkpoint load replaced the store's keys."));
              keys_.clear();
              for (auto& k : keys) {
                key_state& st = keys_[k.key];
                st.shape = std::move(k.shape);
                st.type = k.type;
                st.done = k.version;
              }
              reply.deliver(unit_t{});
            },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  int rank_;
  int world_;
  kvstore_dist::mode mode_;
  std::chrono::nanoseconds timeout_;
  device dev_;
  stream stream_;
  actor_ref store_;
  bool has_optimizer_ = false;
  std::map<kvstore::key, key_state> keys_;
  std::map<std::uint64_t, std::vector<response_promise<unit_t>>> barriers_;
  std::vector<std::uint64_t> barriers_reached_ = std::vector<std::uint64_t>(static_cast<std::size_t>(world_), 0);  // by rank
  std::vector<actor_ref> watches_;          // of the other ranks' shards (on_peers)
  std::map<int, std::string> left_;         // ranks whose workers push no more, and why
};

}  // namespace

tensor rounded(const std::vector<float>& values, const std::vector<std::int64_t>& shape, dtype type, device& dev,
               const stream& s) {
  if (!kernels::is_half(type)) return tensor::from_host<float>(std::span<const float>(values), shape, dev, s);
  std::vector<std::uint16_t> bits(values.size());
  kernels::cpu::narrow(type, values.size(), values.data(), bits.data());
  return tensor::from_host_words(bits, shape, type, dev, s);
}

actor_ref spawn_server(actor_system& system, int rank, int world, kvstore_dist::mode mode,
                       std::chrono::nanoseconds timeout, device dev) {
  return system.spawn_with<server>(spawn_options{.name = "kvstore_dist.server"}, rank, world, mode, timeout,
                                   std::move(dev));
}

}  // namespace strata::kvstore_dist::detail

STRATA_NET_DECLARE(strata::kvstore_dist::detail::init_msg, strata::kvstore_dist::detail::push_msg,
                   strata::kvstore_dist::detail::compressed_push_msg,
                   strata::kvstore_dist::detail::pull_msg, strata::kvstore_dist::detail::barrier_msg,
                   strata::tensor);
STRATA_NET_DECLARE(strata::kvstore_dist::detail::sparse_push_msg, strata::kvstore_dist::detail::sparse_pull_msg);
