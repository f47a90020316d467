#pragma once
// The main of the GPU programs here: Boost.Test's, with the skip rule of every CUDA test program
// (tests/kernels_cuda/gpu_requirement.hpp). Under mpirun a case needs as many GPUs as there are
// ranks only where NCCL is involved (NCCL puts one rank per GPU).

#include <cstdlib>
#include <string>

#include "gpu_requirement.hpp"

namespace strata::test {

/// The number of ranks mpirun started (1 without mpirun).
inline int launched_ranks() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (v == nullptr || *v == '\0') return 1;
  const int n = std::atoi(v);
  return n > 0 ? n : 1;
}

/// Preconditions of the cases here (`boost::unit_test::precondition(...)`).
/// A world of one on one GPU: the case runs without mpirun.
inline boost::test_tools::assertion_result one_gpu_without_mpirun(boost::unit_test::test_unit_id) {
  if (launched_ranks() > 1) {
    boost::test_tools::assertion_result r(false);
    r.message() << "the world of one runs without mpirun";
    return r;
  }
  return gpu_precondition(1);
}
/// `gpus` GPUs, under mpirun -np 2 or more.
inline boost::test_tools::assertion_result gpus_under_mpirun(int gpus) {
  if (launched_ranks() < 2) {
    boost::test_tools::assertion_result r(false);
    r.message() << "needs mpirun -np 2 or more";
    return r;
  }
  return gpu_precondition(gpus);
}
/// Ranks sharing one GPU, under mpirun.
inline boost::test_tools::assertion_result one_gpu_under_mpirun(boost::unit_test::test_unit_id) {
  return gpus_under_mpirun(1);
}
/// A GPU per rank, under mpirun.
inline boost::test_tools::assertion_result gpu_per_rank_under_mpirun(boost::unit_test::test_unit_id) {
  return gpus_under_mpirun(launched_ranks());
}
/// A GPU per rank, with or without mpirun (NCCL puts one rank per GPU).
inline boost::test_tools::assertion_result gpu_per_rank(boost::unit_test::test_unit_id) {
  return gpu_precondition(launched_ranks());
}

}  // namespace strata::test
