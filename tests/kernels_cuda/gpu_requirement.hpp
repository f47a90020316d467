#pragma once

// The rule every CUDA test program follows (test_kernels_cuda, test_device_cuda,
// test_kvstore_cuda, test_lm_cuda): a GPU case runs when CUDA can use enough GPUs; otherwise it
// is skipped, unless a GPU is expected here (STRATA_REQUIRE_GPU=1, which tools/gpu-check.sh sets,
// or nvidia-smi lists a GPU), in which case the skip is a failure that prints CUDA's error. A
// program whose GPU cases were all skipped exits with 77, which ctest reports as "Skipped"
// (SKIP_RETURN_CODE), so a run without a GPU is never mistaken for a pass.
//
// The decisions are plain functions of their inputs (tested without a GPU in test_cuda_host);
// the live parts probe CUDA and nvidia-smi once per process.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <boost/test/unit_test.hpp>

namespace strata::test {

/// What cudaGetDeviceCount said: the count and, on an error, CUDA's name and text for it.
struct cuda_probe {
  int count = 0;
  std::string error;  ///< "" on cudaSuccess, else "cudaErrorInsufficientDriver (...)"
};

/// Whether this machine is expected to have a usable GPU, and why.
struct gpu_expectation {
  bool expected = false;
  std::string why;  ///< "STRATA_REQUIRE_GPU=1", "nvidia-smi lists a GPU" or ""
};

/// From STRATA_REQUIRE_GPU (`require`, null when unset) and the output of `nvidia-smi -L`: "1"
/// expects a GPU, "0" does not, unset expects one when nvidia-smi lists a line "GPU <n>: ...".
/// \throws std::invalid_argument for any other value of STRATA_REQUIRE_GPU.
inline gpu_expectation expectation_of(const char* require, const std::string& nvidia_smi_list) {
  if (require != nullptr && *require != '\0') {
    const std::string v(require);
    if (v == "1") return {true, "STRATA_REQUIRE_GPU=1"};
    if (v == "0") return {false, ""};
    throw std::invalid_argument("STRATA_REQUIRE_GPU is \"" + v + "\"; expected 1 (a GPU must be used) or 0");
  }
  std::istringstream lines(nvidia_smi_list);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("GPU ", 0) == 0) return {true, "nvidia-smi lists a GPU"};
  return {false, ""};
}

enum class gpu_verdict {
  run,   ///< CUDA has at least the GPUs the case needs
  skip,  ///< it has not, and that is expected (no GPU here, or fewer GPUs than the case needs)
  fail,  ///< a GPU is expected but CUDA cannot use any: the case must not pass as skipped
};

/// The verdict for a case that needs `needed` GPUs.
inline gpu_verdict verdict(const cuda_probe& probe, int needed, const gpu_expectation& expect) {
  const bool usable = probe.error.empty() && probe.count > 0;
  if (usable && probe.count >= needed) return gpu_verdict::run;
  if (usable || !expect.expected) return gpu_verdict::skip;
  return gpu_verdict::fail;
}

/// GPU cases seen by the preconditions of one program.
struct gpu_case_counts {
  int ran = 0;
  int skipped = 0;
  int refused = 0;  ///< skipped although a GPU is expected (verdict fail)
  int most_needed = 1;  ///< the most GPUs a case that did not run needed
};

/// The program's exit status from Boost.Test's and the cases' counts: 1 when a case was refused,
/// Boost's status when it failed, 77 when every GPU case was skipped, else 0.
inline int exit_status(int boost_status, const gpu_case_counts& n) {
  if (n.refused > 0) return 1;
  if (boost_status != 0) return boost_status;
  if (n.ran == 0 && n.skipped > 0) return 77;
  return 0;
}

/// One sentence for a case that cannot run.
inline std::string skip_reason(const cuda_probe& probe, int needed) {
  if (!probe.error.empty()) return "CUDA cannot use a GPU (cudaGetDeviceCount: " + probe.error + ")";
  return "needs " + std::to_string(needed) + " CUDA GPU(s); CUDA sees " + std::to_string(probe.count);
}

// ---- live -------------------------------------------------------------------------------------

inline const cuda_probe& cuda() {
  static const cuda_probe p = [] {
    cuda_probe r;
    const cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      r.count = 0;
      r.error = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
    }
    return r;
  }();
  return p;
}

inline std::string nvidia_smi_list() {
  std::string out;
  if (FILE* f = popen("nvidia-smi -L 2>/dev/null", "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, f) != nullptr) out += buf;
    pclose(f);
  }
  return out;
}

inline const gpu_expectation& expectation() {
  static const gpu_expectation e = expectation_of(std::getenv("STRATA_REQUIRE_GPU"), nvidia_smi_list());
  return e;
}

inline gpu_case_counts& counts() {
  static gpu_case_counts n;
  return n;
}

/// Precondition of a case (or suite) that needs `needed` GPUs; counts the verdicts for finish().
inline boost::test_tools::assertion_result gpu_precondition(int needed) {
  const auto v = verdict(cuda(), needed, expectation());
  boost::test_tools::assertion_result r(v == gpu_verdict::run);
  if (v == gpu_verdict::run) {
    ++counts().ran;
  } else {
    ++(v == gpu_verdict::fail ? counts().refused : counts().skipped);
    counts().most_needed = std::max(counts().most_needed, needed);
    r.message() << skip_reason(cuda(), needed);
  }
  return r;
}

/// Runs Boost.Test's main and turns its status and the GPU verdicts into the exit status, with
/// one line saying what was skipped and why.
inline int run_gpu_tests(const char* program, boost::unit_test::init_unit_test_func init, int argc, char* argv[]) {
  try {
    expectation();
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  }
  const int rc = boost::unit_test::unit_test_main(init, argc, argv);
  const auto& n = counts();
  if (n.refused > 0)
    std::cerr << program << ": FAILED: " << n.refused << " GPU test unit(s) could not run although a GPU is expected ("
              << expectation().why << "): " << skip_reason(cuda(), n.most_needed) << "\n";
  else if (n.skipped > 0)
    std::cout << program << ": " << n.skipped << " GPU test unit(s) skipped: " << skip_reason(cuda(), n.most_needed)
              << (n.ran == 0 && rc == 0 ? " (exit code 77)" : "") << "\n";
  return exit_status(rc, n);
}

}  // namespace strata::test
