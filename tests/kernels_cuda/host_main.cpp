// The Boost.Test module of the CUDA code's host-side logic, run on every machine (no GPU needed):
// the kernels' GEMM mapping, workspace sizes, argument checks and error messages, the cuda
// backend's completion ledger and fault watch, and the GPU test programs' skip rule.
#define BOOST_TEST_MODULE strata_cuda_host
#include <boost/test/unit_test.hpp>
