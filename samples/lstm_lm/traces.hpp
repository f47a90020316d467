#pragma once
// lstm_lm train --trace FILE under mpirun: every rank records FILE.rank<r>, rank 0 joins them into
// FILE (docs/lstm_lm.md, "Under mpirun").

#include <chrono>
#include <string>

namespace lstm_lm {

/// `FILE.rank<r>` for every rank of a world of `world`: removed before a run so that a file left
/// by an earlier run is never taken for this run's.
void remove_rank_traces(const std::string& file, int world);

/// Waits (up to `wait`) until every rank's `FILE.rank<r>` is there, merges them into `file` and
/// removes them. Returns the line to print; throws std::runtime_error with one sentence (the
/// per-rank files are kept) when a rank's file does not come or the merge fails.
std::string join_rank_traces(const std::string& file, int world, std::chrono::milliseconds wait);

}  // namespace lstm_lm
