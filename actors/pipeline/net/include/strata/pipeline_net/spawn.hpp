#pragma once
/// \file
/// Pipelines across MPI ranks: the stage actor of strata/pipeline/stage_actor.hpp with its stages
/// on several processes. SPMD: every rank runs the same program, derives the same plan and the
/// same placement (`ranks[s]`: the rank of stage s), builds the contexts and models of only its
/// own stages, and calls `spawn_pipeline` with the endpoint. Activations and gradients then travel
/// as strata::net messages (cpu tensors, zero-copy, delivered at once with a ready event); the
/// driver runs on rank 0, gets every stage's report and sends back the update's arguments, as in
/// one process. GPipe, 1F1B and wavefront plans run unchanged.
///
/// Example, under `mpirun -np 2` (the whole program: samples/custom_pipeline; docs/pipeline.md,
/// "Across ranks"):
/// \code
///   strata::actor_system sys({.worker_threads = 1});
///   auto cpu = strata::make_devices("cpu:1").front();
///   strata::net::endpoint net(sys, {.receive_device = cpu});
///   auto plan = strata::pipeline::make_plan(strata::pipeline::schedule_kind::one_f_one_b, 2, 4);
///   auto ranks = strata::pipeline_net::one_stage_per_rank(2, net.size());  // stage k on rank k
///   std::vector<std::shared_ptr<strata::pipeline::stage_context>> contexts(2);
///   std::vector<std::shared_ptr<my_stage>> models(2);
///   const int s = net.rank();                                              // this rank's stage
///   contexts[s] = std::make_shared<strata::pipeline::stage_context>(s, cpu);
///   models[s] = std::make_shared<my_stage>(s, contexts[s]->compute());
///   auto p = strata::pipeline_net::spawn_pipeline(sys, net, plan, ranks, contexts, models);
///   if (net.rank() == 0) {  // the driver lives on rank 0
///     auto outcome = sys.request<strata::pipeline::step_outcome>(p.driver, 1min, strata::pipeline::run_step{}).get();
///   }
///   (void)strata::pipeline_net::stop_pipeline(sys, net, p, 10min);  // rank 0 stops the driver, the others wait for that
/// \endcode

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/error.hpp"
#include "strata/net/endpoint.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/stage_actor.hpp"

