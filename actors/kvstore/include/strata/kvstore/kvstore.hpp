#pragma once
/// \file
/// The KVStore actor: MXNet's init/push/pull parameter store as one strata actor, plus
/// `kvstore::client`, a handle for code outside actors.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "strata/actor.hpp"
#include "strata/actor_ref.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/device.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kvstore/lr_scheduler.hpp"
#include "strata/message.hpp"
#include "strata/requester.hpp"
#include "strata/kvstore/compression.hpp"
#include "strata/kvstore/row_sparse.hpp"

namespace strata::kvstore {

/// A key of a kvstore: an integer or a string. One store holds keys of one kind only (the kind
/// of the first key it was given), as in MXNet.
class key {
public:
  key(int value) : value_(static_cast<std::int64_t>(value)) {}  // NOLINT: implicit on purpose
  key(std::int64_t value) : value_(value) {}                      // NOLINT
  key(std::string value) : value_(std::move(value)) {}            // NOLINT
  key(const char* value) : value_(std::string(value)) {}          // NOLINT

  bool is_int() const noexcept { return value_.index() == 0; }
  bool is_string() const noexcept { return value_.index() == 1; }
  /// `5` or `"5"` (quoted), for error texts.
  std::string to_string() const;

  friend bool operator==(const kvstore::key& a, const kvstore::key& b) noexcept { return a.value_ == b.value_; }
  friend bool operator<(const kvstore::key& a, const kvstore::key& b) noexcept { return a.value_ < b.value_; }
  const std::variant<std::int64_t, std::string>& value() const noexcept { return value_; }

private:
  std::variant<std::int64_t, std::string> value_;
};

/// Where a store merges and keeps its values.
enum class kind : std::uint8_t {
  local,   ///< On the host: the store owns a one-thread cpu device of its own.
  device,  ///< On `kvstore::options::merge_device` (a cpu, sim or cuda device).
};

/// A user update rule, run inside the store: `stored` is the key's value, `merged` the sum of
/// the values pushed. One key at a time, in push order. It must not block; an exception fails
/// that push with the exception's text.
/// - cpu stores: runs as a work item on the store's stream (on its arena thread), with the data
///   of both tensors ready and host-accessible.
/// - cuda stores: runs on the store's actor thread right after the sum is enqueued; both tensors
///   are GPU memory whose ready event marks the sum. It must enqueue its own work (on a stream of
///   its choice, after waiting for that event) and should set `stored`'s ready event to an event
///   recorded after all of it: the store's stream waits for that event before its next work (an
///   error carried by the event becomes the store stream's error).
/// - sim stores: never called (sim tensors hold no data).
using updater = std::function<void(const kvstore::key& key, const tensor& merged, tensor& stored)>;

/// What an init of a key that already exists does.
enum class init_existing : std::uint8_t {
  error,       ///< The init fails (one sentence) and changes nothing: a single-process store's rule.
  keep_first,  ///< The key keeps its value and the init of that key is ignored, as in MXNet's
               ///< distributed stores where every worker calls init and the first value wins. A value
               ///< of another shape than the stored one still fails the init.
};

/// Settings of a store. Every field has a working default (a local, asynchronous store).
struct options {
  kvstore::kind kind = kvstore::kind::local;
  /// For `kvstore::kind::device`: the device that merges and keeps the values.
  device merge_device{};
  /// Synchronous mode when > 0: a key expects this many pushed values per version; the update
  /// applies when all have arrived (values pushed beyond that start the next version). 0: every
  /// push call applies its own update at once (asynchronous mode).
  std::size_t contributions_per_version = 0;
  /// Actor name (traces, error texts).
  std::string name = "kvstore";
  /// Store actors the keys are spread over (>= 1). With more than one, `kvstore::spawn` returns a
  /// router actor that takes the same messages, validates each request whole, and forwards the
  /// parts to its shards, which merge in parallel; results equal those of one store, also when
  /// one tensor serves several keys of a request or several requests (the router orders the
  /// shards' accesses to it as one store would).
  std::size_t shards = 1;
  /// Sharded stores only: a key whose value has more bytes than this is split into contiguous
  /// slices of about equal size (each at most `chunk_bytes`), each slice a key of its own on
  /// consecutive shards, so that one large key merges on every shard at once. 0: never split.
  std::size_t chunk_bytes = std::size_t{4} << 20;
  /// Sharded stores only: shard i merges on `shard_devices[i % size]` (cpu, sim or cuda devices of
  /// one kind). Empty: every shard is a store of `kind` (local: its own one-thread cpu device).
  std::vector<device> shard_devices{};
  /// Requests the store hands to its stream at a time (>= 1). The others wait in the store's
  /// ready queue, ordered by priority: 1 gives priority its full effect; more keeps the stream
  /// busy between requests at the cost of serving those already handed over first.
  std::size_t max_in_flight = 1;
  /// An init of a key the store holds: an error (the default), or ignored (the first value wins).
  kvstore::init_existing init_existing = kvstore::init_existing::error;
  /// What `store_type` answers. Empty: "local" or "device" by `kind`. `kvstore::create` sets it
  /// to the name it was called with, so a store made by name reports that name (MXNet's
  /// `kv.type`), including a user's registered type whose factory passes the options on.
  std::string type_name{};
};

// ---- messages (use them with `actor::request` inside actors) --------------------------------

/// Stores `values[i]` as the initial value of `keys[i]`. Reply: `unit` (request<void>).
/// A value's dtype (float32, or float16 / bfloat16 on cpu and cuda stores) becomes the key's: its pushes
/// and pulls take tensors of that dtype. Pushed 16-bit values are summed in float32 and the sum
/// is rounded once to the key's dtype (to nearest, ties to even; `strata/kernels/half.hpp`).
/// Fails if a key repeats, a value has another dtype, or a key exists (unless the store's
/// `options::init_existing` is `keep_first`: then that key is left as it is).
struct init {
  std::vector<kvstore::key> keys{};
  std::vector<tensor> values{};
};
/// Pushes `values[i]` to `keys[i]`; values of the same key are summed, then the updater runs.
/// Reply: `unit` once the update has been applied (in synchronous mode: once the values are
/// accumulated).
struct push {
  std::vector<kvstore::key> keys{};
  std::vector<tensor> values{};
  /// Requests waiting for a busy store are served highest priority first (equal priorities in
  /// arrival order). A request never overtakes an earlier one that uses one of its tensors (of
  /// any sender: MXNet's issue order per array), nor an earlier one of the same sender that names
  /// one of its keys (it lends that one its priority instead), so a sender's pull sees its push.
  int priority = 0;
};
/// Copies the value of `keys[i]` into `outs[i]` (a key may repeat, outputs may live on several
/// devices). Reply: `std::vector<tensor>`, the outputs with their ready events, once the copies
/// are done. With `min_version` > 0 the reply waits until every key has had that many updates.
struct pull {
  std::vector<kvstore::key> keys{};
  std::vector<tensor> outs{};
  std::uint64_t min_version = 0;
  int priority = 0;  ///< As `kvstore::push::priority`.
};
/// A push followed by a pull, as one message (one round trip). The pull's `min_version` is
/// ignored: it sees the push. In synchronous mode the pull of a key this request pushes waits for
/// the version the push contributes to and answers with that merged, updated value (MXNet's
/// dist_sync pushpull), so every contributor of a round gets the same value. Reply as pull.
struct pushpull {
  kvstore::push push{};
  kvstore::pull pull{};
  int priority = 0;  ///< As `kvstore::push::priority` (those of `push` and `pull` are ignored).
};
/// MXNet's `pushpull(key, value)` without outputs: pushes `values[i]` to `keys[i]`, then pulls
/// each key's updated value back into the pushed tensors themselves. Reply as pull (the values).
struct pushpull_in_place {
  std::vector<kvstore::key> keys{};
  std::vector<tensor> values{};
  int priority = 0;  ///< As `kvstore::push::priority`.
};
/// MXNet's push of `row_sparse` values: `values[i]` to `keys[i]`, a key held dense with the
/// values' full `shape`. The rows of one key's values are summed by id, then the rule runs on
/// those rows only: assign makes the key that sum (every other row zero: MXNet's store keeps the
/// merged row-sparse array), SGD and Adam update only the pushed rows and their state (MXNet's
/// lazy update; Adam's step counts pushes), a user updater gets the sum as a dense tensor.
/// Rows have the key's dtype: a 16-bit key's are summed in float32 and rounded once, and under
/// multi_precision its master copy's pushed rows are updated. cpu and cuda stores (rows and
/// outputs are cpu tensors either way), one shard or sharded (a row reaches the shards
/// holding its elements); in synchronous mode each of a version's n values is one contribution,
/// summed by id with the others, and the rule runs once on the union of their rows. Refused with
/// one sentence: a row id out of range, rows whose shape is not `[row_ids.size(), shape[1],
/// ...]`, sim stores, compressed stores (as MXNet), and, in synchronous mode, a version that has
/// dense values already. Reply: `unit` (in synchronous mode: once the values are accumulated).
struct push_row_sparse {
  std::vector<kvstore::key> keys{};
  std::vector<kvstore::row_sparse> values{};
  int priority = 0;  ///< As `kvstore::push::priority`.
};
/// MXNet's `row_sparse_pull(key, out, row_ids)`: copies rows `row_ids[i]` of the value of
/// `keys[i]`, in that order (an id may repeat), into `outs[i]` of shape `[row_ids[i].size(),
/// shape[1], ...]` (cpu tensors). With `min_version` > 0 the reply waits until every key has
/// had that many updates, as `kvstore::pull`'s. Reply as pull.
struct row_sparse_pull {
  std::vector<kvstore::key> keys{};
  std::vector<std::vector<std::int64_t>> row_ids{};
  std::vector<tensor> outs{};
  std::uint64_t min_version = 0;
  int priority = 0;  ///< As `kvstore::push::priority`.
};

/// MXNet's `broadcast(key, value, out)`: `init` and then `pull`, as one request (nothing of the
/// same sender comes between). The request is checked whole first: the pull may name the keys
/// the init creates. Reply as pull.
struct broadcast {
  kvstore::init init{};
  kvstore::pull pull{};  ///< Its `min_version` and `priority` are ignored.
};

/// Replaces the update rule (an empty function restores the default: assign). Reply: `unit`.
struct set_updater {
  kvstore::updater updater{};
};
/// Installs SGD (momentum, weight decay) or Adam/AdamW as the update rule, with per-key state
/// created at a key's first update (`merged` is the gradient). Hyper-parameters follow
/// torch.optim's rules (lr, momentum, weight_decay and eps finite and >= 0, Adam's betas in
/// [0, 1), Nesterov only with a momentum); one outside them, or a bad scheduler, fails the request
/// with one sentence naming the field and leaves the rule as it was. Reply: `unit`.
struct set_optimizer {
  std::variant<kernels::sgd_options, kernels::adam_options> options{};
  /// MXNet's `lr_scheduler`: when set, each update of a key uses `learning_rate(scheduler, n)`
  /// instead of the options' lr, n being the key's update count after that update (its version,
  /// 1 at its first; after `load_optimizer_states`, the count that file saved). A scheduler
  /// whose `base_lr` is unset starts from the options' lr (MXNet's `Optimizer` sets its
  /// scheduler's base_lr so).
  kvstore::lr_scheduler scheduler{};
  /// MXNet's `Optimizer(multi_precision=True)`, for float16 and bfloat16 keys: such a key keeps a
  /// float32 master copy (made from its value at its first update under this optimizer); the
  /// optimizer updates the master and the key's value becomes the master rounded to its dtype, so
  /// steps smaller than half a 16-bit ulp add up. Without it a 16-bit key's value is widened,
  /// updated in float32 and rounded back at every step (those small steps are lost, as MXNet's
  /// update in low precision loses them). Optimizer state is float32 either way. No effect on
  /// float32 keys.
  bool multi_precision = false;
};
/// MXNet's `Optimizer.set_learning_rate` (what `Trainer.set_learning_rate` calls): the installed
/// optimizer's lr becomes `lr` and every key keeps its optimizer state (momentum, Adam's moments
/// and step count), where a second `set_optimizer` would start that state afresh. A barrier, as
/// `set_optimizer`. Fails with one sentence, changing nothing, for an lr that is negative or not
/// finite, a store without an optimizer (assign, or a user updater), or one whose optimizer has a
/// scheduler (MXNet: "LRScheduler of the optimizer has already been defined"). Reply: `unit`.
struct set_learning_rate {
  double lr = 0.0;
};
/// The number of updates applied to `key` so far. Reply: `std::uint64_t`.
struct version {
  kvstore::key key;  // no default: every request names its key
};

/// MXNet's name of the store's type: `options::type_name` (the name `kvstore::create` made it by),
/// else "local" (merges on the host) or "device" (merges on `options::merge_device` or on the
/// `shard_devices`). Reply: `std::string`.
struct store_type {};

/// MXNet's `KVStoreBase.is_capable`: whether the store has `capability`, compared ignoring case.
/// Known capabilities: "optimizer" (MXNet's `KVStoreBase.OPTIMIZER`: `set_optimizer` runs the
/// optimizer inside the store; true for every strata store). Reply: `bool`; an unknown
/// capability fails with one sentence listing the known ones.
struct is_capable {
  std::string capability{};
};

/// Writes every key's value, version and optimizer state to `path`, after the work queued before
/// it: atomically (a temporary file beside it, fsync, rename), so `path` holds either the old or
/// the new checkpoint. The update rule itself is not saved. cpu and cuda stores (a cuda store's
/// tensors are copied to the host first), sharded or not: the file is the same whatever the
/// shard count, so any store loads it. sim stores hold no data and fail. Reply: `unit`.
struct save {
  std::string path{};
};
/// Replaces the store's keys with those of a checkpoint written by `kvstore::save` (by a store of
/// any shard count and device). The whole file is read and checked (format, size, checksum)
/// before anything changes: a truncated or corrupt file fails with one sentence and leaves the
/// store as it was. On a sharded store every shard first stages its part and all swap it in only
/// when all have it, so a shard that fails (e.g. out of memory) leaves every shard unchanged too.
/// Reply: `unit`.
struct load {
  std::string path{};
};

/// MXNet's `save_optimizer_states(fname, dump_optimizer=True)`: writes the optimizer installed by
/// `set_optimizer` (its hyper-parameters and scheduler) and every key's optimizer state (SGD
/// momentum, Adam's two moments and step; multi_precision and 16-bit keys' float32 master
/// copies), without the values, to `path` atomically, after the
/// work queued before it. A store without an optimizer (assign, or a user updater whose state the
/// store cannot see) fails with one sentence. Any store, whatever its shard count, loads the
/// file. Reply: `unit`.
struct save_optimizer_states {
  std::string path{};
};
/// MXNet's `load_optimizer_states`: installs the file's optimizer and scheduler and gives each key
/// of the file its saved state. The file is read and checked whole first; a key it names must
/// exist in the store with the same shape and dtype, else the request fails with one sentence and nothing
/// changes. Keys of the store that the file lacks start with fresh state; values and versions are
/// untouched (the values live in `save` checkpoints), and a scheduler's update count continues
/// from the file's (MXNet's pickled optimizer keeps its `num_update`). Reply: `unit`.
struct load_optimizer_states {
  std::string path{};
};

/// Spawns a store (with `options.shards` > 1: the shards and the router in front of them; the
/// returned handle takes the same messages either way, and stopping it stops the shards).
///
/// Init, `set_updater`, `set_optimizer`, `save` and `load` are barriers: nothing queued after
/// them overtakes them, whatever its priority. On a sharded store a key split in chunks reaches
/// a user updater once per chunk (a 1-D slice of the value, with the caller's key), on several
/// shards at once: the updater must be thread-safe. On a sharded store `save` and `load` are
/// barriers of the router too: requests that arrive meanwhile are served once they are done.
/// A store on a cuda device takes cuda tensors of any GPU: values on another GPU are
/// copied to the merge device first, outputs on another GPU are written peer to peer. cpu and
/// cuda stores also take tensors of the other kind, of the key's dtype (copied in stream order,
/// MXNet's 'local' store fed by GPUs); sim tensors only sim stores (docs/kvstore.md, "values").
/// \throws std::invalid_argument for a `device` store without a `merge_device`, `shards` or
///   `max_in_flight` of 0, or `shard_devices` of more than one kind.
actor_ref spawn(actor_system& system, kvstore::options options = {});

/// Makes a store of a registered type: takes the options and returns an actor that answers the
/// kvstore messages (a store spawned by `kvstore::spawn`, or a user's own actor).
using store_factory = std::function<actor_ref(actor_system& system, const kvstore::options& options)>;

/// MXNet's `KVStoreBase.register`: makes `factory` the store type `name` for `kvstore::create`.
/// Thread-safe. Registering a name again replaces its factory (as MXNet's register does).
/// Fails with one sentence for an empty name or an empty factory.
expected<void> register_type(const std::string& name, store_factory factory);

/// MXNet's `mx.kv.create(name)`: a store of the type registered as `name`, whose `store_type`
/// answers `name`. Built in: "local" (a store of `kind::local`) and "device" (`kind::device`;
/// `options.merge_device` must be set), and MXNet's other names for them: "local_update_cpu" and
/// "local_allreduce_cpu" (local), "local_allreduce_device" (device). The distributed types
/// ("dist_sync", ...) are made by `kvstore_dist::store`, not here.
/// An unknown name fails with one sentence that lists the known ones; a factory's
/// std::exception fails with its text.
expected<actor_ref> create(actor_system& system, const std::string& name, kvstore::options options = {});

/// A handle on a store for code outside actors: each call sends one message and returns a future
/// of `expected<...>` (failed replies carry one sentence naming the key and what was wrong).
///
/// Calls made through one client reach the store in call order, so a pull issued after a push
/// sees that push (the client calls through one `strata::requester`; `actor_system::request`
/// alone would not keep the order). Thread-safe; calls from several threads are ordered per thread.
///
/// \code
///   strata::actor_system sys;
///   auto devs = strata::make_devices("cpu:2");
///   strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
///   kv.init("w", ones).get().value();
///   kv.push("w", {g0, g1});                   // summed, then assigned
///   auto out = kv.pull("w", out_tensor).get().value();
/// \endcode
class client {
public:
  using done = std::future<expected<unit_t>>;
  using tensors = std::future<expected<std::vector<tensor>>>;

