#pragma once
/// \file
/// `strata::kvstore_dist::store`: MXNet's distributed KVStore types (`dist_sync`, `dist_async`)
/// for the workers of an MPI job, built on strata::net and the kvstore actor.

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kvstore/checkpoint.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/net/endpoint.hpp"

namespace strata::kvstore_dist {

/// How pushes of the workers become updates (MXNet's store types).
enum class mode : std::uint8_t {
  /// `dist_sync`: a key's update runs once per version, when every worker's push for that
  /// version has arrived; the values are summed in rank order, so results equal one process
  /// pushing the same values in one call, bit for bit. Without an optimizer the stored value
  /// becomes the merged sum.
  sync,
  /// `dist_async`: every push updates the key at once. An optimizer is required.
  async,
  /// `dist_sync_allreduce` (Horovod's way): no servers; every rank keeps a replica of every key.
  /// `pushpull` sums the gradients of all ranks with one fused allreduce (in key order), then each
  /// rank applies the same update to its replica. `push` alone is refused; `pull` reads the
  /// replica. With a cuda `store_options::replica_device` the gradients stay on the GPU: one
  /// packed device buffer per step, summed with NCCL (or staged through the host: `cuda_sum`).
  allreduce,
};

/// `dist_sync_allreduce` with a cuda `store_options::replica_device`: how a step's packed sum
/// crosses the ranks.
enum class cuda_sum : std::uint8_t {
  /// `nccl` when this build has strata::nccl (`STRATA_NCCL=AUTO` found NCCL, or `ON`), else
  /// `staged_mpi`.
  automatic,
  /// One `ncclAllReduce` on the replica's GPU (`nccl::communicator`, made when the store is
  /// made). The constructor throws when this build has no strata::nccl.
  nccl,
  /// The packed buffer copied to the host, summed with MPI (`endpoint::allreduce_sum`, as host
  /// tensors are), copied back. Ranks may share a GPU (NCCL puts one rank per GPU).
  staged_mpi,
};

/// Settings of a distributed store. Every field has a working default.
struct store_options {
  kvstore_dist::mode mode = kvstore_dist::mode::sync;
  /// How long one call waits for the servers. A rank that dies ends the job before that
  /// (docs/distributed.md); a rank that leaves the job or closes its store makes what waits for
  /// it fail at once instead (`errc::rank_down`: dist_sync rounds and barriers, dist_sync_allreduce
  /// steps, inits and barriers).
  std::chrono::nanoseconds timeout = std::chrono::seconds(120);
  /// A cpu device for this worker's local sums (several values in one push) and for the values
  /// its server shard answers with. Empty: a one-thread cpu device made by the store.
  device value_device;
  /// MXNet's `MXNET_KVSTORE_BIGARRAY_BOUND`: a key with more elements than this is split over the
  /// servers (`dist_sync`, `dist_async`; never in `allreduce` mode, where every rank keeps a
  /// replica): cut along its flattened elements into min(num_workers, elements) contiguous parts
  /// whose sizes differ by at most one element, part i kept by rank i's shard. Every update rule
  /// and compression here is per element, so a split key gives the same results, bit for bit, as
  /// a whole one. 0 splits every key of two or more elements; `never_split` none. A negative bound
  /// makes the constructor throw. (MXNet splits at `>=` the bound; here only above it.)
  std::int64_t big_array_bound = 1'000'000;
  static constexpr std::int64_t never_split = std::numeric_limits<std::int64_t>::max();
  /// `dist_sync_allreduce` only: where this rank keeps its replica and takes its gradients.
  /// Empty or cpu: float32 cpu tensors, packed into one host buffer and summed with MPI. A cuda
  /// device: float32 tensors on that GPU, packed into one buffer there and summed as `cuda_sum`
  /// says; the replica is a cuda kvstore on that device, and pulls answer tensors there. A sim
  /// device, or any device in `dist_sync` / `dist_async`, makes the constructor throw.
  device replica_device;
  /// `dist_sync_allreduce` with a cuda `replica_device` only (anything but `automatic` elsewhere
  /// makes the constructor throw).
  kvstore_dist::cuda_sum cuda_sum = kvstore_dist::cuda_sum::automatic;
  /// `dist_sync_allreduce` on a cpu replica only: the store spans the ranks of this group
  /// (`net::endpoint::split`) instead of the whole job: its members construct it (a collective of
  /// the group), its sums and agreements run among them, `rank()` and `num_workers()` are the
  /// group's, and rank 0 of the group writes `save`'s file. Unset: every rank. Set in another mode
  /// or with a cuda replica, the constructor throws.
  std::optional<net::rank_group> group;
};

namespace detail {
struct worker_state;
}

/// One per worker (every rank of the job constructs one, with the same options: it is a
/// collective, like MXNet's `kv.create('dist_sync')`). Each rank also runs one server shard
/// (a kvstore actor, published on the endpoint); key k lives on rank `owner(k)`.
///
/// A key larger than `store_options::big_array_bound` is split: its parts live on ranks 0, 1, ...,
/// a push sends every part at once (each straight from its slice of the caller's tensor) and a
/// pull gathers them; checkpoints hold the key whole.
///
/// Every call blocks until its reply (a push until the owner has taken it, a pull until the
/// value is there) and returns an error with one sentence instead of throwing. `init` and
/// `barrier` are collectives: every worker calls them in the same order.
///
/// \code
///   strata::actor_system sys({.worker_threads = 1});
///   strata::net::endpoint net(sys);
///   strata::kvstore_dist::store kv(sys, net);                 // dist_sync
///   kv.init("3", ones_2x3).value();                            // rank 0's value, then a barrier
///   kv.push("3", {grad}).value();
///   strata::tensor merged = kv.pull("3").value();              // the round this worker pushed to
/// \endcode
class store {
public:
  /// \throws std::invalid_argument for a non-cpu `value_device`, or a `replica_device` or
  ///   `cuda_sum` that the mode does not take; error_exception when the NCCL communicator of a
  ///   cuda replica cannot be made (on every rank: its creation is a collective).
  store(actor_system& system, net::endpoint& endpoint, store_options options = {});
  /// Stops this rank's server shard. Call `barrier()` first when other workers may still use it:
  /// once it is stopped, the other ranks' dist_sync rounds that need this worker's pushes, and
  /// their barriers, fail at once ("... rank R has closed this store.").
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  /// "dist_sync", "dist_async" or "dist_sync_allreduce", as MXNet names them.
  std::string type() const;
  /// This worker's rank and the number of workers (MXNet's `rank`, `num_workers`).
  int rank() const noexcept;
  int num_workers() const noexcept;
  /// The rank whose server shard keeps `key` whole (the same on every rank), or -1 for a key
  /// split over several ranks (`store_options::big_array_bound`; see `owners`). Before its init a
  /// key is not known to be split and this answers where it would be kept whole.
  int owner(const kvstore::key& key) const;
  /// The ranks that keep `key`'s parts, part i on `owners(key)[i]` (0, 1, ... for a split key),
  /// or the one rank `owner(key)`.
  std::vector<int> owners(const kvstore::key& key) const;

