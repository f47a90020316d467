#include "strata/stats.hpp"
#include "strata/lm/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "strata/actor_system.hpp"
#include "strata/lm/pipeline.hpp"
#include "trainer_setup.hpp"

namespace strata::lm {

namespace {

namespace pl = strata::pipeline;
using json = nlohmann::ordered_json;
using detail::fixed;

double param_norm(const std::vector<named_parameter>& params) {
  double sq = 0;
  for (const auto& p : params)
    for (float v : p.values) sq += static_cast<double>(v) * v;
  return std::sqrt(sq);
}

// Set by SIGINT/SIGTERM while a train() with handle_signals runs. An atomic rather than volatile
// sig_atomic_t: the handler may run on any of the threads.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");
char interrupt_note[256];
std::size_t interrupt_note_size = 0;

extern "C" void on_interrupt(int) {
  interrupted.store(true, std::memory_order_relaxed);
  [[maybe_unused]] auto n = ::write(2, interrupt_note, interrupt_note_size);
}

/// Installs on_interrupt for SIGINT and SIGTERM for its lifetime: the first signal stops the run
/// after the current step (saved when there is a checkpoint); a second one ends it at once
/// (SA_RESETHAND), which saves are atomic against.
class signal_scope {
public:
  signal_scope(bool active, const std::string& program) : active_(active) {
    if (!active_) return;
    const std::string note = "\n" + program + ": interrupted: stopping after this step (interrupt again to quit at once)\n";
    interrupt_note_size = std::min(note.size(), sizeof interrupt_note);
    std::memcpy(interrupt_note, note.data(), interrupt_note_size);
    interrupted.store(false, std::memory_order_relaxed);
    struct sigaction stop_after_step {};
    stop_after_step.sa_handler = on_interrupt;
    stop_after_step.sa_flags = SA_RESETHAND | SA_RESTART;
    ::sigemptyset(&stop_after_step.sa_mask);
    ::sigaction(SIGINT, &stop_after_step, &old_int_);
    ::sigaction(SIGTERM, &stop_after_step, &old_term_);
  }
  ~signal_scope() {
    if (!active_) return;
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  signal_scope(const signal_scope&) = delete;
  signal_scope& operator=(const signal_scope&) = delete;

private:
  bool active_;
  struct sigaction old_int_ {}, old_term_ {};
};

/// The JSON-lines log: one line per step, retry, validation and stop, and a summary.
class run_log {
public:
  run_log(const std::string& path, bool append) {
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw input_error("--log '" + path + "' cannot be opened for writing");
  }
  void write(const json& j) {
    if (out_.is_open()) out_ << j.dump() << '\n' << std::flush;
  }
  /// `j` with `more`'s keys after its own.
  void write(json j, const json& more) {
    j.update(more);
    write(j);
  }

private:
  std::ofstream out_;
};

/// The end of a run: the --test file evaluated (10 columns, state carried, every token) and a
/// sample from the trained model after the validation text's first tokens.
void held_out_and_sample(const trainer_options& o, const detail::prepared_run& run, const lm::config& cfg, std::size_t step,
                         const std::vector<named_parameter>& params, run_log& log, training_result& result) {
  if (run.test_ids.empty() && o.sample_length == 0) return;
  const lm::model model(cfg, params);
  if (!run.test_ids.empty()) {
    result.test = evaluate_batched(model, run.test_ids, 10, cfg.seq, 0);
    log.write({{"step", step}, {"test_loss", result.test->loss}, {"test_ppl", std::exp(result.test->loss)},
               {"test_tokens", result.test->tokens}});
  }
  if (o.sample_length == 0) return;
  const std::size_t prompt_tokens = run.vocab.kind() == token_kind::chars ? 12 : 4;
  const std::vector<std::int32_t> prompt(run.validation_ids.begin(),
                                         run.validation_ids.begin() + static_cast<std::ptrdiff_t>(
                                                                          std::min(prompt_tokens, run.validation_ids.size())));
  const auto sampled = generate(model, prompt, o.sample_length, o.sample_temperature, o.seed, run.vocab.unknown_id());
  result.sample_prompt = run.vocab.decode(prompt);
  auto all = prompt;
  all.insert(all.end(), sampled.begin(), sampled.end());
  const std::string text = run.vocab.decode(all);
  result.sample = text.substr(std::min(result.sample_prompt.size(), text.size()));
  log.write({{"step", step}, {"sample_prompt", result.sample_prompt}, {"sample", result.sample},
             {"sample_temperature", o.sample_temperature}, {"sample_seed", o.seed}});
}

}  // namespace

double scheduled_lr(const lr_schedule& s, std::size_t step, double plateau_scale) {
  const double k = static_cast<double>(step);
  if (step < s.warmup_steps) return s.base * plateau_scale * (k + 1) / static_cast<double>(s.warmup_steps);
  const double after = k - static_cast<double>(s.warmup_steps);
  if (s.kind == "constant") return s.base;
  if (s.kind == "plateau") return s.base * plateau_scale;
  if (s.kind == "step") return s.base * std::pow(s.decay, std::floor(after / static_cast<double>(std::max<std::size_t>(1, s.step_size))));
  if (s.kind == "cosine") {
    const double span = static_cast<double>(s.total_steps > s.warmup_steps ? s.total_steps - s.warmup_steps : 1);
    return s.base * 0.5 * (1 + std::cos(std::acos(-1.0) * std::min(after / span, 1.0)));
  }
  throw std::invalid_argument("learning-rate schedule '" + s.kind + "' is not one of constant, step, cosine, plateau");
}

namespace {
/// The run once its system is up: the pipeline, the steps, validations, checkpoints, the summary.
training_result run_training(const trainer_options& o, const trainer_events& events, detail::prepared_run& run,
                             training_result result, actor_system& system);
}  // namespace

training_result train(const trainer_options& o, const trainer_events& events) {
  auto run = detail::prepare_run(o);
  training_result result;
  auto start = [&] {
    detail::place_stages(run, o, events);
    result.setup = run.setup;
    if (events.on_start) events.on_start(result.setup);
  };

  // ---- the pipeline ------------------------------------------------------------------------
  system_config sc;
  sc.worker_threads = 2;
  sc.trace_file = o.trace;  // across ranks each writes FILE.rank<r>; the program joins them (lstm_lm)
  if (!o.ranks) {
    start();  // before the system: --partition auto measures the costs on idle devices
    actor_system system(sc);
    return run_training(o, events, run, std::move(result), system);
  }
  actor_system system(sc);
  // Across ranks a failure ends this process at once (the MPI job with it): the other ranks wait
  // in collective calls that a rank that unwinds would never join. The placement needs the
  // ranks joined: they measure the link between them and take rank 0's costs.
  o.ranks->attach(system);
  try {
    start();
    auto done = run_training(o, events, run, std::move(result), system);
    o.ranks->detach();
    return done;
  } catch (const std::exception& e) {
    o.ranks->fail(e);
    throw;  // not reached: fail() ends the process
  }
}

namespace {

training_result run_training(const trainer_options& o, const trainer_events& events, detail::prepared_run& run,
                             training_result result, actor_system& system) {
  const training_setup& su = result.setup;
  const lm::config& cfg = su.model;
  const std::size_t windows = su.windows, first_step = su.first_step, total_steps = su.total_steps;
  const bool rank0 = !o.ranks || o.ranks->rank() == 0;
  lm_pipeline_options pipe_options{.carry_state = su.carry_state, .ranks = o.ranks, .replicas = o.replicas};
  if (su.link) pipe_options.link = pl::link_model::measured(su.link->latency_us, su.link->gbps);  // for its ideal step
  // Owned through a pointer so that it stops before the system's shutdown writes the trace.
  auto pipe_owner = std::make_unique<lm_pipeline>(system, std::move(run.devices), cfg, su.schedule, su.layer_counts,
                                                  std::move(pipe_options));
  lm_pipeline& pipe = *pipe_owner;
  // The schedule; a plateau's position comes back with a resume of the same schedule.
  const lr_schedule schedule{o.lr_schedule, cfg.lr, o.warmup_steps, o.lr_decay, o.lr_step_size, total_steps};
  schedule_record plateau;
  plateau.kind = o.lr_schedule;
  plateau.warmup_steps = o.warmup_steps;
  if (run.resume) {
    if (auto r = pipe.set_parameters(run.resume->parameters); !r) throw std::runtime_error(r.error().message());
    // The optimizer's state continues when the checkpoint's optimizer is this run's; another
    // optimizer starts afresh.
    if (!run.resume->optimizer_state.empty() && run.resume->config.optimizer == cfg.optimizer)
      if (auto r = pipe.set_optimizer_state(run.resume->optimizer_state); !r)
        throw std::runtime_error("cannot restore the optimizer state of --checkpoint '" + o.checkpoint + "': " + r.error().message());
    // The carried LSTM state continues when the checkpoint has it (else this run starts from zeros).
    if (su.carry_state && !run.resume->carried_state.empty())
      if (auto r = pipe.set_carried_state(run.resume->carried_state); !r)
        throw std::runtime_error("cannot restore the carried state of --checkpoint '" + o.checkpoint + "': " + r.error().message());
    if (run.resume->schedule.kind == o.lr_schedule) {
      plateau.lr_scale = run.resume->schedule.lr_scale;
      plateau.best_val_loss = run.resume->schedule.best_val_loss;
      plateau.stale_validations = run.resume->schedule.stale_validations;
    }
  }
  // A plateau schedule: after each validation, decay when it has not improved for long enough
  // (improving = below the best by more than 1e-4 relative, as ReduceLROnPlateau's default).
  auto on_plateau_check = [&](double val_loss) {
    if (o.lr_schedule != "plateau" || !std::isfinite(val_loss)) return;
    if (val_loss < plateau.best_val_loss * (1 - 1e-4)) {
      plateau.best_val_loss = val_loss;
      plateau.stale_validations = 0;
    } else if (++plateau.stale_validations > o.patience) {
      plateau.lr_scale *= o.lr_decay;
      plateau.stale_validations = 0;
    }
  };
  run_log log(rank0 ? o.log : std::string(), run.resume.has_value());  // across ranks: rank 0 writes it

  auto validate = [&](std::size_t step) {
    auto params = pipe.parameters();
    if (!params) throw std::runtime_error(params.error().message());
    lm::model model(cfg, *params);
    auto r = evaluate_batched(model, run.validation_ids, 10, cfg.seq, o.val_tokens);
    log.write({{"step", step}, {"epoch", step / windows}, {"val_loss", r.loss}, {"val_ppl", std::exp(r.loss)}, {"val_tokens", r.tokens}});
    return std::pair{r, std::move(*params)};
  };
  auto save = [&](std::size_t step, const std::vector<named_parameter>* have) {
    if (o.checkpoint.empty()) return;
    checkpoint ck{cfg, su.tokens, run.vocab, {}, step, step / windows, windows, su.source, {}, plateau};
    if (cfg.optimizer != optimizer_kind::sgd) {
      auto state = pipe.optimizer_state();
      if (!state) throw std::runtime_error("cannot save the optimizer state: " + state.error().message());
      ck.optimizer_state = std::move(*state);
    }
    if (su.carry_state) {
      auto carried = pipe.carried_state();
      if (!carried) throw std::runtime_error("cannot save the carried state: " + carried.error().message());
      ck.carried_state = std::move(*carried);
    }
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
    if (!rank0) return;  // the others took part in gathering the parameters and the optimizer state
    if (auto e = save_checkpoint(o.checkpoint, ck); e) throw std::runtime_error(e.message());
  };
  auto stop_requested = [&] {
    return interrupted.load(std::memory_order_relaxed) || (o.stop && o.stop->load(std::memory_order_relaxed));
  };

  std::vector<double> step_ms, bubbles, tokens_per_s;
  std::vector<std::vector<double>> fwd_ms(pipe.stages()), bwd_ms(pipe.stages());
  std::vector<std::int32_t> x, y, xj, yj;
  const double tokens_per_step = static_cast<double>(cfg.seq * cfg.batch);
  const auto started = std::chrono::steady_clock::now();
  std::optional<std::pair<eval_result, std::vector<named_parameter>>> last_val;
  std::size_t last_val_step = static_cast<std::size_t>(-1);
  signal_scope signals(o.handle_signals, o.program);
  for (std::size_t step = first_step; step < total_steps; ++step) {
    if (su.accumulate == 1) {
      run.batches->window(step % windows, x, y);
    } else {  // windows side by side: window j fills columns [j B, (j+1) B), micro-batch(es) of its own
      const std::size_t B = o.batch, N = su.accumulate, T = cfg.seq;
      x.assign(T * B * N, 0);
      y.assign(T * B * N, 0);
      for (std::size_t j = 0; j < N; ++j) {
        run.batches->window((step % windows) * N + j, xj, yj);
        for (std::size_t t = 0; t < T; ++t)
          for (std::size_t b = 0; b < B; ++b) {
            x[t * B * N + j * B + b] = xj[t * B + b];
            y[t * B * N + j * B + b] = yj[t * B + b];
          }
      }
    }
    if (su.carry_state && step % windows == 0 && step > 0)  // the column streams start over
      if (auto r = pipe.reset_state(); !r) throw std::runtime_error(r.error().message());
    // A retry restarts the stages, whose carried state starts from zeros: keep it to put back.
    std::optional<std::vector<named_parameter>> carried_before;
    if (su.carry_state && o.retries > 0) {
      auto c = pipe.carried_state();
      if (!c) throw std::runtime_error("cannot read the carried state: " + c.error().message());
      carried_before = std::move(*c);
    }
    if (o.fault_at_step == step + 1) pipe.inject_device_fault(pipe.stages() - 1, 1);
    const double lr = scheduled_lr(schedule, step, plateau.lr_scale);
    if (auto set = pipe.set_learning_rate(lr); !set) throw std::runtime_error("cannot set the learning rate: " + set.error().message());
    auto t0 = std::chrono::steady_clock::now();
    pipe.set_step_index(step);  // dropout's masks follow the data position, across resumes too
    auto r = pipe.train_step(x, y);
    // A failed step changes no weights; the next train_step restarts the pipeline's actors.
    for (std::size_t attempt = 1; !r && attempt <= o.retries; ++attempt) {
      if (events.on_retry) events.on_retry(step + 1, attempt, o.retries, r.error().message());
      log.write({{"step", step + 1}, {"retry", attempt}, {"error", r.error().message()}});
      if (carried_before)
        if (auto put = pipe.set_carried_state(*carried_before); !put)
          throw std::runtime_error("cannot restore the carried state for the retry: " + put.error().message());
      t0 = std::chrono::steady_clock::now();
      r = pipe.train_step(x, y);
    }
    if (!r) throw std::runtime_error("step " + std::to_string(step + 1) + " failed: " + r.error().message());
    if (!std::isfinite(r->loss))
      throw std::runtime_error("the training diverged: the loss of step " + std::to_string(step + 1) + " is " +
                               fixed(r->loss, 3) + " (try a smaller --lr)");
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double tps = tokens_per_step / (wall_ms / 1e3);
    const double bubble = r->measured_bubble();
    step_ms.push_back(r->step_ms);
    bubbles.push_back(bubble);
    tokens_per_s.push_back(tps);
    auto st = pipe.measured_stage_times_ms();
    for (std::size_t s = 0; s < st.size(); ++s) fwd_ms[s].push_back(st[s].first), bwd_ms[s].push_back(st[s].second);
    const std::size_t done = step + 1;
    result.loss = r->loss;
    result.losses.push_back({static_cast<double>(done), r->loss});
    log.write({{"step", done}, {"epoch", step / windows}, {"loss", r->loss}, {"ppl", std::exp(std::min(r->loss, 50.0))},
               {"grad_norm", r->grad_norm}, {"step_ms", r->step_ms}, {"tokens_per_s", tps}, {"bubble", bubble}, {"lr", lr}});
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const double eta = elapsed / static_cast<double>(done - first_step) * static_cast<double>(total_steps - done);
    if (events.on_step) events.on_step({done, total_steps, r->loss, r->grad_norm, r->step_ms, tps, bubble, eta, lr});
    bool saved = false;
    const bool epoch_end = done % windows == 0;
    if (epoch_end || (o.val_every && done % o.val_every == 0 && done < total_steps)) {
      last_val = validate(done);
      last_val_step = done;
      result.validation_losses.push_back({static_cast<double>(done), last_val->first.loss});
      if (events.on_validation) events.on_validation(done, epoch_end, last_val->first);
      on_plateau_check(last_val->first.loss);
      if (epoch_end) {
        save(done, &last_val->second);
        saved = true;
      }
    }
    if (!saved && o.save_every && done % o.save_every == 0 && done < total_steps) {
      save(done, nullptr);
      saved = true;
    }
    if (o.crash_after_step && done == o.crash_after_step && (o.ranks ? o.ranks->rank() : 0) == o.crash_rank)
      std::raise(SIGKILL);
    auto stop = pipe.any_rank(stop_requested());  // across ranks every rank stops after the same step
    if (!stop) throw std::runtime_error("cannot agree on stopping with the other ranks: " + stop.error().message());
    if (*stop && done < total_steps) {
      if (!saved) save(done, nullptr);
      log.write({{"step", done}, {"interrupted", true}});
      result.interrupted = true;
      result.steps = done;
      result.steps_this_run = step_ms.size();
      return result;
    }
  }
  const std::size_t final_step = std::max(first_step, total_steps);
  if (last_val_step != final_step) {
    last_val = validate(final_step);
    result.validation_losses.push_back({static_cast<double>(final_step), last_val->first.loss});
    if (events.on_validation) events.on_validation(final_step, false, last_val->first);
    save(final_step, &last_val->second);
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  held_out_and_sample(o, run, cfg, final_step, last_val->second, log, result);

  // ---- summary: measured against the plan's ideal ------------------------------------------
  pl::cost_model measured;
  for (std::size_t s = 0; s < pipe.stages(); ++s) {
    measured.forward.push_back(median(fwd_ms[s]));
    measured.backward.push_back(median(bwd_ms[s]));
  }
  if (!step_ms.empty()) {  // the plan with the median stage times (and the link between ranks)
    step_result medians;
    medians.stage_forward_ms = measured.forward;
    medians.stage_backward_ms = measured.backward;
    if (auto ideal = pipe.ideal(medians))
      result.ideal_step_ms = ideal->step_ms, result.ideal_bubble = ideal->bubble, result.timeline = ideal->simulation.timeline;
  }
  result.steps = final_step;
  result.steps_this_run = step_ms.size();
  result.validation = last_val->first;
  result.param_norm = param_norm(last_val->second);
  result.step_ms = median(step_ms);
  result.bubble = median(bubbles);
  result.tokens_per_s = median(tokens_per_s);
  result.stage_forward_ms = measured.forward;
  result.stage_backward_ms = measured.backward;
  result.plan_text = pipe.plan().to_string();
  json link_keys = json::object();  // under mpirun: the link the placement and the ideal step charged
  if (o.ranks) {
    const auto& link = su.link;  // none with one stage per replica
    link_keys["link_latency_us"] = link ? json(link->latency_us) : json(nullptr);
    link_keys["link_gbps"] = link && std::isfinite(link->gbps) ? json(link->gbps) : json(nullptr);
  }
  log.write({{"summary", true},
             {"steps", final_step},
             {"steps_this_run", step_ms.size()},
             {"carry_state", su.carry_state},
             {"optimizer", to_string(cfg.optimizer)},
             {"lr", cfg.lr},
             {"lr_schedule", o.lr_schedule},
             {"residual", cfg.residual},
             {"dropout", cfg.dropout},
             {"accumulate", su.accumulate},
             {"loss", result.loss},
             {"val_loss", result.validation.loss},
             {"val_ppl", std::exp(result.validation.loss)},
             {"test_loss", result.test ? json(result.test->loss) : json(nullptr)},
             {"test_ppl", result.test ? json(std::exp(result.test->loss)) : json(nullptr)},
             {"param_norm", result.param_norm},
             {"step_ms", result.step_ms},
             {"ideal_step_ms", result.ideal_step_ms},
             {"bubble", result.bubble},
             {"ideal_bubble", result.ideal_bubble},
             {"tokens_per_s", result.tokens_per_s},
             {"stage_forward_ms", measured.forward},
             {"stage_backward_ms", measured.backward},
             {"wall_s", result.wall_s},
             {"devices", su.devices},
             {"cpu_threads_per_device", su.cpu_stages ? json(su.cpu_threads) : json(nullptr)},
             {"schedule", pl::to_string(su.schedule)},
             {"micro_batches", cfg.micro_batches},
             {"chunks", cfg.chunks},
             {"layer_counts", su.layer_counts},
             {"ranks", su.ranks},
             {"stages", su.layer_counts.size()},
             {"replicas", su.replicas},
             {"replica_sum", pipe.replica_sum()}},
            link_keys);
  if (!o.trace.empty()) {  // the trace is written at shutdown
    pipe_owner.reset();
    if (o.ranks) o.ranks->detach();
    auto shut = system.shutdown();
    result.trace_error = shut.trace_error;
    result.trace_events = shut.trace_events;
  }
  return result;
}

}  // namespace

}  // namespace strata::lm