  client(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout = std::chrono::seconds(60));
  /// With the client's requester placed by `requester` (`strata::requester`): `.dedicated_thread
  /// = true` for a client whose caller may block a scheduler thread on its futures.
  client(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout, spawn_options requester);
  /// The calls in flight still complete (the requester's actor stops once they are answered).
  ~client();
  client(const kvstore::client&) = delete;
  kvstore::client& operator=(const kvstore::client&) = delete;

  const actor_ref& store() const noexcept { return store_; }

  done init(kvstore::key key, tensor value);
  done init(std::vector<kvstore::key> keys, std::vector<tensor> values);

  done push(kvstore::key key, tensor value);
  /// Several values for one key (e.g. one per device): summed.
  done push(kvstore::key key, std::vector<tensor> values);
  done push(std::vector<kvstore::key> keys, std::vector<tensor> values);

  tensors pull(kvstore::key key, tensor out, std::uint64_t min_version = 0);
  /// One key into several outputs.
  tensors pull(kvstore::key key, std::vector<tensor> outs, std::uint64_t min_version = 0);
  tensors pull(std::vector<kvstore::key> keys, std::vector<tensor> outs, std::uint64_t min_version = 0);

  tensors pushpull(kvstore::key key, std::vector<tensor> values, std::vector<tensor> outs);
  tensors pushpull(std::vector<kvstore::key> keys, std::vector<tensor> values, std::vector<tensor> outs);
  /// In place: the pushed tensors receive the key's updated value (MXNet's `pushpull(key, value)`).
  tensors pushpull(kvstore::key key, std::vector<tensor> values);
  tensors pushpull(std::vector<kvstore::key> keys, std::vector<tensor> values);

