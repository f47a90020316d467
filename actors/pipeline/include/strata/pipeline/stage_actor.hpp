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
/// - `abandon_step(step, s)`: after a step failed (every stage restarted), called once on each
///   stage's fresh stream at the start of the next step, before `begin_step`: drop what the failed
///   step left behind (half-accumulated gradients, carried state). A model whose backward
///   accumulates gradients across a step needs it: without it, the failed step's partial gradients
///   join the next update.
/// - `set_chunks(n)` / `std::size_t chunks() const`: the plan's time-chunk count is passed to
///   `set_chunks` (which may throw std::invalid_argument to refuse it) and compared with `chunks()`
///   when spawn_pipeline builds the stages; a mismatch is refused in one sentence, never an index
///   out of bounds later.
/// - `update(args, s)`: applies the step's update locally (e.g. SGD on the stage's weights), with
///   the `args` the driver's update rule computed from every stage's report.
/// - or `exchange(args, s)` (used instead of `update` when a model has both) returning a request message for the stage's store, the reply type
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
  tensor data{};  ///< Invalid on sim devices (no data); its ready_event() is still the ordering point.
};
struct stage_activation {
  stage_tensor t{};
};
struct stage_gradient {
  stage_tensor t{};
};
/// Driver -> stages: run the plan's actions of step `step`. `abandoned`: the step that failed just
/// before this one (0: none); each stage's fresh instance calls its model's abandon_step for it.
struct begin_step {
  std::uint64_t step = 0;
  std::uint64_t abandoned = 0;
};
/// Stage -> driver: the stage's computes of `step` are done; `report` from the model's report().
struct stage_computed {
  int stage = 0;
  std::uint64_t step = 0;
  std::vector<double> report{};
};
/// Driver -> stages: push and pull with `args` (from the driver's update rule).
struct stage_update {
  std::uint64_t step = 0;
  std::vector<double> args{};
};
/// Stage -> driver: the update of `step` has completed on the stage's device.
struct stage_updated {
  int stage = 0;
  std::uint64_t step = 0;
};
/// Stage -> driver: the stage failed during `step`. `inherited_from` is -1 when the failure started
/// on this stage (its model threw, its own device work failed, its update was refused), else the
/// neighbour stage whose activation or gradient carried the error into this stage's stream. The
/// stage then waits, doing nothing, until the driver restarts it (restart_stage).
struct stage_failed {
  int stage = 0;
  std::uint64_t step = 0;
  std::string reason{};
  int inherited_from = -1;
};
/// Stage -> driver: a restarted instance of stage `stage` (its `instance`-th) is running.
struct stage_started {
  int stage = 0;
  std::uint64_t instance = 0;
};
/// Runs `run` on the stage's actor with its compute stream, between steps (reading or writing a
/// model's parameters, resetting its state). Answered with what `run` returns.
struct stage_task {
  std::function<expected<void>(stream&)> run{};
};
/// Makes a stage fail on purpose, so that its all-for-one supervisor restarts every stage: sent by
/// the driver to one stage of each supervisor's group once a step has failed (the group restarts
/// once per failed step, however many of its stages failed), or by an owner after a step that
/// timed out. `reason` becomes the failure the supervisor sees.
struct restart_stage {
  std::string reason{};
};
/// Owner -> driver: run one step. Answered with `step_outcome`, or the error of the stage that
/// failed ("pipeline stage 1 failed during step 3: ...").
struct run_step {};
struct step_outcome {
  std::uint64_t step = 0;
  std::vector<std::vector<double>> reports{};  ///< Per stage: its model's report().
  std::vector<double> args{};                ///< What the update rule made of them.
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
  a(m.step, m.abandoned);
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
  a(m.stage, m.step, m.reason, m.inherited_from);
}
template <class A>
void serialize(A& a, stage_started& m) {
  a(m.stage, m.instance);
}
template <class A>
void serialize(A& a, restart_stage& m) {
  a(m.reason);
}

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
  /// Streams of earlier instances not yet taken (a restarted instance waits for them to finish
  /// their queued work before it reports to the driver).
  std::vector<stream> retired() const;
  /// Streams of earlier instances, handed to the caller (drain them before reusing the model).
  std::vector<stream> take_retired();

  /// Set by spawn_pipeline before the first step.
  struct links {
    actor_ref prev{}, next{}, driver{}, store{};
    std::vector<action> actions{};
    std::size_t chunks = 1;
    bool copy_always = false;
    std::chrono::milliseconds update_timeout{std::chrono::minutes(5)};
  };
  void set_links(links l);
  links get_links() const;
  /// Replaces the store (a rebuilt one); stages use it from their next step.
  void set_store(actor_ref store);

  /// Called by each new actor instance: the first keeps the streams, later ones renew them.
  /// Returns the instance's number (1 for the first).
  std::size_t claim_instance();

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
/// A failure (device work that failed, a model that throws, an update the store refused) is sent
/// to the driver as stage_failed, saying whether it started here or reached this stage's stream
/// through a neighbour's tensor; the stage then idles until the driver restarts the group
/// (restart_stage), so that one failed step costs one restart. A stage without a driver throws
/// instead, for its supervisor to decide. Completions of an earlier instance's streams never
/// reach a restarted one.
///
/// With tracing on, every unit of the model's device work is recorded on the stage's device track
/// (1000000000 + stage) as "forward mb M chunk C", "backward mb M chunk C" or "update", and the
/// actor's tags "pipeline.stage" and "pipeline.device" say where it runs (docs/trace-format.md).
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
  /// Reports `what` ("stage 1 could not ...") to the driver, then throws it (guarded() stops it
  /// there when the stage has a driver to restart it).
  [[noreturn]] void fail(const std::string& what);
  /// Runs `f`, reporting an exception to the driver (unless fail() did); the stage then waits for
  /// its restart. Without a driver the exception propagates to the supervisor.
  void guarded(const std::function<void()>& f);
  /// Runs `submit` (which submits device work to the compute stream) and, when tracing, records
  /// that work as one slice named `name` on the stage's device track.
  void traced(const char* name, std::size_t mb, std::size_t ch, const std::function<void()>& submit);

  virtual void model_begin_step(std::uint64_t step) = 0;
  virtual void model_abandon_step(std::uint64_t step) = 0;
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
  enum class phase : std::uint8_t { idle, running, awaiting_compute, awaiting_update, updating, finishing, failed };
  /// A tensor received (`from`: the neighbour) or sent (`from` -1) this step, in stream order: to
  /// tell where a failure started.
  struct traffic {
    event ready;
    int from;
  };
  void report_failure(const std::string& what, int inherited_from = -1);
  bool restarts_by_driver() const;
  int inherited_from(const std::exception_ptr& error) const;
  template <class T>
  void notify_when_done(stream& on, T msg);
  void announce_when_drained();
  void on_begin_step(const begin_step& b);
  void on_stream_failure(std::uint64_t step, std::size_t instance, const std::exception_ptr& error);
  void advance();
  void send_output(const action& a, tensor t, bool forward);
  std::size_t unit(int mb, int ch) const noexcept;

  std::shared_ptr<stage_context> context_;
  stage_context::links links_;
  stream compute_;
  std::size_t instance_ = 0;
  transport transport_;
  bool wired_ = false;
  std::uint64_t step_ = 0;
  std::size_t pos_ = 0;
  phase phase_ = phase::idle;
  bool update_done_ = false;
  std::map<std::pair<std::uint64_t, std::size_t>, tensor> activations_, gradients_;
  std::vector<traffic> traffic_;
  std::size_t undrained_ = 0;  ///< A restarted instance: retired streams still running.
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
template <class M>
concept has_abandon_step = requires(M& m, stream& s) { m.abandon_step(std::uint64_t{}, s); };
template <class M>
concept has_set_chunks = requires(M& m) { m.set_chunks(std::size_t{}); };
template <class M>
concept has_chunks = requires(const M& m) {
  { m.chunks() } -> std::convertible_to<std::size_t>;
};