  /// Returns once every worker has called it as often as this one.
  /// \returns rank_down at once when a worker that has not reached it has left the job or closed
  ///   its store (`kvstore dist barrier: barrier 2 cannot complete: rank 1 has left the job.`).
  expected<void> barrier();

  /// Collective: rank 0's `value` becomes the key's initial value (the others' are ignored, as
  /// in MXNet's distributed stores; rank 0's shape decides whether the key is split), then a
  /// barrier. The key keeps the value's dtype: float32, or float16 / bfloat16 (summed in float32,
  /// rounded once per update, as the one-process cpu store's 16-bit keys). Fails on every rank for
  /// a key that exists, and for a value the store cannot keep.
  expected<void> init(const kvstore::key& key, const tensor& value);

  /// MXNet's `broadcast(key, value, out)` in one call: `init` (rank 0's value; a collective) then
  /// `pull`, so every rank gets rank 0's value back. Fails as `init` does, on every rank.
  expected<tensor> broadcast(const kvstore::key& key, const tensor& value);

  /// Pushes this worker's contribution for `key`: `values` (cpu tensors of the key's shape and
  /// dtype; another dtype is refused with one sentence naming both) summed here in the order given
  /// (16-bit ones in float32, rounded once to the key's dtype), then sent to the owner (compressed,
  /// after `set_gradient_compression`). `dist_sync`: it counts
  /// towards this worker's next version of the key; `dist_async`: it updates the key at once.
  expected<void> push(const kvstore::key& key, const std::vector<tensor>& values);

