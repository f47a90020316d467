#pragma once
/// \file
/// Model-parallel training of the LSTM language model: one stage actor per device, activations
/// forward and gradients backward as messages, a plan (GPipe, 1F1B, wavefront) per stage.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/lm/config.hpp"
#include "strata/lm/ranks.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/simulator.hpp"
#include "strata/device/device.hpp"
#include "strata/error.hpp"

namespace strata::lm {

/// What one training step did.
struct step_result {
  double loss = 0;                   ///< Mean next-token cross-entropy of the global batch.
  double grad_norm = 0;              ///< Global L2 norm of the gradients before clipping.
  double step_ms = 0;                ///< Wall time of the step.
  std::vector<double> stage_busy_ms; ///< Per stage: device busy time during the step.
  std::vector<double> stage_forward_ms;   ///< Per stage: forward device time per micro-batch.
  std::vector<double> stage_backward_ms;  ///< Per stage: backward device time per micro-batch.
  std::vector<double> stage_other_ms;     ///< Per stage: norm, scaling, zeroing (once per step).
  double store_busy_ms = 0;          ///< KVStore device time (when the store runs on a given device).
  /// 1 - sum(stage_busy_ms) / (stages x step_ms): the measured bubble.
  double measured_bubble() const;
};

/// The plan's ideal step: its makespan with the device times a step measured (or modelled) and
/// no runtime cost (messages, scheduling, host work), plus the store's device time.
struct ideal_step {
  double step_ms = 0;
  double bubble = 0;  ///< The plan's bubble over the same makespan.
  pipeline::simulation simulation;
};

/// How an lm_pipeline runs, beyond its devices, model, schedule and partition.
struct lm_pipeline_options {
  /// Where the KVStore merges. Default: on the host for cpu stages, on the first stage's device
  /// for sim and cuda stages.
  device store_device;
  /// Copy every activation and gradient into the receiving stage's own memory even where it could
  /// read the sender's in place (host memory between cpu devices, one GPU's memory between its
  /// shares). Stages that cannot read each other's memory (two GPUs, host and GPU) always copy;
  /// this option sends cpu stages down that path too (tests, and measuring what copies cost).
  bool copy_activations = false;
  /// Truncated backpropagation through time across steps, as PyTorch's word_language_model
  /// trains (`repackage_hidden`): each step's first timestep starts from the (h, c) the same batch
  /// columns ended the previous step with, detached (no gradient flows into the previous step).
  /// Meant for consecutive windows of column streams (token_batches); call reset_state() where
  /// the streams restart (an epoch). Off: every step starts from zeros.
  bool carry_state = false;
  /// Stages on several MPI ranks (strata/lm/ranks.hpp), one per rank: `devices` then holds this
  /// rank's one device, `layer_counts` every stage's layers, and every rank makes the same calls
  /// in the same order (SPMD; train_step, parameters and optimizer_state are collective). A
  /// failed step is not retried across ranks (relaunch from the checkpoint). Empty: one process.
  std::shared_ptr<rank_group> ranks;
  /// With `ranks`: data parallel replicas of the pipeline (world = stages x replicas, stage k of
  /// replica j on rank j * stages + k). Replica j trains on columns [j B / R, (j+1) B / R) of each
  /// step's batch; before the gradient norm the replicas sum their gradients (one collective sum
  /// per step), so every replica applies the update of the whole batch. cpu stages only.
  std::size_t replicas = 1;
  /// What a message between two ranks costs: `ideal` charges it on every cut between stages, each
  /// stage on a rank of its own as with `ranks` (pipeline::with_links, with one micro-batch's
  /// activation crossing each cut forward and its gradient back). The trainer sets it under
  /// mpirun (measured or given: docs/lstm_lm.md, "Under mpirun"); it may be set without `ranks`
  /// to ask what the stages would cost across ranks. Unset: the ideal step is compute only.
  std::optional<pipeline::link_model> link;
};

/// The pipeline: spawns one stage actor per device and a driver that runs steps.
///
/// Stage s owns LSTM layers per `layer_counts` (the embedding on stage 0, the decoder and loss on
/// the last); each stage runs its plan's actions in order on its device's stream, sending its
/// output activation (with the event that makes it ready) to stage s+1 and its input gradient to
/// stage s-1; nothing waits on the host except the step boundary (the global gradient norm
/// for clipping needs every stage). Results equal one device's on the same global batch.
///
/// Thread-safety: one caller at a time.
class lm_pipeline {
public:
  /// Devices may be cpu, sim or cuda (all of one kind); cuda stages compute with
  /// strata::kernels::cuda on their device's stream and the KVStore merges on the first stage's GPU.
  /// \throws std::invalid_argument for an invalid config, partition or device mix.
  lm_pipeline(actor_system& system, std::vector<device> devices, lm::config config,
              pipeline::schedule_kind schedule, std::vector<std::size_t> layer_counts,
              lm_pipeline_options options = {});
  ~lm_pipeline();
  lm_pipeline(const lm_pipeline&) = delete;
  lm_pipeline& operator=(const lm_pipeline&) = delete;

