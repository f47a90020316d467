// strata-bench-lm-gpu: the LSTM LM training step on one GPU, in one run: the step PyTorch's
// nn.LSTM runs there (cuDNN's RNN API, fp32 and TF32; cudnn_lstm_step.cpp), strata's lm_pipeline
// on the whole GPU (one stage), and S stage actors sharing the GPU (cuda:GxS, 1F1B and GPipe);
// where python3 has PyTorch with CUDA, PyTorch's own step too (lm_step_torch.py, fp32 and TF32).
// Results: docs/perf.md ("GPU: 8 stage actors on one H200 vs cuDNN").
//
//   strata-bench-lm-gpu [--vocab 96 --layers 8 --hidden 400 --embed 200 --batch 20 --seq 35]
//                       [--stages 8] [--micro-batches 4] [--warmup 3] [--steps 10] [--gpu 0] [--no-torch]
//                       [--json]
// PyTorch: STRATA_PYTHON names the interpreter (default /usr/bin/python3), STRATA_SOURCE_DIR the
// source tree holding tools/bench/lm_step_torch.py when the build was carried to another machine.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cudnn_lstm_step.hpp"
#include "torch_anchor.hpp"
#include "strata/stats.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"

namespace {

using strata::pipeline::schedule_kind;

/// One row of the table: a configuration and what its timed steps measured.
struct row {
  std::string name;
  std::string kind;  // "cudnn", "torch" or "strata"
  std::string devices, schedule, math;
  std::size_t stages = 1, micro_batches = 1;
  double step_ms = 0, tokens_per_s = 0;
  double bubble = -1, ideal_step_ms = -1, ideal_bubble = -1;  // strata only (-1: not applicable)
  double loss_first = 0, grad_norm_first = 0;                  // step 1, same tokens and parameters everywhere
  double forward_ms = 0, decoder_ms = 0, backward_ms = 0, update_ms = 0;  // cuDNN phases
  std::string error;  // the configuration failed: nothing else is set
};

using strata::median;

/// Tokens and targets of step k: the same sequence in every configuration.
class token_source {
public:
  explicit token_source(const strata::lm::config& c)
      : rng_(1), id_(0, static_cast<std::int32_t>(c.vocab) - 1), tokens_(c.seq * c.batch), targets_(c.seq * c.batch) {}
  void next() {
    for (auto& t : tokens_) t = id_(rng_);
    for (auto& t : targets_) t = id_(rng_);
  }
  const std::vector<std::int32_t>& tokens() const { return tokens_; }
  const std::vector<std::int32_t>& targets() const { return targets_; }

private:
  std::mt19937 rng_;
  std::uniform_int_distribution<std::int32_t> id_;
  std::vector<std::int32_t> tokens_, targets_;
};

row run_cudnn(int gpu, const strata::lm::config& c, strata::bench::cudnn_math math, int warmup, int steps,
              std::string& memory_note) {
  const bool tf32 = math == strata::bench::cudnn_math::tf32;
  row r;
  r.name = tf32 ? "cuDNN TF32 (DEFAULT_MATH, PyTorch's default)" : "cuDNN fp32 (FMA_MATH)";
  r.kind = "cudnn";
  r.devices = "cuda:" + std::to_string(gpu);
  r.math = tf32 ? "tf32" : "fp32";
  try {
    strata::bench::cudnn_lm_step anchor(gpu, c, math);
    char note[160];
    std::snprintf(note, sizeof note, "weight space %.1f MiB, workspace %.1f MiB, reserve %.1f MiB",
                  static_cast<double>(anchor.weight_space_bytes()) / 1048576.0,
                  static_cast<double>(anchor.workspace_bytes()) / 1048576.0,
                  static_cast<double>(anchor.reserve_bytes()) / 1048576.0);
    memory_note = note;
    token_source data(c);
    std::vector<double> step, fwd, dec, bwd, upd;
    for (int s = 0; s < warmup + steps; ++s) {
      data.next();
      const auto m = anchor.step(data.tokens(), data.targets());
      if (s == 0) {
        r.loss_first = m.loss;
        r.grad_norm_first = m.grad_norm;
      }
      if (s < warmup) continue;
      step.push_back(m.step_ms);
      fwd.push_back(m.forward_ms);
      dec.push_back(m.decoder_ms);
      bwd.push_back(m.backward_ms);
      upd.push_back(m.update_ms);
    }
    r.step_ms = median(step);
    r.forward_ms = median(fwd);
    r.decoder_ms = median(dec);
    r.backward_ms = median(bwd);
    r.update_ms = median(upd);
    r.tokens_per_s = static_cast<double>(c.seq * c.batch) / (r.step_ms / 1e3);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

std::vector<std::size_t> even_layer_counts(std::size_t layers, std::size_t stages) {
  std::vector<std::size_t> counts(stages, layers / stages);
  for (std::size_t i = 0; i < layers % stages; ++i) ++counts[i];
  return counts;
}

row run_strata(strata::actor_system& sys, const std::string& spec, strata::lm::config c, schedule_kind kind,
               std::size_t stages, std::size_t micro_batches, int warmup, int steps) {
  row r;
  r.kind = "strata";
  r.devices = spec;
  r.schedule = strata::pipeline::to_string(kind);
  r.math = strata::lm::to_string(c.precision);
  r.stages = stages;
  r.micro_batches = micro_batches;
  r.name = "strata " + spec + ", " + (stages == 1 ? std::string("1 stage") : std::to_string(stages) + " stages " +
                                                                                 r.schedule + " M=" +
                                                                                 std::to_string(micro_batches)) +
           (c.precision == strata::lm::precision::fp32 ? std::string() : std::string(", ") + r.math);
  c.micro_batches = micro_batches;
  try {
    strata::lm::lm_pipeline p(sys, strata::make_devices(spec), c, kind, even_layer_counts(c.layers, stages));
    token_source data(c);
    std::vector<double> step, bubble, ideal, ideal_bubble;
    for (int s = 0; s < warmup + steps; ++s) {
      data.next();
      auto m = p.train_step(data.tokens(), data.targets(), std::chrono::seconds(60));
      if (!m) throw std::runtime_error(m.error().message());
      if (s == 0) {
        r.loss_first = m->loss;
        r.grad_norm_first = m->grad_norm;
      }
      if (s < warmup) continue;
      auto i = p.ideal(*m);
      if (!i) throw std::runtime_error(i.error().message());
      step.push_back(m->step_ms);
      bubble.push_back(m->measured_bubble());
      ideal.push_back(i->step_ms);
      ideal_bubble.push_back(i->bubble);
    }
    r.step_ms = median(step);
    r.tokens_per_s = static_cast<double>(c.seq * c.batch) / (r.step_ms / 1e3);
    r.bubble = median(bubble);
    r.ideal_step_ms = median(ideal);
    r.ideal_bubble = median(ideal_bubble);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

/// PyTorch's own step on the GPU (lm_step_torch.py as a subprocess, after the other rows have
/// released the GPU's memory): its own initial parameters and tokens, so only its time compares.
row run_torch_gpu(int gpu, const strata::lm::config& c, strata::lm::precision math, int warmup, int steps) {
  row r;
  const bool tf32 = math == strata::lm::precision::tf32, bf16 = math == strata::lm::precision::bf16;
  r.name = std::string("PyTorch nn.LSTM (cuDNN) ") + (tf32 ? "TF32" : bf16 ? "bf16 autocast" : "fp32");
  r.kind = "torch";
  r.devices = "cuda:" + std::to_string(gpu);
  r.math = strata::lm::to_string(math);
  const std::string args = "--device cuda" + std::string(tf32 ? " --tf32" : bf16 ? " --bf16" : "") + " --vocab " + std::to_string(c.vocab) +
                           " --embed " + std::to_string(c.embed) + " --layers " + std::to_string(c.layers) +
                           " --hidden " + std::to_string(c.hidden) + " --batch " + std::to_string(c.batch) +
                           " --seq " + std::to_string(c.seq);
  const std::string old = std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "";
  // The script runs on "cuda" (its device 0): show it only --gpu.
  if (gpu != 0) setenv("CUDA_VISIBLE_DEVICES", std::to_string(gpu).c_str(), 1);
  const auto t = strata::bench::run_torch(1, warmup, steps, args);
  if (gpu != 0) old.empty() ? unsetenv("CUDA_VISIBLE_DEVICES") : setenv("CUDA_VISIBLE_DEVICES", old.c_str(), 1);
  if (!t.ok) {
    r.error = t.why;
    return r;
  }
  r.name += " " + t.version;
  r.step_ms = t.step_ms;
  r.tokens_per_s = static_cast<double>(c.seq * c.batch) / (t.step_ms / 1e3);
  return r;
}

std::string ratio(const row& r, const row& anchor) {
  if (!r.error.empty() || !anchor.error.empty() || anchor.tokens_per_s <= 0) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", r.tokens_per_s / anchor.tokens_per_s);
  return b;
}

nlohmann::json to_json(const row& r, const row& fp32, const row& tf32) {
  nlohmann::json j{{"name", r.name}, {"kind", r.kind}, {"devices", r.devices}, {"math", r.math}};
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  j["step_ms"] = r.step_ms;
  j["tokens_per_s"] = r.tokens_per_s;
  j["loss_step1"] = r.loss_first;
  j["grad_norm_step1"] = r.grad_norm_first;
  if (fp32.error.empty()) j["vs_cudnn_fp32"] = r.tokens_per_s / fp32.tokens_per_s;
  if (tf32.error.empty()) j["vs_cudnn_tf32"] = r.tokens_per_s / tf32.tokens_per_s;
  if (r.kind == "torch") {
    j.erase("loss_step1");
    j.erase("grad_norm_step1");
  } else if (r.kind == "strata") {
    j["schedule"] = r.schedule;
    j["stages"] = r.stages;
    j["micro_batches"] = r.micro_batches;
    j["bubble"] = r.bubble;
    j["ideal_step_ms"] = r.ideal_step_ms;
    j["ideal_bubble"] = r.ideal_bubble;
  } else {
    j["forward_ms"] = r.forward_ms;
    j["decoder_ms"] = r.decoder_ms;
    j["backward_ms"] = r.backward_ms;
    j["update_ms"] = r.update_ms;
  }
  return j;
}

void print_table(const std::vector<row>& rows, const row& fp32, const row& tf32) {
  std::printf("| configuration | step ms | tokens/s | vs cuDNN fp32 | vs cuDNN TF32 | measured bubble | ideal step ms | loss, step 1 |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const row& r : rows) {
    if (!r.error.empty()) {
      std::printf("| %s | failed: %s | | | | | | |\n", r.name.c_str(), r.error.c_str());
      continue;
    }
    char bubble[32] = "", ideal[32] = "";
    if (r.bubble >= 0) std::snprintf(bubble, sizeof bubble, "%.1f %% (plan %.1f %%)", 100 * r.bubble, 100 * r.ideal_bubble);
    if (r.ideal_step_ms >= 0) std::snprintf(ideal, sizeof ideal, "%.2f", r.ideal_step_ms);
    char loss[32] = "(own data)";
    if (r.kind != "torch") std::snprintf(loss, sizeof loss, "%.5f", r.loss_first);
    std::printf("| %s | %.2f | %.0f | %s | %s | %s | %s | %s |\n", r.name.c_str(), r.step_ms, r.tokens_per_s,
                ratio(r, fp32).c_str(), ratio(r, tf32).c_str(), bubble, ideal, loss);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-bench-lm-gpu: the LSTM LM training step on one GPU, stage actors against cuDNN"};
  strata::lm::config c;
  c.vocab = 96;  // a character vocabulary, as lstm_lm trains by default
  std::size_t stages = 8, micro_batches = 4;
  int warmup = 3, steps = 10, gpu = 0, threads = 0;
  bool json = false, no_torch = false;
  app.add_option("--vocab", c.vocab, "vocabulary (embedding rows, decoder classes)")->check(CLI::Range(2, 1000000));
  app.add_option("--embed", c.embed, "embedding width")->check(CLI::Range(1, 8192));
  app.add_option("--layers", c.layers, "LSTM layers")->check(CLI::Range(1, 64));
  app.add_option("--hidden", c.hidden, "hidden size")->check(CLI::Range(1, 8192));
  app.add_option("--batch", c.batch, "sequences per step")->check(CLI::Range(1, 4096));
  app.add_option("--seq", c.seq, "timesteps per step")->check(CLI::Range(1, 4096));
  app.add_option("--stages", stages, "stage actors sharing the GPU (cuda:GxS), at most --layers")->check(CLI::Range(2, 64));
  app.add_option("--micro-batches", micro_batches, "micro-batches of the multi-stage runs (divides --batch)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--warmup", warmup, "untimed steps per configuration")->check(CLI::Range(0, 1000));
  app.add_option("--steps", steps, "timed steps per configuration (the median is reported)")->check(CLI::Range(1, 10000));
  app.add_option("--gpu", gpu, "CUDA device ordinal")->check(CLI::Range(0, 63));
  app.add_option("--threads", threads, "actor scheduler threads (0: one per hardware thread)")->check(CLI::Range(0, 1024));
  app.add_flag("--no-torch", no_torch, "leave out PyTorch's own step (lm_step_torch.py on the GPU)");
  app.add_flag("--json", json, "print one JSON object on one line");
  CLI11_PARSE(app, argc, argv);

  const char* self = "strata-bench-lm-gpu";
  if (c.batch % micro_batches != 0) {
    std::fprintf(stderr, "%s: --micro-batches %zu does not divide --batch %zu.\n", self, micro_batches, c.batch);
    return 2;
  }
  strata::lm::config piped = c;
  piped.micro_batches = micro_batches;
  try {
    c.validate();
    piped.validate();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", self, e.what());
    return 2;
  }
  if (stages > c.layers) {
    std::fprintf(stderr, "%s: --stages %zu needs at least as many LSTM layers (--layers %zu): every stage owns one.\n",
                 self, stages, c.layers);
    return 2;
  }
  std::string why;
  const int gpus = strata::bench::visible_gpus(why);
  if (gpus == 0) {
    std::fprintf(stderr, "%s: no CUDA GPU: %s.\n", self, why.c_str());
    return 1;
  }
  if (gpu >= gpus) {
    std::fprintf(stderr, "%s: --gpu %d names no GPU: %d visible (ordinals 0 to %d).\n", self, gpu, gpus, gpus - 1);
    return 2;
  }

  const std::string g = std::to_string(gpu);
  std::string memory_note;
  std::vector<row> rows;
  rows.push_back(run_cudnn(gpu, c, strata::bench::cudnn_math::fp32, warmup, steps, memory_note));
  rows.push_back(run_cudnn(gpu, c, strata::bench::cudnn_math::tf32, warmup, steps, memory_note));
  {
    strata::actor_system sys(strata::system_config{.worker_threads = static_cast<std::size_t>(threads)});
    rows.push_back(run_strata(sys, "cuda:" + g, c, schedule_kind::one_f_one_b, 1, 1, warmup, steps));
    const std::string shared = "cuda:" + g + "x" + std::to_string(stages);
    rows.push_back(run_strata(sys, shared, c, schedule_kind::one_f_one_b, stages, micro_batches, warmup, steps));
    rows.push_back(run_strata(sys, shared, c, schedule_kind::gpipe, stages, micro_batches, warmup, steps));
    // --precision tf32 and bf16 (docs/lstm_lm.md, "Precision on GPUs"): the 1F1B pipeline again.
    for (auto p : {strata::lm::precision::tf32, strata::lm::precision::bf16}) {
      auto cp = c;
      cp.precision = p;
      rows.push_back(run_strata(sys, shared, cp, schedule_kind::one_f_one_b, stages, micro_batches, warmup, steps));
    }
  }
  // PyTorch's rows are informative: a machine without PyTorch on CUDA reports why and still passes.
  std::vector<row> torch_rows;
  if (!no_torch)
    for (auto p : {strata::lm::precision::fp32, strata::lm::precision::tf32})
      torch_rows.push_back(run_torch_gpu(gpu, c, p, warmup, steps));
  rows.insert(rows.begin() + 2, torch_rows.begin(), torch_rows.end());
  if (!no_torch) rows.push_back(run_torch_gpu(gpu, c, strata::lm::precision::bf16, warmup, steps));
  const row& fp32 = rows[0];
  const row& tf32 = rows[1];
  const bool failed =
      std::any_of(rows.begin(), rows.end(), [](const row& r) { return !r.error.empty() && r.kind != "torch"; });
  const std::string decoder_note =
      "embedding, decoder + cross-entropy, clip_grad_norm and SGD are strata::kernels::cuda in every row "
      "(TF32 decoder in the cuDNN TF32 row), so only the LSTM and its orchestration differ";

  if (json) {
    nlohmann::json out{{"gpu", strata::bench::gpu_name(gpu)},
                       {"cudnn", strata::bench::cudnn_version()},
                       {"config",
                        {{"vocab", c.vocab}, {"embed", c.embed}, {"layers", c.layers}, {"hidden", c.hidden},
                         {"batch", c.batch}, {"seq", c.seq}, {"lr", c.lr}, {"clip", c.clip}}},
                       {"warmup", warmup},
                       {"steps", steps},
                       {"note", decoder_note},
                       {"rows", nlohmann::json::array()}};
    for (const row& r : rows) out["rows"].push_back(to_json(r, fp32, tf32));
    std::printf("%s\n", out.dump().c_str());
    return failed ? 1 : 0;
  }

  std::printf("%s: LSTM LM training step on %s (GPU %d): V=%zu E=%zu L=%zu H=%zu B=%zu T=%zu (%zu tokens), "
              "lr %.3g, clip %.3g; median of %d steps after %d warm-up\n",
              self, strata::bench::gpu_name(gpu).c_str(), gpu, c.vocab, c.embed, c.layers, c.hidden, c.batch, c.seq,
              c.seq * c.batch, c.lr, c.clip, steps, warmup);
  std::printf("anchor: cuDNN %s RNN API, the LSTM PyTorch's nn.LSTM runs on a GPU (1 stream); %s.\n\n",
              strata::bench::cudnn_version().c_str(), decoder_note.c_str());
  print_table(rows, fp32, tf32);
  for (const row* r : {&fp32, &tf32})
    if (r->error.empty())
      std::printf("\n%s phases (median ms): forward %.2f | decoder %.2f | backward %.2f | clip + SGD %.2f",
                  r->name.c_str(), r->forward_ms, r->decoder_ms, r->backward_ms, r->update_ms);
  if (!memory_note.empty()) std::printf("\ncuDNN buffers: %s", memory_note.c_str());
  std::printf("\n\n");
  // Last line: the key figures on one line (tools/gpu-check.sh puts it in its summary).
  std::string summary = "summary:";
  for (const row& r : rows) {
    char b[200];
    if (!r.error.empty())
      std::snprintf(b, sizeof b, "%s FAILED", r.name.c_str());
    else if (r.kind == "cudnn")
      std::snprintf(b, sizeof b, "cuDNN %s %.2f ms", r.math.c_str(), r.step_ms);
    else if (r.kind == "torch")
      std::snprintf(b, sizeof b, "PyTorch %s %.2f ms", r.math.c_str(), r.step_ms);
    else
      std::snprintf(b, sizeof b, "%s%s%s %.2f ms (%s)", r.stages == 1 ? "1 stage" : r.schedule.c_str(),
                    r.math == "fp32" ? "" : " ", r.math == "fp32" ? "" : r.math.c_str(), r.step_ms, ratio(r, fp32).c_str());
    summary += (&r == &rows.front() ? " " : " | ") + std::string(b);
  }
  std::printf("%s\n", summary.c_str());
  return failed ? 1 : 0;
}
