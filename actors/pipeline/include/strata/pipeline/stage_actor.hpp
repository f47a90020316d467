#pragma once
/// \file
/// The stage actor any model runs on: it executes its stage's actions of a plan (receive, forward,
/// send, backward, push, pull) in order, moving activations and gradients between stages as
/// tensors with their ready events. A model plugs in through the `stage_model` concept.
///
/// Example (the whole program: samples/custom_pipeline; the tutorial: docs/pipeline.md):
/// \code
///   auto plan = strata::pipeline::make_plan(strata::pipeline::schedule_kind::one_f_one_b, 2, 4);
///   std::vector<std::shared_ptr<strata::pipeline::stage_context>> contexts;
///   std::vector<std::shared_ptr<my_stage>> models;
///   for (int s = 0; s < 2; ++s) {
///     contexts.push_back(std::make_shared<strata::pipeline::stage_context>(s, devices[s]));
///     models.push_back(std::make_shared<my_stage>(s, contexts.back()->compute()));
///   }
///   auto p = strata::pipeline::spawn_pipeline(system, plan, contexts, models);
///   auto outcome = system.request<strata::pipeline::step_outcome>(p.driver, 1min,
///                                                                  strata::pipeline::run_step{}).get();
/// \endcode

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/device/device.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/transport.hpp"
#include "strata/supervisor.hpp"