  /// One step on tokens and next-token targets, both [seq, batch] row-major (seq-major).
  ///
  /// A step that fails (a device error, a stage or the store that stops, a timeout) returns the
  /// error, naming the stage and the step. Failing before its update (forward, backward, the
  /// norm) it changes no weights; failing during the update, each parameter ends either updated
  /// or not, the same in the stages and the store. The next call first restarts
  /// the pipeline, all for one: stage actors and driver spawned again on fresh streams, the failed
  /// step's gradients zeroed, every stage's weights taken back from the KVStore (the master copy;
  /// a store that no longer answers is rebuilt from the stages' weights), then runs its step.
  expected<step_result> train_step(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets,
                                   std::chrono::milliseconds timeout = std::chrono::minutes(10));

  /// Every parameter, gathered from the stages, in PyTorch's order.
  expected<std::vector<named_parameter>> parameters(std::chrono::milliseconds timeout = std::chrono::minutes(1));
  /// Overwrites parameters by name (unknown names are an error; nothing changes then).
  expected<void> set_parameters(const std::vector<named_parameter>& params,
                                std::chrono::milliseconds timeout = std::chrono::minutes(1));

  /// The KVStore actor that holds the master weights and applies SGD (MXNet's kvstore: the
  /// stages push gradients and pull weights at the end of each step). Built on first use; a
  /// replacement after a restart has another handle. For inspection and drills.
  expected<actor_ref> store();
  /// The learning rate the store applies from the next step on (a schedule's value for that
  /// step; config().lr until changed). The store's optimizer state (momentum, Adam's moments and
  /// step count) is kept: the store saves it, takes the rule with the new rate and loads it back
  /// (kvstore::set_optimizer alone would start the state afresh), so with a stateful optimizer a
  /// change costs a round trip of the state through a scratch file (in /dev/shm where there is
  /// one). Setting the rate it already has costs nothing.
  expected<void> set_learning_rate(double lr, std::chrono::milliseconds timeout = std::chrono::minutes(1));
  /// The rate the next step applies.
  double learning_rate() const noexcept;
  /// The store's weights, versions and optimizer state as the bytes of a kvstore::save file (for
  /// checkpoints); after the last step's update.
  expected<std::string> optimizer_state(std::chrono::milliseconds timeout = std::chrono::minutes(1));
  /// Loads bytes optimizer_state() returned (of a pipeline of the same model and optimizer kind)
  /// into the store: its weights must equal the stages' (set_parameters with the same values).
  expected<void> set_optimizer_state(const std::string& bytes,
                                     std::chrono::milliseconds timeout = std::chrono::minutes(1));

  /// Collective across ranks (lm_pipeline_options::ranks): whether `flag` is true on any rank
  /// (e.g. a stop request that reached only some). In one process: `flag`.
  expected<bool> any_rank(bool flag);
  /// The index of the next step, from which dropout draws its masks (config::dropout): 0 at
  /// first, one more after every step that succeeds (a failed step's retry draws the same
  /// masks). A trainer that resumes at step k sets k, so the masks follow the data position.
  void set_step_index(std::uint64_t step) noexcept;
  std::uint64_t step_index() const noexcept;

  /// How many times a failed step made the pipeline restart its actors.
  std::size_t restarts() const noexcept;
  /// Zeroes the recurrent state carried across steps (lm_pipeline_options::carry_state); the
  /// next step starts from zeros. A restart after a failed step zeroes it too.
  expected<void> reset_state(std::chrono::milliseconds timeout = std::chrono::minutes(1));
  /// With carry_state: the (h, c) every LSTM layer carries into the next step, as "h_l<k>" and
  /// "c_l<k>" for k = 0..layers-1, each [batch, hidden] row-major (the batch's columns in order,
  /// as nn.LSTM's hidden state per layer). Collective across ranks (every rank gets all of it).
  /// Empty without carry_state.
  expected<std::vector<named_parameter>> carried_state(std::chrono::milliseconds timeout = std::chrono::minutes(1));
  /// Overwrites that state (names and sizes as carried_state gives them; a missing, unknown or
  /// misshapen tensor is errc::invalid_argument with one sentence and changes nothing). After a
  /// failed step it restarts the actors first, as set_parameters does. Collective across ranks.
  expected<void> set_carried_state(const std::vector<named_parameter>& carried,
                                   std::chrono::milliseconds timeout = std::chrono::minutes(1));

  const pipeline::plan& plan() const noexcept;
  const lm::config& config() const noexcept;
  std::size_t stages() const noexcept;
  /// How the replicas sum their gradients: "none" (one replica), "dist_sync_allreduce" (each
  /// stage's replicas through a distributed store of their own: `rank_group::join_replicas`
  /// answered true) or "world_allreduce" (one sum over every rank, zeros for other stages).
  std::string replica_sum() const;
  /// Stage s's device time per (micro-batch) forward and backward, averaged over the last step
  /// (for the plan's ideal step time).
  std::vector<std::pair<double, double>> measured_stage_times_ms() const;
  /// Fault injection (tests, drills): on stage `stage`'s device, the `n`-th forward or backward
  /// work item from now fails as a device error would (cpu and cuda stages).
  void inject_device_fault(std::size_t stage, std::size_t n);

  /// The plan simulated with the device times of step `r` (and lm_pipeline_options::link on every
  /// cut between stages, when set).
  expected<ideal_step> ideal(const step_result& r) const;

private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace strata::lm
