// The end of a training run: the final validation and checkpoint, the --test file and the closing
// sample, the summary measured against the plan's ideal (in the result and the log's last line),
// and the trace written at the system's shutdown.
#include "training_run.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "strata/stats.hpp"

namespace strata::lm::detail {

namespace {

namespace pl = strata::pipeline;
using log_json = run_log::json;

double param_norm(const std::vector<named_parameter>& params) {
  double sq = 0;
  for (const auto& p : params)
    for (float v : p.values) sq += static_cast<double>(v) * v;
  return std::sqrt(sq);
}

}  // namespace

training_result training_run::finish() {
  const std::size_t final_step = std::max(su_.first_step, su_.total_steps);
  final_validation(final_step);
  result_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  held_out_and_sample(final_step);
  summarise(final_step);
  write_summary(final_step);
  write_trace();
  return std::move(result_);
}

/// The validation and checkpoint after the last step, unless that step's are done already.
void training_run::final_validation(std::size_t final_step) {
  if (last_val_step_ == final_step) return;
  last_val_ = validate(final_step);
  result_.validation_losses.push_back({static_cast<double>(final_step), last_val_->first.loss});
  if (events_.on_validation) events_.on_validation(final_step, false, last_val_->first);
  save(final_step, &last_val_->second);
}

/// The --test file evaluated (10 columns, state carried, every token) and a sample from the
/// trained model after the validation text's first tokens.
void training_run::held_out_and_sample(std::size_t final_step) {
  if (run_.test_ids.empty() && o_.sample_length == 0) return;
  const lm::model model(cfg_, last_val_->second);
  if (!run_.test_ids.empty()) {
    result_.test = evaluate_batched(model, run_.test_ids, 10, cfg_.seq, 0);
    log_.write({{"step", final_step}, {"test_loss", result_.test->loss}, {"test_ppl", std::exp(result_.test->loss)},
                {"test_tokens", result_.test->tokens}});
  }
  if (o_.sample_length == 0) return;
  const auto& val = run_.validation_ids;
  const std::size_t prompt_tokens = run_.vocab.kind() == token_kind::chars ? 12 : 4;
  const std::vector<std::int32_t> prompt(val.begin(),
                                         val.begin() + static_cast<std::ptrdiff_t>(std::min(prompt_tokens, val.size())));
  const auto sampled = generate(model, prompt, o_.sample_length, o_.sample_temperature, o_.seed, run_.vocab.unknown_id());
  result_.sample_prompt = run_.vocab.decode(prompt);
  auto all = prompt;
  all.insert(all.end(), sampled.begin(), sampled.end());
  const std::string text = run_.vocab.decode(all);
  result_.sample = text.substr(std::min(result_.sample_prompt.size(), text.size()));
  log_.write({{"step", final_step}, {"sample_prompt", result_.sample_prompt}, {"sample", result_.sample},
              {"sample_temperature", o_.sample_temperature}, {"sample_seed", o_.seed}});
}

/// The run's figures in the result: medians of the steps and the plan's ideal step with the
/// median stage times (and the link between ranks).
void training_run::summarise(std::size_t final_step) {
  pl::cost_model measured;
  for (std::size_t s = 0; s < pipe_->stages(); ++s) {
    measured.forward.push_back(median(fwd_ms_[s]));
    measured.backward.push_back(median(bwd_ms_[s]));
  }
  if (!step_ms_.empty()) {
    step_result medians;
    medians.stage_forward_ms = measured.forward;
    medians.stage_backward_ms = measured.backward;
    if (auto ideal = pipe_->ideal(medians))
      result_.ideal_step_ms = ideal->step_ms, result_.ideal_bubble = ideal->bubble, result_.timeline = ideal->simulation.timeline;
  }
  result_.steps = final_step;
  result_.steps_this_run = step_ms_.size();
  result_.validation = last_val_->first;
  result_.param_norm = param_norm(last_val_->second);
  result_.step_ms = median(step_ms_);
  result_.bubble = median(bubbles_);
  result_.tokens_per_s = median(tokens_per_s_);
  result_.stage_forward_ms = measured.forward;
  result_.stage_backward_ms = measured.backward;
  result_.plan_text = pipe_->plan().to_string();
}

/// The log's summary line.
void training_run::write_summary(std::size_t final_step) {
  log_json link_keys = log_json::object();  // under mpirun: the link the placement and the ideal step charged
  if (o_.ranks) {
    const auto& link = su_.link;  // none with one stage per replica
    link_keys["link_latency_us"] = link ? log_json(link->latency_us) : log_json(nullptr);
    link_keys["link_gbps"] = link && std::isfinite(link->gbps) ? log_json(link->gbps) : log_json(nullptr);
  }
  const training_result& r = result_;
  log_.write({{"summary", true},
              {"steps", final_step},
              {"steps_this_run", step_ms_.size()},
              {"carry_state", su_.carry_state},
              {"optimizer", to_string(cfg_.optimizer)},
              {"lr", cfg_.lr},
              {"lr_schedule", o_.lr_schedule},
              {"residual", cfg_.residual},
              {"dropout", cfg_.dropout},
              {"accumulate", su_.accumulate},
              {"loss", r.loss},
              {"val_loss", r.validation.loss},
              {"val_ppl", std::exp(r.validation.loss)},
              {"test_loss", r.test ? log_json(r.test->loss) : log_json(nullptr)},
              {"test_ppl", r.test ? log_json(std::exp(r.test->loss)) : log_json(nullptr)},
              {"param_norm", r.param_norm},
              {"step_ms", r.step_ms},
              {"ideal_step_ms", r.ideal_step_ms},
              {"bubble", r.bubble},
              {"ideal_bubble", r.ideal_bubble},
              {"tokens_per_s", r.tokens_per_s},
              {"stage_forward_ms", r.stage_forward_ms},
              {"stage_backward_ms", r.stage_backward_ms},
              {"wall_s", r.wall_s},
              {"devices", su_.devices},
              {"cpu_threads_per_device", su_.cpu_stages ? log_json(su_.cpu_threads) : log_json(nullptr)},
              {"schedule", pl::to_string(su_.schedule)},
              {"micro_batches", cfg_.micro_batches},
              {"chunks", cfg_.chunks},
              {"layer_counts", su_.layer_counts},
              {"ranks", su_.ranks},
              {"stages", su_.layer_counts.size()},
              {"replicas", su_.replicas},
              {"replica_sum", pipe_->replica_sum()}},
             link_keys);
}

/// With --trace: the pipeline stops (and the ranks detach) so that the system's shutdown writes
/// the trace now; its outcome goes in the result.
void training_run::write_trace() {
  if (o_.trace.empty()) return;
  pipe_.reset();
  if (o_.ranks) o_.ranks->detach();
  auto shut = system_.shutdown();
  result_.trace_error = shut.trace_error;
  result_.trace_events = shut.trace_events;
}

}  // namespace strata::lm::detail
