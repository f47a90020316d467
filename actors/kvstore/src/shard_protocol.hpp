#pragma once
// Messages from a sharded store's router to its shards (keys are the router's chunk numbers).
// Replies: unit once the work is done. Private to strata::kvstore.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "checkpoint_file.hpp"
#include "merge.hpp"
#include "optimizer_states.hpp"
#include "sparse_rows.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore::internal {

/// New chunk keys: `values[i]` holds `lengths[i]` elements of `labels[i]`, the caller's key
/// (named in error texts and passed to user updaters).
struct shard_init {
  std::vector<kvstore::key> keys;
  std::vector<slice_ref> values;
  std::vector<std::int64_t> lengths;
  std::vector<kvstore::key> labels;
};
/// A push, a pull or both (a pushpull), for the caller `origin` (its actor id, for ordering).
/// Reply: `std::vector<std::uint64_t>`, for each pushed key the version its value belongs to.
/// The pull waits until each key has had `pull_versions[i]` updates when given (a router's later
/// step of a pushpull), else `min_version`, or, for a synchronous pushpull, the versions its push
/// contributes to.
struct shard_request {
  std::vector<kvstore::key> push_keys;
  std::vector<slice_ref> values;
  std::vector<kvstore::key> pull_keys;
  std::vector<slice_ref> outs;
  std::vector<std::uint64_t> pull_versions;
  std::uint64_t min_version = 0;
  int priority = 0;
  std::uint64_t origin = 0;
};

/// A row-sparse push or row_sparse_pull of chunk keys for the caller `origin` (one of the two:
/// the router sends them apart). `values[i]`: the pieces of one pushed row-sparse value that lie
/// in chunk key `push_keys[i]`; every chunk of a pushed key is named, with no pieces when no row
/// reaches it, so that each chunk counts the push (versions, Adam's step, synchronous rounds)
/// as one store counts it for the key. `outs[i]`: the pieces of pulled rows in chunk key
/// `pull_keys[i]`, written into the caller's output. The pull waits until each key has had
/// `min_version` updates. Reply as `shard_request`.
struct shard_row_sparse {
  std::vector<kvstore::key> push_keys;
  std::vector<row_pieces> values;
  std::vector<kvstore::key> pull_keys;
  std::vector<row_pieces> outs;
  std::uint64_t min_version = 0;
  int priority = 0;
  std::uint64_t origin = 0;
};

/// A snapshot of every chunk key (value, version, optimizer state), taken after the work queued
/// before it (a barrier). Reply: `std::vector<checkpoint_entry>`.
struct shard_save {};
/// What a store loads as `key` (the caller's key `label`): elements [offset, offset + numel(shape))
/// of each array of entry `entry` of a checkpoint.
struct checkpoint_piece {
  kvstore::key key = 0;
  kvstore::key label = 0;
  std::size_t entry = 0;
  std::size_t offset = 0;
  std::vector<std::int64_t> shape;
};
/// Stages a shard's part of a checkpoint (a barrier); its keys change only with `shard_commit`.
struct shard_load {
  std::shared_ptr<const std::vector<checkpoint_entry>> file;
  std::vector<checkpoint_piece> pieces;
};
/// Swaps the staged keys in (`keep`) or drops them. No reply.
struct shard_commit {
  bool keep = false;
};
/// Installs an optimizer and the shard's part of an optimizer states file (`pieces` as for a
/// load; each entry's arrays are states only). A barrier.
struct shard_load_optimizer_states {
  optimizer_setting setting;
  std::shared_ptr<const std::vector<checkpoint_entry>> file;
  std::vector<checkpoint_piece> pieces;
};

}  // namespace strata::kvstore::internal
