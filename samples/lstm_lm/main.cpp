// lstm_lm: train a stacked-LSTM language model with strata's model-parallel pipeline, evaluate a
// checkpoint on a text, or sample from it. The training loop is strata::lm::train
// (strata/lm/trainer.hpp); this file is its command line, commands.cpp what each command runs and
// prints. Usage and flags: docs/lstm_lm.md.

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "mpi.hpp"
#include "strata/kernels/blas.hpp"
#include "strata/lm/trainer.hpp"

namespace {

namespace lm = strata::lm;
using lstm_lm::usage_error;

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
      return lstm_lm::run_train(t);
    }
    if (eval->parsed()) return lstm_lm::run_eval(ck_dir, text_file, as_json);
    return lstm_lm::run_generate(ck_dir, prompt, length, temperature, gen_seed);
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
