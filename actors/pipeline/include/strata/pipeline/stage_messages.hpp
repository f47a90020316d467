#pragma once
/// \file
/// The messages between stage actors and their driver (activations, gradients, the step's phases,
/// failures and restarts), with their wire form for pipelines across ranks.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"

namespace strata::pipeline {

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

}  // namespace strata::pipeline
