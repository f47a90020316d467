// A training run's pipeline and its steps: the pipeline built and restored from the checkpoint,
// then per step the batch, the learning rate, the step (with its retries), its figures, the
// validations and checkpoints it is due, and the stop.
#include "training_run.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <stdexcept>
#include <string>

#include "interrupt.hpp"

namespace strata::lm::detail {

namespace {

namespace pl = strata::pipeline;

/// The pipeline on `run`'s devices (which it takes), placed as `su` says.
std::unique_ptr<lm_pipeline> build_pipeline(actor_system& system, prepared_run& run, const training_setup& su,
                                            const trainer_options& o) {
  lm_pipeline_options pipe_options{.carry_state = su.carry_state, .ranks = o.ranks, .replicas = o.replicas};
  if (su.link) pipe_options.link = pl::link_model::measured(su.link->latency_us, su.link->gbps);  // for its ideal step
  return std::make_unique<lm_pipeline>(system, std::move(run.devices), su.model, su.schedule, su.layer_counts,
                                       std::move(pipe_options));
}

}  // namespace

training_result run_training(const trainer_options& o, const trainer_events& events, prepared_run& run,
                             training_result result, actor_system& system) {
  training_run training(o, events, run, std::move(result), system);
  return training.run();
}

training_run::training_run(const trainer_options& o, const trainer_events& events, prepared_run& run,
                           training_result result, actor_system& system)
    : o_(o),
      events_(events),
      run_(run),
      system_(system),
      result_(std::move(result)),
      su_(result_.setup),
      cfg_(su_.model),
      rank0_(!o.ranks || o.ranks->rank() == 0),
      pipe_(build_pipeline(system, run, su_, o)),
      schedule_{o.lr_schedule, cfg_.lr, o.warmup_steps, o.lr_decay, o.lr_step_size, su_.total_steps},
      fwd_ms_(pipe_->stages()),
      bwd_ms_(pipe_->stages()) {
  plateau_.kind = o_.lr_schedule;
  plateau_.warmup_steps = o_.warmup_steps;
  if (run_.resume) restore_checkpoint();
  log_.open(rank0_ ? o_.log : std::string(), run_.resume.has_value());  // across ranks: rank 0 writes it
}

training_result training_run::run() {
  started_ = std::chrono::steady_clock::now();
  signal_scope signals(o_.handle_signals, o_.program);
  for (std::size_t step = su_.first_step; step < su_.total_steps; ++step) {
    fill_batch(step);
    const auto carried_before = begin_step(step);
    const double lr = set_learning_rate(step);
    const auto [r, wall_ms] = train_step(step, carried_before);
    record_step(step, r, wall_ms, lr);
    const std::size_t done = step + 1;
    const bool saved = validate_or_save(done);
    crash_if_asked(done);
    if (stop_after(done, saved)) return std::move(result_);
  }
  return finish();
}

/// The checkpoint's parameters, and what else of it continues in this run: the optimizer's state
/// (the same optimizer only; another starts afresh), the carried LSTM state (when the checkpoint
/// has it, else this run starts from zeros) and a plateau's position (the same schedule only).
void training_run::restore_checkpoint() {
  const checkpoint& ck = *run_.resume;
  if (auto r = pipe_->set_parameters(ck.parameters); !r) throw std::runtime_error(r.error().message());
  if (!ck.optimizer_state.empty() && ck.config.optimizer == cfg_.optimizer)
    if (auto r = pipe_->set_optimizer_state(ck.optimizer_state); !r)
      throw std::runtime_error("cannot restore the optimizer state of --checkpoint '" + o_.checkpoint + "': " + r.error().message());
  if (su_.carry_state && !ck.carried_state.empty())
    if (auto r = pipe_->set_carried_state(ck.carried_state); !r)
      throw std::runtime_error("cannot restore the carried state of --checkpoint '" + o_.checkpoint + "': " + r.error().message());
  if (ck.schedule.kind == o_.lr_schedule) {
    plateau_.lr_scale = ck.schedule.lr_scale;
    plateau_.best_val_loss = ck.schedule.best_val_loss;
    plateau_.stale_validations = ck.schedule.stale_validations;
  }
}

/// The step's tokens and targets into x_, y_: its window, or with --accumulate N windows side by
/// side (window j fills columns [j B, (j+1) B), micro-batch(es) of its own).
void training_run::fill_batch(std::size_t step) {
  const std::size_t windows = su_.windows;
  if (su_.accumulate == 1) {
    run_.batches->window(step % windows, x_, y_);
    return;
  }
  const std::size_t B = o_.batch, N = su_.accumulate, T = cfg_.seq;
  x_.assign(T * B * N, 0);
  y_.assign(T * B * N, 0);
  for (std::size_t j = 0; j < N; ++j) {
    run_.batches->window((step % windows) * N + j, xj_, yj_);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t b = 0; b < B; ++b) {
        x_[t * B * N + j * B + b] = xj_[t * B + b];
        y_[t * B * N + j * B + b] = yj_[t * B + b];
      }
  }
}

