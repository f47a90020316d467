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

///
/// The pieces, one concept a header: strata/pipeline/stage_model.hpp (what a model provides),
/// stage_messages.hpp (what stages and the driver send), stage_context.hpp (where a stage runs),
/// step_driver.hpp (the driver); this header adds the actor and spawn_pipeline.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/device/event.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/stage_context.hpp"
#include "strata/pipeline/stage_messages.hpp"
#include "strata/pipeline/stage_model.hpp"
#include "strata/pipeline/step_driver.hpp"
#include "strata/pipeline/transport.hpp"
#include "strata/supervisor.hpp"

namespace strata::pipeline {

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
  /// Sends the exchange request model_update prepared (send_when_stream_done's answer).
  virtual void model_send_exchange() {}
  /// Calls model_send_exchange() once the compute stream has done the work submitted so far.
  void send_when_stream_done();

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
      // The request leaves once the stream has done the work exchange() submitted (and everything
      // before it): the store reads pushed tensors complete even where a model forgot their ready
      // event. A failure of that work fails the stage instead.
      pending_exchange_.emplace(model_->exchange(args, compute_stream()));
      send_when_stream_done();
    } else {
      if constexpr (detail::has_local_update<M>) model_->update(args, compute_stream());
      update_finished();
    }
  }
  void model_send_exchange() override {
    if constexpr (detail::has_exchange<M>) {
      if (!pending_exchange_) return;
      auto message = std::move(*pending_exchange_);
      pending_exchange_.reset();
      request<typename M::exchange_reply>(store(), update_timeout(), std::move(message))
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
    }
  }

private:
  template <class T>
  struct exchange_of {
    using type = int;
  };
  template <class T>
    requires detail::has_exchange<T>
  struct exchange_of<T> {
    using type = std::decay_t<decltype(std::declval<T&>().exchange(std::declval<const std::vector<double>&>(),
                                                                    std::declval<stream&>()))>;
  };

  std::shared_ptr<M> model_;
  std::optional<typename exchange_of<M>::type> pending_exchange_;  ///< Waits for the stream.
};

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

/// What stage `s` of `p` needs to know of the others: its neighbours among `actors.stages`, the
/// driver, the store, its actions and the options' transport settings.
stage_context::links stage_links(const plan& p, const pipeline_actors& actors, std::size_t s,
                                 const pipeline_options& options);

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
  for (std::size_t s = 0; s < contexts.size(); ++s) contexts[s]->set_links(stage_links(p, out, s, options));
  return out;
}

}  // namespace strata::pipeline