namespace strata::pipeline {

// ---- the model --------------------------------------------------------------------------------

/// What a stage actor needs of a model: the work of a unit (micro-batch `mb`, time chunk `ch`) on
/// the stage's stream, its output and input gradient, and the incoming tensors.
///
/// - `forward(mb, ch, s)` / `backward(mb, ch, s)` submit the unit's work to `s` (asynchronous);
///   backward accumulates the parameter gradients.
/// - `output(mb, ch)` / `input_grad(mb, ch)`: the tensors sent to the next / previous stage once
///   the forward / backward submitted before is done (invalid tensors on sim devices).
/// - `accept_input(mb, ch, t, s)` / `accept_output_grad(mb, ch, t, s)`: the unit's input activation
///   / output gradient, readable by work on `s` from `t.ready_event()` on (`s` already waits).
///
/// Optional members, used when present:
/// - `begin_step(step, s)`: at the start of each step (e.g. copy the step's data to the device).
/// - `end_compute(s)` and `std::vector<double> report()`: after the last compute `end_compute`
///   submits what the driver needs (a loss, a gradient norm); `report()` is read once that work has
///   completed and goes to the driver's update rule.
/// - `update(args, s)`: applies the step's update locally (e.g. SGD on the stage's weights), with
///   the `args` the driver's update rule computed from every stage's report.
/// - or `exchange(args, s)` returning a request message for the stage's store, the reply type
///   `exchange_reply`, and `exchanged(reply, s)`: push gradients, pull weights through a parameter
///   server (the LSTM LM's kvstore). With `std::string exchange_name() const` ("push to the
///   kvstore") a refused exchange fails the stage as "stage S could not <name> during step N: ...";
///   without it, as "stage S could not update its weights: ...".
template <class M>
concept stage_model = requires(M& m, const M& cm, std::size_t mb, std::size_t ch, stream& s, const tensor& t) {
  m.forward(mb, ch, s);
  m.backward(mb, ch, s);
  { cm.output(mb, ch) } -> std::convertible_to<tensor>;
  { cm.input_grad(mb, ch) } -> std::convertible_to<tensor>;
  m.accept_input(mb, ch, t, s);
  m.accept_output_grad(mb, ch, t, s);
};

// ---- messages ---------------------------------------------------------------------------------

/// An activation (forward) or a gradient (backward) of one unit: the producer's tensor, carrying
/// the event after which it is ready.
struct stage_tensor {
  std::uint64_t step = 0;
  int micro_batch = 0;
  int chunk = 0;
  tensor data;  ///< Invalid on sim devices (no data); its ready_event() is still the ordering point.
};
struct stage_activation {
  stage_tensor t;
};
struct stage_gradient {
  stage_tensor t;
};
/// Driver -> stages: run the plan's actions of step `step`.
struct begin_step {
  std::uint64_t step = 0;
};
/// Stage -> driver: the stage's computes of `step` are done; `report` from the model's report().
struct stage_computed {
  int stage = 0;
  std::uint64_t step = 0;
  std::vector<double> report;
};
/// Driver -> stages: push and pull with `args` (from the driver's update rule).
struct stage_update {
  std::uint64_t step = 0;
  std::vector<double> args;
};
/// Stage -> driver: the update of `step` has completed on the stage's device.
struct stage_updated {
  int stage = 0;
  std::uint64_t step = 0;
};
/// Stage -> driver: the stage failed during `step` (then it throws; its supervisor decides).
struct stage_failed {
  int stage = 0;
  std::uint64_t step = 0;
  std::string reason;
};
/// Runs `run` on the stage's actor with its compute stream, between steps (reading or writing a
/// model's parameters, resetting its state). Answered with what `run` returns.
struct stage_task {
  std::function<expected<void>(stream&)> run;
};
/// Makes a stage fail on purpose, so that its all-for-one supervisor restarts every stage (after
/// a step that timed out, when no stage failed but the step's work must be abandoned).
struct restart_stage {};
/// Owner -> driver: run one step. Answered with `step_outcome`, or the error of the stage that
/// failed ("pipeline stage 1 failed during step 3: ...").
struct run_step {};
struct step_outcome {
  std::uint64_t step = 0;
  std::vector<std::vector<double>> reports;  ///< Per stage: its model's report().
  std::vector<double> args;                  ///< What the update rule made of them.
  double step_ms = 0;                        ///< From begin_step to the last stage_updated.
};

// Wire form of the messages between stages and the driver, for pipelines across ranks
// (strata::pipeline_net; strata::net finds `serialize` by argument-dependent lookup). Plain
// templates: strata::pipeline itself does not depend on strata::net.
template <class A>
void serialize(A& a, stage_tensor& m) {
  a(m.step, m.micro_batch, m.chunk, m.data);
}
template <class A>
void serialize(A& a, stage_activation& m) {
  a(m.t);
}
template <class A>
void serialize(A& a, stage_gradient& m) {
  a(m.t);
}
template <class A>
void serialize(A& a, begin_step& m) {
  a(m.step);
}
template <class A>
void serialize(A& a, stage_computed& m) {
  a(m.stage, m.step, m.report);
}
template <class A>
void serialize(A& a, stage_update& m) {
  a(m.step, m.args);
}
template <class A>
void serialize(A& a, stage_updated& m) {
  a(m.stage, m.step);
}
template <class A>
void serialize(A& a, stage_failed& m) {
  a(m.stage, m.step, m.reason);
}
template <class A>
void serialize(A&, restart_stage&) {}

// ---- where a stage runs -----------------------------------------------------------------------

/// One stage's place in a pipeline, shared by the owner and every instance of the stage's actor:
/// its index, device, streams and neighbours.
///
/// A restarted instance (its supervisor is all-for-one) takes fresh streams, since a stream whose
/// work failed stays failed; the old ones are kept in `retired()` until the owner has drained
/// them (`take_retired`). Thread-safe.
class stage_context {
public:
  /// Creates the compute and copy streams on `dev`.
  stage_context(int index, device dev);

  int index() const noexcept { return index_; }
  const device& get_device() const noexcept { return dev_; }
  stream compute() const;
  stream copies() const;
  /// How many actor instances have run this stage (1 + restarts).
  std::size_t instances() const;
  /// Streams of earlier instances, handed to the caller (drain them before reusing the model).
  std::vector<stream> take_retired();

