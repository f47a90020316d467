// lstm_lm: train a stacked-LSTM language model with strata's model-parallel pipeline, evaluate a
// checkpoint on a text, or sample from it. The training loop is strata::lm::train
// (strata/lm/trainer.hpp); this file is its command line, commands.cpp what each command runs and
// prints. Usage and flags: docs/lstm_lm.md.

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
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

// Counts in [0, limit]: zero gets its own sentence (or means "default"), more is absurd.
CLI::Validator size_limit() { return whole_number(65536); }
CLI::Validator step_count() { return whole_number(1'000'000'000); }
CLI::Validator any_u64() { return whole_number(std::numeric_limits<std::uint64_t>::max()); }

/// `lstm_lm train`: its flags fill a trainer_options; those whose presence matters (a default
/// that depends on other flags, or "given" checks) are applied after parsing by options().
class train_command {
public:
  explicit train_command(CLI::App& app)
      : command_(app.add_subcommand("train", "Train on a corpus (default: Debian's fortunes), with checkpoints, logs and a report")) {
    add_data_model_and_schedule();
    add_optimization();
    add_validation_and_outputs();
    add_ranks_threads_and_testing();
    add_dropout_held_out_and_sample();
  }

  train_command(const train_command&) = delete;  // the flags point into it
  train_command& operator=(const train_command&) = delete;

  bool parsed() const { return command_->parsed(); }

  /// The options after parsing, with the flags that were given applied.
  lm::trainer_options options() {
    t_.epochs_given = epochs_->count() > 0;
    if (lr_->count() > 0) t_.lr = lr_value_;
    if (carry_->count() > 0) t_.carry_state = carry_value_;
    if (link_latency_->count() > 0) t_.link_latency_us = link_latency_value_;
    if (link_gbps_->count() > 0) t_.link_gbps = link_gbps_value_;
    t_.chunks_given = chunks_->count() > 0;
    t_.vocab_size_given = vocab_size_->count() > 0;
    return t_;
  }

private:
  void add_data_model_and_schedule() {
    command_->add_option("--corpus", t_.corpus, "UTF-8 text file (default: /usr/share/games/fortunes, else /usr/share/common-licenses)");
    command_->add_option("--tokens", t_.tokens, "char or word")->capture_default_str();
    vocab_size_ = command_->add_option("--vocab-size", t_.vocab_size, "word tokens: keep the most frequent N-1 words and <unk>")
        ->check(whole_number(10'000'000))
        ->capture_default_str();
    command_->add_option("--devices", t_.devices, "device spec, e.g. cpu:2 (default: the CUDA GPUs if any, else cpu:2)");
    command_->add_option("--layers", t_.layers, "LSTM layers")->check(whole_number(1024))->capture_default_str();
    command_->add_option("--hidden", t_.hidden, "LSTM width")->check(size_limit())->capture_default_str();
    command_->add_option("--embed", t_.embed, "embedding width")->check(size_limit())->capture_default_str();
    command_->add_option("--batch", t_.batch, "columns of the token matrix")->check(size_limit())->capture_default_str();
    command_->add_option("--seq", t_.seq, "timesteps per step (truncated BPTT window)")->check(size_limit())->capture_default_str();
    command_->add_option("--micro-batches", t_.micro_batches, "micro-batches per step (default 1: see docs/lstm_lm.md)")
        ->check(size_limit());
    chunks_ = command_->add_option("--chunks", t_.chunks,
                                   "time chunks per micro-batch, wavefront only (default: the largest divisor of --seq up to 8)")
        ->check(size_limit());
    command_->add_option("--schedule", t_.schedule, "auto, gpipe, 1f1b or wavefront (auto: wavefront on cpu stages with cores of their own, else 1f1b)")
        ->capture_default_str();
    command_->add_option("--partition", t_.partition, "auto, even, or LSTM layer ranges per device like 0-3,4-7")->capture_default_str();
    auto* steps = command_->add_option("--steps", t_.steps, "total training steps")->check(step_count())->capture_default_str();
    epochs_ = command_->add_option("--epochs", t_.epochs, "total passes over the training text")->check(step_count());
    steps->excludes(epochs_);
  }

  void add_optimization() {
    lr_ = command_->add_option("--lr", lr_value_, "learning rate (default: 0.004 for adam and adamw, 0.1 for momentum and nesterov, 1 for sgd)");
    command_->add_option("--optimizer", t_.optimizer, "sgd, momentum, nesterov, adam or adamw (applied by the KVStore)")
        ->capture_default_str();
    command_->add_option("--precision", t_.precision,
                         "math of the matrix products on cuda stages: fp32, tf32 or bf16 (float32 weights and activations; "
                         "docs/lstm_lm.md)")
        ->capture_default_str();
    command_->add_option("--momentum", t_.momentum, "momentum and nesterov: the momentum factor")->capture_default_str();
    command_->add_option("--beta1", t_.beta1, "adam, adamw: beta1")->capture_default_str();
    command_->add_option("--beta2", t_.beta2, "adam, adamw: beta2")->capture_default_str();
    command_->add_option("--eps", t_.eps, "adam, adamw: eps")->capture_default_str();
    command_->add_option("--weight-decay", t_.weight_decay, "L2 penalty (adamw: decoupled)")->capture_default_str();
    command_->add_flag("--residual,!--no-residual", t_.residual,
                       "residual connections from the third LSTM layer on (default on; --no-residual: the plain stack)");
    command_->add_option("--lr-schedule", t_.lr_schedule, "constant, step, cosine or plateau")->capture_default_str();
    command_->add_option("--warmup-steps", t_.warmup_steps, "linear learning-rate warmup over N steps")
        ->check(step_count())
        ->capture_default_str();
    command_->add_option("--lr-decay", t_.lr_decay, "step and plateau schedules: the factor of a decay")->capture_default_str();
    command_->add_option("--lr-step-size", t_.lr_step_size, "step schedule: steps between decays")
        ->check(step_count())
        ->capture_default_str();
    command_->add_option("--patience", t_.patience, "plateau schedule: validations without improvement before a decay")
        ->check(step_count())
        ->capture_default_str();
    command_->add_option("--accumulate", t_.accumulate, "sum the gradients of N consecutive windows per update (batch x N)")
        ->check(whole_number(65536))
        ->capture_default_str();
    command_->add_option("--val-every", t_.val_every, "also validate every N steps (plateau decides at each validation)")
        ->check(step_count());
    command_->add_option("--clip", t_.clip, "global gradient-norm clip")->capture_default_str();
    command_->add_option("--seed", t_.seed, "initialisation seed")->check(any_u64())->capture_default_str();
  }

  void add_validation_and_outputs() {
    command_->add_option("--val-fraction", t_.val_fraction, "held-out tail of the corpus")->capture_default_str();
    command_->add_option("--val-tokens", t_.val_tokens, "validation predictions at most (0: the whole held-out text)")
        ->check(any_u64())
        ->capture_default_str();
    carry_ = command_->add_flag("--carry-state,!--no-carry-state", carry_value_,
                                "start each step from the LSTM state the previous window ended with (truncated BPTT; "
                                "reset every epoch; default on, off with --accumulate above 1)");
    command_->add_option("--trace", t_.trace, "record a strata trace into FILE");
    auto* checkpoint = command_->add_option("--checkpoint", t_.checkpoint,
                                            "checkpoint directory: saved every epoch and at the end; resumed from when present");
    command_->add_option("--save-every", t_.save_every, "also save the checkpoint every N steps")->check(step_count())->needs(checkpoint);
    command_->add_option("--log", t_.log, "JSON lines: one per step, per validation and a summary");
    command_->add_option("--report", t_.report, "directory for loss.svg, timeline.svg and index.html");
    command_->add_option("--crash-after-step", t_.crash_after_step, "testing: kill the process (SIGKILL) after step N")
        ->check(step_count())
        ->group("");
  }

  void add_ranks_threads_and_testing() {
    command_->add_option("--replicas", t_.replicas,
                         "under mpirun: data parallel replicas of the pipeline (ranks = stages x replicas; docs/lstm_lm.md)")
        ->check(whole_number(65536))
        ->capture_default_str();
    link_latency_ = command_->add_option("--link-latency-us", link_latency_value_,
                                         "under mpirun: one-way latency of the link between ranks, microseconds "
                                         "(strata-bench-net's link_latency_us; default: measured at the start)");
    link_gbps_ = command_->add_option("--link-gbps", link_gbps_value_,
                                      "under mpirun: bandwidth of the link between ranks, GB/s (strata-bench-net's "
                                      "link_gbps; default: measured at the start)");
    command_->add_option("--crash-rank", t_.crash_rank, "testing, under mpirun: the rank --crash-after-step kills")
        ->check(CLI::Range(0, 1'000'000))
        ->group("");
    command_->add_option("--fault-at-step", t_.fault_at_step, "testing: a device fault in the last stage during step N")
        ->check(step_count())
        ->group("");
    command_->add_option("--cpu-threads", t_.cpu_threads,
                         "threads each cpu stage device may use (default 0: every hardware thread, shared by the stages)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    command_->add_option("--retries", t_.retries, "retry a failed step up to N times (the pipeline restarts its actors first)")
        ->check(whole_number(1000))
        ->capture_default_str();
  }

  // Dropout, held-out files and the closing sample (issue 15).
  void add_dropout_held_out_and_sample() {
    command_->add_option("--dropout", t_.dropout, "dropout probability on the embedding output, between LSTM layers and on the decoder input")
        ->capture_default_str();
    command_->add_option("--valid", t_.valid, "held-out file that validates (PTB layout; the whole --corpus then trains)");
    command_->add_option("--test", t_.test, "held-out file evaluated at the end (PTB layout)");
    command_->add_option("--sample-length", t_.sample_length, "tokens sampled from the trained model at the end (0: none)")
        ->check(whole_number(1'000'000))
        ->capture_default_str();
    command_->add_option("--sample-temperature", t_.sample_temperature, "softmax temperature of that sample (0: most likely token)")
        ->capture_default_str();
  }

  CLI::App* command_;
  lm::trainer_options t_;
  CLI::Option *vocab_size_ = nullptr, *chunks_ = nullptr, *epochs_ = nullptr, *lr_ = nullptr, *carry_ = nullptr;
  CLI::Option *link_latency_ = nullptr, *link_gbps_ = nullptr;
  double lr_value_ = 0, link_latency_value_ = 0, link_gbps_value_ = 0;
  bool carry_value_ = true;
};

/// `lstm_lm eval`: a checkpoint and a text.
struct eval_command {
  explicit eval_command(CLI::App& app)
      : command(app.add_subcommand("eval", "Mean next-token cross-entropy of a text under a checkpoint (one stream, zero state)")) {
    command->add_option("--checkpoint", checkpoint, "checkpoint directory")->required();
    command->add_option("--text", text_file, "UTF-8 text file")->required();
    command->add_flag("--json", as_json, "print {\"tokens\": n, \"loss\": x}");
  }
  CLI::App* command;
  std::string checkpoint, text_file;
  bool as_json = false;
};

/// `lstm_lm generate`: a checkpoint, a prompt and how to sample.
struct generate_command {
  explicit generate_command(CLI::App& app) : command(app.add_subcommand("generate", "Sample text from a checkpoint")) {
    command->add_option("--checkpoint", checkpoint, "checkpoint directory")->required();
    command->add_option("--prompt", prompt, "text to start from")->required();
    command->add_option("--length", length, "tokens to sample")->check(whole_number(10'000'000))->capture_default_str();
    command->add_option("--temperature", temperature, "softmax temperature (0: most likely token)")->capture_default_str();
    command->add_option("--seed", seed, "sampling seed")->check(any_u64())->capture_default_str();
  }
  CLI::App* command;
  std::string checkpoint, prompt;
  std::size_t length = 200;
  double temperature = 0.8;
  std::uint64_t seed = 1;
};

/// Parses the command line: the exit status when it ends here (help, or a bad flag: exit 2).
std::optional<int> parse(CLI::App& app, int argc, char** argv) {
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
  return std::nullopt;
}

/// `lstm_lm train` with its ranks under mpirun (one stage per rank, docs/lstm_lm.md).
int train_on_ranks(lm::trainer_options t) {
  try {
    t.ranks = lstm_lm::mpi_ranks();
  } catch (const lm::input_error& e) {  // a bad STRATA_NET_* variable, before anything runs
    throw usage_error(e.what());
  }
  return lstm_lm::run_train(t);
}

/// Runs `command` and turns what it throws into a sentence and an exit status: 2 for bad input,
/// 1 for a failure.
template <class Command>
int exit_status_of(Command command) {
  try {
    return command();
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lstm_lm: train a stacked-LSTM language model on strata's model-parallel pipeline, evaluate it, sample from it"};
  app.require_subcommand(1);
  train_command train(app);
  eval_command eval(app);
  generate_command gen(app);
  if (auto status = parse(app, argc, argv)) return *status;
  // Each cpu device is a oneTBB arena and the kernels split large GEMMs into tasks inside it;
  // OpenBLAS's own threads (one per core by default) would oversubscribe the cores when two
  // stages compute at once, and its idle threads spin: wavefront steps ran 5x slower
  // (docs/kernels.md, Threading).
  strata::kernels::cpu::set_blas_threads(1);
  return exit_status_of([&] {
    if (train.parsed()) return train_on_ranks(train.options());
    if (eval.command->parsed()) return lstm_lm::run_eval(eval.checkpoint, eval.text_file, eval.as_json);
    return lstm_lm::run_generate(gen.checkpoint, gen.prompt, gen.length, gen.temperature, gen.seed);
  });
}
