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
#include <string>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"
#include "strata/pipeline/plan.hpp"
#include "strata/pipeline/simulator.hpp"
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

  /// Collective over every rank (a job of two or more): ranks 0 and 1 measure the link between
  /// them the way strata-bench-net defines `link_latency_us` and `link_gbps`: the latency is
  /// half the round trip of `round_trips` pings between actors on scheduler threads (as pipeline
  /// stages are), the bandwidth `transfer_bytes` over one tensor transfer's time (a request and
  /// its small reply) less one round trip. Rank 0 gets the link; the other ranks get a free one
  /// (broadcast rank 0's to agree). The default answers that this group cannot measure a link.
  virtual expected<pipeline::link_model> measure_link(std::size_t transfer_bytes, int round_trips) {
    (void)transfer_bytes, (void)round_trips;
    return error(errc::invalid_argument, "this rank group cannot measure the link between its ranks");
  }

  /// Data parallel replicas (world = `stages` x R): called once by every rank at setup, before
  /// the stages are wired. A group that can sum one stage's gradients over that stage's replicas
  /// alone (ranks k, P + k, ...: strata::lm_net does, through a distributed store) prepares it
  /// and answers true; then `sum_over_replicas` replaces a sum over every rank. The default
  /// answers false (the pipeline then sums every stage's gradients over the whole job, each rank
  /// adding zeros for the other stages).
  virtual expected<bool> join_replicas(std::size_t stages) {
    (void)stages;
    return false;
  }
  /// Collective over the replicas of this rank's stage (after `join_replicas` answered true), in
  /// the same order on each: `grads[i]` (cpu float32 tensors, the gradient of the parameter
  /// `names[i]`) becomes the sum over the replicas, in place.
  virtual expected<void> sum_over_replicas(const std::vector<std::string>& names, const std::vector<tensor>& grads) {
    (void)names, (void)grads;
    return error(errc::invalid_argument, "this rank group sums no replicas (join_replicas answered false)");
  }

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