  /// Set by spawn_pipeline before the first step.
  struct links {
    actor_ref prev, next, driver, store;
    std::vector<action> actions;
    std::size_t chunks = 1;
    bool copy_always = false;
    std::chrono::milliseconds update_timeout{std::chrono::minutes(5)};
  };
  void set_links(links l);
  links get_links() const;
  /// Replaces the store (a rebuilt one); stages use it from their next step.
  void set_store(actor_ref store);

  /// Called by each new actor instance: the first keeps the streams, later ones renew them.
  void claim_instance();

private:
  int index_;
  device dev_;
  mutable std::mutex mu_;
  stream compute_, copies_;
  std::vector<stream> retired_;
  std::size_t instances_ = 0;
  links links_;
};

// ---- the actor --------------------------------------------------------------------------------

/// The plan executor of a stage, without the model (stage_actor<M> supplies it). Follows the
/// stage's actions as written: a receive waits for its message, a compute submits work, a send
/// sends the output with its ready event, push_gradients reports to the driver and waits for its
/// update, pull_weights waits for the update's work, then the stage reports stage_updated.
/// Nothing blocks: the stream waits for events, the actor for messages.
///
/// A failure (device work that failed, a model that throws, an update the store refused) is sent to
/// the driver as stage_failed and thrown, for the supervisor to decide.
class basic_stage_actor : public actor {
public:
  explicit basic_stage_actor(std::shared_ptr<stage_context> context);
  behavior make_behavior() final;

protected:
  stream& compute_stream() noexcept { return compute_; }
  const actor_ref& store() const noexcept { return links_.store; }
  std::chrono::milliseconds update_timeout() const noexcept { return links_.update_timeout; }
  int index() const noexcept { return context_->index(); }
  /// The step being run (as the driver numbered it).
  std::uint64_t current_step() const noexcept { return step_; }
  /// The update's work has been submitted: pull_weights can complete.
  void update_finished();
  /// Reports `what` ("stage 1 could not ...") to the driver, then throws it.
  [[noreturn]] void fail(const std::string& what);
  /// Runs `f`, reporting an exception to the driver (unless fail() did) before it propagates.
  void guarded(const std::function<void()>& f);

  virtual void model_begin_step(std::uint64_t step) = 0;
  virtual void model_forward(std::size_t mb, std::size_t ch) = 0;
  virtual void model_backward(std::size_t mb, std::size_t ch) = 0;
  virtual tensor model_output(std::size_t mb, std::size_t ch) const = 0;
  virtual tensor model_input_grad(std::size_t mb, std::size_t ch) const = 0;
  virtual void model_accept_input(std::size_t mb, std::size_t ch, const tensor& t) = 0;
  virtual void model_accept_output_grad(std::size_t mb, std::size_t ch, const tensor& t) = 0;
  virtual void model_end_compute() = 0;
  virtual std::vector<double> model_report() = 0;
  /// Starts the update; calls update_finished() once its work is submitted.
  virtual void model_update(const std::vector<double>& args) = 0;

private:
  enum class phase : std::uint8_t { idle, running, awaiting_compute, awaiting_update, updating, finishing };
  void report_failure(const std::string& what);
  void advance();
  void send_output(const action& a, tensor t, bool forward);
  std::size_t unit(int mb, int ch) const noexcept;

