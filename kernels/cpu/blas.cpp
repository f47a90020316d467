#include "strata/kernels/blas.hpp"

#include <cblas.h>

#include "common/checks.hpp"

namespace strata::kernels::cpu {

int blas_threads() noexcept { return openblas_get_num_threads(); }

void set_blas_threads(int threads) {
  common::require(threads >= 1, "set_blas_threads", "threads must be at least 1");
  openblas_set_num_threads(threads);
}

}  // namespace strata::kernels::cpu