  /// MXNet's `push` of a `row_sparse` value (an embedding's gradient; a name of its own, since
  /// `push(key, {tensor})` would also read as a row_sparse of that tensor): only the rows travel, to the
  /// key's owner (of a split key: each row cut at the part boundaries, each piece to its part's
  /// owner). `dist_sync`: it is this worker's contribution to its next version of the key; a
  /// version collects dense or row-sparse values, not both (the other kind is refused, as by the
  /// one-process synchronous store), and when every worker's is there the rows are summed by id
  /// in rank order and the rule runs once on their union (assign: the key becomes that sum, every
  /// other row zero). `dist_async`: an update at once (an optimizer is required). Rows have the
  /// key's dtype. Refused with one sentence, nothing changed: compression on, a row id outside
  /// the key, rows of another shape or dtype, a key not initialised, `dist_sync_allreduce`.
  expected<void> push_row_sparse(const kvstore::key& key, const kvstore::row_sparse& value);
  /// Several local row-sparse values of `key` (one per device, as MXNet's workers push a list):
  /// their rows summed here by id, in the order given (a repeated id adds up; 16-bit rows in
  /// float32, rounded once to the key's dtype), then pushed as one value (ids ascending), as
  /// above. Refused with one sentence, nothing sent: no value, values of another dtype or key
  /// shape than the first's or off the cpu, a row id outside the key, rows of the wrong shape.
  expected<void> push_row_sparse(const kvstore::key& key, const std::vector<kvstore::row_sparse>& values);

  /// MXNet's `row_sparse_pull(key, out, row_ids)`: rows `row_ids` of the key (in that order, an id
  /// may repeat; `dist_sync`: after every version this worker has pushed to) copied into `out`, a
  /// cpu tensor of the key's dtype and shape `[row_ids.size(), shape[1], ...]`. Only those rows
  /// travel (of a split key: from each part they reach). Refused with one sentence, `out`
  /// untouched: a row id outside the key, an `out` of another shape or dtype, a key not
  /// initialised, `dist_sync_allreduce`.
  expected<void> row_sparse_pull(const kvstore::key& key, tensor& out, const std::vector<std::int64_t>& row_ids);

  /// The key's value. `dist_sync`: the value after every version this worker has pushed to (it
  /// waits for the other workers' pushes of that version); `dist_async`: the current value. The
  /// tensor, of the key's dtype, lives on a cpu device of this rank; its ready event fires when
  /// the data is there.
  expected<tensor> pull(const kvstore::key& key);

  /// `push` then `pull`: in `dist_sync` the merged round this push contributed to (MXNet's
  /// pushpull, which Gluon's `Trainer.step` relies on), never a stale value.
  expected<tensor> pushpull(const kvstore::key& key, const std::vector<tensor>& values);
  /// Several keys, one value each: in `dist_sync_allreduce` one fused allreduce for all of them
  /// (keys in `kvstore::key` order, the same on every rank), else every push, then every pull.
  expected<std::vector<tensor>> pushpull(const std::vector<kvstore::key>& keys, const std::vector<tensor>& values);

