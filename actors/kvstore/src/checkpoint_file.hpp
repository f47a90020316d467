#pragma once
// The kvstore's checkpoint file: its format, reading it whole and checking it, and writing it
// atomically. Private to strata::kvstore.
//
// "STRKV001", u64 key count, then per key: u8 kind (0 int, 1 string), the key (i64, or u64 length
// + bytes), u64 version, i64 optimizer step, u64 rank, rank x i64 dims, u64 state count, then the
// value and each state tensor as numel floats; then u64 FNV-1a of everything before, "STRKVEND".
// Native byte order (little-endian on every platform strata targets).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/error.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore::internal {

/// One key of a checkpoint, on the host.
struct checkpoint_entry {
  kvstore::key key = 0;
  std::uint64_t version = 0;
  std::int64_t step = 0;
  std::vector<std::int64_t> shape;
  std::vector<std::vector<float>> arrays;  // value, then optimizer state
};

/// A checkpoint read and checked whole: its keys are of one kind (`int_keys`, empty for no keys).
struct checkpoint {
  std::vector<checkpoint_entry> entries;
  std::optional<bool> int_keys;
};

/// Reads `path` on the calling thread (a checkpoint load is a program edge) and checks all of it:
/// format, size, checksum, one key kind. Fails with one sentence naming the file.
expected<checkpoint> read_checkpoint(const std::string& path);

/// Writes a checkpoint of `entries` (in key order, as a store holds them) to `path`, atomically
/// (`path`.tmp, fsync, rename), so `path` holds either the old or the new checkpoint.
expected<void> write_checkpoint(const std::string& path, const std::vector<checkpoint_entry>& entries);

}  // namespace strata::kvstore::internal
