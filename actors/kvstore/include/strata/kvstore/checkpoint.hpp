#pragma once
/// \file
/// The kvstore's checkpoint file, read and written outside a store: what `kvstore::save` writes
/// and `kvstore::load` reads, for tools and for stores made of several stores (a distributed
/// store gathers its shards' files into one with these).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/error.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore {

/// One key of a checkpoint, on the host: its value and then its optimizer state (SGD momentum,
/// or Adam's two moments), as float arrays of `shape`.
struct checkpoint_entry {
  kvstore::key key = 0;
  std::uint64_t version = 0;  ///< Updates applied to the key.
  std::int64_t step = 0;      ///< Adam's step count (0 otherwise).
  std::vector<std::int64_t> shape{};
  std::vector<std::vector<float>> arrays{};  ///< value, then optimizer state
  /// The key's dtype: float32, float16 or bfloat16. A 16-bit value is held in `arrays[0]` widened
  /// to float (exactly), and the file stores its 16 bits.
  strata::dtype type = strata::dtype::float32;
  /// `set_optimizer{.multi_precision = true}`: the float32 master copy of a 16-bit value, once the
  /// optimizer has updated the key; empty otherwise.
  std::vector<float> master{};
};

/// A checkpoint read and checked whole: its keys are of one kind (`int_keys`; empty for no keys).
struct checkpoint {
  std::vector<checkpoint_entry> entries{};
  std::optional<bool> int_keys{};
};

/// Reads `path` on the calling thread and checks all of it: format, size, checksum, one key
/// kind. Fails with one sentence naming the file.
expected<checkpoint> read_checkpoint(const std::string& path);

/// Writes `entries` (in key order, as a store holds them: sort by `kvstore::key`) to `path`
/// atomically (`path`.tmp, fsync, rename), so `path` holds either the old or the new checkpoint.
/// Any store loads the file, whatever its shard count.
expected<void> write_checkpoint(const std::string& path, const std::vector<checkpoint_entry>& entries);

}  // namespace strata::kvstore
