#pragma once
// lstm_lm under mpirun: the job's rank group (one stage per rank), or nothing in one process.

#include <memory>

#include "strata/lm/ranks.hpp"

namespace lstm_lm {

/// Started by mpirun (and built with strata::net): the MPI job as an lm::rank_group whose failed
/// runs print "lstm_lm: <sentence>" (prefixed "rank R: " on the other ranks) and exit at once
/// with status 2 for bad input, else 1. Otherwise empty: one process, as without MPI.
std::shared_ptr<strata::lm::rank_group> mpi_ranks();

}  // namespace lstm_lm