  std::shared_ptr<stage_context> context_;
  stage_context::links links_;
  stream compute_;
  transport transport_;
  bool wired_ = false;
  std::uint64_t step_ = 0;
  std::size_t pos_ = 0;
  phase phase_ = phase::idle;
  bool update_done_ = false;
  std::map<std::pair<std::uint64_t, std::size_t>, tensor> activations_, gradients_;
};

namespace detail {
template <class M>
concept has_begin_step = requires(M& m, stream& s) { m.begin_step(std::uint64_t{}, s); };
template <class M>
concept has_end_compute = requires(M& m, stream& s) {
  m.end_compute(s);
  { m.report() } -> std::convertible_to<std::vector<double>>;
};
template <class M>
concept has_local_update = requires(M& m, const std::vector<double>& a, stream& s) { m.update(a, s); };
template <class M>
concept has_exchange = requires(M& m, const std::vector<double>& a, stream& s, typename M::exchange_reply& r) {
  m.exchange(a, s);
  m.exchanged(r, s);
};
template <class M>
concept has_exchange_name = requires(const M& m) {
  { m.exchange_name() } -> std::convertible_to<std::string>;
};
}  // namespace detail

/// The stage actor of a model `M` (see stage_model); spawned by spawn_pipeline.
template <stage_model M>
class stage_actor final : public basic_stage_actor {
public:
  stage_actor(std::shared_ptr<stage_context> context, std::shared_ptr<M> model)
      : basic_stage_actor(std::move(context)), model_(std::move(model)) {}

protected:
  void model_begin_step(std::uint64_t step) override {
    if constexpr (detail::has_begin_step<M>) model_->begin_step(step, compute_stream());
  }
  void model_forward(std::size_t mb, std::size_t ch) override { model_->forward(mb, ch, compute_stream()); }
  void model_backward(std::size_t mb, std::size_t ch) override { model_->backward(mb, ch, compute_stream()); }
  tensor model_output(std::size_t mb, std::size_t ch) const override { return model_->output(mb, ch); }
  tensor model_input_grad(std::size_t mb, std::size_t ch) const override { return model_->input_grad(mb, ch); }
  void model_accept_input(std::size_t mb, std::size_t ch, const tensor& t) override {
    model_->accept_input(mb, ch, t, compute_stream());
  }
  void model_accept_output_grad(std::size_t mb, std::size_t ch, const tensor& t) override {
    model_->accept_output_grad(mb, ch, t, compute_stream());
  }
  void model_end_compute() override {
    if constexpr (detail::has_end_compute<M>) model_->end_compute(compute_stream());
  }
  std::vector<double> model_report() override {
    if constexpr (detail::has_end_compute<M>) return model_->report();
    else return {};
  }
  void model_update(const std::vector<double>& args) override {
    if constexpr (detail::has_exchange<M>) {
      request<typename M::exchange_reply>(store(), update_timeout(), model_->exchange(args, compute_stream()))
          .then(
              [this](typename M::exchange_reply& reply) {
                guarded([&] {
                  model_->exchanged(reply, compute_stream());
                  update_finished();
                });
              },
              [this](const error& e) {
                std::string what = "update its weights";
                if constexpr (detail::has_exchange_name<M>)
                  what = std::string(model_->exchange_name()) + " during step " + std::to_string(current_step());
                fail("stage " + std::to_string(index()) + " could not " + what + ": " + e.message());
              });
    } else {
      if constexpr (detail::has_local_update<M>) model_->update(args, compute_stream());
      update_finished();
    }
  }

private:
  std::shared_ptr<M> model_;
};

// ---- the driver and the whole pipeline --------------------------------------------------------

/// Computes the update's arguments from every stage's report (per stage, in stage order).
using update_rule = std::function<std::vector<double>(const std::vector<std::vector<double>>& reports)>;

/// Runs steps (run_step): starts every stage, collects their reports, sends the update, answers
/// when every stage has updated. A stage that fails fails the step; the stages' all-for-one
/// supervisor has restarted them, so the next step runs on fresh instances. A supervisor that
/// gives up fails this and every later step.
///
/// Stages under several supervisors (a pipeline across ranks: one all-for-one supervisor per
/// rank) are told apart by `groups`: `groups[s]` names stage s's supervisor. When a stage fails,
/// the driver tells one stage of every other group to restart (restart_stage), so that every
/// stage still restarts, and it monitors every stage: a stage that goes down (its rank left, its
/// supervisor gave up) fails this and every later step, naming the stage. Empty `groups`: every
/// stage is under `supervisor` (one process).
class step_driver final : public actor {
public:
  step_driver(std::vector<actor_ref> stages, actor_ref supervisor, update_rule rule, std::vector<int> groups = {});
  behavior make_behavior() override;

private:
  void fail_step(error e);
  void restart_other_groups(int failed_stage);

