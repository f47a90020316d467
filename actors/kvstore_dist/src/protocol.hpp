#pragma once
// The messages between a worker and the server shards of a distributed store (they cross ranks),
// and the server actor.

#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kvstore/compression.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/kvstore_dist/store.hpp"
#include "strata/net/serialize.hpp"

namespace strata::kvstore_dist::detail {

/// The name each rank publishes its server shard under.
inline constexpr const char* server_name = "strata.kvstore_dist.server";

/// A kvstore::key on the wire.
struct wire_key {
  std::int32_t is_int = 1;
  std::int64_t number = 0;
  std::string text;
};
template <class A>
void serialize(A& a, wire_key& k) {
  a(k.is_int, k.number, k.text);
}
wire_key to_wire(const kvstore::key& key);
kvstore::key from_wire(const wire_key& key);

/// Rank 0's initial value of a key (of a split key's part: a slice of rank 0's tensor, 1-D).
/// Reply: unit.
struct init_msg {
  wire_key key;
  net::tensor_slice value;
};
template <class A>
void serialize(A& a, init_msg& m) {
  a(m.key, m.value);
}

/// One worker's contribution: its `seq`-th push of the key (dist_sync versions count from 1); for
/// a split key's part, the part's slice of the worker's tensor, sent from it without a copy (1-D).
/// Reply: unit once the owner has taken it (dist_async: once the update has run).
struct push_msg {
  wire_key key;
  std::int32_t rank = 0;
  std::uint64_t seq = 0;
  net::tensor_slice value;
};
template <class A>
void serialize(A& a, push_msg& m) {
  a(m.key, m.rank, m.seq, m.value);
}

/// A push compressed on the worker (`store::set_gradient_compression`): instead of the value,
/// its packed codes (`kvstore::compress_packed`, 16 elements a word for 2bit, 32 for 1bit), the
/// threshold they stand for, the value's shape and its dtype (a 16-bit value is quantized widened
/// to float32). The owner decompresses it (into the key's dtype, which must hold the decompressed
/// values exactly) and goes on as for a `push_msg`. Reply: unit.
struct compressed_push_msg {
  wire_key key;
  std::int32_t rank = 0;
  std::uint64_t seq = 0;
  kvstore::compression_type type = kvstore::compression_type::two_bit;
  float threshold = 0.5f;
  std::vector<std::int64_t> shape;
  std::vector<std::uint32_t> codes;
  dtype value_type = dtype::float32;
};
template <class A>
void serialize(A& a, compressed_push_msg& m) {
  a(m.key, m.rank, m.seq, m.type, m.threshold, m.shape, m.codes, m.value_type);
}

/// The key's value once it has had `min_version` updates. Reply: tensor.
struct pull_msg {
  wire_key key;
  std::uint64_t min_version = 0;
};
template <class A>
void serialize(A& a, pull_msg& m) {
  a(m.key, m.min_version);
}

/// One worker's row-sparse contribution (`store::push` of a kvstore::row_sparse): the rows
/// `row_ids` of the key, stacked in `rows`. For a whole key `part_offset` is -1, `shape` the
/// value's and `rows` `[row_ids.size(), shape[1], ...]` (the caller's tensor, sent as it is). For
/// a part of a split key: the whole key's rows of `row_length` elements that reach the part, which
/// starts at element `part_offset` of the whole key, and in `rows` (1-D) each row's piece within
/// the part, in id order (no tensor when no row reaches it). `type` is the rows' dtype, checked
/// by every part, reached or not, so that all refuse alike. Reply: unit, as for a `push_msg`.
struct sparse_push_msg {
  wire_key key;
  std::int32_t rank = 0;
  std::uint64_t seq = 0;
  std::vector<std::int64_t> row_ids;
  std::vector<std::int64_t> shape;
  std::int64_t part_offset = -1;
  std::int64_t row_length = 0;
  net::tensor_slice rows;
  dtype type = dtype::float32;
};
template <class A>
void serialize(A& a, sparse_push_msg& m) {
  a(m.key, m.rank, m.seq, m.row_ids, m.shape, m.part_offset, m.row_length, m.rows, m.type);
}

/// `store::row_sparse_pull`: the rows `row_ids` of the key (of a whole key: `part_offset` -1,
/// reply `[row_ids.size(), shape[1], ...]`; of a split key's part: the pieces of those whole-key
/// rows within the part, reply 1-D, in id order) once it has had `min_version` updates.
/// Reply: tensor.
struct sparse_pull_msg {
  wire_key key;
  std::vector<std::int64_t> row_ids;
  std::int64_t part_offset = -1;
  std::int64_t row_length = 0;
  std::uint64_t min_version = 0;
};
template <class A>
void serialize(A& a, sparse_pull_msg& m) {
  a(m.key, m.row_ids, m.part_offset, m.row_length, m.min_version);
}

/// Where row `id` of a key whose rows have `row_length` elements meets the part of `size`
/// elements from element `offset` of the whole key: elements [`begin`, `end`) of the whole key,
/// empty (`begin` >= `end`) when it does not.
struct row_piece_span {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
inline row_piece_span piece_in_part(std::int64_t id, std::int64_t row_length, std::int64_t offset, std::int64_t size) {
  return {std::max(id * row_length, offset), std::min((id + 1) * row_length, offset + size)};
}

/// To rank 0's server: `rank` reached its `generation`-th barrier. Reply: unit when all have.
struct barrier_msg {
  std::int32_t rank = 0;
  std::uint64_t generation = 0;
};
template <class A>
void serialize(A& a, barrier_msg& m) {
  a(m.rank, m.generation);
}

/// Local only: the server shards of every rank, by rank (this rank's own among them). The shard
/// monitors the others', so that when a rank leaves the job or closes its store, the rounds that
/// wait on its pushes and the barriers that wait on it fail at once instead of at the timeout.
struct peers_msg {
  std::vector<actor_ref> servers;
};

/// Local only: the update rule of this rank's shard (`multi_precision` for 16-bit keys). Reply: unit.
struct optimizer_msg {
  kvstore::set_optimizer rule;
};

/// Local only: a new rate for that rule, its state kept (kvstore::set_learning_rate). Reply: unit.
struct learning_rate_msg {
  double lr = 0.0;
};

/// Local only: save this shard's keys to `path` (kvstore::save). Reply: unit.
struct save_msg {
  std::string path;
};

/// Local only: replace this shard's keys with those of the checkpoint `path`, whose keys are
/// `keys` (shape and version each). Reply: unit.
struct loaded_key {
  kvstore::key key;
  std::vector<std::int64_t> shape;
  std::uint64_t version = 0;
  dtype type = dtype::float32;
};
struct load_msg {
  std::string path;
  std::vector<loaded_key> keys;
};

/// A cpu tensor of `shape` and `type` (float32, float16 or bfloat16) on `dev` holding `values`,
/// rounded once to nearest even for a 16-bit type.
tensor rounded(const std::vector<float>& values, const std::vector<std::int64_t>& shape, dtype type, device& dev,
               const stream& s);

/// Spawns this rank's (`rank`) server shard (a kvstore actor behind it, on `device`).
actor_ref spawn_server(actor_system& system, int rank, int world, kvstore_dist::mode mode,
                       std::chrono::nanoseconds timeout, device device);

}  // namespace strata::kvstore_dist::detail