/// Before the step: the carried state starts over with each epoch's column streams; with
/// retries it is kept to put back (a retry restarts the stages, whose carried state starts from
/// zeros), which this returns; --fault-at-step injects its fault.
std::optional<training_run::named_parameters> training_run::begin_step(std::size_t step) {
  if (su_.carry_state && step % su_.windows == 0 && step > 0)
    if (auto r = pipe_->reset_state(); !r) throw std::runtime_error(r.error().message());
  std::optional<named_parameters> carried_before;
  if (su_.carry_state && o_.retries > 0) {
    auto c = pipe_->carried_state();
    if (!c) throw std::runtime_error("cannot read the carried state: " + c.error().message());
    carried_before = std::move(*c);
  }
  if (o_.fault_at_step == step + 1) pipe_->inject_device_fault(pipe_->stages() - 1, 1);
  return carried_before;
}

/// The schedule's learning rate for `step`, set on the pipeline.
double training_run::set_learning_rate(std::size_t step) {
  const double lr = scheduled_lr(schedule_, step, plateau_.lr_scale);
  if (auto set = pipe_->set_learning_rate(lr); !set) throw std::runtime_error("cannot set the learning rate: " + set.error().message());
  return lr;
}

/// The step on the pipeline, retried up to --retries times (a failed step changes no weights;
/// the next train_step restarts the pipeline's actors): its result and its wall time in ms (of
/// the last attempt). Throws when it fails every time or its loss is not finite.
std::pair<step_result, double> training_run::train_step(std::size_t step,
                                                        const std::optional<named_parameters>& carried_before) {
  auto t0 = std::chrono::steady_clock::now();
  pipe_->set_step_index(step);  // dropout's masks follow the data position, across resumes too
  auto r = pipe_->train_step(x_, y_);
  for (std::size_t attempt = 1; !r && attempt <= o_.retries; ++attempt) {
    if (events_.on_retry) events_.on_retry(step + 1, attempt, o_.retries, r.error().message());
    log_.write({{"step", step + 1}, {"retry", attempt}, {"error", r.error().message()}});
    if (carried_before)
      if (auto put = pipe_->set_carried_state(*carried_before); !put)
        throw std::runtime_error("cannot restore the carried state for the retry: " + put.error().message());
    t0 = std::chrono::steady_clock::now();
    r = pipe_->train_step(x_, y_);
  }
  if (!r) throw std::runtime_error("step " + std::to_string(step + 1) + " failed: " + r.error().message());
  if (!std::isfinite(r->loss))
    throw std::runtime_error("the training diverged: the loss of step " + std::to_string(step + 1) + " is " +
                             fixed(r->loss, 3) + " (try a smaller --lr)");
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return {std::move(*r), wall_ms};
}

/// The step's figures: kept for the summary, in the result, the log and the on_step event.
void training_run::record_step(std::size_t step, const step_result& r, double wall_ms, double lr) {
  const double tokens_per_step = static_cast<double>(cfg_.seq * cfg_.batch);
  const double tps = tokens_per_step / (wall_ms / 1e3);
  const double bubble = r.measured_bubble();
  step_ms_.push_back(r.step_ms);
  bubbles_.push_back(bubble);
  tokens_per_s_.push_back(tps);
  auto st = pipe_->measured_stage_times_ms();
  for (std::size_t s = 0; s < st.size(); ++s) fwd_ms_[s].push_back(st[s].first), bwd_ms_[s].push_back(st[s].second);
  const std::size_t done = step + 1, first_step = su_.first_step, total_steps = su_.total_steps;
  result_.loss = r.loss;
  result_.losses.push_back({static_cast<double>(done), r.loss});
  log_.write({{"step", done}, {"epoch", step / su_.windows}, {"loss", r.loss}, {"ppl", std::exp(std::min(r.loss, 50.0))},
              {"grad_norm", r.grad_norm}, {"step_ms", r.step_ms}, {"tokens_per_s", tps}, {"bubble", bubble}, {"lr", lr}});
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double eta = elapsed / static_cast<double>(done - first_step) * static_cast<double>(total_steps - done);
  if (events_.on_step) events_.on_step({done, total_steps, r.loss, r.grad_norm, r.step_ms, tps, bubble, eta, lr});
}

