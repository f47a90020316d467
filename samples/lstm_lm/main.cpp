// lstm_lm: train a stacked-LSTM language model with strata's model-parallel pipeline, evaluate a
// checkpoint on a text, or sample from it. The training loop is strata::lm::train
// (strata/lm/trainer.hpp); this file is its command line and what it prints. Usage and flags:
// docs/lstm_lm.md.

#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mpi.hpp"
#include "traces.hpp"
#include "report.hpp"
#include "strata/kernels/blas.hpp"
#include "strata/lm/checkpoint.hpp"
#include "strata/lm/data.hpp"
#include "strata/lm/inference.hpp"
#include "strata/lm/trainer.hpp"

namespace {

namespace fs = std::filesystem;
namespace lm = strata::lm;
namespace pl = strata::pipeline;
using json = nlohmann::ordered_json;

/// Bad input from the user: main prints the sentence and exits with status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string hms(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  auto s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

/// A validator for unsigned flags: CLI11 2.1 reads "-1" into an unsigned option as 2^64 - 1 and
/// "99999999999999999999" as the largest value, so every count takes a whole number in [0, max].
CLI::Validator whole_number(std::uint64_t max) {
  return CLI::Validator(
      [max](std::string& s) -> std::string {
        const bool digits = !s.empty() && s.size() <= 20 &&
                            std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
        errno = 0;
        const unsigned long long v = digits ? std::strtoull(s.c_str(), nullptr, 10) : 0;
        if (!digits || errno == ERANGE || v > max)
          return "expected a whole number from 0 to " + std::to_string(max) + ", got '" + s + "'";
        return {};
      },
      "0.." + std::to_string(max));
}

/// Progress on stderr: one \r-refreshed line on a terminal, else a line every `every` steps.
class progress_line {
public:
  progress_line(std::size_t total, std::size_t first) : total_(total), first_(first), tty_(::isatty(2) != 0) {
    every_ = std::max<std::size_t>(1, (total - std::min(first, total)) / 20);
  }
  void update(std::size_t step, double loss, double tokens_per_s, double eta_s) {
    std::string text = "step " + std::to_string(step) + "/" + std::to_string(total_) + "  loss " + fmt(loss, 3) +
                       "  ppl " + fmt(std::exp(std::min(loss, 50.0)), 1) + "  " + fmt(tokens_per_s, 0) + " tok/s  eta " +
                       hms(eta_s);
    if (tty_) {
      const std::size_t width = 24, done = total_ ? step * width / total_ : width;
      std::string bar = "[" + std::string(done, '#') + std::string(width - done, '.') + "] ";
      std::cerr << '\r' << bar << text << "   " << std::flush;
      dirty_ = true;
    } else if ((step - first_) % every_ == 0 || step == total_ || step == first_ + 1) {
      std::cerr << text << '\n';
    }
  }
  /// A line of its own (e.g. validation), not overwritten by the bar.
  void note(const std::string& text) {
    if (dirty_) std::cerr << '\n';
    dirty_ = false;
    std::cerr << text << '\n';
  }
  void finish() {
    if (dirty_) std::cerr << '\n';
    dirty_ = false;
  }

private:
  std::size_t total_, first_, every_;
  bool tty_, dirty_ = false;
};

std::string ms_of(const pl::layer_cost& c) { return fmt(1e3 * (c.forward_s + c.backward_s), 2); }

/// What the run is about to do: corpus, model, devices, schedule and the plan.
void print_setup(const lm::training_setup& s, const lm::trainer_options& o) {
  const auto& cfg = s.model;
  std::cerr << "lstm_lm: corpus " << s.source << ": " << s.train_tokens << " training and " << s.validation_tokens
            << " validation " << lm::to_string(s.tokens) << " tokens, vocabulary " << cfg.vocab << "\n"
            << "lstm_lm: model " << cfg.layers << " x LSTM(" << cfg.hidden << "), embed " << cfg.embed << ", batch "
            << cfg.batch << " x seq " << cfg.seq << ", " << s.windows << " steps per epoch, " << s.devices << ", "
            << pl::to_string(s.schedule) << " with " << cfg.micro_batches << (cfg.micro_batches == 1 ? " micro-batch" : " micro-batches")
            << (cfg.chunks > 1 ? " x " + std::to_string(cfg.chunks) + " chunks" : std::string()) << "\n"
            << (s.cpu_stages
                    ? "lstm_lm: " + std::to_string(s.cpu_threads) + (s.cpu_threads == 1 ? " thread" : " threads") +
                          " per cpu device (--cpu-threads), " +
                          (s.own_cores ? "each stage on cores of its own\n" : "the stages sharing the cores\n")
                    : std::string())
            << "lstm_lm: optimizer " << lm::to_string(cfg.optimizer) << ", lr " << cfg.lr << " (" << o.lr_schedule
            << (o.warmup_steps ? " after " + std::to_string(o.warmup_steps) + " warmup steps" : std::string())
            << "), clip " << cfg.clip << ", residual connections "
            << (cfg.residual ? (cfg.layers > 2 ? "from layer 3 on" : "on (no effect below 3 layers)") : "off")
            << (cfg.dropout > 0 ? ", dropout " + fmt(cfg.dropout, 2) : std::string())
            << (cfg.precision != lm::precision::fp32
                    ? std::string(", ") + lm::to_string(cfg.precision) + " matrix products on the cuda stages"
                    : std::string())
            << (s.accumulate > 1 ? ", " + std::to_string(s.accumulate) + " windows accumulated per step" : std::string())
            << (s.carry_state ? ", LSTM state carried across steps" : ", every step from a zero LSTM state") << "\n"
            << (s.auto_schedule ? "lstm_lm: schedule chosen by --schedule auto for " + s.devices + " (docs/lstm_lm.md)\n" : std::string())
            << (s.link ? "lstm_lm: link between ranks " + fmt(s.link->latency_us, 1) + " us per message, " +
                             (std::isinf(s.link->gbps) ? std::string("free bandwidth") : fmt(s.link->gbps, 3) + " GB/s") +
                             ", " + s.link_note + "\n"
                       : std::string())
            << "lstm_lm: plan (--partition " << o.partition << ", " << s.costs_note << "):\n"
            << s.placement.to_string() << "\n";
  if (s.resumed) std::cerr << "lstm_lm: resuming from " << o.checkpoint << " at step " << s.first_step << "\n";
}

int run_train(lm::trainer_options o) {
  o.handle_signals = true;
  o.program = "lstm_lm";
  std::optional<progress_line> bar;
  lm::trainer_events ev;
  ev.on_costs_measured = [](const pl::model_costs& c, const std::string& note) {
    std::cerr << "lstm_lm: " << note << ": embedding " << ms_of(c.embedding) << " ms, lstm 0 " << ms_of(c.lstm.front()) << " ms"
              << (c.lstm.size() > 1 ? ", lstm 1-" + std::to_string(c.lstm.size() - 1) + " " + ms_of(c.lstm.back()) + " ms each"
                                    : std::string())
              << ", decoder " << ms_of(c.decoder) << " ms (forward + backward per micro-batch)\n";
  };
  std::size_t windows = 1, total_steps = 0;
  ev.on_start = [&](const lm::training_setup& s) {
    print_setup(s, o);
    windows = s.windows;
    total_steps = s.total_steps;
    bar.emplace(s.total_steps, s.first_step);
  };
  ev.on_step = [&](const lm::step_progress& p) { bar->update(p.step, p.loss, p.tokens_per_s, p.eta_s); };
  ev.on_retry = [](std::size_t step, std::size_t attempt, std::size_t retries, const std::string& error) {
    std::cerr << "\nlstm_lm: step " << step << " failed: " << error << "; retrying (" << attempt << " of " << retries << ")\n";
  };
  ev.on_validation = [&](std::size_t step, bool epoch_end, const lm::eval_result& v) {
    const std::string figures = "validation loss " + fmt(v.loss, 4) + ", perplexity " + fmt(std::exp(v.loss), 2) + " (" +
                                std::to_string(v.tokens) + " tokens)";
    if (epoch_end) {
      bar->note("epoch " + std::to_string(step / windows) + ": " + figures);
    } else if (step < total_steps) {  // --val-every
      bar->note("step " + std::to_string(step) + ": " + figures);
    } else {
      bar->finish();
      std::cerr << figures << "\n";
    }
  };
  if (o.ranks && o.ranks->rank() != 0) {  // under mpirun rank 0 prints, logs and reports
    ev = {};
    o.report.clear();
  }
  const bool ranked_trace = !o.trace.empty() && o.ranks && o.ranks->size() > 1;
  if (ranked_trace && o.ranks->rank() == 0) lstm_lm::remove_rank_traces(o.trace, o.ranks->size());
  lm::training_result r;
  try {
    r = lm::train(o, ev);
  } catch (const lm::input_error& e) {
    throw usage_error(e.what());
  }
  if (bar) bar->finish();
  if (o.ranks && o.ranks->rank() != 0) {
    // Every rank's trace is the run's: a rank that cannot write its own says so and fails.
    if (ranked_trace && !r.trace_error.empty())
      throw std::runtime_error("--trace on rank " + std::to_string(o.ranks->rank()) + ": " + r.trace_error);
    return r.interrupted ? 130 : 0;
  }
  if (r.interrupted) {
    std::cerr << "lstm_lm: interrupted after step " << r.steps
              << (o.checkpoint.empty() ? std::string(" (no --checkpoint: nothing saved)")
                                       : "; saved in " + o.checkpoint + " (the same command resumes)")
              << "\n";
    return 130;
  }
  if (r.steps_this_run > 0)
    std::cerr << "lstm_lm: " << r.steps_this_run << " steps in " << fmt(r.wall_s, 1) << " s; median step " << fmt(r.step_ms, 1)
              << " ms (ideal " << fmt(r.ideal_step_ms, 1) << " ms), bubble " << fmt(r.bubble, 3) << " (ideal "
              << fmt(r.ideal_bubble, 3) << "), " << fmt(r.tokens_per_s, 0) << " tokens/s, parameter norm " << fmt(r.param_norm, 2)
              << "\n";
  if (r.test)
    std::cerr << "lstm_lm: test loss " << fmt(r.test->loss, 4) << ", perplexity " << fmt(std::exp(r.test->loss), 2) << " ("
              << r.test->tokens << " tokens of " << o.test << ")\n";
  if (o.sample_length > 0)
    std::cerr << "lstm_lm: sample (temperature " << fmt(o.sample_temperature, 2) << ", seed " << o.seed << "; prompt from the validation text):\n"
              << r.sample_prompt << r.sample << "\n";
  if (!o.report.empty())
    std::cerr << "lstm_lm: report in " << lstm_lm::write_report(r, o.report) << "\n";
  if (!o.trace.empty()) {  // the trace is written at shutdown: its failure is the run's
    if (!r.trace_error.empty()) throw std::runtime_error("--trace: " + r.trace_error);
    if (ranked_trace) std::cerr << lstm_lm::join_rank_traces(o.trace, o.ranks->size(), std::chrono::seconds(60)) << "\n";
    else std::cerr << "lstm_lm: trace of " << r.trace_events << " events in " << o.trace << "\n";
  }
  return 0;
}

lm::checkpoint load_for_inference(const std::string& dir) {
  auto ck = lm::load_checkpoint(dir);
  if (!ck) throw usage_error(ck.error().message());
  return std::move(*ck);
}

int run_eval(const std::string& checkpoint, const std::string& text_file, bool as_json) {
  auto ck = load_for_inference(checkpoint);
  std::string text;
  try {
    text = lm::read_text_file(text_file);
  } catch (const std::exception& e) {
    throw usage_error(std::string("--text: ") + e.what());
  }
  auto ids = ck.vocab.encode(text);
  if (!ids) throw usage_error("--text '" + text_file + "': " + ids.error().message());
  if (ids->size() < 2) throw usage_error("--text '" + text_file + "' holds fewer than two tokens");
  lm::model model(ck.config, ck.parameters);
  auto r = lm::evaluate_stream(model, *ids, ck.config.seq);
  if (as_json) std::cout << json{{"tokens", r.tokens}, {"loss", r.loss}}.dump() << "\n";
  else std::cout << r.tokens << " tokens: loss " << fmt(r.loss, 4) << " nats/token, perplexity " << fmt(std::exp(r.loss), 2) << "\n";
  return 0;
}

int run_generate(const std::string& checkpoint, const std::string& prompt, std::size_t length, double temperature,
                 std::uint64_t seed) {
  if (!(temperature >= 0) || !std::isfinite(temperature)) throw usage_error("--temperature must be a number >= 0");
  auto ck = load_for_inference(checkpoint);
  auto ids = ck.vocab.encode(prompt);
  if (!ids) throw usage_error("--prompt: " + ids.error().message());
  if (ids->empty()) throw usage_error("--prompt must hold at least one token");
  lm::model model(ck.config, ck.parameters);
  auto out = lm::generate(model, *ids, length, temperature, seed, ck.vocab.unknown_id());
  std::string text = ck.vocab.decode(out);
  if (ck.tokens == lm::token_kind::words && !text.empty() && text.front() != '\n') text = " " + text;
  std::cout << prompt << text << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lstm_lm: train a stacked-LSTM language model on strata's model-parallel pipeline, evaluate it, sample from it"};
  app.require_subcommand(1);
  lm::trainer_options t;
  // Counts in [0, limit]: zero gets its own sentence below (or means "default"), more is absurd.
  const auto size_limit = whole_number(65536), step_count = whole_number(1'000'000'000);
  const auto any_u64 = whole_number(std::numeric_limits<std::uint64_t>::max());
  auto* train = app.add_subcommand("train", "Train on a corpus (default: Debian's fortunes), with checkpoints, logs and a report");
  train->add_option("--corpus", t.corpus, "UTF-8 text file (default: /usr/share/games/fortunes, else /usr/share/common-licenses)");
  train->add_option("--tokens", t.tokens, "char or word")->capture_default_str();
  auto* vocab_size = train->add_option("--vocab-size", t.vocab_size, "word tokens: keep the most frequent N-1 words and <unk>")
                         ->check(whole_number(10'000'000))
                         ->capture_default_str();
  train->add_option("--devices", t.devices, "device spec, e.g. cpu:2 (default: the CUDA GPUs if any, else cpu:2)");
  train->add_option("--layers", t.layers, "LSTM layers")->check(whole_number(1024))->capture_default_str();
  train->add_option("--hidden", t.hidden, "LSTM width")->check(size_limit)->capture_default_str();
  train->add_option("--embed", t.embed, "embedding width")->check(size_limit)->capture_default_str();
  train->add_option("--batch", t.batch, "columns of the token matrix")->check(size_limit)->capture_default_str();
  train->add_option("--seq", t.seq, "timesteps per step (truncated BPTT window)")->check(size_limit)->capture_default_str();
  train->add_option("--micro-batches", t.micro_batches, "micro-batches per step (default 1: see docs/lstm_lm.md)")
      ->check(size_limit);
  auto* chunks = train->add_option("--chunks", t.chunks,
                                   "time chunks per micro-batch, wavefront only (default: the largest divisor of --seq up to 8)")
                     ->check(size_limit);
  train->add_option("--schedule", t.schedule, "auto, gpipe, 1f1b or wavefront (auto: wavefront on cpu stages with cores of their own, else 1f1b)")
      ->capture_default_str();
  train->add_option("--partition", t.partition, "auto, even, or LSTM layer ranges per device like 0-3,4-7")->capture_default_str();
  auto* steps = train->add_option("--steps", t.steps, "total training steps")->check(step_count)->capture_default_str();
  auto* epochs = train->add_option("--epochs", t.epochs, "total passes over the training text")->check(step_count);
  steps->excludes(epochs);
  double lr_value = 0;
  auto* lr = train->add_option("--lr", lr_value, "learning rate (default: 0.004 for adam and adamw, 0.1 for momentum and nesterov, 1 for sgd)");
  train->add_option("--optimizer", t.optimizer, "sgd, momentum, nesterov, adam or adamw (applied by the KVStore)")
      ->capture_default_str();
  train->add_option("--precision", t.precision,
                    "math of the matrix products on cuda stages: fp32, tf32 or bf16 (float32 weights and activations; "
                    "docs/lstm_lm.md)")
      ->capture_default_str();
  train->add_option("--momentum", t.momentum, "momentum and nesterov: the momentum factor")->capture_default_str();
  train->add_option("--beta1", t.beta1, "adam, adamw: beta1")->capture_default_str();
  train->add_option("--beta2", t.beta2, "adam, adamw: beta2")->capture_default_str();
  train->add_option("--eps", t.eps, "adam, adamw: eps")->capture_default_str();
  train->add_option("--weight-decay", t.weight_decay, "L2 penalty (adamw: decoupled)")->capture_default_str();
  train->add_flag("--residual,!--no-residual", t.residual,
                  "residual connections from the third LSTM layer on (default on; --no-residual: the plain stack)");
  train->add_option("--lr-schedule", t.lr_schedule, "constant, step, cosine or plateau")->capture_default_str();
  train->add_option("--warmup-steps", t.warmup_steps, "linear learning-rate warmup over N steps")
      ->check(step_count)
      ->capture_default_str();
  train->add_option("--lr-decay", t.lr_decay, "step and plateau schedules: the factor of a decay")->capture_default_str();
  train->add_option("--lr-step-size", t.lr_step_size, "step schedule: steps between decays")
      ->check(step_count)
      ->capture_default_str();
  train->add_option("--patience", t.patience, "plateau schedule: validations without improvement before a decay")
      ->check(step_count)
      ->capture_default_str();
  train->add_option("--accumulate", t.accumulate, "sum the gradients of N consecutive windows per update (batch x N)")
      ->check(whole_number(65536))
      ->capture_default_str();
  train->add_option("--val-every", t.val_every, "also validate every N steps (plateau decides at each validation)")
      ->check(step_count);
  train->add_option("--clip", t.clip, "global gradient-norm clip")->capture_default_str();
  train->add_option("--seed", t.seed, "initialisation seed")->check(any_u64)->capture_default_str();
  train->add_option("--val-fraction", t.val_fraction, "held-out tail of the corpus")->capture_default_str();
  train->add_option("--val-tokens", t.val_tokens, "validation predictions at most (0: the whole held-out text)")
      ->check(any_u64)
      ->capture_default_str();
  bool carry_value = true;
  auto* carry = train->add_flag("--carry-state,!--no-carry-state", carry_value,
                                "start each step from the LSTM state the previous window ended with (truncated BPTT; "
                                "reset every epoch; default on, off with --accumulate above 1)");
  train->add_option("--trace", t.trace, "record a strata trace into FILE");
  auto* checkpoint = train->add_option("--checkpoint", t.checkpoint,
                                       "checkpoint directory: saved every epoch and at the end; resumed from when present");
  train->add_option("--save-every", t.save_every, "also save the checkpoint every N steps")->check(step_count)->needs(checkpoint);
  train->add_option("--log", t.log, "JSON lines: one per step, per validation and a summary");
  train->add_option("--report", t.report, "directory for loss.svg, timeline.svg and index.html");
  train->add_option("--crash-after-step", t.crash_after_step, "testing: kill the process (SIGKILL) after step N")
      ->check(step_count)
      ->group("");
  train->add_option("--replicas", t.replicas,
                    "under mpirun: data parallel replicas of the pipeline (ranks = stages x replicas; docs/lstm_lm.md)")
      ->check(whole_number(65536))
      ->capture_default_str();
  double link_latency_value = 0, link_gbps_value = 0;
  auto* link_latency = train->add_option("--link-latency-us", link_latency_value,
                                         "under mpirun: one-way latency of the link between ranks, microseconds "
                                         "(strata-bench-net's link_latency_us; default: measured at the start)");
  auto* link_gbps = train->add_option("--link-gbps", link_gbps_value,
                                      "under mpirun: bandwidth of the link between ranks, GB/s (strata-bench-net's "
                                      "link_gbps; default: measured at the start)");
  train->add_option("--crash-rank", t.crash_rank, "testing, under mpirun: the rank --crash-after-step kills")
      ->check(CLI::Range(0, 1'000'000))
      ->group("");
  train->add_option("--fault-at-step", t.fault_at_step, "testing: a device fault in the last stage during step N")
      ->check(step_count)
      ->group("");
  train->add_option("--cpu-threads", t.cpu_threads,
                    "threads each cpu stage device may use (default 0: every hardware thread, shared by the stages)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  train->add_option("--retries", t.retries, "retry a failed step up to N times (the pipeline restarts its actors first)")
      ->check(whole_number(1000))
      ->capture_default_str();
  // Dropout, held-out files and the closing sample (issue 15).
  train->add_option("--dropout", t.dropout, "dropout probability on the embedding output, between LSTM layers and on the decoder input")
      ->capture_default_str();
  train->add_option("--valid", t.valid, "held-out file that validates (PTB layout; the whole --corpus then trains)");
  train->add_option("--test", t.test, "held-out file evaluated at the end (PTB layout)");
  train->add_option("--sample-length", t.sample_length, "tokens sampled from the trained model at the end (0: none)")
      ->check(whole_number(1'000'000))
      ->capture_default_str();
  train->add_option("--sample-temperature", t.sample_temperature, "softmax temperature of that sample (0: most likely token)")
      ->capture_default_str();

  std::string ck_dir, text_file, prompt;
  bool as_json = false;
  std::size_t length = 200;
  double temperature = 0.8;
  std::uint64_t gen_seed = 1;
  auto* eval = app.add_subcommand("eval", "Mean next-token cross-entropy of a text under a checkpoint (one stream, zero state)");
  eval->add_option("--checkpoint", ck_dir, "checkpoint directory")->required();
  eval->add_option("--text", text_file, "UTF-8 text file")->required();
  eval->add_flag("--json", as_json, "print {\"tokens\": n, \"loss\": x}");
  auto* gen = app.add_subcommand("generate", "Sample text from a checkpoint");
  gen->add_option("--checkpoint", ck_dir, "checkpoint directory")->required();
  gen->add_option("--prompt", prompt, "text to start from")->required();
  gen->add_option("--length", length, "tokens to sample")->check(whole_number(10'000'000))->capture_default_str();
  gen->add_option("--temperature", temperature, "softmax temperature (0: most likely token)")->capture_default_str();
  gen->add_option("--seed", gen_seed, "sampling seed")->check(any_u64)->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "lstm_lm: " << e.what() << " (see --help)\n";
    return 2;
  }
  t.epochs_given = epochs->count() > 0;
  if (lr->count() > 0) t.lr = lr_value;
  if (carry->count() > 0) t.carry_state = carry_value;
  if (link_latency->count() > 0) t.link_latency_us = link_latency_value;
  if (link_gbps->count() > 0) t.link_gbps = link_gbps_value;
  t.chunks_given = chunks->count() > 0;
  t.vocab_size_given = vocab_size->count() > 0;
  // Each cpu device is a oneTBB arena and the kernels split large GEMMs into tasks inside it;
  // OpenBLAS's own threads (one per core by default) would oversubscribe the cores when two
  // stages compute at once, and its idle threads spin: wavefront steps ran 5x slower
  // (docs/kernels.md, Threading).
  strata::kernels::cpu::set_blas_threads(1);
  try {
    if (train->parsed()) {
      try {
        t.ranks = lstm_lm::mpi_ranks();  // under mpirun: one stage per rank (docs/lstm_lm.md)
      } catch (const lm::input_error& e) {  // a bad STRATA_NET_* variable, before anything runs
        throw usage_error(e.what());
      }
      return run_train(t);
    }
    if (eval->parsed()) return run_eval(ck_dir, text_file, as_json);
    return run_generate(ck_dir, prompt, length, temperature, gen_seed);
  } catch (const usage_error& e) {
    std::cerr << "lstm_lm: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "lstm_lm: not enough memory for this model and batch (smaller --hidden, --embed, --layers, --batch or "
                 "--seq need less)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "lstm_lm: " << e.what() << "\n";
    return 1;
  }
}