/// Passes the plan's chunk count to stage `s`'s model and checks it (see stage_model).
/// \throws std::invalid_argument on a mismatch, naming the stage and both counts.
template <class M>
void check_model_chunks(M& model, int plan_chunks, std::size_t s) {
  const auto n = static_cast<std::size_t>(plan_chunks);
  if constexpr (has_set_chunks<M>) model.set_chunks(n);
  if constexpr (has_chunks<M>) {
    const std::size_t has = model.chunks();
    if (has != n)
      throw std::invalid_argument("stage " + std::to_string(s) + "'s model works in " + std::to_string(has) +
                                  " time chunks, but the plan has " + std::to_string(n));
  }
}
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
  void model_abandon_step(std::uint64_t step) override {
    if constexpr (detail::has_abandon_step<M>) model_->abandon_step(step, compute_stream());
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
                  traced("update", 0, 0, [&] { model_->exchanged(reply, compute_stream()); });
                  update_finished();
                });
              },
              [this](const error& e) {
                std::string what = "update its weights";
                if constexpr (detail::has_exchange_name<M>)
                  what = std::string(model_->exchange_name()) + " during step " + std::to_string(current_step());
                guarded([&] { fail("stage " + std::to_string(index()) + " could not " + what + ": " + e.message()); });
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
/// when every stage has updated.
///
/// A failed step: the driver waits for the stage where the failure started (a stage whose stream
/// inherited the error from a neighbour's tensor reports that, and is not blamed), tells one stage
/// of each supervisor's group to restart (restart_stage: every stage restarts once, on fresh
/// streams), waits until every stage's new instance runs (stage_started), and only then answers
/// "pipeline stage S failed during step N: ..." naming the stage where it started. The next step
/// therefore finds every stage fresh, and its begin_step names the abandoned step. A supervisor
/// that gives up fails this and every later step.
///
/// Stages under several supervisors (a pipeline across ranks: one all-for-one supervisor per
/// rank) are told apart by `groups`: `groups[s]` names stage s's supervisor, and the driver
/// monitors every stage: a stage that goes down (its rank left, its supervisor gave up) fails this
/// and every later step, naming the stage. Empty `groups`: every stage is under `supervisor` (one
/// process).
class step_driver final : public actor {
public:
  step_driver(std::vector<actor_ref> stages, actor_ref supervisor, update_rule rule, std::vector<int> groups = {});
  behavior make_behavior() override;

private:
  void on_stage_failed(const stage_failed& f);
  void on_stage_started(const stage_started& s);
  void blame(int stage, const std::string& reason);
  void blame_when_all_reported();
  void answer_once_restarted();
  error blamed_error() const;
  void fail_step(error e);

  std::vector<actor_ref> stages_;
  actor_ref supervisor_;
  update_rule rule_;
  std::vector<int> groups_;
  response_promise<step_outcome> promise_;
  error fatal_;
  std::uint64_t step_ = 0;
  std::uint64_t abandoned_ = 0;  ///< The last failed step, for the next begin_step.
  std::chrono::steady_clock::time_point start_;
  std::vector<std::vector<double>> reports_;
  std::vector<double> args_;
  std::size_t computed_ = 0, updated_ = 0;
  // A failing step: what each stage reported, whom the driver blamed, the restarts it awaits.
  std::vector<int> failed_;                ///< Per stage: -2 none, -1 started here, else inherited from.
  std::vector<std::string> failure_text_;  ///< Per stage: its reason.
  std::vector<bool> computed_ok_;          ///< Per stage: reported stage_computed this step.
  int blamed_ = -1;
  std::string blamed_reason_;
  std::vector<std::uint64_t> instance_;       ///< Per stage: the newest instance that said it runs.
  std::vector<std::uint64_t> need_instance_;  ///< Per stage: the instance a restart must reach.
};

/// How spawn_pipeline builds a pipeline.
struct pipeline_options {
  /// Stage actors are named "<stage_name>-<s> (<device>)", the driver `driver_name`.
  std::string stage_name = "stage";
  std::string driver_name = "pipeline-driver";
  /// Where models with `exchange` push and pull (may be set later: stage_context::set_links).
  actor_ref store{};
  /// From the stages' reports to the update's arguments (default: no arguments).
  update_rule rule{};
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
  actor_ref supervisor{};
  std::vector<actor_ref> stages{};
  actor_ref driver{};
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
  for (std::size_t s = 0; s < models.size(); ++s) detail::check_model_chunks(*models[s], p.chunks, s);
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