  /// MXNet's `broadcast(key, value, out)`: inits `key` with `value`, then pulls it into `outs`.
  tensors broadcast(kvstore::key key, tensor value, std::vector<tensor> outs);
  /// Several keys: `outs[i]` receives `keys[i]`.
  tensors broadcast(std::vector<kvstore::key> keys, std::vector<tensor> values, std::vector<tensor> outs);

  /// Any request message (`kvstore::push{..., .priority = 2}`, `kvstore::pull`, ...), in call order
  /// with the other calls of this client: the way to give a client's request a priority.
  done send(kvstore::push msg) { return call<unit_t>(std::move(msg)); }
  tensors send(kvstore::pull msg) { return call<std::vector<tensor>>(std::move(msg)); }
  tensors send(kvstore::pushpull msg) { return call<std::vector<tensor>>(std::move(msg)); }
  tensors send(kvstore::pushpull_in_place msg) { return call<std::vector<tensor>>(std::move(msg)); }
  tensors send(kvstore::broadcast msg) { return call<std::vector<tensor>>(std::move(msg)); }
  done send(kvstore::push_row_sparse msg) { return call<unit_t>(std::move(msg)); }
  tensors send(kvstore::row_sparse_pull msg) { return call<std::vector<tensor>>(std::move(msg)); }
  /// `kvstore::set_optimizer` with every field, e.g. `.multi_precision = true`.
  done send(kvstore::set_optimizer msg) { return call<unit_t>(std::move(msg)); }

