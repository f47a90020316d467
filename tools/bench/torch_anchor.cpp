#include "torch_anchor.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include <nlohmann/json.hpp>

namespace strata::bench {

python_output run_python_script(const std::string& script_name, const std::string& args) {
  python_output r;
  auto env_or = [](const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr && *v != '\0' ? v : fallback);
  };
  const std::string python = env_or("STRATA_PYTHON", "/usr/bin/python3");
  const std::string script = env_or("STRATA_SOURCE_DIR", STRATA_SOURCE_DIR) + "/tools/bench/" + script_name;
  // A bare name (STRATA_PYTHON=python3) is looked up on PATH by the shell.
  if (python.find('/') != std::string::npos && access(python.c_str(), X_OK) != 0) {
    r.why = python + " is not installed";
    return r;
  }
  if (access(script.c_str(), R_OK) != 0) {
    r.why = script + " is missing";
    return r;
  }
  const std::string cmd = "'" + python + "' '" + script + "' " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    r.why = "could not start " + python;
    return r;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = pclose(p);
  // The script prints one JSON line last; anything else is an error message (e.g. no torch).
  std::string last;
  std::size_t pos = 0;
  while (pos < out.size()) {
    const std::size_t nl = out.find('\n', pos);
    const std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!line.empty()) last = line;
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  if (status == 0 && !last.empty() && last.front() == '{') {
    r.ok = true;
    r.json = last;
    return r;
  }
  r.why = last.empty() ? "the PyTorch script printed nothing" : last;
  return r;
}

// Runs tools/bench/lm_step_torch.py; never fails the benchmark.
torch_result run_torch(int threads, int warmup, int steps, const std::string& extra_args) {
  torch_result r;
  const auto out = run_python_script("lm_step_torch.py", "--json --threads " + std::to_string(threads) + " --steps " +
                                                             std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                                                             (extra_args.empty() ? "" : " " + extra_args));
  if (!out.ok) {
    r.why = out.why;
    return r;
  }
  try {
    const auto j = nlohmann::json::parse(out.json);
    r.step_ms = j.at("lm_step_ms").get<double>();
    r.version = j.value("torch_version", "?");
    r.ok = true;
  } catch (const std::exception&) {
    r.why = out.json;
  }
  return r;
}

}  // namespace strata::bench
