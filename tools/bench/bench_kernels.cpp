// strata-bench-kernels: the seed LM training step on one CPU with strata's kernels, side by
// side with PyTorch's (tools/bench/lm_step_torch.py, run as a subprocess) in the same run,
// plus this machine's sgemm peak through the same GEMM path. Results: docs/perf.md.
//
//   strata-bench-kernels [--steps N] [--warmup N] [--torch-threads N] [--no-torch] [--json]
//                        [--blas-core NAME] [--isa baseline,avx2,avx512,auto]
//
// --isa with several paths of the CPU kernels' vector loops (strata/kernels/isa.hpp) times them
// in the same run: one identically seeded model per path, the steps alternating between them,
// so that a noisy machine slows all paths alike; the losses must agree bitwise.

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "lm_step.hpp"
#include "torch_anchor.hpp"
#include "strata/stats.hpp"
#include "strata/kernels/costs.hpp"
#include "strata/kernels/cpu.hpp"

#ifndef STRATA_SOURCE_DIR
#define STRATA_SOURCE_DIR "."
#endif

namespace {

namespace kcpu = strata::kernels::cpu;
using strata::bench::run_torch;
using strata::bench::torch_result;
using clock_type = std::chrono::steady_clock;

using strata::median;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Resident set size in bytes (VmRSS), or 0 where /proc is missing.
std::size_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  std::size_t pages_total = 0, pages_resident = 0;
  if (!(in >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// The OpenBLAS kernel family in use ("Haswell", "SkylakeX", ...), if OpenBLAS is the BLAS.
std::string blas_core_name() {
  using corename_fn = char* (*)();
  auto fn = reinterpret_cast<corename_fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "unknown";
  const char* s = fn();
  return s != nullptr ? s : "unknown";
}

// OpenBLAS picks its kernels (AVX2 "Haswell", AVX-512 "SkylakeX"/"Cooperlake", ...) from the CPU
// or from OPENBLAS_CORETYPE, once, when it is loaded. --blas-core sets that variable and
// re-executes this program so that both strata and the PyTorch subprocess (which inherits the
// environment) use the same kernels. Returns only if no re-exec happened.
void select_blas_core(const std::string& wanted, char** argv) {
  if (wanted.empty() || std::getenv("STRATA_BENCH_BLAS_REEXEC") != nullptr) return;
  if (const char* env = std::getenv("OPENBLAS_CORETYPE"); env != nullptr && wanted == env) return;
  setenv("OPENBLAS_CORETYPE", wanted.c_str(), 1);
  setenv("STRATA_BENCH_BLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "note: could not re-execute with OPENBLAS_CORETYPE=%s (%s); using OpenBLAS's own choice.\n",
               wanted.c_str(), std::strerror(errno));
}

// Best GFLOP/s of a square sgemm through kernels::cpu::gemm (the LM step's GEMM path).
double sgemm_peak_gflops(std::size_t n, int repeats) {
  std::vector<float> a(n * n), b(n * n), c(n * n);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : a) x = u(gen);
  for (auto& x : b) x = u(gen);
  const auto tr = strata::kernels::transpose::no;
  kcpu::gemm(tr, tr, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
  double best_ms = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock_type::now();
    kcpu::gemm(tr, tr, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best_ms = std::min(best_ms, ms_since(t0));
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (best_ms * 1e6);
}

struct strata_result {
  double step_ms = 0, min_ms = 0, max_ms = 0;
  double first_loss = 0, last_loss = 0;
  std::size_t buffer_bytes = 0, rss_growth_bytes = 0, parameters = 0;
  strata::lm::lm_phase_times phases;  // medians per phase
};

// The seed step for each path in `isas`, on one identically seeded model per path; every
// warm-up and timed step runs all paths in turn (the order reversed on alternate steps).
// `losses_identical` tells whether the paths' losses agreed bitwise at every step.
std::vector<strata_result> run_strata(const strata::lm::config& cfg, int warmup, int steps,
                                      const std::vector<kcpu::cpu_isa>& isas, bool& losses_identical) {
  const std::size_t k = isas.size();
  std::vector<strata_result> r(k);
  const std::size_t rss0 = resident_bytes();
  std::vector<std::unique_ptr<strata::lm::lstm_lm>> models;
  for (std::size_t p = 0; p < k; ++p) models.push_back(std::make_unique<strata::lm::lstm_lm>(cfg));
  std::vector<std::int32_t> tokens(cfg.seq * cfg.batch), targets(cfg.seq * cfg.batch);
  // One random sequence s of seq+1 rows: tokens = s[0:seq], targets = s[1:seq+1].
  std::mt19937_64 gen(cfg.seed + 1);
  std::vector<std::int32_t> s((cfg.seq + 1) * cfg.batch);
  for (auto& x : s) x = static_cast<std::int32_t>(gen() % cfg.vocab);
  std::copy(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(tokens.size()), tokens.begin());
  std::copy(s.begin() + static_cast<std::ptrdiff_t>(cfg.batch), s.end(), targets.begin());

  losses_identical = true;
  std::vector<std::vector<double>> ms(k);
  std::vector<std::vector<strata::lm::lm_phase_times>> ph(k);
  for (int i = 0; i < warmup + steps; ++i) {
    std::vector<float> loss(k);
    for (std::size_t q = 0; q < k; ++q) {
      const std::size_t p = i % 2 == 0 ? q : k - 1 - q;
      kcpu::set_isa(isas[p]);
      const auto t0 = clock_type::now();
      loss[p] = models[p]->step(tokens.data(), targets.data());
      const double t = ms_since(t0);
      if (i == std::max(0, warmup - 1)) r[p].first_loss = loss[p];  // the last warm-up step's
      r[p].last_loss = loss[p];
      if (i < warmup) continue;
      ms[p].push_back(t);
      ph[p].push_back(models[p]->last_phase_times());
    }
    for (std::size_t p = 1; p < k; ++p) {
      if (std::memcmp(&loss[p], &loss[0], sizeof(float)) != 0) losses_identical = false;
    }
  }
  const std::size_t rss1 = resident_bytes();
  using pt = strata::lm::lm_phase_times;
  for (std::size_t p = 0; p < k; ++p) {
    r[p].step_ms = median(ms[p]);
    r[p].min_ms = *std::min_element(ms[p].begin(), ms[p].end());
    r[p].max_ms = *std::max_element(ms[p].begin(), ms[p].end());
    for (auto f : {&pt::zero_grad, &pt::embedding_forward, &pt::lstm_forward, &pt::decoder, &pt::lstm_backward,
                   &pt::embedding_backward, &pt::clip, &pt::sgd}) {
      std::vector<double> v;
      for (const auto& x : ph[p]) v.push_back(x.*f);
      r[p].phases.*f = median(v);
    }
    r[p].buffer_bytes = models[p]->buffer_bytes();
    r[p].rss_growth_bytes = (rss1 > rss0 ? rss1 - rss0 : 0) / k;
    r[p].parameters = models[p]->parameter_count();
  }
  return r;
}

nlohmann::json phases_json(const strata::lm::lm_phase_times& p) {
  return {{"zero_grad", p.zero_grad},       {"embedding_forward", p.embedding_forward},
          {"lstm_forward", p.lstm_forward}, {"decoder", p.decoder},
          {"lstm_backward", p.lstm_backward}, {"embedding_backward", p.embedding_backward},
          {"clip", p.clip},                 {"sgd", p.sgd}};
}

std::string supported_isas() {
  std::string out;
  for (const auto isa : {kcpu::cpu_isa::baseline, kcpu::cpu_isa::avx2, kcpu::cpu_isa::avx512}) {
    if (!kcpu::isa_supported(isa)) continue;
    out += out.empty() ? "" : ", ";
    out += kcpu::isa_name(isa);
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-bench-kernels: the seed LM training step on one CPU, strata's kernels and PyTorch in the same run"};
  int steps = 10;
  int warmup = 2;
  int torch_threads = 2;
  int threads = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  bool no_torch = false;
  bool json = false;
  std::size_t sgemm_size = 2048;
  std::string blas_core;
  std::vector<std::string> isa_names;
  strata::lm::config cfg;
  app.add_option("--steps", steps, "timed training steps; the median is reported")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 100000));
  app.add_option("--threads", threads, "oneTBB threads for strata's kernels (default: all cores)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--torch-threads", torch_threads, "torch.set_num_threads of the PyTorch run")->check(CLI::Range(1, 1024));
  app.add_flag("--no-torch", no_torch, "measure strata only");
  app.add_flag("--json", json, "print one JSON object on one line");
  app.add_option("--layers", cfg.layers, "LSTM layers (a reduced model skips PyTorch)")->check(CLI::Range(1, 1024));
  app.add_option("--hidden", cfg.hidden, "LSTM hidden size (a reduced model skips PyTorch)")->check(CLI::Range(1, 65536));
  app.add_option("--sgemm-size", sgemm_size, "n of the square n x n x n sgemm peak measurement")
      ->check(CLI::Range(64, 16384));
  app.add_option("--blas-core", blas_core,
                 "OpenBLAS kernels by OPENBLAS_CORETYPE name (e.g. Haswell, SkylakeX); default: the "
                 "environment's or OpenBLAS's own choice; PyTorch inherits it")
      ->check(CLI::IsMember({"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge", "Haswell",
                             "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", "Atom", "Barcelona", "Bulldozer",
                             "Piledriver", "Steamroller", "Excavator"},
                            CLI::ignore_case));
  app.add_option("--isa", isa_names,
                 "paths of the CPU kernels' vector loops to time, comma-separated (baseline, avx2, avx512, "
                 "auto = the widest this CPU has); several alternate step by step on identical models and are "
                 "compared; default: STRATA_CPU_ISA's choice, else auto")
      ->delimiter(',')
      ->check(CLI::IsMember({"baseline", "avx2", "avx512", "auto"}));
  CLI11_PARSE(app, argc, argv);

  // Resolved before the re-exec and the work, so a bad name or STRATA_CPU_ISA fails at once.
  std::vector<kcpu::cpu_isa> isas;
  try {
    if (isa_names.empty()) isas.push_back(kcpu::active_isa());
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "strata-bench-kernels: %s\n", e.what());
    return 2;
  }
  for (const std::string& name : isa_names) {
    kcpu::cpu_isa isa = kcpu::widest_isa();
    for (const auto candidate : {kcpu::cpu_isa::baseline, kcpu::cpu_isa::avx2, kcpu::cpu_isa::avx512}) {
      if (name == kcpu::isa_name(candidate)) isa = candidate;
    }
    if (!kcpu::isa_supported(isa)) {
      std::fprintf(stderr, "strata-bench-kernels: --isa %s is not supported by this CPU or build (supported: %s).\n",
                   name.c_str(), supported_isas().c_str());
      return 2;
    }
    isas.push_back(isa);
  }

  select_blas_core(blas_core, argv);
  kcpu::set_blas_threads(1);  // oneTBB parallelism inside the kernels (docs/kernels.md)
  const strata::lm::config seed_cfg;
  const bool seed_sizes = cfg.layers == seed_cfg.layers && cfg.hidden == seed_cfg.hidden;

  tbb::task_arena arena(threads);
  double peak = 0;
  std::vector<strata_result> runs;
  bool losses_identical = true;
  arena.execute([&] {
    // Measured before and after the steps, the best kept: a shared machine's noise only
    // lowers a measurement, so the best is the closest to the machine's peak.
    peak = sgemm_peak_gflops(sgemm_size, 5);
    runs = run_strata(cfg, warmup, steps, isas, losses_identical);
    peak = std::max(peak, sgemm_peak_gflops(sgemm_size, 5));
  });
  // The main figures are the last path's; the others are compared with it below.
  const strata_result& s = runs.back();
  const char* isa = kcpu::isa_name(isas.back());
  const double flops = strata::kernels::step_matmul_flops({cfg.vocab, cfg.embed, cfg.layers, cfg.hidden, cfg.seq * cfg.batch});
  const double tokens = static_cast<double>(cfg.batch * cfg.seq);
  const double step_gflops = flops / (s.step_ms * 1e6);

  torch_result t;
  if (no_torch) {
    t.why = "--no-torch";
  } else if (!seed_sizes) {
    t.why = "the PyTorch script runs the seed sizes only (layers 8, hidden 400)";
  } else {
    t = run_torch(torch_threads, warmup, steps);
    if (!t.ok) std::fprintf(stderr, "PyTorch baseline not available (%s); reporting strata's figures only.\n", t.why.c_str());
  }
  const std::string core = blas_core_name();

  if (json) {
    nlohmann::json out = {
        {"lm_step_ms", s.step_ms},
        {"tokens_per_s", tokens / (s.step_ms / 1e3)},
        {"torch_lm_step_ms", t.ok ? nlohmann::json(t.step_ms) : nlohmann::json(nullptr)},
        {"torch_tokens_per_s", t.ok ? nlohmann::json(tokens / (t.step_ms / 1e3)) : nlohmann::json(nullptr)},
        {"speedup_vs_torch", t.ok ? nlohmann::json(t.step_ms / s.step_ms) : nlohmann::json(nullptr)},
        {"sgemm_peak_gflops", peak},
        {"sgemm_size", sgemm_size},
        {"step_gflops", step_gflops},
        {"step_gflop_count", flops / 1e9},
        {"fraction_of_sgemm_peak", step_gflops / peak},
        {"peak_memory_bytes", s.buffer_bytes},
        {"rss_growth_bytes", s.rss_growth_bytes},
        {"parameters", s.parameters},
        {"lm_step_min_ms", s.min_ms},
        {"lm_step_max_ms", s.max_ms},
        {"loss_first", s.first_loss},
        {"loss_last", s.last_loss},
        {"phases_ms", phases_json(s.phases)},
        {"cpu_isa", isa},
        {"threads", threads},
        {"torch_threads", torch_threads},
        {"torch_version", t.ok ? nlohmann::json(t.version) : nlohmann::json(nullptr)},
        {"torch_note", t.ok ? nlohmann::json(nullptr) : nlohmann::json(t.why)},
        {"blas_core", core},
        {"steps", steps},
        {"warmup", warmup},
        {"config",
         {{"vocab", cfg.vocab}, {"embed", cfg.embed}, {"layers", cfg.layers}, {"hidden", cfg.hidden},
          {"batch", cfg.batch}, {"seq", cfg.seq}, {"clip", cfg.clip}, {"lr", cfg.lr}}},
    };
    if (runs.size() > 1) {
      nlohmann::json per_isa = nlohmann::json::array();
      for (std::size_t p = 0; p < runs.size(); ++p) {
        per_isa.push_back({{"cpu_isa", kcpu::isa_name(isas[p])},
                           {"lm_step_ms", runs[p].step_ms},
                           {"lm_step_min_ms", runs[p].min_ms},
                           {"lm_step_max_ms", runs[p].max_ms},
                           {"phases_ms", phases_json(runs[p].phases)}});
      }
      out["isa_runs"] = per_isa;
      out["isa_losses_identical"] = losses_identical;
    }
    std::printf("%s\n", out.dump().c_str());
    return losses_identical ? 0 : 1;
  }

  std::printf("strata-bench-kernels: LM training step (V %zu, E %zu, %zu x LSTM %zu, B %zu, T %zu), %d timed steps after %d warm-up\n",
              cfg.vocab, cfg.embed, cfg.layers, cfg.hidden, cfg.batch, cfg.seq, steps, warmup);
  std::printf("OpenBLAS kernels: %s, 1 BLAS thread + %d oneTBB threads (strata); PyTorch: %d threads\n",
              core.c_str(), threads, torch_threads);
  std::printf("CPU kernels' vector loops: %s (this CPU's widest: %s)\n\n", isa,
              kcpu::isa_name(kcpu::widest_isa()));
  const std::string tv = t.ok ? "PyTorch " + t.version : "PyTorch";
  std::printf("%-28s %14s %16s %8s\n", "", "strata", tv.c_str(), "ratio");
  auto row = [&](const char* what, double sv, double tval, const char* f, bool higher_better) {
    const std::string ts = t.ok ? fmt(f, tval) : "n/a";
    const std::string rs = t.ok ? fmt("%.2fx", higher_better ? sv / tval : tval / sv) : "n/a";
    std::printf("%-28s %14s %16s %8s\n", what, fmt(f, sv).c_str(), ts.c_str(), rs.c_str());
  };
  row("step ms (median)", s.step_ms, t.step_ms, "%.1f", false);
  row("tokens/s", tokens / (s.step_ms / 1e3), t.ok ? tokens / (t.step_ms / 1e3) : 0, "%.0f", true);
  row("GEMM GFLOP/s achieved", step_gflops, t.ok ? flops / (t.step_ms * 1e6) : 0, "%.1f", true);
  std::printf("\nstep: %.2f GFLOP in GEMMs; sgemm peak (%zu^3, same gemm path): %.1f GFLOP/s; step reaches %.0f %% of it\n",
              flops / 1e9, sgemm_size, peak, 100.0 * step_gflops / peak);
  std::printf("strata step min/median/max: %.1f / %.1f / %.1f ms; loss %.4f -> %.4f\n", s.min_ms, s.step_ms, s.max_ms,
              s.first_loss, s.last_loss);
  std::printf("memory per step: %.1f MiB of buffers (%zu parameters), RSS grew %.1f MiB\n",
              static_cast<double>(s.buffer_bytes) / (1 << 20), s.parameters,
              static_cast<double>(s.rss_growth_bytes) / (1 << 20));
  const auto& p = s.phases;
  std::printf("phases (median ms): zero_grad %.1f | embedding fwd %.1f | lstm fwd %.1f | decoder fwd+bwd %.1f | "
              "lstm bwd %.1f | embedding bwd %.1f | clip %.1f | sgd %.1f\n",
              p.zero_grad, p.embedding_forward, p.lstm_forward, p.decoder, p.lstm_backward, p.embedding_backward,
              p.clip, p.sgd);
  if (!t.ok) std::printf("PyTorch: n/a (%s)\n", t.why.c_str());
  if (runs.size() > 1) {
    std::printf("\nvector-loop paths, alternating step by step on identical models (median ms; ratio = path / %s):\n",
                isa);
    std::printf("%-22s", "");
    for (const auto x : isas) std::printf(" %10s", kcpu::isa_name(x));
    for (std::size_t i = 0; i + 1 < isas.size(); ++i) {
      std::printf(" %10s", (std::string(kcpu::isa_name(isas[i])) + "/last").c_str());
    }
    std::printf("\n");
    auto cmp = [&](const char* what, auto get) {
      std::printf("%-22s", what);
      for (const auto& r : runs) std::printf(" %10.2f", get(r));
      for (std::size_t i = 0; i + 1 < runs.size(); ++i) {
        const double last = get(runs.back());
        std::printf(" %10s", last > 0 ? fmt("%.3fx", get(runs[i]) / last).c_str() : "n/a");
      }
      std::printf("\n");
    };
    cmp("step", [](const strata_result& r) { return r.step_ms; });
    cmp("step min", [](const strata_result& r) { return r.min_ms; });
    cmp("lstm forward", [](const strata_result& r) { return r.phases.lstm_forward; });
    cmp("decoder fwd+bwd", [](const strata_result& r) { return r.phases.decoder; });
    cmp("lstm backward", [](const strata_result& r) { return r.phases.lstm_backward; });
    cmp("zero_grad", [](const strata_result& r) { return r.phases.zero_grad; });
    cmp("clip", [](const strata_result& r) { return r.phases.clip; });
    cmp("sgd", [](const strata_result& r) { return r.phases.sgd; });
    cmp("embedding fwd+bwd", [](const strata_result& r) { return r.phases.embedding_forward + r.phases.embedding_backward; });
    std::printf("losses bitwise identical across paths at every step: %s\n", losses_identical ? "yes" : "NO");
  }
  return losses_identical ? 0 : 1;
}
