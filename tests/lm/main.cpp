#define BOOST_TEST_MODULE strata_lm
#include <boost/test/unit_test.hpp>

#include "strata/kernels/blas.hpp"

// As lstm_lm does: oneTBB parallelism inside the device arenas, single-threaded OpenBLAS
// (docs/kernels.md). Otherwise two cpu stages computing at once oversubscribe the cores.
struct single_threaded_blas {
  single_threaded_blas() { strata::kernels::cpu::set_blas_threads(1); }
};
BOOST_TEST_GLOBAL_FIXTURE(single_threaded_blas);
