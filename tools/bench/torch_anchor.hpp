#pragma once
// The PyTorch anchor of the LM benchmarks: tools/bench/lm_step_torch.py run as a subprocess.

#include <string>

namespace strata::bench {

struct torch_result {
  bool ok = false;
  std::string why;  // when !ok
  double step_ms = 0;
  std::string version;
};

/// Runs tools/bench/lm_step_torch.py with Debian's interpreter (the seed LM step on the CPU);
/// never fails the caller: `ok` is false with `why` when PyTorch is unavailable.
torch_result run_torch(int threads, int warmup, int steps);

}  // namespace strata::bench