  std::vector<actor_ref> stages_;
  actor_ref supervisor_;
  update_rule rule_;
  std::vector<int> groups_;
  std::vector<int> restarted_groups_;  ///< Groups restarted during the current step.
  response_promise<step_outcome> promise_;
  error fatal_;
  std::uint64_t step_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::vector<double>> reports_;
  std::vector<double> args_;
  std::size_t computed_ = 0, updated_ = 0;
};

/// How spawn_pipeline builds a pipeline.
struct pipeline_options {
  /// Stage actors are named "<stage_name>-<s> (<device>)", the driver `driver_name`.
  std::string stage_name = "stage";
  std::string driver_name = "pipeline-driver";
  /// Where models with `exchange` push and pull (may be set later: stage_context::set_links).
  actor_ref store;
  /// From the stages' reports to the update's arguments (default: no arguments).
  update_rule rule;
  /// The stages' supervisor: all for one (the in-flight work of a step dies with any stage);
  /// by default it never gives up (every failed step is answered as an error, the next one runs).
  restart_policy restarts{.max_restarts = std::numeric_limits<std::size_t>::max(),
                          .within = std::chrono::milliseconds(1),
                          .strategy = restart_strategy::all_for_one};
  /// Copy activations and gradients even where they could be read in place (transport).
  bool copy_always = false;
  std::chrono::milliseconds update_timeout{std::chrono::minutes(5)};
};

/// The actors of a pipeline. Stopping `supervisor` stops the stages.
struct pipeline_actors {
  actor_ref supervisor;
  std::vector<actor_ref> stages;
  actor_ref driver;
};

/// Spawns stage s of `p` as stage_actor<M>(contexts[s], models[s]) under one all-for-one
/// supervisor, and the step_driver. Each model must have been built on its context's device.
/// \throws std::invalid_argument when the counts of plan stages, contexts and models differ.
template <stage_model M>
pipeline_actors spawn_pipeline(actor_system& system, const plan& p,
                               const std::vector<std::shared_ptr<stage_context>>& contexts,
                               const std::vector<std::shared_ptr<M>>& models, pipeline_options options = {}) {
  if (contexts.size() != p.stages.size() || models.size() != p.stages.size())
    throw std::invalid_argument("a pipeline of " + std::to_string(p.stages.size()) + " plan stages needs as many contexts and models; got " +
                                std::to_string(contexts.size()) + " and " + std::to_string(models.size()));
  pipeline_actors out;
  out.supervisor = system.spawn_supervisor(options.restarts, spawn_options{.name = options.stage_name + "-supervisor"});
  for (std::size_t s = 0; s < contexts.size(); ++s)
    out.stages.push_back(system.spawn_child<stage_actor<M>>(
        out.supervisor,
        spawn_options{.name = options.stage_name + "-" + std::to_string(s) + " (" + contexts[s]->get_device().name() + ")"},
        contexts[s], models[s]));
  out.driver = system.spawn_with<step_driver>(spawn_options{.name = options.driver_name}, out.stages, out.supervisor,
                                              options.rule);
  for (std::size_t s = 0; s < contexts.size(); ++s) {
    stage_context::links l;
    l.prev = s > 0 ? out.stages[s - 1] : actor_ref{};
    l.next = s + 1 < out.stages.size() ? out.stages[s + 1] : actor_ref{};
    l.driver = out.driver;
    l.store = options.store;
    l.actions = p.stages[s];
    l.chunks = static_cast<std::size_t>(p.chunks);
    l.copy_always = options.copy_always;
    l.update_timeout = options.update_timeout;
    contexts[s]->set_links(std::move(l));
  }
  return out;
}

}  // namespace strata::pipeline
