// dist_sync_allreduce with a cuda replica: one packed device buffer per step, summed with NCCL
// (or staged through the host and summed with MPI), then the same update on every replica.

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "allreduce_cuda.hpp"
#include "worker.hpp"
#if STRATA_HAS_NCCL
#include "strata/nccl/communicator.hpp"
#endif

namespace strata::kvstore_dist::internal {

struct cuda_link {
  mutable std::mutex mu;
  error failed;  // set once: why the link cannot sum any more
#if STRATA_HAS_NCCL
  std::optional<nccl::communicator> comm;
#endif
  actor_ref watch;  // this rank's watch of the other ranks (published; none in a world of one)

  error failure() const {
    std::lock_guard lock(mu);
#if STRATA_HAS_NCCL
    if (!failed && comm) {
      if (error f = comm->failure()) return f;
    }
#endif
    return failed;
  }
  /// Ends every sum in flight and refuses later ones with `why` (code `code`).
  void abort(errc code, const std::string& why) {
    {
      std::lock_guard lock(mu);
      if (failed) return;
      failed = error(code, why);
    }
#if STRATA_HAS_NCCL
    if (comm) comm->abort(why);
#endif
  }
};

namespace {

/// The store's sentence for a step whose sum failed; the replicas were not touched.
error step_failed(const error& why) {
  return error(why.code(), "kvstore dist pushpull: the allreduce of this step failed, and no replica was updated: " +
                               why.message());
}

}  // namespace

std::shared_ptr<cuda_link> make_cuda_link() { return std::make_shared<cuda_link>(); }

void abort_cuda_link(cuda_link& link, errc code, const std::string& why) { link.abort(code, why); }

namespace {

/// Waits until `ready()`, the link has failed, or `timeout` has passed (then aborts the link with
/// request_timeout, `what` saying what did not finish).
template <class Ready>
expected<void> await_until(cuda_link& link, Ready ready, std::chrono::nanoseconds timeout, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!ready()) {
    if (error f = link.failure()) return step_failed(f);
    if (std::chrono::steady_clock::now() > deadline) {
      link.abort(errc::request_timeout, std::string(what) + " did not finish within " +
                                            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                                            " ms (store_options::timeout); a rank may have died or not called pushpull");
      return step_failed(link.failure());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return {};
}

}  // namespace

expected<void> await_agreement(cuda_link& link, const std::future<expected<void>>& agreed, std::chrono::nanoseconds timeout) {
  return await_until(
      link, [&] { return agreed.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }, timeout,
      "the ranks' agreement on the step");
}

expected<void> await_sum(cuda_link& link, const event& done, std::chrono::nanoseconds timeout) {
  if (auto waited = await_until(link, [&] { return done.query(); }, timeout, "the sum"); !waited) return waited;
  if (error f = link.failure()) return step_failed(f);  // aborted: the buffer holds no sum
  if (auto ex = done.error()) {
    try {
      std::rethrow_exception(ex);
    } catch (const std::exception& e) {
      return step_failed(error(errc::runtime_failure, e.what()));
    } catch (...) {
      return step_failed(error(errc::runtime_failure, "the sum's work failed with an exception that is no std::exception"));
    }
  }
  return {};
}

namespace {

/// Sums `packed` over the ranks as `w.path` says; answers the summed tensor (`packed` itself on
/// the NCCL path) once the sum is there.
expected<tensor> sum_over_ranks(worker_state& w, tensor packed) {
  cuda_link& link = *w.link;
  if (error f = link.failure()) return step_failed(f);
  if (w.path == sum_path::staged_mpi) {
    // Shared with the stream, so that a copy still running after a failed wait has its buffer.
    auto host = std::make_shared<std::vector<float>>(static_cast<std::size_t>(packed.numel()));
    w.rs.wait(packed.ready_event());
    w.rs.copy_to_host(host->data(), packed.storage(), host->size() * sizeof(float));
    const event copied = w.rs.record();
    w.rs.on_complete([host](std::exception_ptr) {});
    if (auto ok = await_sum(link, copied, w.options.timeout); !ok) return ok.error();
    if (auto summed = w.net->allreduce_sum(std::span<float>(*host)).get(); !summed) return step_failed(summed.error());
    return tensor::from_host<float>(std::span<const float>(*host), packed.shape(), w.replica_dev, w.rs);
  }
#if STRATA_HAS_NCCL
  std::vector<tensor> one{packed};
  if (auto enqueued = link.comm->allreduce_sum(one, w.rs); !enqueued) return step_failed(enqueued.error());
  if (auto summed = await_sum(link, one.front().ready_event(), w.options.timeout); !summed) return summed.error();
  return one.front();
#else
  return step_failed(error(errc::runtime_failure, "this build has no strata::nccl"));
#endif
}

}  // namespace

void open_cuda_link(worker_state& w) {
  w.link = make_cuda_link();
  if (w.path != sum_path::nccl) return;
#if STRATA_HAS_NCCL
  // The communicator waits for other ranks as long as the store's calls do.
  const nccl::communicator_config config{
      .timeout = std::chrono::duration_cast<std::chrono::milliseconds>(w.options.timeout)};
  auto comm = w.world == 1 ? nccl::communicator::create_single(w.replica_dev, config)
                           : nccl::communicator::create(*w.net, w.replica_dev, config);
  if (!comm)
    throw error_exception(error(comm.error().code(), "kvstore_dist::store: the NCCL communicator of the replicas on " +
                                                         w.replica_dev.name() + " could not be made: " + comm.error().message()));
  w.link->comm.emplace(std::move(*comm));
  if (w.world == 1) return;
  // A rank that leaves while the others wait in ncclAllReduce would leave them waiting (NCCL
  // detects nothing): each rank publishes a watch that monitors the others' and aborts the
  // communicator on their rank_down. Stores are collectives: the n-th cuda store of each rank
  // publishes under the same name.
  static std::atomic<int> watches_made{0};
  const std::string name = "kvstore_dist.allreduce_watch/" + std::to_string(watches_made.fetch_add(1));
  std::weak_ptr<cuda_link> weak = w.link;
  std::vector<actor_ref> peers;
  for (int r = 0; r < w.world; ++r) {
    if (r == w.rank) continue;
    auto ref = w.net->remote(r, name);
    if (!ref) throw error_exception(ref.error());
    peers.push_back(std::move(*ref));
  }
  w.link->watch = w.sys->spawn([weak, peers](actor& self) -> behavior {
    for (const auto& p : peers) self.monitor(p);
    return {[weak](const down_msg& d) {
      if (d.reason.code() != errc::rank_down) return;  // a peer's store ended normally
      if (auto link = weak.lock()) link->abort(errc::rank_down, "another rank left the job: " + d.reason.message());
    }};
  });
  if (auto published = w.net->publish(w.link->watch, name); !published) {
    w.sys->stop(w.link->watch);
    throw error_exception(published.error());
  }
#else
  throw std::invalid_argument("kvstore_dist::store: this build has no strata::nccl");
#endif
}

void close_cuda_link(worker_state& w) {
  if (!w.link) return;
  if (w.link->watch) w.sys->stop(w.link->watch);
  w.link.reset();
}

expected<std::vector<tensor>> cuda_pushpull(worker_state& w, const std::vector<kvstore::key>& keys,
                                            const std::vector<std::vector<tensor>>& values, expected<void> mine,
                                            step_refusal reason) {
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::size_t> sizes;
  const int gpu = w.replica_dev.properties().gpu_ordinal;
  // A failed link fails every later step at once, before the agreement, which a rank that left
  // would never join; a rank whose link has not failed waits there until its timeout aborts it.
  if (error f = w.link->failure()) return step_failed(f);
  auto refuse = [&](step_refusal why, error e) {
    mine = std::move(e);
    reason = why;
  };
  for (std::size_t i = 0; i < keys.size() && mine; ++i) {
    auto shape = w.shapes.find(keys[i]);
    std::vector<value_facts> facts;
    for (const auto& v : values[i]) facts.push_back(facts_of(v));
    if (auto ok = check_cuda_values(keys[i], facts, gpu, w.replica_dev.name(), shape->second); !ok) {
      refuse(step_refusal::bad_value, ok.error());
      break;
    }
    shapes.push_back(shape->second);
    sizes.push_back(static_cast<std::size_t>(values[i].front().numel()));
  }
  expected<pack_plan> plan = pack_plan{};
  if (mine) plan = plan_packing(keys, sizes);
  if (!plan) refuse(step_refusal::bad_keys, plan.error());
  if (auto agreed = agree_on_step(w, mine, reason, keys); !agreed) return agreed.error();
  if (keys.empty()) return std::vector<tensor>();
  tensor packed = pack_sums(w.replica_dev, w.rs, *plan, values);
  if (plan->total > 0) {  // keys of no elements only: nothing to sum (the same on every rank)
    auto summed = sum_over_ranks(w, std::move(packed));
    if (!summed) return summed.error();
    packed = std::move(*summed);
  }
  w.bytes_pushed += plan->total * sizeof(float);
  return replica_step(w, keys, *plan, unpack(w.replica_dev, w.rs, packed, *plan, shapes));
}

}  // namespace strata::kvstore_dist::internal
