#pragma once
// A server shard of a distributed store (one per rank, in front of a kvstore actor): its state and
// handlers. server.cpp: init, pushes, pulls, barriers, the watch of the other ranks, checkpoints;
// server_versions.cpp: a push's checks, dist_sync's versions and what a rank that left makes
// unreachable; server_sparse.cpp: row-sparse pushes and pulls.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "protocol.hpp"

namespace strata::kvstore_dist::detail {

/// A slice's elements as a tensor of their own: the base itself when the slice is all of it (a
/// message from another rank always is: the slice crossed as a tensor); else (from this rank's own
/// worker, delivered without serialization) a copy of the part, enqueued on `s` after the base.
tensor part_of(net::tensor_slice& slice, device& dev, stream& s);

/// `slice` as a tensor the server owns: a message from this rank's own worker arrives unserialized,
/// and its slice is the caller's own tensor, which the caller may reuse once its push is answered
/// (as with the one-process store), while a dist_sync version keeps its value until every rank's
/// is in: that one is copied even when whole. A slice from another rank is a received tensor.
tensor owned_part(net::tensor_slice& slice, bool from_this_rank, device& dev, stream& s);

/// Local only: the watch of rank `rank`'s shard saw it go down, for `reason`.
struct peer_down_msg {
  int rank = -1;
  error reason;
};
class server final : public actor {
public:
  server(int rank, int world, kvstore_dist::mode mode, std::chrono::nanoseconds timeout, device dev)
      : rank_(rank), world_(world), mode_(mode), timeout_(timeout), dev_(std::move(dev)) {}

  behavior make_behavior() override;

  void on_exit(const error&) override;

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

  void on_init(init_msg& m);

  void on_push(push_msg& m);

  // A worker's compressed push: its codes become the floats they stand for (in the key's dtype,
  // which must hold them exactly), then as a push.
  void on_compressed_push(compressed_push_msg& m);

  // A worker's row-sparse value: checked whole on arrival (a synchronous version keeps it until
  // the others' are there), so that a bad one is refused with nothing changed.
  void on_sparse_push(sparse_push_msg& m);

  /// The kvstore's row-sparse value of `m` for this shard's key: the rows as they came for a whole
  /// key; for a part (a 1-D key here) each element of the pieces a row of its own.
  expected<kvstore::row_sparse> sparse_value(const kvstore::key& key, const key_state& st, sparse_push_msg& m,
                                             tensor rows);

  /// The elements of this shard's part (from element `offset` of the whole key) that the whole
  /// key's rows `ids` of `row_length` elements reach, in id order, as indices into the part.
  static expected<std::vector<std::int64_t>> part_elements(const kvstore::key& key, const key_state& st,
                                                           const std::vector<std::int64_t>& ids, std::int64_t offset,
                                                           std::int64_t row_length, const char* op);

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
                      response_promise<unit_t>& reply);

  /// One worker's value of `key`: an update at once (dist_async) or a slot of its version.
  void take(const kvstore::key& key, key_state& st, int rank, std::uint64_t seq, contribution value,
            response_promise<unit_t>& reply);

  // dist_sync: the next version of `key` runs once every worker's value is there, summed in rank
  // order by one kvstore push (values of one key are summed in the order given).
  void try_merge(const kvstore::key& key);

  /// One update of `key` from `values` (of one kind), summed in the order given by one request
  /// to the kvstore: dense ones by element, row-sparse ones by row id, the rule run on the union.
  request_handle<void> update(const kvstore::key& key, std::vector<contribution> values);

  void on_pull(const pull_msg& m);

  void on_sparse_pull(sparse_pull_msg& m);

  /// The rows `m` asks for, read by the kvstore into a tensor of their own: of a whole key
  /// `[ids, shape[1], ...]`, of a part its elements that the rows reach (1-D).
  void send_rows(const kvstore::key& key, const sparse_pull_msg& m, response_promise<tensor> reply);

  void serve_pulls(const kvstore::key& key);

  void send_value(const kvstore::key& key, response_promise<tensor> reply);

  void on_barrier(const barrier_msg& m);

  /// Barrier `generation`, when a rank that left never reached it: every rank waiting there is
  /// told so, and true.
  bool fail_barrier_without_left_ranks(std::uint64_t generation);

  // One watch per other rank, each monitoring that rank's shard: a down message names its rank by
  // who gets it. (The shard's handle in a down message need not equal the one looked up by name:
  // a rank that learns a shard's id from its watch before the name's resolution makes a second
  // handle for it.)
  void on_peers(peers_msg& m);

  // Another rank's shard went down: with its rank (`rank_down`) or because that rank closed its
  // store (`stopped`: the store's destructor, or the end of its actor system). Either way that
  // rank's worker pushes no more, so what waits for its pushes or its barriers fails now. A shard
  // that failed in a handler is not a rank leaving (its worker may still push) and is ignored.
  void on_peer_down(const peer_down_msg& m);

  /// dist_sync: the last version of `key` that can still complete: every version after the ones
  /// applied (and the one being applied) needs the pushes of every rank, and a rank that left
  /// pushes no more. All versions when no rank has left.
  std::uint64_t last_reachable(const key_state& st) const;

  /// Why version `version` of `key` can never complete (a rank whose push it needs has left), or
  /// nothing when it still can.
  std::optional<error> unreachable(const kvstore::key& key, const key_state& st, std::uint64_t version) const;

  /// After a rank left: the pulls of `key` parked for versions that can no longer complete fail,
  /// and the values collected for those versions are dropped.
  void give_up_unreachable(const kvstore::key& key, key_state& st);

  void on_optimizer(optimizer_msg& m);

  void on_save(const save_msg& m);

  void on_load(load_msg& m);

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

}  // namespace strata::kvstore_dist::detail
