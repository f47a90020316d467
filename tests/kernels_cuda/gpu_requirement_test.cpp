// The rule of the GPU test programs (gpu_requirement.hpp), on its inputs: what CUDA says, whether
// a GPU is expected (STRATA_REQUIRE_GPU, nvidia-smi), and the exit status from the verdicts.
#include "gpu_requirement.hpp"

#include <stdexcept>
#include <string>

#include <boost/test/unit_test.hpp>

namespace st = strata::test;
using st::gpu_verdict;

namespace gpu_requirement_test {

const std::string smi_one_gpu = "GPU 0: NVIDIA H200 (UUID: GPU-0a1b2c3d)\n";
const st::cuda_probe no_device{.count = 0, .error = "cudaErrorNoDevice (no CUDA-capable device is detected)"};
const st::cuda_probe old_driver{.count = 0,
                                .error = "cudaErrorInsufficientDriver (CUDA driver version is insufficient for "
                                         "CUDA runtime version)"};
const st::cuda_probe one_gpu{.count = 1, .error = ""};

BOOST_AUTO_TEST_SUITE(gpu_requirement)

BOOST_AUTO_TEST_CASE(a_gpu_is_expected_when_required_or_when_nvidia_smi_lists_one) {
  BOOST_TEST(st::expectation_of("1", "").expected);
  BOOST_TEST(st::expectation_of("1", "").why == "STRATA_REQUIRE_GPU=1");
  BOOST_TEST(!st::expectation_of("0", smi_one_gpu).expected);  // an explicit 0 wins
  BOOST_TEST(st::expectation_of(nullptr, smi_one_gpu).expected);
  BOOST_TEST(st::expectation_of("", "No devices were found\n" + smi_one_gpu).why == "nvidia-smi lists a GPU");
  BOOST_TEST(!st::expectation_of(nullptr, "").expected);                         // no nvidia-smi
  BOOST_TEST(!st::expectation_of(nullptr, "No devices were found\n").expected);  // a driver, no GPU
}

BOOST_AUTO_TEST_CASE(a_bad_strata_require_gpu_is_named) {
  try {
    st::expectation_of("yes", "");
    BOOST_ERROR("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "STRATA_REQUIRE_GPU is \"yes\"; expected 1 (a GPU must be used) or 0");
  }
}

BOOST_AUTO_TEST_CASE(without_an_expected_gpu_any_cuda_error_is_a_skip) {
  const st::gpu_expectation none{};
  BOOST_TEST((st::verdict(no_device, 1, none) == gpu_verdict::skip));
  BOOST_TEST((st::verdict(old_driver, 1, none) == gpu_verdict::skip));
  BOOST_TEST((st::verdict(one_gpu, 1, none) == gpu_verdict::run));
  BOOST_TEST((st::verdict(one_gpu, 2, none) == gpu_verdict::skip));
}

BOOST_AUTO_TEST_CASE(where_a_gpu_is_expected_a_case_that_cannot_use_one_fails) {
  const auto expected = st::expectation_of(nullptr, smi_one_gpu);
  BOOST_TEST((st::verdict(old_driver, 1, expected) == gpu_verdict::fail));
  BOOST_TEST((st::verdict(no_device, 1, expected) == gpu_verdict::fail));
  BOOST_TEST((st::verdict({.count = 0, .error = ""}, 1, expected) == gpu_verdict::fail));  // CUDA_VISIBLE_DEVICES=""
  BOOST_TEST((st::verdict(one_gpu, 1, expected) == gpu_verdict::run));
  // A working GPU, but the case needs two: a skip on a one-GPU machine, not a failure.
  BOOST_TEST((st::verdict(one_gpu, 2, expected) == gpu_verdict::skip));
}

BOOST_AUTO_TEST_CASE(the_skip_reason_carries_cudas_error) {
  BOOST_TEST(st::skip_reason(old_driver, 1) ==
             "CUDA cannot use a GPU (cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is "
             "insufficient for CUDA runtime version))");
  BOOST_TEST(st::skip_reason(one_gpu, 2) == "needs 2 CUDA GPU(s); CUDA sees 1");
}

BOOST_AUTO_TEST_CASE(a_program_whose_gpu_cases_all_skipped_exits_77_and_a_refused_case_fails_it) {
  BOOST_TEST(st::exit_status(0, {.ran = 0, .skipped = 3, .refused = 0}) == 77);
  BOOST_TEST(st::exit_status(0, {.ran = 2, .skipped = 1, .refused = 0}) == 0);  // a two-GPU case skipped
  BOOST_TEST(st::exit_status(0, {.ran = 0, .skipped = 0, .refused = 4}) == 1);  // Boost says 0: skips
  BOOST_TEST(st::exit_status(201, {.ran = 5, .skipped = 0, .refused = 0}) == 201);
  BOOST_TEST(st::exit_status(201, {.ran = 0, .skipped = 5, .refused = 0}) == 201);  // host cases failed
  BOOST_TEST(st::exit_status(0, {.ran = 0, .skipped = 0, .refused = 0}) == 0);     // no GPU cases at all
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace gpu_requirement_test
