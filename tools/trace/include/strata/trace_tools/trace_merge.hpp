#pragma once
/// \file
/// Joins the per-rank traces of one mpirun job (`FILE.rank<r>`, format version 2) into one trace
/// (docs/trace-tools.md, "merge"): timestamps on one clock, actors renamed `name@r<rank>` with ids
/// unique in the job, and each message sent to another rank linked to its handling there.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/trace_tools/trace_reader.hpp"

namespace strata::trace_tools {

/// What a merge did, for the line `strata-trace merge` prints.
struct merge_counts {
  std::size_t ranks = 0;
  std::size_t events = 0;
  std::uint64_t linked = 0;          ///< remote_send events matched by the receiving rank's remote_recv.
  std::uint64_t unmatched_sends = 0; ///< remote_send without a receipt (not received, or its rank not merged).
  std::uint64_t unmatched_receipts = 0;
  std::uint64_t handled_before_sent = 0;  ///< Linked messages whose receipt is earlier than the send after alignment.
  std::uint64_t unknown_events = 0;  ///< Kinds this version does not know, copied with only their time shifted.
};

/// Either the merged trace or one sentence naming the input that is wrong and why.
struct merge_result {
  trace_file trace;
  merge_counts counts;
  std::string error;  ///< Empty on success.
  bool ok() const noexcept { return error.empty(); }
};

/// Merges per-rank traces of one job (any order; at least one). Refused, with a sentence: a
/// trace without a rank (version 1, a world of one), an already merged trace, traces of
/// different jobs (job id or world size differ) and the same rank twice.
///
/// Alignment: rank r's wall clock at its trace start is `start_unix_ns + clock_offset_ns` on
/// rank 0's clock; the merged trace starts at the earliest of these and every event is shifted
/// by its rank's distance from it. Links: a `remote_send` (rank A, message m, to rank B) and the
/// `remote_recv` on B that names (A, m) get one message id, so B's enqueue and handler events
/// follow A's send; B's own `send` record of that delivery (from the proxy) is left out.
merge_result merge_traces(const std::vector<trace_file>& ranks);

/// The bytes of `t` as a trace file (docs/trace-format.md; version 2 when `t.version` is 2,
/// else version 1). `t.events` must be sorted by time.
std::string serialize_trace(const trace_file& t);

/// What `merge_trace_files` did: the merge's counts and the merged trace's header figures, or
/// one sentence.
struct merge_files_result {
  merge_counts counts;
  std::uint32_t world_size = 0;
  std::uint64_t clock_uncertainty_ns = 0;
  std::string error;  ///< Empty on success.
  bool ok() const noexcept { return error.empty(); }
};

/// Reads the per-rank trace files `files` (strictly), merges them and writes the result to `out`
/// atomically (through `out.tmp.<pid>`, after it read back under the strict reader). `out` must
/// not be one of `files`. What `strata-trace merge` and `lstm_lm train --trace` under mpirun do.
merge_files_result merge_trace_files(const std::string& out, const std::vector<std::string>& files);

/// The line `strata-trace merge` prints for `r` (and notes about clock offsets or unknown
/// kinds on further lines), without a trailing newline; `who` starts it ("strata-trace").
std::string describe_merge(const std::string& who, const std::string& out, const merge_files_result& r);

}  // namespace strata::trace_tools
