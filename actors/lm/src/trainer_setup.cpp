// prepare_run: a training run checked and made ready, step by step (options, schedule and token
// kinds, devices, schedule, data, model configuration, outputs, the checkpoint to resume from).
#include "trainer_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "strata/device/device_manager.hpp"

namespace strata::lm::detail {

namespace {

namespace pl = strata::pipeline;

/// Hardware threads each cpu stage device may use: `flag`, or (0) all of them.
std::size_t cpu_threads_of(std::size_t flag) {
  return flag > 0 ? flag : std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

/// The devices to train on: an explicit spec, else the CUDA GPUs when present (one stage per GPU;
/// a single GPU is shared by two stages, cuda:0x2, so that the default is a pipeline as cpu:2 is),
/// else cpu:2; cpu devices get `cpu_threads` threads each.
std::vector<device> choose_devices(const std::string& spec_flag, std::size_t cpu_threads, std::string& spec_used) {
  std::string spec = spec_flag;
  if (spec.empty()) {
    const int gpus = cuda_gpu_count();
    spec = "cpu:2";
    if (gpus == 1) {
      spec = "cuda:0x2";
    } else if (gpus > 1) {
      spec = "cuda:0";
      for (int g = 1; g < gpus; ++g) spec += "," + std::to_string(g);
    }
  } else if (spec.rfind("sim", 0) == 0) {
    throw input_error("--devices '" + spec + "' names sim devices, which model time but compute nothing, so they cannot train; use cpu:N");
  }
  std::vector<device> devs;
  try {
    devs = make_devices(spec, {.cpu_threads_per_device = static_cast<int>(cpu_threads_of(cpu_threads))});
  } catch (const std::exception& e) {
    throw input_error("--devices '" + spec + "' cannot be met: " + e.what());
  }
  if (devs.empty()) throw input_error("--devices '" + spec + "' names no devices");
  spec_used = spec;
  return devs;
}

/// One micro-batch by default: on CPU stages an LSTM step at batch <= 20 is bound by streaming
/// its weights, so splitting the batch multiplies that traffic and costs more than the pipeline
/// bubble it removes (docs/lstm_lm.md has the measurements). Pass --micro-batches to pipeline.
std::size_t default_micro_batches() { return 1; }

/// Wavefront's time chunks when --chunks is not given: the largest divisor of the window up to 8
/// (seq 35: 7 chunks of 5 timesteps). More chunks fill the pipeline sooner but each costs a
/// message and a smaller input-projection GEMM; on cpu:2 with a core per stage and the seed model
/// 7 chunks gave a 280 ms step, 5 gave 286 ms and 35 gave 347 ms (docs/lstm_lm.md).
std::size_t default_chunks(std::size_t seq) {
  std::size_t best = 1;
  for (std::size_t c = 1; c <= std::min<std::size_t>(seq, 8); ++c)
    if (seq % c == 0) best = c;
  return best;
}

/// The --schedule and --tokens flags parsed into `su` and checked with what they govern
/// (--chunks, --vocab-size, --epochs, --steps). The schedule is --schedule's, or for auto a
/// placeholder that choose_schedule replaces.
pl::schedule_kind read_kinds(const trainer_options& o, training_setup& su) {
  su.auto_schedule = o.schedule == "auto";
  pl::schedule_kind schedule = pl::schedule_kind::one_f_one_b;
  try {
    if (!su.auto_schedule) schedule = pl::parse_schedule(o.schedule);
  } catch (const std::exception& e) {
    throw input_error(std::string("--schedule: ") + e.what() + " (or auto)");
  }
  if (!su.auto_schedule && o.chunks_given && o.chunks > 1 && schedule != pl::schedule_kind::wavefront)
    throw input_error("--chunks " + std::to_string(o.chunks) + " needs --schedule wavefront");
  try {
    su.tokens = parse_token_kind(o.tokens);
  } catch (const std::exception& e) {
    throw input_error(std::string("--tokens: ") + e.what());
  }
  if (o.vocab_size < 2) throw input_error("--vocab-size must be at least 2");
  if (o.vocab_size_given && su.tokens != token_kind::words)
    throw input_error("--vocab-size applies to --tokens word only (char tokens keep every character)");
  if (o.epochs_given && o.epochs == 0) throw input_error("--epochs must be at least 1");
  if (!o.epochs_given && o.steps == 0) throw input_error("--steps must be at least 1");
  return schedule;
}

/// The devices (run.devices, setup.devices) and the stages of one pipeline: each device a stage,
/// under mpirun each rank one stage on its one device (ranks / replicas stages).
void open_devices(const trainer_options& o, prepared_run& run) {
  training_setup& su = run.setup;
  run.devices = choose_devices(o.devices, o.cpu_threads, su.devices);
  std::size_t S = run.devices.size();
  if (o.replicas == 0) throw input_error("--replicas must be at least 1");
  if (o.ranks) {  // under mpirun: one stage per rank, each on its rank's one device
    if (o.retries > 0)
      throw input_error("--retries " + std::to_string(o.retries) + " does not apply under mpirun: a failed step of a pipeline "
                        "across ranks ends the job instead of being retried (relaunch it from its checkpoint); leave "
                        "--retries at 0");
    if (run.devices.size() != 1)
      throw input_error(std::string(o.devices.empty() ? "the default " : "") + "--devices '" + su.devices + "' names " +
                        std::to_string(run.devices.size()) + " devices, but rank " + std::to_string(o.ranks->rank()) +
                        " runs one stage on one device of its own under mpirun (name one, e.g. --devices cpu:1)");
    const auto world = static_cast<std::size_t>(o.ranks->size());
    if (world % o.replicas != 0)
      throw input_error("--replicas " + std::to_string(o.replicas) + " does not divide the job's " + std::to_string(world) +
                        " ranks (each replica is a pipeline of ranks / replicas stages)");
    S = world / o.replicas;
    su.ranks = world;
    su.replicas = o.replicas;
    su.devices += " per rank, " + std::to_string(world) + " ranks" +
                  (o.replicas > 1 ? " (" + std::to_string(S) + " stages x " + std::to_string(o.replicas) + " replicas)" : "");
  } else if (o.replicas != 1) {
    throw input_error("--replicas " + std::to_string(o.replicas) + " needs a job of stages x replicas ranks under mpirun");
  } else if (o.link_latency_us || o.link_gbps) {
    throw input_error(std::string(o.link_latency_us ? "--link-latency-us" : "--link-gbps") +
                      " sets the link between MPI ranks, and this run is one process (start it under mpirun)");
  }
  if (o.precision != "fp32" &&
      std::none_of(run.devices.begin(), run.devices.end(), [](const device& d) { return d.kind() == device_kind::cuda; }))
    throw input_error("--precision " + o.precision + " sets the math of cuda stages, but the stages run on " +
                      run.devices.front().name() + ", which computes in fp32: use cuda devices or --precision fp32");
  run.stages = S;
}

/// The schedule (auto chosen here, docs/lstm_lm.md) and the partition of the layers over the
/// stages; returns the time chunks of a micro-batch.
std::size_t choose_schedule(const trainer_options& o, prepared_run& run, pl::schedule_kind schedule) {
  training_setup& su = run.setup;
  const std::size_t S = run.stages;
  // auto (docs/lstm_lm.md): 1F1B, except on cpu stages that own their cores (cpu_threads times
  // the stages fits the hardware threads), where wavefront's time chunks let the stages overlap;
  // where the stages share every core (the default), a stage that waits lends its cores to the
  // one that works and one micro-batch in order is fastest. chunks > 1 asks for wavefront.
  su.cpu_stages = run.devices.front().kind() == device_kind::cpu;
  su.cpu_threads = cpu_threads_of(o.cpu_threads);
  su.own_cores = su.cpu_stages && S > 1 && su.cpu_threads * S <= cpu_threads_of(0);
  if (su.auto_schedule)
    schedule = (o.chunks_given && o.chunks > 1) || su.own_cores ? pl::schedule_kind::wavefront : pl::schedule_kind::one_f_one_b;
  su.schedule = schedule;
  const std::size_t chunks = o.chunks_given ? o.chunks : schedule == pl::schedule_kind::wavefront ? default_chunks(o.seq) : 1;
  if (o.ranks && o.partition != "even" && o.partition != "auto") {
    const auto ranges = static_cast<std::size_t>(std::count(o.partition.begin(), o.partition.end(), ',') + 1);
    if (ranges != S)
      throw input_error("--partition '" + o.partition + "' names " + std::to_string(ranges) + " stages, but the job has " +
                        std::to_string(S * o.replicas) + " ranks for " + std::to_string(o.replicas) +
                        (o.replicas == 1 ? " replica" : " replicas") + " (one stage per rank: start stages x replicas ranks)");
  }
  try {
    run.partition = pl::parse_partition(o.partition, static_cast<int>(o.layers), static_cast<int>(S));
  } catch (const std::exception& e) {
    throw input_error(std::string("--partition: ") + e.what());
  }
  return chunks;
}

/// The model's configuration from the options (setup.model, total_steps), checked, with the
/// replicas' constraints on it.
void build_config(const trainer_options& o, prepared_run& run, std::size_t chunks) {
  training_setup& su = run.setup;
  lm::config& cfg = su.model;
  cfg.vocab = run.vocab.size();
  cfg.embed = o.embed;
  cfg.layers = o.layers;
  cfg.hidden = o.hidden;
  cfg.batch = o.batch * o.accumulate;  // an accumulated step: one micro-batch (or more) per window
  cfg.seq = o.seq;
  cfg.micro_batches = (o.micro_batches ? o.micro_batches : default_micro_batches()) * o.accumulate;
  cfg.chunks = chunks;
  cfg.optimizer = parse_optimizer(o.optimizer);
  const bool adam_kind = cfg.optimizer == optimizer_kind::adam || cfg.optimizer == optimizer_kind::adamw;
  // Unset: Adam's 4e-3 (after a 20-step warmup by default; measured against 2e-3 in
  // docs/lstm_lm.md); SGD the seed's 1; with momentum 0.1, the same effective step as the seed's
  // SGD (lr / (1 - 0.9)).
  const bool momentum_kind = cfg.optimizer == optimizer_kind::momentum || cfg.optimizer == optimizer_kind::nesterov;
  cfg.lr = o.lr ? *o.lr : adam_kind ? 4e-3 : momentum_kind ? 0.1 : 1.0;
  cfg.momentum = o.momentum;
  cfg.beta1 = o.beta1;
  cfg.beta2 = o.beta2;
  cfg.eps = o.eps;
  cfg.weight_decay = o.weight_decay;
  cfg.residual = o.residual;
  cfg.dropout = o.dropout;
  cfg.precision = parse_precision(o.precision);
  cfg.clip = o.clip;
  cfg.seed = o.seed;
  try {
    cfg.validate();
  } catch (const std::exception& e) {
    throw input_error(e.what());
  }
  su.total_steps = o.epochs_given ? o.epochs * su.windows : o.steps;
  if (o.replicas > 1 && cfg.batch % (o.replicas * cfg.micro_batches) != 0)
    throw input_error("--batch " + std::to_string(cfg.batch) + " does not split into " + std::to_string(o.replicas) +
                      " replicas of " + std::to_string(cfg.micro_batches) +
                      (cfg.micro_batches == 1 ? " micro-batch" : " micro-batches") + " each");
  if (o.replicas > 1 && run.devices.front().kind() != device_kind::cpu)
    throw input_error("--replicas needs cpu devices (--devices cpu:1): replicas sum their gradients on the host");
}

/// The checkpoint to resume from (run.resume, setup.resumed, first_step): --checkpoint's when it
/// holds one, which must fit this model and corpus.
void find_resume(const trainer_options& o, prepared_run& run) {
  training_setup& su = run.setup;
  const lm::config& cfg = su.model;
  if (!o.checkpoint.empty() && checkpoint_exists(o.checkpoint)) {
    auto ck = load_checkpoint(o.checkpoint);
    if (!ck) throw input_error(ck.error().message());
    if (auto e = check_compatible(*ck, cfg, su.tokens); e) throw input_error("--checkpoint '" + o.checkpoint + "': " + e.message());
    if (!(ck->vocab == run.vocab))
      throw input_error("--checkpoint '" + o.checkpoint + "' was trained on another corpus (its vocab.json differs from this corpus's vocabulary)");
    if (ck->windows_per_epoch != su.windows)
      throw input_error("--checkpoint '" + o.checkpoint + "' was trained on another corpus (" + std::to_string(ck->windows_per_epoch) +
                        " steps per epoch, this corpus " + std::to_string(su.windows) + ")");
    run.resume = std::move(*ck);
  }
  su.resumed = run.resume.has_value();
  su.first_step = run.resume ? run.resume->step : 0;
}

}  // namespace

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

prepared_run prepare_run(const trainer_options& o) {
  check_options(o);
  prepared_run run;
  const pl::schedule_kind schedule = read_kinds(o, run.setup);
  open_devices(o, run);
  const std::size_t chunks = choose_schedule(o, run, schedule);
  open_data(o, run);
  build_config(o, run, chunks);
  check_outputs(o);
  find_resume(o, run);
  return run;
}

}  // namespace strata::lm::detail
