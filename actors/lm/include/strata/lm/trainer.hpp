#pragma once
/// \file
/// The LSTM language model's training loop: reads a corpus, places the layers on devices, runs
/// the pipeline step by step with validation, checkpoints (and resume from them), retries of
/// failed steps, a JSON-lines log and a clean stop on SIGINT/SIGTERM. `lstm_lm train` is a
/// command line around it; docs/lstm_lm.md describes the run.
///
/// Example:
/// \code
///   strata::lm::trainer_options o;
///   o.corpus = "tiny.txt";
///   o.devices = "cpu:2";
///   o.layers = 2, o.hidden = 16, o.embed = 8, o.steps = 10;
///   o.checkpoint = "ckpt";                 // resumed from when it already holds a checkpoint
///   strata::lm::trainer_events events;
///   events.on_step = [](const strata::lm::step_progress& p) { std::cout << p.loss << '\n'; };
///   auto r = strata::lm::train(o, events); // throws input_error for bad options or files
///   std::cout << r.validation.loss << '\n';
/// \endcode

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/lm/config.hpp"
#include "strata/lm/data.hpp"
#include "strata/lm/inference.hpp"
#include "strata/lm/ranks.hpp"
#include "strata/pipeline/partitioner.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/simulator.hpp"

namespace strata::lm {

/// Bad input to train(): an option, the corpus, an output path or a checkpoint that does not fit.
/// what() is one sentence naming the input (a command line exits with status 2).
struct input_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Everything a training run is told. Option names follow `lstm_lm train`'s flags.
struct trainer_options {
  std::string corpus;              ///< UTF-8 text; empty: read_default_corpus()
  std::string tokens = "char";     ///< char or word
  std::size_t vocab_size = 10000;  ///< word tokens: the most frequent vocab_size - 1 words and <unk>
  bool vocab_size_given = false;   ///< true when vocab_size was asked for (char tokens reject it)
  std::string devices;             ///< device spec; empty: the CUDA GPUs if any, else cpu:2
  std::size_t layers = 8, hidden = 400, embed = 200, batch = 20, seq = 35;
  std::size_t micro_batches = 0;   ///< 0: one (see docs/lstm_lm.md)
  std::size_t chunks = 0;          ///< wavefront time chunks; used when chunks_given
  bool chunks_given = false;       ///< false: the largest divisor of seq up to 8 for wavefront, else 1
  std::string schedule = "auto";   ///< auto, gpipe, 1f1b or wavefront
  std::string partition = "even";  ///< auto (measured), even, or ranges like 0-3,4-7
  std::size_t steps = 900;         ///< total steps, unless epochs_given (docs/lstm_lm.md: why 900)
  std::size_t epochs = 0;          ///< total passes over the training text, when epochs_given
  bool epochs_given = false;
  /// Learning rate (a schedule's base rate); unset: 4e-3 for adam and adamw, 0.1 for momentum
  /// and nesterov, 1 for sgd.
  std::optional<double> lr;
  double clip = 5.0;
  /// The update rule the KVStore applies: sgd, momentum, nesterov, adam or adamw (docs/lstm_lm.md
  /// explains the default).
  std::string optimizer = "adam";
  /// Matrix-product math on cuda stages: fp32, tf32 or bf16 (docs/lstm_lm.md, "Precision on
  /// GPUs"); tf32 and bf16 need a cuda device among --devices.
  std::string precision = "fp32";
  double momentum = 0.9;           ///< momentum, nesterov
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  ///< adam, adamw
  double weight_decay = 0.0;
  /// Residual connections from the third layer on (lm::config::residual).
  bool residual = true;
  /// Dropout probability in training, in [0, 1) (lm::config::dropout: embedding output, between
  /// LSTM layers, decoder input).
  double dropout = 0.0;
  /// Learning-rate schedule: constant, step (times lr_decay every lr_step_size steps), cosine
  /// (to 0 at the last step) or plateau (times lr_decay when a validation has not improved on the
  /// best for more than `patience` validations); each after a linear warmup of warmup_steps.
  std::string lr_schedule = "cosine";  ///< docs/lstm_lm.md, "The default run": why cosine
  std::size_t warmup_steps = 20;   ///< docs/lstm_lm.md: why 20 with Adam at 4e-3
  double lr_decay = 0.5;           ///< step, plateau: the factor, in (0, 1)
  std::size_t lr_step_size = 150;  ///< step: steps between decays
  std::size_t patience = 0;        ///< plateau: validations without improvement tolerated
  std::size_t val_every = 0;       ///< also validate every N steps (0: at epoch ends and the end)
  /// Gradient accumulation: each step reads `accumulate` consecutive windows and applies one
  /// update with their gradients summed (the loss is their mean): an effective batch of
  /// accumulate x batch columns, each window a micro-batch of the pipeline. Steps per epoch are
  /// the windows / accumulate. Not with carry_state (off by default then).
  std::size_t accumulate = 1;
  std::uint64_t seed = 1;
  double val_fraction = 0.05;      ///< held-out tail of the corpus, in (0, 0.5) (without `valid`)
  /// Held-out files in PTB's layout (one sentence a line; with word tokens each line end is
  /// <eos> and unseen words are <unk>; with char tokens a character the corpus lacks is an
  /// error). `valid`: validates instead of the corpus's tail, the whole corpus trains. `test`:
  /// evaluated once at the end (training_result::test, the log's summary).
  std::string valid, test;
  /// Tokens sampled from the trained model at the end (training_result::sample; 0: none), at
  /// `sample_temperature`, seeded by `seed`, after a prompt of the validation text's first tokens.
  std::size_t sample_length = 200;
  double sample_temperature = 0.8;
  std::size_t val_tokens = 20000;  ///< validation predictions at most (0: all)
  std::size_t save_every = 0;      ///< also save every N steps (0: only per epoch and at the end)
  /// strata trace file (empty: none). With `ranks`, each rank writes `trace.rank<r>` (the
  /// runtime's rule under mpirun) for the program to join (lstm_lm does: docs/lstm_lm.md).
  std::string trace;
  std::string checkpoint;          ///< checkpoint directory (empty: none)
  std::string log;                 ///< JSON-lines log (empty: none); appended to on resume
  std::string report;              ///< a directory the caller writes a report to: checked writable up front
  std::size_t retries = 0;         ///< retries of a failed step (the pipeline restarts its actors)
  std::size_t cpu_threads = 0;     ///< per cpu device; 0: every hardware thread
  /// Truncated BPTT across steps (lm_pipeline_options::carry_state): each window starts from the
  /// LSTM state its columns ended the previous window with, reset at every epoch, and kept in
  /// checkpoints. Unset: on, except with accumulate > 1 (whose windows are not column streams);
  /// true with accumulate > 1 is an input_error.
  std::optional<bool> carry_state;
  /// Stages on several MPI ranks, one per rank (strata/lm/ranks.hpp; strata::lm_net makes one
  /// over an MPI endpoint). Every rank calls train() with the same options except `devices`
  /// (each rank's one local device); the log and checkpoints come from rank 0 only, the trace
  /// from every rank (`trace`).
  /// Empty: one process.
  std::shared_ptr<rank_group> ranks;
  /// With `ranks`: data parallel replicas of the pipeline (lm_pipeline_options::replicas); the
  /// job's ranks must be the stages times the replicas, and batch / replicas a multiple of the
  /// micro-batches.
  std::size_t replicas = 1;
  /// With `ranks`: the link between two ranks, in strata-bench-net's units (`link_latency_us`:
  /// one-way microseconds per message, >= 0; `link_gbps`: 1e9 bytes per second, > 0). Unset
  /// ones are measured at the start between ranks 0 and 1 (docs/lstm_lm.md, "Under mpirun").
  /// The placement and the ideal step charge it on every cut between ranks. Without `ranks`
  /// either is an input_error.
  std::optional<double> link_latency_us, link_gbps;
  /// Stop after the step in progress (saving, when there is a checkpoint) once this reads true.
  const std::atomic<bool>* stop = nullptr;
  /// While train() runs, the first SIGINT or SIGTERM stops after the step in progress (as
  /// `stop`) and writes "\n<program>: interrupted: ..." to stderr; a second one ends the process.
  bool handle_signals = false;
  std::string program = "lm trainer";  ///< the name in that note
  std::size_t crash_after_step = 0;    ///< testing: SIGKILL the process after this step
  int crash_rank = 0;                  ///< testing, across ranks: the rank crash_after_step kills
  std::size_t fault_at_step = 0;       ///< testing: a device fault in the last stage during this step
};

/// A learning-rate schedule (trainer_options' lr_schedule, warmup_steps, lr_decay, lr_step_size).
struct lr_schedule {
  std::string kind = "constant";  ///< constant, step, cosine, plateau
  double base = 1e-3;             ///< the rate after warmup (cosine: at its start)
  std::size_t warmup_steps = 0;   ///< linear warmup: step k < warmup_steps runs at base * (k+1) / warmup_steps
  double decay = 0.5;             ///< step: factor per lr_step_size steps
  std::size_t step_size = 100;
  std::size_t total_steps = 1;    ///< cosine reaches 0 after the last
};

/// The rate of step `step` (0-based: the step about to run). `plateau_scale` is the factor a
/// plateau schedule's decays have reached (1 for the others).
/// 	hrows std::invalid_argument for an unknown kind.
double scheduled_lr(const lr_schedule& schedule, std::size_t step, double plateau_scale = 1.0);

/// A link between MPI ranks in strata-bench-net's units: `pipeline::link_model::measured(latency_us,
/// gbps)` is the link the placement and the ideal step charge.
struct rank_link {
  double latency_us = 0;  ///< One-way, per message.
  double gbps = std::numeric_limits<double>::infinity();  ///< 1e9 bytes per second.
};

/// What the run is about to do, once everything is checked and before the first step.
struct training_setup {
  std::string source;               ///< the corpus file read
  std::size_t train_tokens = 0, validation_tokens = 0;
  token_kind tokens = token_kind::chars;
  lm::config model;                 ///< sizes and settings (vocab: the vocabulary's size)
  std::size_t windows = 0;          ///< steps per epoch (windows / accumulate)
  std::size_t accumulate = 1;       ///< windows per step (model.batch = accumulate x the batch)
  bool carry_state = false;         ///< the LSTM state is carried across steps (trainer_options::carry_state)
  std::size_t first_step = 0;       ///< > 0 when resumed from the checkpoint
  bool resumed = false;
  std::size_t total_steps = 0;
  std::string devices;              ///< the spec used
  pipeline::schedule_kind schedule = pipeline::schedule_kind::one_f_one_b;
  bool auto_schedule = false;       ///< chosen by schedule "auto"
  bool cpu_stages = false;          ///< cpu devices
  std::size_t cpu_threads = 0;      ///< threads per cpu device
  bool own_cores = false;           ///< cpu stages with cores of their own
  std::string costs_note;           ///< where the placement's per-layer costs came from
  pipeline::placement placement;
  std::vector<std::size_t> layer_counts;  ///< LSTM layers per stage
  std::size_t ranks = 1, replicas = 1;    ///< MPI ranks (one stage each) and data parallel replicas
  /// Across ranks with more than one stage: the link between ranks (rank 0's, on every rank) that
  /// the placement and the ideal step charge on every cut, and where it came from (measured or
  /// given).
  std::optional<rank_link> link;
  std::string link_note;
};

/// One finished step.
struct step_progress {
  std::size_t step = 0, total = 0;  ///< steps done (1-based) and in all
  double loss = 0, grad_norm = 0, step_ms = 0, tokens_per_s = 0;
  double bubble = 0;                ///< the step's measured bubble
  double eta_s = 0;                 ///< time left at this run's rate so far
  double lr = 0;                    ///< the learning rate the step applied
};

/// Called as the run goes; any may be empty.
struct trainer_events {
  /// --partition auto: the measured per-layer costs, as soon as they are known (across ranks,
  /// rank 0's, which every rank places with).
  std::function<void(const pipeline::model_costs&, const std::string& note)> on_costs_measured;
  std::function<void(const training_setup&)> on_start;
  std::function<void(const step_progress&)> on_step;
  /// A failed step about to be retried (attempt of retries).
  std::function<void(std::size_t step, std::size_t attempt, std::size_t retries, const std::string& error)> on_retry;
  /// A validation: after each epoch (`epoch_end`) and at the end of the run when that was not
  /// an epoch's end.
  std::function<void(std::size_t step, bool epoch_end, const eval_result&)> on_validation;
};

/// One point of a curve: step and loss.
struct loss_point {
  double step = 0;
  double loss = 0;
};

/// How the run went.
struct training_result {
  training_setup setup;
  bool interrupted = false;         ///< stopped early by `stop` or a signal (saved when there is a checkpoint)
  std::size_t steps = 0;            ///< the step the run ended at
  std::size_t steps_this_run = 0;
  double loss = 0;                  ///< the last step's training loss
  eval_result validation;           ///< the last validation (not set when interrupted)
  std::optional<eval_result> test;  ///< trainer_options::test, the whole file (not when interrupted)
  std::string sample_prompt, sample;  ///< trainer_options::sample_length: the prompt and what followed (decoded)
  double param_norm = 0;            ///< L2 norm of the final parameters (not set when interrupted)
  double step_ms = 0, bubble = 0, tokens_per_s = 0;  ///< medians over this run's steps
  double ideal_step_ms = 0, ideal_bubble = 0;        ///< the plan simulated with the median stage times
  std::vector<double> stage_forward_ms, stage_backward_ms;  ///< median per stage and micro-batch
  std::vector<pipeline::timeline_entry> timeline;           ///< of the ideal step
  std::string plan_text;            ///< the executed plan, pipeline::plan::to_string()
  std::vector<loss_point> losses, validation_losses;
  double wall_s = 0;
  std::size_t trace_events = 0;     ///< events written to `trace`
  std::string trace_error;          ///< why the trace could not be written (empty: it was)
};

/// Runs the training `options` describe and reports through `events`.
/// \throws input_error with one sentence for bad options, an unreadable or too small corpus, an
///         output that cannot be written or a checkpoint that does not fit; std::runtime_error
///         when a step fails after its retries, the training diverges or a save fails.
training_result train(const trainer_options& options, const trainer_events& events = {});

}  // namespace strata::lm
