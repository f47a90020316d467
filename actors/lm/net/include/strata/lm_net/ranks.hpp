#pragma once
/// \file
/// The LSTM LM's training across MPI ranks: an lm::rank_group (strata/lm/ranks.hpp) over a
/// net::endpoint, one stage per rank, the step driver on rank 0 (strata::pipeline_net).
///
/// Example, every rank of `mpirun -np 2` (the whole program: samples/lstm_lm, docs/lstm_lm.md,
/// "Under mpirun"):
/// \code
///   strata::lm::trainer_options o;
///   o.devices = "cpu:1";                                   // this rank's one device
///   if (strata::lm_net::launched()) o.ranks = strata::lm_net::make_rank_group();
///   auto r = strata::lm::train(o);                         // rank 0 logs and checkpoints
/// \endcode

#include <exception>
#include <functional>
#include <memory>

#include "strata/lm/ranks.hpp"

namespace strata::lm_net {

/// Whether a launcher started this process (the variables strata::net looks for:
/// OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE).
bool launched();

/// What a rank does when its run fails (lm::rank_group::fail): typically print the sentence and
/// `std::_Exit` with the program's status. It must not return; if it does, the process ends with
/// status 1.
using failure_handler = std::function<void(const std::exception&)>;

/// The group of this MPI job. Rank and size come from the launcher's environment at once; MPI
/// starts when train() attaches its actor system (a net::endpoint). Without a launcher: a world
/// of one. Default `on_failure`: "<what()>" on stderr and status 1.
/// \throws lm::input_error (under a launcher) for a bad `STRATA_NET_*` variable
///   (net::check_environment), so that it is refused before the run starts.
std::shared_ptr<lm::rank_group> make_rank_group(failure_handler on_failure = {});

}  // namespace strata::lm_net
