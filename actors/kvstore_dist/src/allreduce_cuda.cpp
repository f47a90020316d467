// dist_sync_allreduce: the link of a store's sums (failure, watch, waits), and the step of a cuda
// replica: one packed device buffer per step, summed with NCCL (or staged through the host and
// summed with MPI), then the same update on every replica.

#include <atomic>
#include <chrono>
#include <future>
#include <map>
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

namespace strata::kvstore_dist::detail {

struct sum_link {
  mutable std::mutex mu;
  error failed;  // set once: why the link cannot sum any more
#if STRATA_HAS_NCCL
  std::optional<nccl::communicator> comm;
#endif
  actor_ref watch;                  // what the other ranks' watchers monitor (published; none in a world of one)
  std::vector<actor_ref> watchers;  // one per other rank of the store, monitoring its watch

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

std::shared_ptr<sum_link> make_sum_link() { return std::make_shared<sum_link>(); }

void abort_sum_link(sum_link& link, errc code, const std::string& why) { link.abort(code, why); }

error sum_link_failure(const sum_link& link) { return link.failure(); }

expected<void> sum_link_ok(const sum_link& link) {
  if (error f = link.failure()) return step_failed(f);
  return {};
}

namespace {

/// Waits until `ready()`, the link has failed, or `timeout` has passed (then aborts the link with
/// request_timeout, `what` saying what did not finish).
/// `ready()` may wait a little itself (a future's wait_for); else the loop sleeps between asks.
template <class Ready>
expected<void> await_until(sum_link& link, Ready ready, std::chrono::nanoseconds timeout, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!ready()) {
    if (error f = link.failure()) return step_failed(f);
    if (std::chrono::steady_clock::now() > deadline) {
      link.abort(errc::request_timeout, std::string(what) + " did not finish within " +
                                            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                                            " ms (store_options::timeout); a rank may have died or not called pushpull");
      return step_failed(link.failure());
    }
  }
  return {};
}

/// A future's readiness, waiting up to 2 ms for it (so that a ready future is seen at once).
bool ready_soon(const std::future<expected<void>>& f) {
  return f.wait_for(std::chrono::milliseconds(2)) == std::future_status::ready;
}

/// An event's, sleeping 100 us when it has not fired.
bool fired_or_nap(const event& done) {
  if (done.query()) return true;
  std::this_thread::sleep_for(std::chrono::microseconds(100));
  return false;
}

/// A failed link while an MPI allreduce is posted: a peer that finished this sum and then left
/// (or closed its store) has still given its part, so the sum may yet complete. It counts if it
/// does within this grace; else the step fails.
constexpr auto after_failure_grace = std::chrono::seconds(1);

}  // namespace

expected<void> await_agreement(sum_link& link, const std::future<expected<void>>& agreed, std::chrono::nanoseconds timeout) {
  auto waited = await_until(link, [&] { return ready_soon(agreed); }, timeout, "the ranks' agreement on the step");
  if (!waited && agreed.wait_for(after_failure_grace) == std::future_status::ready) return {};
  return waited;
}

expected<void> await_host_sum(sum_link& link, std::future<expected<void>>& summed, std::shared_ptr<std::vector<float>> buffer,
                              std::chrono::nanoseconds timeout, const std::string& what) {
  auto waited = await_until(link, [&] { return ready_soon(summed); }, timeout, "the sum");
  if (!waited && summed.wait_for(after_failure_grace) == std::future_status::ready) waited = {};
  if (!waited) {
    // The allreduce stays posted (MPI cannot take it back): its buffer lives as long as the process.
    static std::mutex mu;
    static std::vector<std::shared_ptr<std::vector<float>>> abandoned;
    std::lock_guard lock(mu);
    abandoned.push_back(std::move(buffer));
    return error(waited.error().code(), what + link.failure().message());
  }
  if (auto got = summed.get(); !got) return error(got.error().code(), what + got.error().message());
  return {};
}

expected<void> await_sum(sum_link& link, const event& done, std::chrono::nanoseconds timeout) {
  if (auto waited = await_until(link, [&] { return fired_or_nap(done); }, timeout, "the sum"); !waited) return waited;
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
  sum_link& link = *w.link;
  if (error f = link.failure()) return step_failed(f);
  if (w.path == sum_path::staged_mpi) {
    // Shared with the stream, so that a copy still running after a failed wait has its buffer.
    auto host = std::make_shared<std::vector<float>>(static_cast<std::size_t>(packed.numel()));
    w.rs.wait(packed.ready_event());
    w.rs.copy_to_host(host->data(), packed.storage(), host->size() * sizeof(float));
    const event copied = w.rs.record();
    w.rs.on_complete([host](std::exception_ptr) {});
    if (auto ok = await_sum(link, copied, w.options.timeout); !ok) return ok.error();
    auto summed = w.net->allreduce_sum(std::span<float>(*host));
    if (auto ok = await_host_sum(link, summed, host, w.options.timeout,
                                 "kvstore dist pushpull: the allreduce of this step failed, and no replica was updated: ");
        !ok)
      return ok.error();
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

namespace {

/// Path nccl: the replicas' communicator, made when the store is made (a collective).
void make_communicator([[maybe_unused]] worker_state& w) {
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
#else
  throw std::invalid_argument("kvstore_dist::store: this build has no strata::nccl");
#endif
}

}  // namespace

void open_sum_link(worker_state& w) {
  w.link = make_sum_link();
  if (w.path == sum_path::nccl) make_communicator(w);
  if (w.world == 1) return;
  // A rank that leaves while the others wait in a sum would leave them waiting (MPI and NCCL
  // detect nothing): each rank publishes a watch that monitors the others' and fails the link
  // when one leaves the job (`rank_down`) or, on the MPI paths, closes its store (`stopped`; an
  // NCCL communicator is kept then, its sums ending on their own). Stores over one group are
  // collectives of its members, made in the same order on each: the n-th one publishes under the
  // same name on every member.
  static std::mutex mu;
  static std::map<std::vector<int>, int> made_per_group;
  std::vector<int> members = w.group.members;
  if (w.group.id < 0) {
    members.clear();
    for (int r = 0; r < w.world; ++r) members.push_back(r);
  }
  int n = 0;
  {
    std::lock_guard lock(mu);
    n = made_per_group[members]++;
  }
  std::string name = "kvstore_dist.allreduce_watch/";
  for (int r : members) name += std::to_string(r) + ".";
  name += std::to_string(n);
  // What the others monitor (it does nothing itself), then one watcher per other member.
  w.link->watch = w.sys->spawn([](actor&) -> behavior { return {[](const down_msg&) {}}; });
  if (auto published = w.net->publish(w.link->watch, name); !published) {
    w.sys->stop(w.link->watch);
    throw error_exception(published.error());
  }
  std::weak_ptr<sum_link> weak = w.link;
  const bool closes_count = w.path != sum_path::nccl;
  for (int r : members) {
    if (r == w.net->rank()) continue;
    auto peer = w.net->remote(r, name);
    if (!peer) throw error_exception(peer.error());
    w.link->watchers.push_back(w.sys->spawn([weak, peer = *peer, r, closes_count](actor& self) -> behavior {
      self.monitor(peer);
      return {[weak, r, closes_count, &self](const down_msg& d) {
        const bool left = d.reason.code() == errc::rank_down;
        if (!left && !(closes_count && d.reason.code() == errc::stopped)) return;  // ended normally
        const std::string who = "rank " + std::to_string(r);
        if (auto link = weak.lock())
          link->abort(errc::rank_down, left ? "another rank left the job (" + who + ")"
                                            : "another rank closed this store (" + who + ")");
        self.quit();
      }};
    }));
  }
}


void close_sum_link(worker_state& w) {
  if (!w.link) return;
  if (w.link->watch) w.sys->stop(w.link->watch);
  for (const auto& watcher : w.link->watchers) w.sys->stop(watcher);
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

}  // namespace strata::kvstore_dist::detail
