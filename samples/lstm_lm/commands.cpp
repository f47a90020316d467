// lstm_lm's commands: what train, eval and generate run and print (main.cpp parses the flags).
#include "commands.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report.hpp"
#include "traces.hpp"
#include "strata/lm/checkpoint.hpp"
#include "strata/lm/data.hpp"
#include "strata/lm/inference.hpp"

namespace lstm_lm {

namespace {

namespace lm = strata::lm;
namespace pl = strata::pipeline;
using json = nlohmann::ordered_json;

std::string hms(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  auto s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
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

lm::checkpoint load_for_inference(const std::string& dir) {
  auto ck = lm::load_checkpoint(dir);
  if (!ck) throw usage_error(ck.error().message());
  return std::move(*ck);
}

/// What a training run shows on stderr while it runs: the setup, the measured costs, a progress
/// line, retries and validations. Outlives the run (its events point into it).
class train_display {
public:
  explicit train_display(const lm::trainer_options& o) : o_(o) {}

  lm::trainer_events events() {
    lm::trainer_events ev;
    ev.on_costs_measured = [](const pl::model_costs& c, const std::string& note) {
      std::cerr << "lstm_lm: " << note << ": embedding " << ms_of(c.embedding) << " ms, lstm 0 " << ms_of(c.lstm.front()) << " ms"
                << (c.lstm.size() > 1 ? ", lstm 1-" + std::to_string(c.lstm.size() - 1) + " " + ms_of(c.lstm.back()) + " ms each"
                                      : std::string())
                << ", decoder " << ms_of(c.decoder) << " ms (forward + backward per micro-batch)\n";
    };
    ev.on_start = [this](const lm::training_setup& s) {
      print_setup(s, o_);
      windows_ = s.windows;
      total_steps_ = s.total_steps;
      bar_.emplace(s.total_steps, s.first_step);
    };
    ev.on_step = [this](const lm::step_progress& p) { bar_->update(p.step, p.loss, p.tokens_per_s, p.eta_s); };
    ev.on_retry = [](std::size_t step, std::size_t attempt, std::size_t retries, const std::string& error) {
      std::cerr << "\nlstm_lm: step " << step << " failed: " << error << "; retrying (" << attempt << " of " << retries << ")\n";
    };
    ev.on_validation = [this](std::size_t step, bool epoch_end, const lm::eval_result& v) { validation(step, epoch_end, v); };
    return ev;
  }

  /// Ends the progress line (when one was shown).
  void finish() {
    if (bar_) bar_->finish();
  }

private:
  void validation(std::size_t step, bool epoch_end, const lm::eval_result& v) {
    const std::string figures = "validation loss " + fmt(v.loss, 4) + ", perplexity " + fmt(std::exp(v.loss), 2) + " (" +
                                std::to_string(v.tokens) + " tokens)";
    if (epoch_end) {
      bar_->note("epoch " + std::to_string(step / windows_) + ": " + figures);
    } else if (step < total_steps_) {  // --val-every
      bar_->note("step " + std::to_string(step) + ": " + figures);
    } else {
      bar_->finish();
      std::cerr << figures << "\n";
    }
  }

  const lm::trainer_options& o_;
  std::optional<progress_line> bar_;
  std::size_t windows_ = 1, total_steps_ = 0;
};

/// lm::train, with bad options as usage_error (exit 2).
lm::training_result train_or_usage_error(const lm::trainer_options& o, const lm::trainer_events& ev) {
  try {
    return lm::train(o, ev);
  } catch (const lm::input_error& e) {
    throw usage_error(e.what());
  }
}

/// The run's figures on rank 0: its steps, the --test file, the closing sample.
void print_result(const lm::trainer_options& o, const lm::training_result& r) {
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
}

/// Rank 0's files after the run: the report and the trace (across ranks, every rank's joined).
void write_outputs(const lm::trainer_options& o, const lm::training_result& r, bool ranked_trace) {
  if (!o.report.empty())
    std::cerr << "lstm_lm: report in " << lstm_lm::write_report(r, o.report) << "\n";
  if (!o.trace.empty()) {  // the trace is written at shutdown: its failure is the run's
    if (!r.trace_error.empty()) throw std::runtime_error("--trace: " + r.trace_error);
    if (ranked_trace) std::cerr << lstm_lm::join_rank_traces(o.trace, o.ranks->size(), std::chrono::seconds(60)) << "\n";
    else std::cerr << "lstm_lm: trace of " << r.trace_events << " events in " << o.trace << "\n";
  }
}

}  // namespace

int run_train(lm::trainer_options o) {
  o.handle_signals = true;
  o.program = "lstm_lm";
  train_display display(o);
  lm::trainer_events ev = display.events();
  const bool rank0 = !o.ranks || o.ranks->rank() == 0;
  if (!rank0) {  // under mpirun rank 0 prints, logs and reports
    ev = {};
    o.report.clear();
  }
  const bool ranked_trace = !o.trace.empty() && o.ranks && o.ranks->size() > 1;
  if (ranked_trace && rank0) lstm_lm::remove_rank_traces(o.trace, o.ranks->size());
  const lm::training_result r = train_or_usage_error(o, ev);
  display.finish();
  if (!rank0) {
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
  print_result(o, r);
  write_outputs(o, r, ranked_trace);
  return 0;
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

}  // namespace lstm_lm
