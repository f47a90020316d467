#pragma once
/// \file
/// The actor that runs a pipeline's steps: starts every stage, turns their reports into the update's
/// arguments, and answers each step, or its failure naming the stage where it started.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/actor.hpp"
#include "strata/actor_ref.hpp"
#include "strata/error.hpp"
#include "strata/pipeline/stage_messages.hpp"

namespace strata::pipeline {

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

}  // namespace strata::pipeline
