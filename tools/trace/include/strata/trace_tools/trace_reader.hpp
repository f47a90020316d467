#pragma once
/// \file
/// Strict reader of strata trace files (format version 1, docs/trace-format.md).
///
/// Every length in the file is checked against the bytes that remain before it is used, and
/// every allocation is bounded by the file size, so an empty, truncated or corrupt file yields
/// one sentence naming the file and what is wrong, never a crash, a hang or a huge allocation.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/trace.hpp"

namespace strata::trace_tools {

/// The newest trace format version this reader understands (it reads versions 1 and 2).
inline constexpr std::uint32_t supported_version = 2;
/// Bytes in a version-1 header (magic through type_count).
inline constexpr std::size_t header_size = 48;
/// Bytes in a version-2 header: version 1's and the job fields (rank through clock uncertainty).
inline constexpr std::size_t header_size_v2 = 80;
/// The `rank` of a merged trace (`strata-trace merge`): its events come from every rank.
inline constexpr std::uint32_t all_ranks = 0xffffffff;

/// One trace file, parsed.
struct trace_file {
  std::string name;                       ///< The path (or label) it was read from, for messages.
  std::uint32_t version = 0;
  std::uint64_t start_unix_ns = 0;        ///< Wall-clock time of the trace start.
  std::uint64_t dropped = 0;              ///< Events lost to the recording limit.
  // Version 2 (a rank of an mpirun job, or a merged trace); a version-1 trace is rank 0 of 1.
  std::uint32_t rank = 0;                 ///< `all_ranks` in a merged trace.
  std::uint32_t world_size = 1;           ///< 0: the launcher did not say.
  std::uint64_t job_id = 0;               ///< The same in every rank's trace of one job; 0: unknown.
  std::int64_t clock_offset_ns = 0;       ///< Add to start_unix_ns to get rank 0's wall clock.
  std::uint64_t clock_uncertainty_ns = 0; ///< Bound on the offset's error (0: not measured).
  bool merged() const noexcept { return rank == all_ranks; }
  std::vector<std::string> strings;       ///< String table; id = index (0 is "").
  std::vector<std::string> types;         ///< Message type names; index = type id (0 is "").
  std::vector<trace::record> events;      ///< Sorted by timestamp.

  /// The string with id `id`, or "" when out of range (the reader already rejected files that
  /// reference strings they do not contain; this guards callers that build ids themselves).
  const std::string& string_at(std::uint64_t id) const;
  /// The message type name for `id`; "?" for 0xffff (id did not fit) or unknown ids.
  std::string type_name(std::uint32_t id) const;
};

/// Either a parsed trace or one sentence saying what is wrong with the input.
struct read_result {
  trace_file trace;
  std::string error;  ///< Empty on success.
  bool ok() const noexcept { return error.empty(); }
};

/// Parses the bytes of a trace file; `name` appears in error messages.
read_result parse_trace(std::string_view bytes, const std::string& name);

/// Reads and parses the trace file at `path` (missing, unreadable, a directory, empty,
/// truncated, corrupt or of another version: an error sentence naming `path`).
read_result read_trace(const std::string& path);

/// True for the kinds whose `msg` is a message id and `type` a message type id (send, enqueue,
/// handler_begin/end, drop, unhandled, timer_fire, remote_send, remote_recv).
bool is_message_kind(std::uint8_t kind);

/// The name of an event kind ("send", ...) or "kind N" for kinds this reader does not know.
std::string kind_name(std::uint8_t kind);

/// The name of a `strata::errc` value as recorded in drop/exit events ("mailbox_full", ...).
std::string errc_name(std::uint32_t code);

}  // namespace strata::trace_tools
