// strata-bench-learning: does strata learn as PyTorch does, and how fast? strata's training loop
// (strata::lm::train, the main job's) and a PyTorch twin (tools/bench/lm_learning_torch.py, a
// subprocess) train the same LSTM language model on the same token ids from the same initial
// weights, with the same optimizer, schedule, clipping and steps, in one run; both validate the
// same way at the end. Prints both validation losses and wall times.
//
//   strata-bench-learning [--corpus FILE] [--steps N] [--layers L --hidden H ...] [--json]

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "strata/kernels/blas.hpp"
#include "strata/lm/checkpoint.hpp"
#include "strata/lm/data.hpp"
#include "strata/lm/trainer.hpp"
#include "torch_anchor.hpp"

namespace {

namespace fs = std::filesystem;
namespace lm = strata::lm;
using json = nlohmann::ordered_json;

/// One side's figures.
struct side {
  double val_loss = 0;
  std::size_t val_tokens = 0;
  double wall_s = 0;      // the training steps and the final validation
  double last_loss = 0;   // mean training loss of the last 10 steps
  std::vector<double> losses;
};

double mean_tail(const std::vector<double>& v, std::size_t n) {
  if (v.empty()) return 0;
  n = std::min(n, v.size());
  double s = 0;
  for (std::size_t i = v.size() - n; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(n);
}

/// The first step (1-based) at which the mean of the 10 training losses ending there is at most
/// `target`; 0 when none is.
std::size_t steps_to(const std::vector<double>& losses, double target) {
  for (std::size_t k = 10; k <= losses.size(); ++k) {
    double s = 0;
    for (std::size_t i = k - 10; i < k; ++i) s += losses[i];
    if (s / 10 <= target) return k;
  }
  return 0;
}

void write_file(const fs::path& p, const void* data, std::size_t bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

/// The token ids and initial weights strata's run will use, written for the PyTorch twin:
/// the corpus read, split and tokenised as strata::lm::train does.
void write_twin_data(const lm::trainer_options& o, int threads, const fs::path& dir) {
  std::string source, text = o.corpus.empty() ? lm::read_default_corpus(source) : lm::read_text_file(o.corpus);
  const auto split = lm::split_text(text, o.val_fraction);
  const auto kind = lm::parse_token_kind(o.tokens);
  const auto vocab = lm::vocabulary::build(kind, split.train, kind == lm::token_kind::words ? o.vocab_size : 0);
  const auto train = vocab.encode(split.train).value();
  const auto valid = vocab.encode(split.validation).value();
  write_file(dir / "train.i32", train.data(), train.size() * sizeof(std::int32_t));
  write_file(dir / "valid.i32", valid.data(), valid.size() * sizeof(std::int32_t));
  lm::config cfg;
  cfg.vocab = vocab.size();
  cfg.embed = o.embed;
  cfg.layers = o.layers;
  cfg.hidden = o.hidden;
  cfg.seed = o.seed;
  std::vector<lm::safetensor> init;
  for (auto& p : lm::parameter_layout(cfg)) init.push_back({p.name, p.shape, lm::initial_parameter(cfg, p.name)});
  const std::string bytes = lm::encode_safetensors(init);
  write_file(dir / "init.safetensors", bytes.data(), bytes.size());
  const json c = {{"vocab", cfg.vocab}, {"embed", o.embed}, {"hidden", o.hidden}, {"layers", o.layers}, {"batch", o.batch},
                  {"seq", o.seq}, {"steps", o.steps}, {"optimizer", o.optimizer}, {"lr", *o.lr},
                  {"momentum", o.momentum}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                  {"weight_decay", o.weight_decay}, {"clip", o.clip}, {"lr_schedule", o.lr_schedule},
                  {"warmup_steps", o.warmup_steps}, {"lr_decay", o.lr_decay}, {"lr_step_size", o.lr_step_size},
                  {"residual", o.residual}, {"carry_state", o.carry_state.value_or(true)},
                  {"val_tokens", o.val_tokens}, {"threads", threads}};
  const std::string cj = c.dump();
  write_file(dir / "config.json", cj.data(), cj.size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-bench-learning: strata's training loop and a PyTorch twin learn the same model on the same text"};
  lm::trainer_options o;
  // Small enough for a few minutes on 2 cores (docs/perf.md has the seed shape too).
  o.layers = 2;
  o.hidden = 200;
  o.embed = 100;
  o.steps = 100;
  o.val_tokens = 10000;
  o.sample_length = 0;
  o.warmup_steps = 0;  // the table in docs/perf.md: Adam at 2e-3 from the first step
  double lr = 0;
  int torch_threads = 2;
  bool no_torch = false, as_json = false;
  app.add_option("--corpus", o.corpus, "UTF-8 text (default: lstm_lm's default corpus)");
  app.add_option("--tokens", o.tokens, "char or word")->capture_default_str();
  app.add_option("--devices", o.devices, "strata's devices (default: lstm_lm's, cpu:2 without GPUs)");
  app.add_option("--layers", o.layers, "LSTM layers")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden size")->check(CLI::Range(1, 8192))->capture_default_str();
  app.add_option("--embed", o.embed, "embedding width")->check(CLI::Range(1, 8192))->capture_default_str();
  app.add_option("--batch", o.batch, "columns")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--seq", o.seq, "timesteps per step")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--steps", o.steps, "training steps of each side")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd, momentum, nesterov, adam or adamw")->capture_default_str();
  auto* lr_flag = app.add_option("--lr", lr, "learning rate (default: 0.002 for adam and adamw, 0.1 for momentum and nesterov, 1 for sgd)");
  app.add_option("--lr-schedule", o.lr_schedule, "constant, step or cosine")
      ->check(CLI::IsMember({"constant", "step", "cosine"}))
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "linear warmup steps")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--lr-step-size", o.lr_step_size, "step schedule: steps between decays")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_flag("--residual,!--no-residual", o.residual, "residual connections from the third layer on (default on)");
  bool carry = true;
  auto* carry_flag = app.add_flag("--carry-state,!--no-carry-state", carry,
                                  "carry the LSTM state across steps, both sides (default on, as lstm_lm)");
  app.add_option("--seed", o.seed, "initialisation seed")->capture_default_str();
  app.add_option("--val-tokens", o.val_tokens, "validation predictions (0: the whole held-out text)")->capture_default_str();
  app.add_option("--torch-threads", torch_threads, "threads of the PyTorch twin")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_flag("--no-torch", no_torch, "strata only");
  app.add_flag("--json", as_json, "print one JSON object on one line");
  CLI11_PARSE(app, argc, argv);
  const bool adam_kind = o.optimizer == "adam" || o.optimizer == "adamw";
  o.lr = lr_flag->count() > 0 ? lr : adam_kind ? 2e-3 : (o.optimizer == "sgd" ? 1.0 : 0.1);
  o.carry_state = carry_flag->count() > 0 ? carry : true;
  strata::kernels::cpu::set_blas_threads(1);  // as lstm_lm: the stages' arenas own the cores

  const fs::path dir = fs::temp_directory_path() / ("strata-bench-learning-" + std::to_string(::getpid()));
  side strata_side;
  std::optional<side> torch_side;
  std::string torch_why, torch_version;
  lm::training_setup setup;
  try {
    // strata first: its checks of the options come before anything is written.
    const auto r = lm::train(o);
    setup = r.setup;
    strata_side.val_loss = r.validation.loss;
    strata_side.val_tokens = r.validation.tokens;
    strata_side.wall_s = r.wall_s;
    for (const auto& p : r.losses) strata_side.losses.push_back(p.loss);
    strata_side.last_loss = mean_tail(strata_side.losses, 10);
    if (!no_torch) {
      fs::create_directories(dir);
      write_twin_data(o, torch_threads, dir);
      const auto out = strata::bench::run_python_script("lm_learning_torch.py", "--json --data '" + dir.string() + "'");
      fs::remove_all(dir);
      if (!out.ok) {
        torch_why = out.why;
      } else {
        const auto j = json::parse(out.json);
        side t;
        t.val_loss = j.at("val_loss").get<double>();
        t.val_tokens = j.at("val_tokens").get<std::size_t>();
        t.wall_s = j.at("wall_s").get<double>();
        t.losses = j.at("losses").get<std::vector<double>>();
        t.last_loss = mean_tail(t.losses, 10);
        torch_version = j.value("torch_version", "?");
        torch_side = t;
      }
    }
  } catch (const lm::input_error& e) {
    std::cerr << "strata-bench-learning: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    fs::remove_all(dir);
    std::cerr << "strata-bench-learning: " << e.what() << "\n";
    return 1;
  }

  const auto& m = setup.model;
  auto figures = [&](const side& s) {
    return json{{"val_loss", s.val_loss}, {"val_ppl", std::exp(s.val_loss)}, {"val_tokens", s.val_tokens},
                {"train_loss_last10", s.last_loss}, {"wall_s", s.wall_s},
                {"ms_per_step", 1e3 * s.wall_s / static_cast<double>(o.steps)}};
  };
  // Time to the same loss: the steps each side's 10-step mean training loss needs to reach the
  // higher of the two final means, at its own seconds per step.
  const double target = torch_side ? std::max(strata_side.last_loss, torch_side->last_loss) : 0;
  json out = {{"model", {{"layers", m.layers}, {"hidden", m.hidden}, {"embed", m.embed}, {"vocab", m.vocab},
                         {"tokens", o.tokens}, {"batch", m.batch}, {"seq", m.seq}, {"residual", m.residual}}},
              {"training", {{"steps", o.steps}, {"optimizer", o.optimizer}, {"lr", *o.lr}, {"lr_schedule", o.lr_schedule},
                            {"warmup_steps", o.warmup_steps}, {"clip", o.clip}, {"seed", o.seed}}},
              {"corpus", setup.source},
              {"strata", figures(strata_side)},
              {"strata_devices", setup.devices},
              {"torch", torch_side ? figures(*torch_side) : json(nullptr)},
              {"torch_threads", torch_threads},
              {"torch_version", torch_side ? json(torch_version) : json(nullptr)},
              {"torch_why", torch_side || no_torch ? json(nullptr) : json(torch_why)},
              {"val_loss_diff", torch_side ? json(strata_side.val_loss - torch_side->val_loss) : json(nullptr)},
              {"wall_ratio", torch_side ? json(strata_side.wall_s / torch_side->wall_s) : json(nullptr)},
              {"target_train_loss", torch_side ? json(target) : json(nullptr)},
              {"strata_steps_to_target", torch_side ? json(steps_to(strata_side.losses, target)) : json(nullptr)},
              {"torch_steps_to_target", torch_side ? json(steps_to(torch_side->losses, target)) : json(nullptr)}};
  if (as_json) {
    std::cout << out.dump() << "\n";
    return 0;
  }
  char line[256];
  std::cout << "strata-bench-learning: " << m.layers << " x LSTM(" << m.hidden << "), embed " << m.embed << ", V=" << m.vocab
            << " " << o.tokens << " tokens, batch " << m.batch << " x seq " << m.seq << (m.residual ? ", residual" : "")
            << "; " << o.steps << " steps of " << o.optimizer << " at " << *o.lr << " (" << o.lr_schedule << "), clip "
            << o.clip << "; " << setup.source << "\n";
  std::snprintf(line, sizeof line, "%-24s %10s %9s %12s %9s %9s\n", "", "val loss", "val ppl", "train loss*", "wall s",
                "ms/step");
  std::cout << line;
  auto row = [&](const std::string& name, const side& s) {
    std::snprintf(line, sizeof line, "%-24s %10.4f %9.2f %12.4f %9.1f %9.1f\n", name.c_str(), s.val_loss,
                  std::exp(s.val_loss), s.last_loss, s.wall_s, 1e3 * s.wall_s / static_cast<double>(o.steps));
    std::cout << line;
  };
  row("strata " + setup.devices, strata_side);
  if (torch_side) {
    row("pytorch " + torch_version + " " + std::to_string(torch_threads) + "t", *torch_side);
    std::snprintf(line, sizeof line,
                  "strata - pytorch: validation loss %+.4f nats; wall time x%.2f; 10-step mean training loss %.4f "
                  "reached at step %zu (strata) and %zu (pytorch)\n",
                  strata_side.val_loss - torch_side->val_loss, strata_side.wall_s / torch_side->wall_s, target,
                  steps_to(strata_side.losses, target), steps_to(torch_side->losses, target));
    std::cout << line;
  } else if (!no_torch) {
    std::cout << "pytorch: not run (" << torch_why << ")\n";
  }
  std::cout << "* mean of the last 10 steps; wall s: the steps and the final validation of " << strata_side.val_tokens
            << " tokens\n";
  return 0;
}
