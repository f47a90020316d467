// The Boost.Test module of strata::kernels::cuda; the suites live in the *_test.cpp files. Every
// case needs a GPU: without one they are skipped and the program exits with 77 (ctest "Skipped");
// where a GPU is expected, a skipped case fails the run (gpu_requirement.hpp).
#define BOOST_TEST_MODULE strata_kernels_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "gpu_requirement.hpp"
#include "strata/kernels/blas.hpp"

namespace {

// The CPU reference kernels in the configuration docs/kernels.md recommends.
struct blas_single_threaded {
  blas_single_threaded() { strata::kernels::cpu::set_blas_threads(1); }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(blas_single_threaded);

int main(int argc, char* argv[]) {
  return strata::test::run_gpu_tests("test_kernels_cuda", &init_unit_test, argc, argv);
}
