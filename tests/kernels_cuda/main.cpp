// The Boost.Test module of strata::kernels::cuda; the suites live in the *_test.cpp files.
#define BOOST_TEST_MODULE strata_kernels_cuda
#include <boost/test/unit_test.hpp>

#include "strata/kernels/blas.hpp"

namespace {

// The CPU reference kernels in the configuration docs/kernels.md recommends.
struct blas_single_threaded {
  blas_single_threaded() { strata::kernels::cpu::set_blas_threads(1); }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(blas_single_threaded);
