#pragma once
// The kvstore's checkpoint file: its format, reading it whole and checking it, and writing it
// atomically. Private to strata::kvstore.
//
// "STRKV002", u64 key count, then per key: u8 kind (0 int, 1 string), the key (i64, or u64 length
// + bytes), u64 version, i64 optimizer step, u64 rank, rank x i64 dims, u64 state count, u8 dtype
// (strata::dtype: 0 float32, 1 float16, 2 bfloat16), u8 master (1: a multi_precision master copy
// follows), then the value (numel floats, or numel 16-bit words for a 16-bit key), each state
// tensor as numel floats, and the master copy (numel floats); then u64 FNV-1a of everything
// before, "STRKVEND". "STRKV001" files (before 16-bit keys) lack the two u8 and are still read.
// Native byte order (little-endian on every platform strata targets).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/error.hpp"
#include "strata/kvstore/checkpoint.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore::internal {

// The format's reader and writer are public (strata/kvstore/checkpoint.hpp); the store's code
// names them from here.
using kvstore::checkpoint;
using kvstore::checkpoint_entry;
using kvstore::read_checkpoint;
using kvstore::write_checkpoint;

expected<checkpoint> read_checkpoint_file(const std::string& path);
expected<void> write_checkpoint_file(const std::string& path, const std::vector<checkpoint_entry>& entries);

// Optimizer states (`save_optimizer_states`): "STRKVOP2", u64 length + header bytes (the optimizer,
// optimizer_states.hpp), then the entries as above with no value (the state count may be 0; dtype
// and master copy as in "STRKV002"), the checksum and "STRKVEND". "STRKVOPT" files (before master
// copies: `typed` false) lack the two u8 per entry and are still read. Each entry's `arrays` holds
// the optimizer state only.
expected<checkpoint> read_optimizer_states_file(const std::string& path, std::string& header, bool& typed);
expected<void> write_optimizer_states_file(const std::string& path, const std::string& header,
                                           const std::vector<checkpoint_entry>& entries);

}  // namespace strata::kvstore::internal
