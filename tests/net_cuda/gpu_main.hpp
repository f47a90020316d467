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

}  // namespace strata::test