  /// Collective: writes every key's value, version and optimizer state to `path` as one kvstore
  /// checkpoint (the format of `kvstore::save`, so a store of one process, or a distributed store
  /// on any number of ranks, loads it). Each shard saves its part beside `path`, rank 0 joins the
  /// parts into `path` atomically (the one commit) and removes them. Ranks share a file system.
  expected<void> save(const std::string& path);
  /// Collective: replaces every key with those of the checkpoint `path` (written by `save` on any
  /// number of ranks, or by a kvstore of one process); each shard takes the keys it owns now, and
  /// keys above today's `big_array_bound` are cut for today's ranks.
  /// In dist_sync each worker's push count of a key becomes the key's saved version. The update
  /// rule is not saved: call `set_optimizer` before `load`. A missing or corrupt file fails on
  /// every rank with one sentence, and nothing changes; so does a file with a 16-bit key in
  /// `dist_sync_allreduce`, which keeps float32 keys only.
  expected<void> load(const std::string& path);

  /// Installs the update rule on this rank's server shard. Every worker calls it (each shard
  /// updates its own keys), before the first push.
  expected<void> set_optimizer(kernels::sgd_options options);
  expected<void> set_optimizer(kernels::adam_options options);
  /// With every field of the one-process kvstore's rule, e.g. `.multi_precision = true`: each
  /// float16 or bfloat16 key keeps a float32 master copy on its server shard (docs/kvstore.md,
  /// "16-bit values and multi_precision").
  expected<void> set_optimizer(kvstore::set_optimizer rule);
  /// MXNet's `Optimizer.set_learning_rate`: this rank's shard (or replica) takes rate `lr` and
  /// keeps its keys' optimizer state (`kvstore::set_learning_rate`). Every worker calls it with
  /// the same rate, then `barrier()` before the next push, so that every shard has it.
  expected<void> set_learning_rate(double lr);

  /// Collective: MXNet's `set_gradient_compression({'type': type, 'threshold': threshold})` for
  /// this store, with the types, checks and sentences of the one-process kvstore's ("2bit",
  /// "1bit", or "none", which turns it off; `kvstore::parse_compression`). Every worker calls it,
  /// with the same setting, before the pushes it should compress. From then on each `push`
  /// quantizes this worker's locally summed value with a residual this worker keeps per key
  /// (MXNet's error feedback, `kvstore::compress`) and sends only the packed codes and the
  /// threshold (`kvstore::compress_packed`: 2 bits an element for 2bit, 1 for 1bit); the owner
  /// decompresses and merges as before. A float16 or bfloat16 key's value is quantized widened to
  /// float32 with a float32 residual (as the one-process store); its owner refuses, with one
  /// sentence, a 2bit threshold the key's dtype does not hold exactly (0.5 and 0.25 it holds),
  /// since the decompressed values must enter the key's dtype unrounded. Inits, pulls and
  /// checkpoints are not compressed. It may
  /// be called again between pushes: the new setting starts from zero residuals (as does `load`).
  /// Refused with one sentence, nothing changed: in `dist_sync_allreduce` (MXNet does not
  /// compress there either), an unknown type, a bad threshold, or another rank's refusal.
  expected<void> set_gradient_compression(std::string type, float threshold = 0.5f);

  /// Bytes of push payload this worker has sent: the dtype's size (4, or 2 for a 16-bit key) per
  /// element of an uncompressed push; for a
  /// compressed one its code words (4 bytes per 16 elements for 2bit, per 32 for 1bit, rounded
  /// up) plus 4 for the threshold. In `dist_sync_allreduce`, 4 per element this worker gave to
  /// the allreduce. The message headers (key, rank, sequence number, shape) are not counted.
  std::uint64_t bytes_pushed() const noexcept;

private:
  std::unique_ptr<detail::worker_state> state_;
};

}  // namespace strata::kvstore_dist
