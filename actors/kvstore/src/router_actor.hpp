#pragma once
// A sharded store's router actor: the class here, its requests and their steps in
// router_actor.cpp, its saves, loads and optimizer states in router.cpp, row-sparse requests in
// router_sparse.cpp. Private to strata::kvstore.

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "admission.hpp"
#include "checkpoint_file.hpp"
#include "merge.hpp"
#include "optimizer_states.hpp"
#include "router.hpp"
#include "shard_protocol.hpp"
#include "sparse_rows.hpp"
#include "strata/actor.hpp"

namespace strata::kvstore::internal {

/// Takes the public messages, checks each request whole against the caller's keys, and sends its
/// parts to the shards (one message per shard and request, or per shard and step when shards
/// would otherwise read and write one caller tensor in no order, or for a synchronous pushpull:
/// see "requests in steps" below), answering once all have answered.
/// Keys are spread round robin over the shards in init order; a key of more than `chunk_bytes`
/// becomes contiguous chunks on consecutive shards. Each chunk is a key of its own on its shard
/// (an integer the router assigns), read and written in place through `slice_ref`s.
///
/// Checkpoints: a save gathers every shard's snapshot (a barrier on each shard) and writes the
/// caller's keys, chunks joined, in one store's format; a load checks the whole file, then stages
/// each shard's part and commits on every shard only when all have staged it. While a save or
/// load is in progress the router holds the requests that arrive and serves them afterwards.
class kvstore_router final : public actor {
public:
  kvstore_router(kvstore::options options, std::vector<actor_ref> shards, store_place place)
      : options_(std::move(options)), shards_(std::move(shards)), place_(std::move(place)) {}

private:
  /// A handler of a public request: `body(m, p, sender id)` runs now or, while the router holds
  /// requests (a checkpoint, a request done in steps, or an earlier request held), once the held
  /// ones before it have started (in arrival order). `body` returns false, changing nothing, when
  /// it cannot start yet because a request in flight uses one of its tensors (see `conflicts`).
  template <class R, class M>
  auto serve(bool (kvstore_router::*body)(M&, response_promise<R>&, std::uint64_t)) {
    return [this, body](M& m) -> expected<R> {
      auto p = make_response_promise<R>();
      const auto origin = current_sender().id();
      std::function<bool()> start = [this, body, m = std::move(m), p, origin]() mutable {
        return (this->*body)(m, p, origin);
      };
      if (holding() || !start()) held_.push_back(std::move(start));
      return R{};
    };
  }
  bool holding() const { return checkpointing_ || steps_holding_ > 0 || !held_.empty(); }
  /// Starts what may start now: stalled steps of requests in progress, then held requests in order.
  /// Not reentrant (a step that completes at once calls it again): the outer call loops instead.
  void pump();
  /// Ends a checkpoint: serves the requests held meanwhile.
  void resume();

public:
  behavior make_behavior() override;

  void on_exit(const error&) override;

private:
  /// Shard requests may wait for a version (synchronous mode) as long as the caller's own timeout.
  static constexpr std::chrono::hours shard_timeout{24};

  struct chunk {
    std::size_t shard = 0;
    std::int64_t sub_key = 0;
    std::size_t offset = 0;  // first element of the caller's tensor
    std::size_t length = 0;
  };
  struct placement {
    std::vector<std::int64_t> shape;
    strata::dtype type = dtype::float32;
    std::vector<chunk> chunks;
  };
  using placements = std::map<kvstore::key, placement>;

  bool on_init(kvstore::init& m, response_promise<unit_t>& p, std::uint64_t);
  /// Sends a checked init's new keys to their shards; `done` runs once all have stored them.
  void send_init(const kvstore::init& m, std::function<void(const error*)> done);
  bool on_pushpull_in_place(kvstore::pushpull_in_place& m, response_promise<std::vector<tensor>>& p,
                            std::uint64_t origin) {
    kvstore::pushpull both = as_pushpull(m);
    return on_pushpull(both, p, origin);
  }
  /// The init's parts go to the shards first, then the pull's: init is a barrier on every shard,
  /// so each shard copies its part of an output after it stored its part of the value.
  bool on_broadcast_request(kvstore::broadcast& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin);
  bool on_push(kvstore::push& m, response_promise<unit_t>& p, std::uint64_t origin);
  bool on_pull(kvstore::pull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin);
  bool on_pushpull(kvstore::pushpull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin);
  template <class M>
  bool on_broadcast(M& m, response_promise<unit_t>& p, std::uint64_t) {
    if constexpr (std::is_same_v<M, kvstore::set_optimizer>) {
      if (auto r = prepare_optimizer(m); !r) return p.deliver(r.error()), true;
      optimizer_ = optimizer_setting{m.options, m.scheduler, m.multi_precision};
    }
    if constexpr (std::is_same_v<M, kvstore::set_updater>) optimizer_.reset();
    if constexpr (std::is_same_v<M, kvstore::set_learning_rate>) {
      const bool scheduled = optimizer_ && !std::holds_alternative<std::monostate>(optimizer_->scheduler);
      if (auto r = check_learning_rate(m.lr, optimizer_.has_value(), scheduled); !r) return p.deliver(r.error()), true;
      std::visit([&m](auto& o) { o.lr = m.lr; }, optimizer_->options);
    }
    auto done = answer(p);
    if constexpr (std::is_same_v<M, kvstore::set_gradient_compression>) {  // refuses row-sparse pushes once on
      const auto type = parse_compression(m.type, m.threshold);
      done = [this, on = type && *type != compression_type::none, done = std::move(done)](const error* e) {
        if (!e) compressed_ = on;
        done(e);
      };
    }
    auto g = gather(std::move(done));
    for (std::size_t s = 0; s < shards_.size(); ++s) ask(s, m, g);
    g->start();
    return true;
  }
  bool on_version(kvstore::version& m, response_promise<std::uint64_t>& p, std::uint64_t);