  done set_updater(kvstore::updater rule);
  done set_optimizer(kernels::sgd_options options);
  done set_optimizer(kernels::adam_options options);
  /// With MXNet's learning-rate scheduler (`kvstore::set_optimizer::scheduler`).
  done set_optimizer(kernels::sgd_options options, kvstore::lr_scheduler scheduler);
  done set_optimizer(kernels::adam_options options, kvstore::lr_scheduler scheduler);
  /// MXNet's `Optimizer.set_learning_rate`: a new lr for the installed optimizer, its state kept
  /// (`kvstore::set_learning_rate`).
  done set_learning_rate(double lr);
  /// MXNet's `set_gradient_compression` (`kvstore::set_gradient_compression`).
  done set_gradient_compression(std::string type, float threshold = 0.5f);
  std::future<expected<std::uint64_t>> version(kvstore::key key);
  done save(std::string path);
  done load(std::string path);
  /// MXNet's push of row-sparse values (`kvstore::push_row_sparse`).
  done push(kvstore::key key, std::vector<kvstore::row_sparse> values);
  /// MXNet's `row_sparse_pull(key, out, row_ids)` (`kvstore::row_sparse_pull`); with
  /// `min_version` > 0 it waits for that many updates of the key, as `pull`.
  tensors row_sparse_pull(kvstore::key key, tensor out, std::vector<std::int64_t> row_ids,
                          std::uint64_t min_version = 0);
  done save_optimizer_states(std::string path);
  done load_optimizer_states(std::string path);

  /// MXNet's `rank`: this worker's rank among the store's workers, 0 (one process is one worker).
  int rank() const noexcept { return 0; }
  /// MXNet's `num_workers`: the workers that share the store, 1 in one process.
  int num_workers() const noexcept { return 1; }
  /// MXNet's `barrier`: answered once every call made through this client before it has been
  /// answered (with one worker there is no other worker to wait for). Never fails.
  done barrier();
  /// MXNet's `type`: "local" or "device" (`kvstore::store_type`).
  std::future<expected<std::string>> type();
  /// MXNet's `is_capable` (`kvstore::is_capable`).
  std::future<expected<bool>> is_capable(std::string capability);

private:
  template <class R, class M>
  std::future<expected<R>> call(M msg);

  actor_ref store_;
  std::chrono::nanoseconds timeout_;
  std::unique_ptr<requester> session_;
};

template <class R, class M>
std::future<expected<R>> client::call(M msg) {
  return session_->request<std::conditional_t<std::is_same_v<R, unit_t>, void, R>>(store_, timeout_, std::move(msg));
}

}  // namespace strata::kvstore
