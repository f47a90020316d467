#pragma once
// A worker's state (one per store and rank) and what the files of the worker's side share.

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "allreduce_cuda.hpp"
#include "protocol.hpp"
#include "split.hpp"

namespace strata::kvstore_dist::detail {

struct worker_state {
  actor_system* sys = nullptr;
  net::endpoint* net = nullptr;
  store_options options;
  device dev;
  stream s;
  actor_ref server;
  std::vector<actor_ref> servers;  // by rank
  std::map<kvstore::key, std::uint64_t> pushes;
  std::uint64_t barriers = 0;
  int rank = 0;
  int world = 1;
  net::rank_group group;  // the ranks the store spans (id -1: every rank)
  std::string name;
  // dist_sync / dist_async: the keys initialised or loaded, and how those split over the ranks
  // are cut (the same on every rank: init and load are collectives).
  std::set<kvstore::key> known;
  std::map<kvstore::key, split_layout> splits;
  // Their dtypes (rank 0's at init, the file's at load): a split push is checked against it
  // before any part leaves, so that no owner refuses a part that the others take.
  std::map<kvstore::key, dtype> types;
  // dist_sync_allreduce: this rank's replica of every key, and the keys' shapes.
  std::unique_ptr<kvstore::client> replica;
  std::map<kvstore::key, std::vector<std::int64_t>> shapes;
  // The replica's device and stream (`dev` and `s` on the host path), how its sums cross the
  // ranks, and for a cuda replica the NCCL communicator or MPI staging.
  device replica_dev;
  stream rs;
  sum_path path = sum_path::host_mpi;
  std::shared_ptr<sum_link> link;
  // set_gradient_compression: the setting and this worker's residual of each key it pushed (the
  // whole key's; a split key's parts use their slices of it).
  kvstore::compression_type compression = kvstore::compression_type::none;
  float threshold = 0.5f;
  std::map<kvstore::key, std::vector<float>> residuals;
  std::uint64_t bytes_pushed = 0;
};

template <class R, class M>
expected<R> ask(worker_state& w, const actor_ref& to, M msg) {
  auto got = w.sys->request<R>(to, w.options.timeout, std::move(msg)).get();
  if (!got && got.error().code() == errc::target_terminated)  // name the rank whose shard it was
    for (std::size_t r = 0; r < w.servers.size(); ++r)
      if (w.servers[r] == to)
        return error(errc::target_terminated, "kvstore dist: the shard of rank " + std::to_string(r) +
                                                  " has stopped (that rank closed this store, or its actor system ended).");
  return got;
}

/// Waits for every reply: the first failure (in the order given), or nothing.
template <class T>
expected<void> all_replies(std::vector<std::future<expected<T>>>& replies) {
  expected<void> first;
  for (auto& r : replies) {
    auto got = r.get();
    if (!got && first) first = got.error();
  }
  return first;
}

/// A cpu tensor's elements as host floats (16-bit ones widened, exactly).
std::vector<float> widened(worker_state& w, const tensor& t);

/// `values` summed on this worker, in the order given, as host floats (16-bit values widened,
/// exactly, and summed in float32); each must be a cpu tensor of one shape (`*shape` when given).
/// Without `type` they must be float32; with it they may be float32, float16 or bfloat16, all of
/// one dtype, which `*type` receives.
expected<std::vector<float>> local_sum(worker_state& w, const kvstore::key& key, const std::vector<tensor>& values,
                                       const std::vector<std::int64_t>* shape, dtype* type = nullptr);

/// Collective, in allreduce mode, before a step's data crosses the ranks (every rank, every step,
/// whatever its own checks said): each rank's refusal (`mine`, why: `reason`) and keys reach every
/// rank. \returns this rank's error, or the sentence naming the ranks that refused (or whose keys
///   differ from rank 0's); nothing when every rank goes on.
expected<void> agree_on_step(worker_state& w, const expected<void>& mine, step_refusal reason,
                             const std::vector<kvstore::key>& keys);

/// The error of a call on a key no init made (store.cpp).
error never_initialised(const char* call, const kvstore::key& key);

/// A reply without value as the call's result.
expected<void> done(expected<unit_t> r);

/// The rank that keeps `key` whole: FNV-1a of the key's kind and text, the same on every rank of
/// one build.
int home_of(const kvstore::key& key, int world);

/// Sums `host` over the store's ranks in place (one allreduce). An allreduce store waits as its
/// steps do: when a rank leaves or closes its store, or no sum comes within the store's timeout,
/// the call fails at once with `what` and why (the buffer then stays with the posted allreduce).
expected<void> allreduce(worker_state& w, std::vector<float>& host, const std::string& what = "kvstore dist: ");

/// Collective: true on every rank when `ok` on every rank (an allreduce of the failures).
bool all_ok(worker_state& w, bool ok);

/// Collective: rank 0's `shape` on every rank when `ok` on rank 0, else none (the other ranks'
/// arguments are ignored), and rank 0's `*type` in `*type` (store_allreduce.cpp).
expected<std::optional<std::vector<std::int64_t>>> shape_of_rank0(worker_state& w, bool ok,
                                                                  const std::vector<std::int64_t>& shape, dtype* type);

/// dist_sync_allreduce: one step of `values[i]` for `keys[i]` (`counted`: the caller's check of
/// the counts), agreed by every rank before any data crosses (store_allreduce.cpp).
expected<std::vector<tensor>> allreduce_step(worker_state& w, const std::vector<kvstore::key>& keys,
                                             const std::vector<std::vector<tensor>>& values, expected<void> counted);

/// This worker's `seq`-th push of the split key `key`: each part sent to its rank at once
/// (straight from a slice of the caller's tensor, or compressed with its slice of the residual),
/// then every reply awaited. Answers the payload bytes sent.
expected<std::uint64_t> push_parts(worker_state& w, const kvstore::key& key, const split_layout& layout,
                                   const std::vector<tensor>& values, std::uint64_t seq);

/// The split key's value: every part asked for at once (after `min_version` updates each), then
/// gathered into one tensor of the key's shape.
expected<tensor> pull_parts(worker_state& w, const kvstore::key& key, const split_layout& layout,
                            std::uint64_t min_version);

}  // namespace strata::kvstore_dist::detail