  // ---- row-sparse values (router_sparse.cpp) ----
  /// Each row goes to the shards holding its elements (a row across a chunk boundary in pieces);
  /// a push names every chunk of its keys, so that each counts it as one store counts the key.
  bool on_push_row_sparse(kvstore::push_row_sparse& m, response_promise<unit_t>& p, std::uint64_t origin);
  /// The shards copy their pieces of the rows straight into the caller's outputs, in its order.
  bool on_row_sparse_pull(kvstore::row_sparse_pull& m, response_promise<std::vector<tensor>>& p, std::uint64_t origin);
  /// Synchronous mode: a version collects dense or row-sparse (`sparse`) values, not both. The
  /// router counts each key's values in the order it sends them and refuses a request that
  /// would mix them before any shard sees it (the shards check too).
  expected<void> count_round(const char* op, const std::vector<kvstore::key>& keys, bool sparse);
  /// The pieces of rows `ids` (stacked in `t`) of a key placed as `pl`, one list per chunk.
  static std::vector<row_pieces> pieces_by_chunk(const placement& pl, const tensor& t,
                                                 const std::vector<std::int64_t>& ids);

  // ---- checkpoints and optimizer states (router.cpp) ----
  /// Every shard's snapshot (chunk keys), joined into the caller's keys and written as one store would.
  bool on_save(kvstore::save& m, response_promise<unit_t>& p, std::uint64_t);
  bool on_save_optimizer_states(kvstore::save_optimizer_states& m, response_promise<unit_t>& p, std::uint64_t);
  /// The file is checked whole against the keys first; then every shard installs the optimizer and
  /// the states of its chunks.
  bool on_load_optimizer_states(kvstore::load_optimizer_states& m, response_promise<unit_t>& p, std::uint64_t);
  /// Takes every shard's snapshot, joins them into the caller's keys and hands them to `write`.
  void gather_snapshots(std::function<expected<void>(std::vector<checkpoint_entry>)> write, response_promise<unit_t> p);
  std::vector<checkpoint_entry> join(const std::map<std::int64_t, checkpoint_entry>& taken) const;
  /// Checks the whole file, places its keys afresh over the shards, has every shard stage its
  /// part, then commits on all of them, or, when one failed, drops the staged parts everywhere.
  bool on_load(kvstore::load& m, response_promise<unit_t>& p, std::uint64_t);

  /// Counts the shards' answers; `done` runs once with the first failure (or null).
  struct gathering {
    std::size_t waiting = 1;  // 1 until start(), so that answers cannot finish it early
    std::optional<error> failure;
    std::function<void(const error*)> done;
    void arrive(const error* e) {
      if (e && !failure) failure = *e;
      if (--waiting == 0) done(failure ? &*failure : nullptr);
    }
    void start() { arrive(nullptr); }
  };
  static std::shared_ptr<gathering> gather(std::function<void(const error*)> done) {
    auto g = std::make_shared<gathering>();
    g->done = std::move(done);
    return g;
  }
  template <class M>
  void ask(std::size_t shard, M msg, const std::shared_ptr<gathering>& g) {
    ++g->waiting;
    request<void>(shards_[shard], shard_timeout, std::move(msg))
        .then([g] { g->arrive(nullptr); }, [g](const error& e) { g->arrive(&e); });
  }

  static std::function<void(const error*)> answer(response_promise<unit_t> p) {
    return [p](const error* e) mutable { e ? p.deliver(*e) : p.deliver(unit); };
  }
  static std::function<void(const error*)> answer_with(response_promise<std::vector<tensor>> p,
                                                       std::vector<tensor> outs) {
    return [p, outs = std::move(outs)](const error* e) mutable {
      if (e) return p.deliver(*e);
      for (auto& out : outs) out.set_ready_event(event{});  // every shard's copy has completed
      p.deliver(std::move(outs));
    };
  }

  shape_lookup shape_of() const;

