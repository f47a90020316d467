// lstm_lm under mpirun (docs/lstm_lm.md, "Under mpirun"): built with strata::lm_net when strata
// has MPI (STRATA_HAS_NET), else a program that is always one process.
#include "mpi.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "strata/lm/trainer.hpp"
#ifndef STRATA_HAS_NET
#define STRATA_HAS_NET 0
#endif
#if STRATA_HAS_NET
#include "strata/lm_net/ranks.hpp"
#endif

namespace lstm_lm {

std::shared_ptr<strata::lm::rank_group> mpi_ranks() {
#if STRATA_HAS_NET
  if (!strata::lm_net::launched()) return nullptr;
  auto rank = std::make_shared<int>(0);
  auto group = strata::lm_net::make_rank_group([rank](const std::exception& e) {
    const std::string where = *rank == 0 ? "" : "rank " + std::to_string(*rank) + ": ";
    std::fprintf(stderr, "\nlstm_lm: %s%s\n", where.c_str(), e.what());
    std::fflush(stderr);
    std::_Exit(dynamic_cast<const strata::lm::input_error*>(&e) != nullptr ? 2 : 1);
  });
  *rank = group->rank();
  return group;
#else
  return nullptr;
#endif
}

}  // namespace lstm_lm