namespace strata::pipeline_net {

/// The default placement: stage k on rank k.
/// \throws std::invalid_argument when the job has fewer ranks than stages (one sentence, naming
///   both counts).
std::vector<int> one_stage_per_rank(int stages, int world_size);

/// Checks that `ranks` places every stage of `p` on a rank of a job of `world_size` ranks.
/// \throws std::invalid_argument with one sentence naming the stage and the rank otherwise.
void check_placement(const pipeline::plan& p, const std::vector<int>& ranks, int world_size);

/// The name stage `s` is published under: "<options.stage_name>/<s>".
std::string stage_address(const pipeline::pipeline_options& options, int s);

namespace detail {
/// Checks the placement and that exactly this rank's stages have a context and a model.
void check_local_stages(const pipeline::plan& p, const std::vector<int>& ranks, const net::endpoint& net,
                        std::size_t contexts, std::size_t models, const std::vector<bool>& built);
/// Everything of spawn_pipeline that does not depend on the model: handles to the other ranks'
/// stages, the driver (spawned and published on rank 0), the links of this rank's stages, and
/// their publication.
pipeline::pipeline_actors connect(actor_system& system, net::endpoint& net, const pipeline::plan& p,
                                  const std::vector<int>& ranks,
                                  const std::vector<std::shared_ptr<pipeline::stage_context>>& contexts,
                                  std::vector<actor_ref> local_stages, actor_ref supervisor,
                                  const pipeline::pipeline_options& options, int driver_rank = 0);
}  // namespace detail

/// Spawns the stages of `p` placed on this rank (`ranks[s] == net.rank()`) as
/// stage_actor<M>(contexts[s], models[s]) under one all-for-one supervisor of this rank, publishes
/// them as `stage_address(options, s)`, takes handles to the other stages from `net.remote`, and
/// spawns the step driver on rank 0 (published as `options.driver_name`).
///
/// `contexts` and `models` have one entry per plan stage; only this rank's entries are read (the
/// others may be empty). Every rank must call this with the same plan, placement and options.
/// Names must be unique per process: give each pipeline its own `stage_name` and `driver_name`.
///
/// The result: `stages` holds every stage's handle (local or remote), `driver` the driver (on
/// rank 0 the local actor, elsewhere a remote handle), `supervisor` this rank's supervisor (empty
/// without local stages). Run steps on rank 0 with `run_step`; the others wait with
/// wait_for_driver_exit until rank 0 stops the driver.
///
/// Failure: a stage that fails on any rank fails the step on the driver with "pipeline stage S
/// failed during step N: ..."; the driver makes the other ranks' stages restart too (all for
/// one across ranks). A stage that goes down (its rank left, its supervisor gave up) fails that
/// step and every later one with "pipeline stage S went down during step N: ...". Put a timeout
/// on every run_step request: a rank that hangs is not detected otherwise.
/// \throws std::invalid_argument for a bad placement, missing or extra counts, a local stage
///   without context or model, or a name already published.
template <pipeline::stage_model M>
pipeline::pipeline_actors spawn_pipeline(actor_system& system, net::endpoint& net, const pipeline::plan& p,
                                         const std::vector<int>& ranks,
                                         const std::vector<std::shared_ptr<pipeline::stage_context>>& contexts,
                                         const std::vector<std::shared_ptr<M>>& models,
                                         pipeline::pipeline_options options = {}) {
  std::vector<bool> built(p.stages.size(), false);
  for (std::size_t s = 0; s < built.size(); ++s)
    built[s] = s < contexts.size() && s < models.size() && contexts[s] && models[s];
  detail::check_local_stages(p, ranks, net, contexts.size(), models.size(), built);
  for (std::size_t s = 0; s < built.size(); ++s)
    if (ranks[s] == net.rank()) pipeline::detail::check_model_chunks(*models[s], p.chunks, s);
  std::vector<actor_ref> local(p.stages.size());
  actor_ref supervisor;
  for (std::size_t s = 0; s < local.size(); ++s) {
    if (ranks[s] != net.rank()) continue;
    if (!supervisor)
      supervisor = system.spawn_supervisor(
          options.restarts,
          spawn_options{.name = options.stage_name + "-supervisor (rank " + std::to_string(net.rank()) + ")"});
    local[s] = system.spawn_child<pipeline::stage_actor<M>>(
        supervisor,
        spawn_options{.name = options.stage_name + "-" + std::to_string(s) + " (" + contexts[s]->get_device().name() +
                              ", rank " + std::to_string(net.rank()) + ")"},
        contexts[s], models[s]);
  }
  return detail::connect(system, net, p, ranks, contexts, std::move(local), std::move(supervisor), options);
}

/// The same with the default placement, stage k on rank k (one_stage_per_rank).
template <pipeline::stage_model M>
pipeline::pipeline_actors spawn_pipeline(actor_system& system, net::endpoint& net, const pipeline::plan& p,
                                         const std::vector<std::shared_ptr<pipeline::stage_context>>& contexts,
                                         const std::vector<std::shared_ptr<M>>& models,
                                         pipeline::pipeline_options options = {}) {
  return spawn_pipeline(system, net, p, one_stage_per_rank(static_cast<int>(p.stages.size()), net.size()), contexts,
                        models, std::move(options));
}

/// Blocks the calling thread (not an actor) until `driver` terminates: how the ranks without the
/// driver wait while it runs steps. Does not spin.
/// \returns nothing when the driver stopped or quit; its reason when it failed or its rank left;
///   `errc::request_timeout` when it still runs after `timeout`.
expected<void> wait_for_driver_exit(actor_system& system, const actor_ref& driver, std::chrono::milliseconds timeout);

/// Ends this rank's part of a pipeline, on every rank once the steps are done: rank 0 stops the
/// driver and waits until it has terminated (so that the other ranks hear of it before this rank
/// may leave the job); the others wait until it has (wait_for_driver_exit). Then this rank's
/// stages stop. Drain the stage contexts' streams before destroying the models. `driver_rank`:
/// where the driver runs, when not on rank 0 (several pipelines in one job, e.g. data parallel
/// replicas of one).
/// \returns what wait_for_driver_exit returns.
expected<void> stop_pipeline(actor_system& system, const net::endpoint& net, const pipeline::pipeline_actors& actors,
                             std::chrono::milliseconds timeout, int driver_rank = 0);

}  // namespace strata::pipeline_net
