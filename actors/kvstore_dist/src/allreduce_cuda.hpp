#pragma once
// dist_sync_allreduce (allreduce_cuda.cpp): the link of a store's sums (its failure, the watch
// of the other ranks, the waits), and the step of a cuda replica: the NCCL communicator (or MPI
// staging) that sums a step's packed buffer.

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "allreduce_path.hpp"

namespace strata::kvstore_dist::detail {

struct worker_state;

/// How an allreduce store's sums cross the ranks: the NCCL communicator (path nccl) and the watch
/// that fails the link when another rank leaves; a failure, once set, fails every later step.
struct sum_link;

/// A link with no communicator (the staged path; tests).
std::shared_ptr<sum_link> make_sum_link();
/// Ends every sum in flight (ncclCommAbort) and fails this and later steps with `why` (code
/// `code`); the first call decides. Thread-safe.
void abort_sum_link(sum_link& link, errc code, const std::string& why);
/// Tests only: `hook` runs once, on the waiting thread, when a wait on `link` (the three below)
/// first finds its sum not there, so that a test can act while a wait is under way (a rank that
/// leaves then) without sleeping first. Thread-safe; a later call replaces a hook not yet run.
void when_waiting(sum_link& link, std::function<void()> hook);
/// Waits on the calling thread (the store's caller, never a scheduler thread) until `done`, the
/// end of the sum, has fired, the link has failed, or `timeout` has passed (then the link is
/// aborted with request_timeout: NCCL kernels that wait for a peer end). A failed link, or an
/// error that `done` carries, is the step's error: `kvstore dist pushpull: the allreduce of this
/// step failed, and no replica was updated: <why>`.
expected<void> await_sum(sum_link& link, const event& done, std::chrono::nanoseconds timeout);

/// Waits, as `await_sum` does, for `agreed`, the allreduce of the agreement before a step
/// (`agree_on_step`), which a rank that left never joins. \returns nothing once it is ready
///   (its own result not read), else the step's error.
expected<void> await_agreement(sum_link& link, const std::future<expected<void>>& agreed, std::chrono::nanoseconds timeout);

/// Waits, as `await_agreement` does, for `summed`, an endpoint allreduce posted on `*buffer` (the
/// host path's sums, init and barrier). A failed link or the timeout fails it with `what` and
/// why, and `buffer` is then kept for the life of the process (the allreduce stays posted);
/// a sum that completes within a second after the link failed still counts (a peer that gave its
/// part and then left).
expected<void> await_host_sum(sum_link& link, std::future<expected<void>>& summed, std::shared_ptr<std::vector<float>> buffer,
                              std::chrono::nanoseconds timeout, const std::string& what);
/// Why the link cannot sum any more (none while it can).
error sum_link_failure(const sum_link& link);
/// Nothing while the link can sum, else the step's error (as `await_sum`).
expected<void> sum_link_ok(const sum_link& link);

/// Collective (every member of the store, when it is made): makes `w.link` for `w.path` (with
/// the NCCL communicator on path nccl) and, in a store of several ranks, the watch that fails it
/// when another rank leaves the job (or, on the MPI paths, closes its store).
/// \throws error_exception with one sentence when the communicator or the watch cannot be made.
void open_sum_link(worker_state& w);
/// Stops the watch and drops the communicator.
void close_sum_link(worker_state& w);

/// One step of a cuda replica: `values[i]` (float32 tensors on the replica's GPU, of key
/// `keys[i]`'s shape) summed on this rank in the order given into one packed buffer in key order,
/// summed over the ranks, unpacked and pushed to the replica, whose values are answered in the
/// order of `keys`. Every rank checks its values (after the caller's checks: `mine`, refused for
/// `reason`; every key initialised when they passed) and then the ranks agree (`agree_on_step`),
/// so a refusal on one rank fails the step on all before the sum. The caller's thread waits for the sum (so that a failed or aborted sum never reaches
/// the replica); no scheduler thread waits on the GPU.
expected<std::vector<tensor>> cuda_pushpull(worker_state& w, const std::vector<kvstore::key>& keys,
                                            const std::vector<std::vector<tensor>>& values, expected<void> mine,
                                            step_refusal reason);

/// The end of every allreduce step (store.cpp): `merged` (the summed values, in key order) pushed
/// to the replica, then pulled; answers them in the order of `keys`.
expected<std::vector<tensor>> replica_step(worker_state& w, const std::vector<kvstore::key>& keys, const pack_plan& plan,
                                           std::vector<tensor> merged);

}  // namespace strata::kvstore_dist::detail
