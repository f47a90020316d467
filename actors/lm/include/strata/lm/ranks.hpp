#pragma once
/// \file
/// The MPI job an LM pipeline's stages are spread over, as strata::lm sees it. strata::lm does
/// not use strata::net (docs/architecture.md): strata::lm_net implements this interface over a
/// net::endpoint (strata/lm_net/ranks.hpp), and a program hands it to lm::train through
/// trainer_options::ranks or to lm_pipeline through lm_pipeline_options::ranks.
///
/// Placement: one stage per rank; with R data parallel replicas of a pipeline of P stages (world
/// = P x R), stage k of replica j on rank j * P + k, and each replica's step driver on its first
/// rank, j * P. Every rank runs the same training loop on the same data (SPMD): the collective
/// calls below happen in the same order on every rank.

#include <chrono>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/error.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/stage_actor.hpp"

namespace strata::lm {

/// One rank's view of the job. Thread-safety: called from the training thread only.
class rank_group {
public:
  virtual ~rank_group() = default;

  /// This process's rank and the job's size (known before `attach`).
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Joins the job with `system` (the one the stages run on): before any call below.
  virtual void attach(actor_system& system) = 0;
  /// Leaves the job cleanly, once every rank is done (waits for the others). Idempotent.
  virtual void detach() = 0;
  /// The run failed on this rank: reports `e` and ends the process at once with a non-zero
  /// status, without waiting for the other ranks (the MPI job then ends; docs/distributed.md,
  /// failure model). Does not return.
  [[noreturn]] virtual void fail(const std::exception& e) = 0;

  /// Collective over every rank: sums `values` element-wise in place (also a barrier).
  virtual expected<void> sum(std::span<float> values) = 0;

  /// Wires this rank's stage actors `local` (empty handles for other ranks' stages; `ranks[s]` the
  /// rank of stage s) with the other stages and the step driver (on `driver_rank`), as
  /// pipeline_net::spawn_pipeline does.
  virtual pipeline::pipeline_actors connect(actor_system& system, const pipeline::plan& plan,
                                            const std::vector<int>& ranks,
                                            const std::vector<std::shared_ptr<pipeline::stage_context>>& contexts,
                                            std::vector<actor_ref> local, actor_ref supervisor,
                                            const pipeline::pipeline_options& options, int driver_rank) = 0;
  /// Ends this rank's part of the pipeline (pipeline_net::stop_pipeline).
  virtual expected<void> stop(actor_system& system, const pipeline::pipeline_actors& actors,
                              std::chrono::milliseconds timeout, int driver_rank) = 0;
};

}  // namespace strata::lm
