#define BOOST_TEST_MODULE strata_actors
#include <boost/test/unit_test.hpp>

#include "strata/kernels/blas.hpp"

namespace {
/// The kernels parallelise inside each device's arena; OpenBLAS's own threads would
/// oversubscribe the cores (docs/kernels.md).
struct one_blas_thread {
  one_blas_thread() { strata::kernels::cpu::set_blas_threads(1); }
};
}  // namespace
BOOST_TEST_GLOBAL_FIXTURE(one_blas_thread);
