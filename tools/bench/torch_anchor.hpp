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

/// What a PyTorch script printed last: one JSON object on one line (`ok`), or why not.
struct python_output {
  bool ok = false;
  std::string why;   // when !ok: the script's last line, or why it could not run
  std::string json;  // when ok
};

/// Runs `/usr/bin/python3 tools/bench/<script> <args>` (the interpreter and the source tree as
/// run_torch below finds them) and returns its last line when that is a JSON object and the
/// script exited with status 0. Never throws.
python_output run_python_script(const std::string& script, const std::string& args);

/// Runs tools/bench/lm_step_torch.py (the seed LM step; on the CPU unless `extra_args` say
/// otherwise, e.g. "--device cuda --vocab 96") with Debian's interpreter, or the one named by the
/// environment variable STRATA_PYTHON; the script is looked for under STRATA_SOURCE_DIR when that
/// variable is set (a build carried to another machine), else in the source tree it was built
/// from. Never fails the caller: `ok` is false with `why` when PyTorch is unavailable.
torch_result run_torch(int threads, int warmup, int steps, const std::string& extra_args = {});

}  // namespace strata::bench