/// After step `done`: a validation at each epoch's end (saved then) and every --val-every steps,
/// else a save every --save-every steps. Returns whether it saved.
bool training_run::validate_or_save(std::size_t done) {
  const bool epoch_end = done % su_.windows == 0;
  if (epoch_end || (o_.val_every && done % o_.val_every == 0 && done < su_.total_steps)) {
    last_val_ = validate(done);
    last_val_step_ = done;
    result_.validation_losses.push_back({static_cast<double>(done), last_val_->first.loss});
    if (events_.on_validation) events_.on_validation(done, epoch_end, last_val_->first);
    plateau_check(last_val_->first.loss);
    if (epoch_end) {
      save(done, &last_val_->second);
      return true;
    }
  }
  if (o_.save_every && done % o_.save_every == 0 && done < su_.total_steps) {
    save(done, nullptr);
    return true;
  }
  return false;
}

/// --crash-after-step (testing): the process dies after step `done` on --crash-rank.
void training_run::crash_if_asked(std::size_t done) const {
  if (o_.crash_after_step && done == o_.crash_after_step && (o_.ranks ? o_.ranks->rank() : 0) == o_.crash_rank)
    std::raise(SIGKILL);
}

/// Whether the run stops after step `done` (an interrupt or options.stop; across ranks every rank
/// stops after the same step): saved then when it was not yet, and logged.
bool training_run::stop_after(std::size_t done, bool saved) {
  const bool requested = interrupt_requested() || (o_.stop && o_.stop->load(std::memory_order_relaxed));
  auto stop = pipe_->any_rank(requested);
  if (!stop) throw std::runtime_error("cannot agree on stopping with the other ranks: " + stop.error().message());
  if (!*stop || done >= su_.total_steps) return false;
  if (!saved) save(done, nullptr);
  log_.write({{"step", done}, {"interrupted", true}});
  result_.interrupted = true;
  result_.steps = done;
  result_.steps_this_run = step_ms_.size();
  return true;
}

/// The validation loss of the parameters after `step` (logged), with those parameters.
training_run::validation training_run::validate(std::size_t step) {
  auto params = pipe_->parameters();
  if (!params) throw std::runtime_error(params.error().message());
  lm::model model(cfg_, *params);
  auto r = evaluate_batched(model, run_.validation_ids, 10, cfg_.seq, o_.val_tokens);
  log_.write({{"step", step}, {"epoch", step / su_.windows}, {"val_loss", r.loss}, {"val_ppl", std::exp(r.loss)},
              {"val_tokens", r.tokens}});
  return {r, std::move(*params)};
}

/// A plateau schedule: after each validation, decay when it has not improved for long enough
/// (improving = below the best by more than 1e-4 relative, as ReduceLROnPlateau's default).
void training_run::plateau_check(double val_loss) {
  if (o_.lr_schedule != "plateau" || !std::isfinite(val_loss)) return;
  if (val_loss < plateau_.best_val_loss * (1 - 1e-4)) {
    plateau_.best_val_loss = val_loss;
    plateau_.stale_validations = 0;
  } else if (++plateau_.stale_validations > o_.patience) {
    plateau_.lr_scale *= o_.lr_decay;
    plateau_.stale_validations = 0;
  }
}

/// The checkpoint after `step` (--checkpoint; none without it): `have`'s parameters when given,
/// else the pipeline's, with the optimizer's and the carried state. Every rank takes part in
/// gathering them; rank 0 writes.
void training_run::save(std::size_t step, const named_parameters* have) {
  if (o_.checkpoint.empty()) return;
  const std::size_t windows = su_.windows;
  checkpoint ck{cfg_, su_.tokens, run_.vocab, {}, step, step / windows, windows, su_.source, {}, plateau_};
  if (cfg_.optimizer != optimizer_kind::sgd) {
    auto state = pipe_->optimizer_state();
    if (!state) throw std::runtime_error("cannot save the optimizer state: " + state.error().message());
    ck.optimizer_state = std::move(*state);
  }
  if (su_.carry_state) {
    auto carried = pipe_->carried_state();
    if (!carried) throw std::runtime_error("cannot save the carried state: " + carried.error().message());
    ck.carried_state = std::move(*carried);
  }
  if (have) {
    ck.parameters = *have;
  } else {
    auto p = pipe_->parameters();
    if (!p) throw std::runtime_error(p.error().message());
    ck.parameters = std::move(*p);
  }
  // A diverged run must not overwrite a good checkpoint with non-finite parameters.
  for (const auto& p : ck.parameters)
    if (!std::all_of(p.values.begin(), p.values.end(), [](float v) { return std::isfinite(v); }))
      throw std::runtime_error("the training diverged: parameter '" + p.name + "' is not finite after step " +
                               std::to_string(step) + " (try a smaller --lr); the checkpoint was not overwritten");
  if (!rank0_) return;  // the others took part in gathering the parameters and the optimizer state
  if (auto e = save_checkpoint(o_.checkpoint, ck); e) throw std::runtime_error(e.message());
}

}  // namespace strata::lm::detail