  /// Places `key` in `into`: its chunks on the next shards, under new chunk keys.
  const placement& place_key(placements& into, const kvstore::key& key, const std::vector<std::int64_t>& shape,
                             strata::dtype type);

  // ---- requests in steps, ordered by the caller tensors they use ------------------------------
  //
  // Shards run at once, so two shards' accesses to one caller tensor have no order of their own.
  // One store reads every value of a request before it writes any output, writes outputs in
  // order, and serves requests that use one tensor in arrival order; the router keeps that order:
  // - within a request, when a tensor's elements are read on one shard and written on another
  //   (or written on two), the request runs in steps: the push on every shard, then the pulls
  //   (one step per output when outputs overlap across shards); meanwhile no other request starts;
  // - across requests, one that uses a tensor a request in flight writes (or writes one it uses)
  //   waits until that one has been answered, and so do the requests after it.
  // A pull that waits for a version writes its outputs when that version exists, as on one store
  // (where later requests are not ordered after it either): it is not waited for.

  /// A caller tensor a request reads or writes, by allocation.
  struct tensor_use {
    const void* allocation = nullptr;
    bool write = false;
  };
  /// One key of a request with its caller tensor: a value read or an output written.
  struct entry {
    kvstore::key key;
    tensor t;
    bool write = false;
  };
  /// What is sent to the shards at once: one part per shard (empty ones are not sent).
  struct step {
    std::vector<shard_request> parts;
    std::vector<shard_row_sparse> sparse_parts;  // a row-sparse request's, or empty
    std::vector<tensor_use> uses;
    bool waits = false;             // its pulls may wait for a version: not counted in `in_use_`
    bool pulls_own_rounds = false;  // synchronous pushpull: pull the versions the first step pushed
  };
  /// A request in progress: its steps, sent one after another.
  struct job {
    std::vector<step> steps;
    std::size_t next = 0;
    bool holds = false;                             // nothing else starts until it is done
    std::map<std::int64_t, std::uint64_t> rounds;   // chunk key -> the version its pushed value belongs to
    std::function<void(const error*)> done;
  };
  struct use_count {
    std::size_t readers = 0;
    std::size_t writers = 0;
  };

  static std::vector<tensor_use> uses_of(const std::vector<tensor>& ts, bool write);
  static std::vector<entry> entries(const std::vector<kvstore::key>& keys, const std::vector<tensor>& ts, bool write);
  /// True when a request in flight writes one of these tensors, or uses one these write.
  bool conflicts(const std::vector<tensor_use>& uses) const;
  void occupy(const std::vector<tensor_use>& uses);
  void release(const std::vector<tensor_use>& uses);

  /// True when elements of one caller tensor are written by one shard and read or written by
  /// another, so that the shards' accesses need an order. O(n log n) in the chunks named.
  bool crosses_shards(const std::vector<entry>& es) const;

  /// The parts of `es` for each shard: values as push keys, outputs as pull keys.
  step make_step(const std::vector<entry>& es, int priority, std::uint64_t origin, std::uint64_t min_version) const;
  /// Pulls: one step, or one per output in order when outputs overlap across shards.
  void add_pull_steps(job& j, const std::vector<entry>& pulled, int priority, std::uint64_t origin,
                      std::uint64_t min_version) const {
    if (!crosses_shards(pulled)) {
      j.steps.push_back(make_step(pulled, priority, origin, min_version));
      return;
    }
    for (const auto& e : pulled) j.steps.push_back(make_step({e}, priority, origin, min_version));
    j.holds = min_version == 0;
  }

  void start(std::shared_ptr<job> j);
  /// Sends the job's next step (or stalls it until the tensors it uses are free), and when every
  /// shard has answered, the step after it, or answers the request.
  void send_step(std::shared_ptr<job> j);

  kvstore::options options_;
  std::vector<actor_ref> shards_;
  store_place place_;
  placements keys_;
  std::optional<bool> int_keys_;
  bool checkpointing_ = false;              // a save or load is in progress
  bool compressed_ = false;                 // gradient compression is on (set_gradient_compression)
  struct round_count {
    std::size_t values = 0;  // sent towards the key's next version (synchronous mode)
    bool sparse = false;     // ... and they are row-sparse
  };
  std::map<kvstore::key, round_count> rounds_;
  std::optional<optimizer_setting> optimizer_;  // the last set_optimizer forwarded (for save_optimizer_states)
  std::size_t steps_holding_ = 0;           // requests in steps that hold every other request
  std::deque<std::function<bool()>> held_;  // requests not started yet, in arrival order
  std::vector<std::shared_ptr<job>> stalled_;  // steps waiting for tensors in use
  std::map<const void*, use_count> in_use_;    // caller tensors of requests in flight
  bool pumping_ = false;
  bool pump_again_ = false;
  std::int64_t next_sub_key_ = 0;
  std::size_t next_shard_ = 0;
};


}  // namespace strata::kvstore::internal
