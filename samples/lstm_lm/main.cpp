// lstm_lm: train a stacked-LSTM language model with strata's model-parallel pipeline, evaluate a
// checkpoint on a text, or sample from it. Usage and flags: docs/lstm_lm.md.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "report.hpp"
#include "strata/actor_system.hpp"
#include "strata/lm/checkpoint.hpp"
#include "strata/lm/costs.hpp"
#include "strata/lm/data.hpp"
#include "strata/lm/inference.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/pipeline/partitioner.hpp"
#include "strata/pipeline/simulator.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/kernels/blas.hpp"

namespace {

namespace fs = std::filesystem;
namespace lm = strata::lm;
namespace pl = strata::pipeline;
using json = nlohmann::ordered_json;

/// Bad input from the user: main prints the sentence and exits with status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct train_options {
  std::string corpus;
  std::string tokens = "char";
  std::size_t vocab_size = 10000;
  bool vocab_size_given = false;
  std::string devices;
  std::size_t layers = 8, hidden = 400, embed = 200, batch = 20, seq = 35;
  std::size_t micro_batches = 0;  // 0: chosen from the stage count
  std::size_t chunks = 0;          // 0: chosen with the schedule (see default_chunks)
  bool chunks_given = false;
  std::string schedule = "auto";  // auto: chosen from the devices (see run_train)
  std::string partition = "even";
  std::size_t steps = 300, epochs = 0;  // epochs 0: --steps decides
  bool epochs_given = false;
  double lr = 1.0, clip = 5.0;
  std::uint64_t seed = 1;
  double val_fraction = 0.05;
  std::size_t val_tokens = 20000;
  std::size_t save_every = 0;
  std::string trace, checkpoint, log, report;
  std::size_t crash_after_step = 0;  // testing hook: SIGKILL itself after this step
  std::size_t fault_at_step = 0;     // testing hook: a device fault in the last stage during this step
  std::size_t retries = 0;
  std::size_t cpu_threads = 0;  // per cpu device; 0: every hardware thread (the stages share the cores)
  bool carry_state = false;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

/// Hardware threads each cpu stage device may use: --cpu-threads, or (0) all of them.
std::size_t cpu_threads_of(std::size_t flag) {
  return flag > 0 ? flag : std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

/// The devices to train on: an explicit spec, else the CUDA GPUs when present (one stage per GPU;
/// a single GPU is shared by two stages, cuda:0x2, so that the default is a pipeline as cpu:2 is),
/// else cpu:2; cpu devices get `cpu_threads` (--cpu-threads) threads each.
std::vector<strata::device> choose_devices(const std::string& spec_flag, std::size_t cpu_threads, std::string& spec_used) {
  std::string spec = spec_flag;
  if (spec.empty()) {
    const int gpus = strata::cuda_gpu_count();
    spec = "cpu:2";
    if (gpus == 1) {
      spec = "cuda:0x2";
    } else if (gpus > 1) {
      spec = "cuda:0";
      for (int g = 1; g < gpus; ++g) spec += "," + std::to_string(g);
    }
  } else if (spec.rfind("sim", 0) == 0) {
    throw usage_error("--devices '" + spec + "' names sim devices, which model time but compute nothing, so they cannot train; use cpu:N");
  }
  std::vector<strata::device> devs;
  try {
    devs = strata::make_devices(spec, {.cpu_threads_per_device = static_cast<int>(cpu_threads_of(cpu_threads))});
  } catch (const std::exception& e) {
    throw usage_error("--devices '" + spec + "' cannot be met: " + e.what());
  }
  if (devs.empty()) throw usage_error("--devices '" + spec + "' names no devices");
  spec_used = spec;
  return devs;
}

/// Per-layer costs estimated from FLOPs and bytes at nominal host rates (60 GFLOP/s, 20 GB/s:
/// about what one core of the 2-core build machine reaches on the seed model); only their ratios
/// matter to the partitioner.
pl::model_costs estimate_costs(const lm::lm_config& c) {
  const double flops_per_s = 60e9, bytes_per_s = 20e9;
  const double T = static_cast<double>(c.seq), B = static_cast<double>(c.micro_batch_size());
  const double H = static_cast<double>(c.hidden), E = static_cast<double>(c.embed), V = static_cast<double>(c.vocab);
  pl::model_costs m;
  m.embedding.forward_s = 2 * 4 * T * B * E / bytes_per_s;
  m.embedding.backward_s = m.embedding.forward_s;
  m.embedding.memory_bytes = static_cast<std::uint64_t>(8 * V * E);
  m.embedding.activation_bytes = static_cast<std::uint64_t>(4 * T * B * E);
  for (std::size_t l = 0; l < c.layers; ++l) {
    const double in = l == 0 ? E : H, weights = 4 * H * (in + H) + 8 * H;
    const double fwd_flops = 2 * T * B * 4 * H * (in + H), fwd_bytes = 4 * (weights + T * B * (in + 8 * H));
    pl::layer_cost lc;
    lc.forward_s = fwd_flops / flops_per_s + fwd_bytes / bytes_per_s;
    lc.backward_s = 2 * lc.forward_s;
    lc.memory_bytes = static_cast<std::uint64_t>(8 * weights);
    lc.activation_bytes = static_cast<std::uint64_t>(4 * (B * H * (7 * T + 2) + T * B * H));
    m.lstm.push_back(lc);
  }
  // The decoder's forward also computes its backward (fused cross-entropy), so it carries both.
  m.decoder.forward_s = 3 * 2 * T * B * H * V / flops_per_s + 4 * (3 * V * H + 2 * T * B * V) / bytes_per_s;
  m.decoder.backward_s = 0;
  m.decoder.memory_bytes = static_cast<std::uint64_t>(8 * (V * H + V));
  m.decoder.activation_bytes = static_cast<std::uint64_t>(4 * T * B * H);
  return m;
}

/// One micro-batch by default: on CPU stages an LSTM step at batch <= 20 is bound by streaming
/// its weights, so splitting the batch multiplies that traffic and costs more than the pipeline
/// bubble it removes (docs/lstm_lm.md has the measurements). Pass --micro-batches to pipeline.
std::size_t default_micro_batches(std::size_t /*batch*/, std::size_t /*stages*/) { return 1; }

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

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write '" + path.string() + "'");
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

/// Fails before the run, not after it, when `file` (the value of `flag`) cannot be written: a
/// directory, or a place where no file can be created (checked with a probe file beside it).
void check_output_file(const std::string& flag, const std::string& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw usage_error(flag + " '" + file + "' is a directory; expected a file name");
  const std::string probe = file + ".probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw usage_error(flag + " '" + file + "' cannot be written (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

/// As check_output_file for a directory flag: `dir` is created when missing and must be writable.
void check_output_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw usage_error(flag + " '" + dir + "' is a file; expected a directory");
  fs::create_directories(dir, ec);
  if (ec) throw usage_error(flag + " '" + dir + "' cannot be created (" + ec.message() + ")");
  check_output_file(flag, (fs::path(dir) / ".lstm_lm").string());
}

/// Set by SIGINT/SIGTERM during training: the run stops after the step in progress and saves.
/// An atomic rather than volatile sig_atomic_t: the handler may run on any of the threads.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_interrupt(int) {
  interrupted.store(true, std::memory_order_relaxed);
  static const char note[] = "\nlstm_lm: interrupted: stopping after this step (interrupt again to quit at once)\n";
  [[maybe_unused]] auto n = ::write(2, note, sizeof note - 1);
}

double param_norm(const std::vector<lm::named_parameter>& params) {
  double sq = 0;
  for (const auto& p : params)
    for (float v : p.values) sq += static_cast<double>(v) * v;
  return std::sqrt(sq);
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

int run_train(const train_options& o) {
  // ---- check the sizes before reading anything --------------------------------------------
  for (auto [name, v] : {std::pair{"--layers", o.layers}, {"--hidden", o.hidden}, {"--embed", o.embed},
                         {"--batch", o.batch}, {"--seq", o.seq}, {"--chunks", o.chunks_given ? o.chunks : 1}})
    if (v == 0) throw usage_error(std::string(name) + " must be at least 1");
  if (o.micro_batches > 0 && o.batch % o.micro_batches != 0)
    throw usage_error("--micro-batches " + std::to_string(o.micro_batches) + " does not divide --batch " + std::to_string(o.batch));
  if (o.chunks_given && o.seq % o.chunks != 0)
    throw usage_error("--seq " + std::to_string(o.seq) + " is not divisible by --chunks " + std::to_string(o.chunks));
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw usage_error("--lr must be a positive number");
  if (!(o.clip > 0) || !std::isfinite(o.clip)) throw usage_error("--clip must be a positive number");
  if (!(o.val_fraction > 0 && o.val_fraction < 0.5)) throw usage_error("--val-fraction must lie in (0, 0.5)");
  const bool auto_schedule = o.schedule == "auto";
  pl::schedule_kind schedule = pl::schedule_kind::one_f_one_b;
  try {
    if (!auto_schedule) schedule = pl::parse_schedule(o.schedule);
  } catch (const std::exception& e) {
    throw usage_error(std::string("--schedule: ") + e.what() + " (or auto)");
  }
  if (!auto_schedule && o.chunks_given && o.chunks > 1 && schedule != pl::schedule_kind::wavefront)
    throw usage_error("--chunks " + std::to_string(o.chunks) + " needs --schedule wavefront");
  lm::token_kind tokens;
  try {
    tokens = lm::parse_token_kind(o.tokens);
  } catch (const std::exception& e) {
    throw usage_error(std::string("--tokens: ") + e.what());
  }
  if (o.vocab_size < 2) throw usage_error("--vocab-size must be at least 2");
  if (o.vocab_size_given && tokens != lm::token_kind::words)
    throw usage_error("--vocab-size applies to --tokens word only (char tokens keep every character)");
  if (o.epochs_given && o.epochs == 0) throw usage_error("--epochs must be at least 1");
  if (!o.epochs_given && o.steps == 0) throw usage_error("--steps must be at least 1");

  std::string spec_used;
  auto devices = choose_devices(o.devices, o.cpu_threads, spec_used);
  const std::size_t S = devices.size();
  // auto (docs/lstm_lm.md): 1F1B, except on cpu stages that own their cores (--cpu-threads times
  // the stages fits the hardware threads), where wavefront's time chunks let the stages overlap;
  // where the stages share every core (the default), a stage that waits lends its cores to the
  // one that works and one micro-batch in order is fastest. --chunks N > 1 asks for wavefront.
  const bool cpu_stages = devices.front().kind() == strata::device_kind::cpu;
  const std::size_t cpu_threads = cpu_threads_of(o.cpu_threads);
  const bool own_cores = cpu_stages && S > 1 && cpu_threads * S <= cpu_threads_of(0);
  if (auto_schedule)
    schedule = (o.chunks_given && o.chunks > 1) || own_cores ? pl::schedule_kind::wavefront : pl::schedule_kind::one_f_one_b;
  const std::size_t chunks = o.chunks_given ? o.chunks : schedule == pl::schedule_kind::wavefront ? default_chunks(o.seq) : 1;
  pl::partition_spec part;
  try {
    part = pl::parse_partition(o.partition, static_cast<int>(o.layers), static_cast<int>(S));
  } catch (const std::exception& e) {
    throw usage_error(std::string("--partition: ") + e.what());
  }

  // ---- corpus, vocabulary, batches --------------------------------------------------------
  std::string text, source;
  try {
    if (o.corpus.empty()) text = lm::read_default_corpus(source);
    else text = lm::read_text_file(o.corpus), source = o.corpus;
  } catch (const std::exception& e) {
    throw usage_error(e.what());
  }
  auto split = lm::split_text(text, o.val_fraction);
  text.clear();
  auto vocab = lm::vocabulary::build(tokens, split.train, tokens == lm::token_kind::words ? o.vocab_size : 0);
  auto train_ids = vocab.encode(split.train);
  auto val_ids = vocab.encode(split.validation);
  if (!train_ids || !val_ids) throw usage_error("the corpus cannot be tokenised");
  std::optional<lm::token_batches> batches;
  try {
    batches.emplace(*train_ids, o.batch, o.seq);
  } catch (const std::exception& e) {
    throw usage_error("the corpus is too small: " + std::string(e.what()));
  }
  if (val_ids->size() < 2) throw usage_error("the corpus is too small to hold out a validation text");
  const std::size_t windows = batches->windows();

  lm::lm_config cfg;
  cfg.vocab = vocab.size();
  cfg.embed = o.embed;
  cfg.layers = o.layers;
  cfg.hidden = o.hidden;
  cfg.batch = o.batch;
  cfg.seq = o.seq;
  cfg.micro_batches = o.micro_batches ? o.micro_batches : default_micro_batches(o.batch, S);
  cfg.chunks = chunks;
  cfg.lr = o.lr;
  cfg.clip = o.clip;
  cfg.seed = o.seed;
  try {
    cfg.validate();
  } catch (const std::exception& e) {
    throw usage_error(e.what());
  }
  const std::size_t total_steps = o.epochs_given ? o.epochs * windows : o.steps;

  // ---- outputs: a path that cannot be written fails now, not after the run -----------------
  if (!o.checkpoint.empty()) check_output_dir("--checkpoint", o.checkpoint);
  if (!o.report.empty()) check_output_dir("--report", o.report);
  if (!o.trace.empty()) check_output_file("--trace", o.trace);
  if (!o.log.empty()) check_output_file("--log", o.log);

  // ---- placement ---------------------------------------------------------------------------
  std::vector<pl::device_slot> slots;
  for (auto& d : devices) slots.push_back({d.name()});
  // auto: per-layer costs measured on the first device (the kernels on one micro-batch, in its
  // arena); the fixed splits only print a prediction, from FLOPs and bytes.
  std::string costs_note =
      "costs estimated from FLOPs and bytes at nominal rates of 60 GFLOP/s and 20 GB/s per device, so the predicted "
      "step is a rough guide; --partition auto measures the costs";
  pl::model_costs costs;
  if (part.kind == pl::partition_spec::kind_t::automatic) {
    const auto t0 = std::chrono::steady_clock::now();
    costs = lm::measure_layer_costs(cfg, devices.front());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    costs_note = "costs measured on " + devices.front().name() + " in " + fmt(ms, 0) + " ms";
    std::cerr << "lstm_lm: " << costs_note << ": embedding " << fmt(1e3 * (costs.embedding.forward_s + costs.embedding.backward_s), 2)
              << " ms, lstm 0 " << fmt(1e3 * (costs.lstm.front().forward_s + costs.lstm.front().backward_s), 2) << " ms"
              << (costs.lstm.size() > 1 ? ", lstm 1-" + std::to_string(costs.lstm.size() - 1) + " " +
                                              fmt(1e3 * (costs.lstm.back().forward_s + costs.lstm.back().backward_s), 2) + " ms each"
                                        : std::string())
              << ", decoder " << fmt(1e3 * (costs.decoder.forward_s + costs.decoder.backward_s), 2)
              << " ms (forward + backward per micro-batch)\n";
  } else {
    costs = estimate_costs(cfg);
  }
  pl::placement placed;
  try {
    placed = pl::place_layers(costs, slots, part,
                              {schedule, static_cast<int>(cfg.micro_batches), static_cast<int>(cfg.chunks)});
  } catch (const std::exception& e) {
    throw usage_error(std::string("--partition: ") + e.what());
  }
  std::vector<std::size_t> counts;
  for (auto& st : placed.stages) counts.push_back(static_cast<std::size_t>(st.lstm.last - st.lstm.first + 1));

  // ---- resume? -----------------------------------------------------------------------------
  std::optional<lm::checkpoint> resume;
  if (!o.checkpoint.empty() && lm::checkpoint_exists(o.checkpoint)) {
    auto ck = lm::load_checkpoint(o.checkpoint);
    if (!ck) throw usage_error(ck.error().message());
    if (auto e = lm::check_compatible(*ck, cfg, tokens); e) throw usage_error("--checkpoint '" + o.checkpoint + "': " + e.message());
    if (!(ck->vocab == vocab))
      throw usage_error("--checkpoint '" + o.checkpoint + "' was trained on another corpus (its vocab.json differs from this corpus's vocabulary)");
    if (ck->windows_per_epoch != windows)
      throw usage_error("--checkpoint '" + o.checkpoint + "' was trained on another corpus (" + std::to_string(ck->windows_per_epoch) +
                        " steps per epoch, this corpus " + std::to_string(windows) + ")");
    resume = std::move(*ck);
  }
  const std::size_t first_step = resume ? resume->step : 0;

  std::cerr << "lstm_lm: corpus " << source << ": " << train_ids->size() << " training and " << val_ids->size()
            << " validation " << lm::to_string(tokens) << " tokens, vocabulary " << vocab.size() << "\n"
            << "lstm_lm: model " << cfg.layers << " x LSTM(" << cfg.hidden << "), embed " << cfg.embed << ", batch "
            << cfg.batch << " x seq " << cfg.seq << ", " << windows << " steps per epoch, " << spec_used << ", "
            << pl::to_string(schedule) << " with " << cfg.micro_batches << (cfg.micro_batches == 1 ? " micro-batch" : " micro-batches")
            << (cfg.chunks > 1 ? " x " + std::to_string(cfg.chunks) + " chunks" : std::string()) << "\n"
            << (cpu_stages
                    ? "lstm_lm: " + std::to_string(cpu_threads) + (cpu_threads == 1 ? " thread" : " threads") +
                          " per cpu device (--cpu-threads), " +
                          (own_cores ? "each stage on cores of its own\n" : "the stages sharing the cores\n")
                    : std::string())
            << (auto_schedule ? "lstm_lm: schedule chosen by --schedule auto for " + spec_used + " (docs/lstm_lm.md)\n" : std::string())
            << "lstm_lm: plan (--partition " << o.partition << ", " << costs_note << "):\n"
            << placed.to_string() << "\n";
  if (resume) std::cerr << "lstm_lm: resuming from " << o.checkpoint << " at step " << first_step << "\n";

  // ---- the pipeline ------------------------------------------------------------------------
  strata::system_config sc;
  sc.worker_threads = 2;
  sc.trace_file = o.trace;
  strata::actor_system system(sc);
  // Owned through a pointer so that it stops before the system's shutdown writes the trace.
  auto pipe_owner = std::make_unique<lm::lm_pipeline>(system, std::move(devices), cfg, schedule, counts,
                                                      lm::lm_pipeline_options{.carry_state = o.carry_state});
  lm::lm_pipeline& pipe = *pipe_owner;
  if (resume) {
    if (auto r = pipe.set_parameters(resume->parameters); !r) throw std::runtime_error(r.error().message());
  }

  std::ofstream log;
  if (!o.log.empty()) {
    log.open(o.log, resume ? std::ios::app : std::ios::trunc);
    if (!log) throw usage_error("--log '" + o.log + "' cannot be opened for writing");
  }
  auto log_line = [&](const json& j) {
    if (log.is_open()) log << j.dump() << '\n' << std::flush;
  };

  auto validate = [&](std::size_t step) {
    auto params = pipe.parameters();
    if (!params) throw std::runtime_error(params.error().message());
    lm::lm_model model(cfg, *params);
    auto r = lm::evaluate_batched(model, *val_ids, 10, cfg.seq, o.val_tokens);
    log_line({{"step", step}, {"epoch", step / windows}, {"val_loss", r.loss}, {"val_ppl", std::exp(r.loss)}, {"val_tokens", r.tokens}});
    return std::pair{r, std::move(*params)};
  };
  auto save = [&](std::size_t step, const std::vector<lm::named_parameter>* have) {
    if (o.checkpoint.empty()) return;
    lm::checkpoint ck{cfg, tokens, vocab, {}, step, step / windows, windows, source};
    if (have) {
      ck.parameters = *have;
    } else {
      auto p = pipe.parameters();
      if (!p) throw std::runtime_error(p.error().message());
      ck.parameters = std::move(*p);
    }
    // A diverged run must not overwrite a good checkpoint with non-finite parameters.
    for (const auto& p : ck.parameters)
      if (!std::all_of(p.values.begin(), p.values.end(), [](float v) { return std::isfinite(v); }))
        throw std::runtime_error("the training diverged: parameter '" + p.name + "' is not finite after step " +
                                 std::to_string(step) + " (try a smaller --lr); the checkpoint was not overwritten");
    if (auto e = lm::save_checkpoint(o.checkpoint, ck); e) throw std::runtime_error(e.message());
  };

  progress_line bar(total_steps, first_step);
  std::vector<lstm_lm::curve_point> curve, val_curve;
  std::vector<double> step_ms, bubbles, tokens_per_s;
  std::vector<std::vector<double>> fwd_ms(pipe.stages()), bwd_ms(pipe.stages());
  std::vector<std::int32_t> x, y;
  const double tokens_per_step = static_cast<double>(cfg.seq * cfg.batch);
  const auto started = std::chrono::steady_clock::now();
  std::optional<std::pair<lm::eval_result, std::vector<lm::named_parameter>>> last_val;
  std::size_t last_val_step = static_cast<std::size_t>(-1);
  double last_loss = 0;
  // The first SIGINT/SIGTERM stops the run after the current step (saved when --checkpoint is
  // given); a second one ends it at once (SA_RESETHAND), which saves are atomic against.
  struct sigaction stop_after_step {};
  stop_after_step.sa_handler = on_interrupt;
  stop_after_step.sa_flags = SA_RESETHAND | SA_RESTART;
  ::sigemptyset(&stop_after_step.sa_mask);
  ::sigaction(SIGINT, &stop_after_step, nullptr);
  ::sigaction(SIGTERM, &stop_after_step, nullptr);
  for (std::size_t step = first_step; step < total_steps; ++step) {
    batches->window(step % windows, x, y);
    if (o.carry_state && step % windows == 0 && step != first_step)  // the column streams start over
      if (auto r = pipe.reset_state(); !r) throw std::runtime_error(r.error().message());
    if (o.fault_at_step == step + 1) pipe.inject_device_fault(pipe.stages() - 1, 1);
    auto t0 = std::chrono::steady_clock::now();
    auto r = pipe.train_step(x, y);
    // A failed step changes no weights; the next train_step restarts the pipeline's actors.
    for (std::size_t attempt = 1; !r && attempt <= o.retries; ++attempt) {
      std::cerr << "\nlstm_lm: step " << step + 1 << " failed: " << r.error().message() << "; retrying (" << attempt
                << " of " << o.retries << ")\n";
      log_line({{"step", step + 1}, {"retry", attempt}, {"error", r.error().message()}});
      t0 = std::chrono::steady_clock::now();
      r = pipe.train_step(x, y);
    }
    if (!r) throw std::runtime_error("step " + std::to_string(step + 1) + " failed: " + r.error().message());
    if (!std::isfinite(r->loss))
      throw std::runtime_error("the training diverged: the loss of step " + std::to_string(step + 1) + " is " +
                               fmt(r->loss, 3) + " (try a smaller --lr)");
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double tps = tokens_per_step / (wall_ms / 1e3);
    double busy = 0;
    for (double b : r->stage_busy_ms) busy += b;
    const double bubble = r->step_ms > 0 ? 1 - busy / (static_cast<double>(pipe.stages()) * r->step_ms) : 0;
    step_ms.push_back(r->step_ms);
    bubbles.push_back(bubble);
    tokens_per_s.push_back(tps);
    auto st = pipe.measured_stage_times_ms();
    for (std::size_t s = 0; s < st.size(); ++s) fwd_ms[s].push_back(st[s].first), bwd_ms[s].push_back(st[s].second);
    const std::size_t done = step + 1;
    last_loss = r->loss;
    curve.push_back({static_cast<double>(done), r->loss});
    log_line({{"step", done}, {"epoch", step / windows}, {"loss", r->loss}, {"ppl", std::exp(std::min(r->loss, 50.0))},
              {"grad_norm", r->grad_norm}, {"step_ms", r->step_ms}, {"tokens_per_s", tps}, {"bubble", bubble}});
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const double eta = elapsed / static_cast<double>(done - first_step) * static_cast<double>(total_steps - done);
    bar.update(done, r->loss, tps, eta);
    const bool epoch_end = done % windows == 0;
    bool saved = true;
    if (epoch_end) {
      last_val = validate(done);
      last_val_step = done;
      val_curve.push_back({static_cast<double>(done), last_val->first.loss});
      bar.note("epoch " + std::to_string(done / windows) + ": validation loss " + fmt(last_val->first.loss, 4) + ", perplexity " +
               fmt(std::exp(last_val->first.loss), 2) + " (" + std::to_string(last_val->first.tokens) + " tokens)");
      save(done, &last_val->second);
    } else if (o.save_every && done % o.save_every == 0 && done < total_steps) {
      save(done, nullptr);
    } else {
      saved = false;
    }
    if (o.crash_after_step && done == o.crash_after_step) std::raise(SIGKILL);
    if (interrupted.load(std::memory_order_relaxed) && done < total_steps) {
      bar.finish();
      if (!saved) save(done, nullptr);
      log_line({{"step", done}, {"interrupted", true}});
      std::cerr << "lstm_lm: interrupted after step " << done
                << (o.checkpoint.empty() ? std::string(" (no --checkpoint: nothing saved)")
                                         : "; saved in " + o.checkpoint + " (the same command resumes)")
                << "\n";
      return 130;
    }
  }
  bar.finish();
  const std::size_t final_step = std::max(first_step, total_steps);
  if (last_val_step != final_step) {
    last_val = validate(final_step);
    val_curve.push_back({static_cast<double>(final_step), last_val->first.loss});
    std::cerr << "validation loss " << fmt(last_val->first.loss, 4) << ", perplexity " << fmt(std::exp(last_val->first.loss), 2)
              << " (" << last_val->first.tokens << " tokens)\n";
    save(final_step, &last_val->second);
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // ---- summary: measured against the plan's ideal ------------------------------------------
  pl::cost_model measured;
  for (std::size_t s = 0; s < pipe.stages(); ++s) {
    measured.forward.push_back(median(fwd_ms[s]));
    measured.backward.push_back(median(bwd_ms[s]));
  }
  double ideal_step_ms = 0, ideal_bubble = 0;
  std::vector<pl::timeline_entry> timeline;
  if (!step_ms.empty()) {
    auto sim = pl::simulate(pipe.plan(), measured);
    if (sim) ideal_step_ms = sim->makespan, ideal_bubble = sim->bubble, timeline = sim->timeline;
  }
  const double pnorm = param_norm(last_val->second);
  json summary = {{"summary", true},
                  {"steps", final_step},
                  {"steps_this_run", step_ms.size()},
                  {"carry_state", o.carry_state},
                  {"loss", last_loss},
                  {"val_loss", last_val->first.loss},
                  {"val_ppl", std::exp(last_val->first.loss)},
                  {"param_norm", pnorm},
                  {"step_ms", median(step_ms)},
                  {"ideal_step_ms", ideal_step_ms},
                  {"bubble", median(bubbles)},
                  {"ideal_bubble", ideal_bubble},
                  {"tokens_per_s", median(tokens_per_s)},
                  {"stage_forward_ms", measured.forward},
                  {"stage_backward_ms", measured.backward},
                  {"wall_s", wall_s},
                  {"devices", spec_used},
                  {"cpu_threads_per_device", cpu_stages ? json(cpu_threads) : json(nullptr)},
                  {"schedule", pl::to_string(schedule)},
                  {"micro_batches", cfg.micro_batches},
                  {"chunks", cfg.chunks},
                  {"layer_counts", counts}};
  log_line(summary);
  if (!step_ms.empty())
    std::cerr << "lstm_lm: " << step_ms.size() << " steps in " << fmt(wall_s, 1) << " s; median step " << fmt(median(step_ms), 1)
              << " ms (ideal " << fmt(ideal_step_ms, 1) << " ms), bubble " << fmt(median(bubbles), 3) << " (ideal "
              << fmt(ideal_bubble, 3) << "), " << fmt(median(tokens_per_s), 0) << " tokens/s, parameter norm " << fmt(pnorm, 2)
              << "\n";

  if (!o.report.empty()) {
    fs::path dir(o.report);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create --report directory '" + o.report + "'");
    write_text(dir / "loss.svg", lstm_lm::loss_curve_svg(curve, val_curve));
    write_text(dir / "timeline.svg",
               lstm_lm::timeline_svg(timeline, static_cast<int>(pipe.stages()), static_cast<int>(cfg.chunks),
                                     std::string(pl::to_string(schedule)) + ", " + std::to_string(pipe.stages()) +
                                         " stages, " + std::to_string(cfg.micro_batches) +
                                         (cfg.micro_batches == 1 ? " micro-batch" : " micro-batches") + ": ideal step " +
                                         fmt(ideal_step_ms, 1) + " ms, bubble " + fmt(ideal_bubble, 3)));
    std::vector<std::pair<std::string, std::string>> figures = {
        {"corpus", source},
        {"model", std::to_string(cfg.layers) + " x LSTM(" + std::to_string(cfg.hidden) + "), embed " + std::to_string(cfg.embed) +
                      ", vocabulary " + std::to_string(cfg.vocab) + " (" + lm::to_string(tokens) + ")"},
        {"batch x seq", std::to_string(cfg.batch) + " x " + std::to_string(cfg.seq)},
        {"devices / schedule", spec_used + ", " + pl::to_string(schedule) + ", " + std::to_string(cfg.micro_batches) +
                                   " micro-batches, " + std::to_string(cfg.chunks) + " chunks"},
        {"steps (this run)", std::to_string(final_step) + " (" + std::to_string(step_ms.size()) + ")"},
        {"first / last training loss", curve.empty() ? "-" : fmt(curve.front().value, 4) + " / " + fmt(curve.back().value, 4)},
        {"validation loss / perplexity", fmt(last_val->first.loss, 4) + " / " + fmt(std::exp(last_val->first.loss), 2)},
        {"median step", fmt(median(step_ms), 1) + " ms"},
        {"ideal step (plan, measured stage times)", fmt(ideal_step_ms, 1) + " ms"},
        {"bubble measured / ideal", fmt(median(bubbles), 3) + " / " + fmt(ideal_bubble, 3)},
        {"tokens/s", fmt(median(tokens_per_s), 0)},
        {"parameter norm", fmt(pnorm, 3)},
        {"wall time", fmt(wall_s, 1) + " s"}};
    write_text(dir / "index.html", lstm_lm::index_html("lstm_lm training run", figures, placed.to_string() + "\n\n" + pipe.plan().to_string()));
    std::cerr << "lstm_lm: report in " << (dir / "index.html").string() << "\n";
  }
  if (!o.trace.empty()) {  // the trace is written at shutdown: its failure is the run's
    pipe_owner.reset();
    auto shut = system.shutdown();
    if (!shut.trace_error.empty()) throw std::runtime_error("--trace: " + shut.trace_error);
    std::cerr << "lstm_lm: trace of " << shut.trace_events << " events in " << o.trace << "\n";
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
  lm::lm_model model(ck.config, ck.parameters);
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
  lm::lm_model model(ck.config, ck.parameters);
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
  train_options t;
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
  train->add_option("--lr", t.lr, "SGD learning rate")->capture_default_str();
  train->add_option("--clip", t.clip, "global gradient-norm clip")->capture_default_str();
  train->add_option("--seed", t.seed, "initialisation seed")->check(any_u64)->capture_default_str();
  train->add_option("--val-fraction", t.val_fraction, "held-out tail of the corpus")->capture_default_str();
  train->add_option("--val-tokens", t.val_tokens, "validation predictions at most (0: the whole held-out text)")
      ->check(any_u64)
      ->capture_default_str();
  train->add_flag("--carry-state", t.carry_state,
                  "start each step from the LSTM state the previous window ended with (truncated BPTT; reset every epoch)");
  train->add_option("--trace", t.trace, "record a strata trace into FILE");
  auto* checkpoint = train->add_option("--checkpoint", t.checkpoint,
                                       "checkpoint directory: saved every epoch and at the end; resumed from when present");
  train->add_option("--save-every", t.save_every, "also save the checkpoint every N steps")->check(step_count)->needs(checkpoint);
  train->add_option("--log", t.log, "JSON lines: one per step, per validation and a summary");
  train->add_option("--report", t.report, "directory for loss.svg, timeline.svg and index.html");
  train->add_option("--crash-after-step", t.crash_after_step, "testing: kill the process (SIGKILL) after step N")
      ->check(step_count)
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
  t.chunks_given = chunks->count() > 0;
  t.vocab_size_given = vocab_size->count() > 0;
  // Each cpu device is a oneTBB arena and the kernels split large GEMMs into tasks inside it;
  // OpenBLAS's own threads (one per core by default) would oversubscribe the cores when two
  // stages compute at once, and its idle threads spin: wavefront steps ran 5x slower
  // (docs/kernels.md, Threading).
  strata::kernels::cpu::set_blas_threads(1);
  try {
    if (train->parsed()) return run_train(t);
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
