#pragma once
// One store actor: a shard of a sharded store or the whole of an unsharded one. Its requests pass
// one admission path (admission.hpp); store.cpp serves them, store_work.cpp enqueues their device
// work (copies, merges, updates) on the store's stream. Private to strata::kvstore.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "admission.hpp"
#include "checkpoint_file.hpp"
#include "merge.hpp"
#include "shard_protocol.hpp"
#include "sparse_rows.hpp"
#include "strata/actor.hpp"
#include "strata/device/device.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/device/stream.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "validation.hpp"

namespace strata::kvstore::internal {

/// A store's snapshot for a `kvstore::save`, posted from the stream's completion thread so that
/// the file is written on the actor's thread.
struct checkpoint_taken {
  std::string path;
  expected<std::vector<checkpoint_entry>> entries;
  response_promise<unit_t> promise;
};

/// A store's snapshot for a `kvstore::save_optimizer_states`, written on the actor's thread.
struct optimizer_states_taken {
  std::string path;
  optimizer_setting setting;
  expected<std::vector<checkpoint_entry>> entries;
  response_promise<unit_t> promise;
};

/// A store's stream finished the work of one request (posted by `send_on_complete`).
struct request_done {};

class kvstore_actor final : public actor {
public:
  explicit kvstore_actor(kvstore::options options);

  behavior make_behavior() override;
  void on_exit(const error&) override;

private:
  struct key_state {
    tensor value;
    tensor accumulator;                   // merge target (sums of several values, sync rounds)
    std::size_t received = 0;             // values accumulated towards the next version (sync mode)
    std::uint64_t version = 0;            // updates applied
    // The scheduler's update count is version + schedule_shift: load_optimizer_states restores the
    // count its file saved (MXNet's optimizer keeps num_update), whatever the value's version.
    std::int64_t schedule_shift = 0;
    std::vector<tensor> optimizer_state;  // sgd: momentum; adam: exp_avg, exp_avg_sq
    std::vector<tensor> residuals;        // gradient compression: one per position in a push
    std::int64_t step = 0;
    kvstore::key label = 0;  // the caller's key (a shard's chunk keys differ from it)
    tensor master;           // multi_precision: the float32 master copy of a 16-bit value
    bool sparse_round = false;              // sync mode: the values received so far are row-sparse
    std::vector<row_pieces> sparse_received;  // ... their pieces, copied into store tensors
  };
  using key_map = std::map<kvstore::key, key_state>;
  struct parked_pull {
    std::vector<kvstore::key> keys;
    std::vector<std::uint64_t> versions;  // per key: the updates it waits for
    request_run serve;
  };

  /// The one admission path: a handler of request kind M that queues the request with its ticket
  /// and, when the queue serves it, runs `serve` (its exception or error fails the request).
  template <class R, class M>
  auto admitted(expected<void> (kvstore_actor::*serve)(M&, response_promise<R>&)) {
    return [this, serve](M& m) -> expected<R> {
      auto p = make_response_promise<R>();
      admission_ticket ticket = ticket_of(m);
      const std::uint64_t sender = ticket.origin ? *ticket.origin : current_sender().id();
      admission_.admit(sender, ticket, [this, serve, op = ticket.op, m = std::move(m), p](const error* stopped) mutable {
        if (stopped) return p.deliver(*stopped);
        if (auto r = guarded(op, [&] { return (this->*serve)(m, p); }); !r) p.deliver(r.error());
      });
      return R{};
    };
  }

  // ---- requests, when the queue serves them (store.cpp) -------------------------------------
  expected<void> on_init(kvstore::init& m, response_promise<unit_t>& p);
  expected<void> on_push(kvstore::push& m, response_promise<unit_t>& p);
  expected<void> on_pull(kvstore::pull& m, response_promise<std::vector<tensor>>& p);
  expected<void> on_pushpull(kvstore::pushpull& m, response_promise<std::vector<tensor>>& p);
  expected<void> on_pushpull_in_place(kvstore::pushpull_in_place& m, response_promise<std::vector<tensor>>& p);
  expected<void> on_broadcast(kvstore::broadcast& m, response_promise<std::vector<tensor>>& p);
  expected<void> on_set_updater(kvstore::set_updater& m, response_promise<unit_t>& p);
  expected<void> on_set_optimizer(kvstore::set_optimizer& m, response_promise<unit_t>& p);
  expected<void> on_set_learning_rate(kvstore::set_learning_rate& m, response_promise<unit_t>& p);
  expected<void> on_set_gradient_compression(kvstore::set_gradient_compression& m, response_promise<unit_t>& p);
  expected<void> on_version(kvstore::version& m, response_promise<std::uint64_t>& p);
  expected<void> on_save(kvstore::save& m, response_promise<unit_t>& p);
  expected<void> on_load(kvstore::load& m, response_promise<unit_t>& p);
  expected<void> on_push_row_sparse(kvstore::push_row_sparse& m, response_promise<unit_t>& p);
  expected<void> on_row_sparse_pull(kvstore::row_sparse_pull& m, response_promise<std::vector<tensor>>& p);
  expected<void> on_shard_row_sparse(shard_row_sparse& m, response_promise<std::vector<std::uint64_t>>& p);
  /// The chunk keys of a shard request, still held (else one sentence).
  expected<void> still_held(const std::vector<kvstore::key>& pushed, const std::vector<kvstore::key>& pulled) const;
  /// Synchronous mode: a version collects dense values or row-sparse ones (`sparse`), not both.
  expected<void> check_round_kind(const char* op, const std::vector<kvstore::key>& keys, bool sparse) const;
  expected<void> on_save_optimizer_states(kvstore::save_optimizer_states& m, response_promise<unit_t>& p);
  expected<void> on_load_optimizer_states(kvstore::load_optimizer_states& m, response_promise<unit_t>& p);
  expected<void> on_shard_load_optimizer_states(shard_load_optimizer_states& m, response_promise<unit_t>& p);
  expected<void> on_shard_init(shard_init& m, response_promise<unit_t>& p);
  expected<void> on_shard_request(shard_request& m, response_promise<std::vector<std::uint64_t>>& p);
  expected<void> on_shard_save(shard_save& m, response_promise<std::vector<checkpoint_entry>>& p);
  expected<void> on_shard_load(shard_load& m, response_promise<unit_t>& p);

  shape_lookup shape_of() const;
  /// Installs `setting` and gives the keys of `pieces` their state from `file` (the others start
  /// fresh); answers `p` once the copies are done.
  void install_optimizer_states(const optimizer_setting& setting, const std::vector<checkpoint_entry>& file,
                                const std::vector<checkpoint_piece>& pieces, response_promise<unit_t>& p);
  bool version_reached(const std::vector<kvstore::key>& keys, const std::vector<std::uint64_t>& versions) const;
  /// The version that the value last pushed to `key` belongs to: the current one when that value
  /// completed it (or in asynchronous mode), else the next.
  std::uint64_t round_of(const kvstore::key& key) const;
  /// Synchronous mode: for each of `pull_keys`, the version of its value pushed by this request
  /// (`push_keys`), or 0 for a key the request did not push. Asynchronous mode: zeros.
  std::vector<std::uint64_t> own_rounds(const std::vector<kvstore::key>& push_keys,
                                        const std::vector<kvstore::key>& pull_keys) const;
  void reconcile_parked();
  void serve_parked();

  /// Copies every key's value and optimizer state to the host after the work queued before (a
  /// cuda store: device-to-host copies on its stream), then calls `done` with them, or with the
  /// stream's error, on the stream's completion thread: `done` must be quick. The keys are this
  /// store's (a shard's chunk keys).
  expected<void> snapshot(std::function<void(expected<std::vector<checkpoint_entry>>)> done);
  /// Makes tensors of this store for `pieces` of a checkpoint (copies on its stream, so ordered
  /// before any later work), hands them to `keep`, and answers `p` once the copies are done.
  expected<void> stage(response_promise<unit_t>& p, const std::vector<checkpoint_entry>& file,
                       const std::vector<checkpoint_piece>& pieces, const std::function<void(key_map&)>& keep);

  // ---- device work (store_work.cpp) ---------------------------------------------------------
  void add_new_keys(const kvstore::init& m, const std::shared_ptr<work_status>& status);
  void add_key(const kvstore::key& key, const kvstore::key& label, std::vector<std::int64_t> shape,
               const slice_ref& from, const std::shared_ptr<work_status>& status);
  void copy_elements(const tensor& dst, std::size_t dst_offset, const tensor& src, std::size_t src_offset,
                     std::size_t n, const std::shared_ptr<work_status>& status, const work_label& label);
  /// A copy between a whole tensor of the store and a tensor of another device kind (crossing.hpp).
  void copy_across(const tensor& foreign, std::size_t offset, const tensor& own, std::size_t n,
                   const std::shared_ptr<work_status>& status, const work_label& label, bool to_foreign);
  stream transfer_stream(const device& d);
  void keep_until_done(const tensor& t) const;
  /// `t` converted to `type` (float32 <-> float16 / bfloat16, cpu stores) into a new tensor, on
  /// the store's stream.
  tensor converted(const tensor& t, dtype type, const std::shared_ptr<work_status>& status, const work_label& label);
  slice_ref readable(const slice_ref& v, const key_state& state, const std::shared_ptr<work_status>& status);
  /// Gradient compression: the value that position `slot` of a push sends, quantized with that
  /// position's residual (cpu stores).
  slice_ref compressed(const slice_ref& v, key_state& state, std::size_t slot,
                       const std::shared_ptr<work_status>& status);
  void enqueue_push(const std::vector<kvstore::key>& keys, const std::vector<slice_ref>& values,
                    const std::shared_ptr<work_status>& status);
  tensor& accumulator_of(key_state& state);
  void merge(key_state& state, const std::vector<slice_ref>& values, bool with_accumulator, bool complete,
             const std::shared_ptr<work_status>& status);
  void run_user_updater(const merge_work& work, work_status& status, const char* action = "push: the update");
  /// Row-sparse pushes (store_sparse.cpp): `values[i]` are the pieces of one value of `keys[i]`;
  /// asynchronous, a call's values make one update; synchronous, each value is a contribution.
  void enqueue_row_sparse_push(const std::vector<kvstore::key>& keys, const std::vector<row_pieces>& values,
                               const std::shared_ptr<work_status>& status);
  /// Sums the pieces by id and runs the rule on those rows of `state` (a version).
  void update_rows(key_state& state, std::vector<row_pieces> lists, const std::shared_ptr<work_status>& status);
  /// The pieces of `lists` (data of dtype `type`) copied (on the stream) into one tensor of this
  /// store (cpu stores).
  row_pieces kept_copy(const std::vector<row_pieces>& lists, dtype type);
  /// cuda stores: `list` with its rows (a cpu tensor) copied to a tensor of this store on its
  /// stream, which the store keeps as long as it needs (a version's contributions included); a
  /// 16-bit key's rows widened (exactly) to float32 there, as the cpu's sum_by_id widens them.
  row_pieces rows_on_store(const row_pieces& list, const std::shared_ptr<work_status>& status, const work_label& label);
  /// cuda stores: update_rows' sum by id (sum_order) and `rule` on the device; `fresh`: the
  /// optimizer state was just made (zeroed first); `step`: Adam's. A 16-bit key's optimizer runs
  /// on `master` (its multi_precision copy, valid only then; `fresh_master`: made just now, from
  /// the whole value) or on the value widened, and the touched rows are rounded back.
  void update_rows_on_cuda(key_state& state, const std::vector<row_pieces>& lists, const update_rule& rule, bool fresh,
                           std::int64_t step, const tensor& master, bool fresh_master,
                           const std::shared_ptr<work_status>& status);
  /// Copies the pieces of each key into the outputs they name; returns the event marking it done.
  event enqueue_row_pull(const std::vector<kvstore::key>& keys, const std::vector<row_pieces>& outs,
                         const std::shared_ptr<work_status>& status);
  /// cuda stores: the pieces of `out` gathered from `stored` on the device, then copied to the
  /// output (a cpu tensor), whole when the pieces fill it in order (one store), else through a
  /// host temporary and a copy per piece on a stream of the output's device (a shard's pieces).
  void pull_rows_on_cuda(const tensor& stored, const row_pieces& out, const std::shared_ptr<work_status>& status,
                         const work_label& label);
  event enqueue_pull(const std::vector<kvstore::key>& keys, const std::vector<slice_ref>& outs,
                     const std::shared_ptr<work_status>& status);
  void reply_when_done(response_promise<unit_t> promise, std::shared_ptr<work_status> status);
  void reply_when_done(response_promise<std::vector<tensor>> promise, std::vector<tensor> outs,
                       std::shared_ptr<work_status> status = nullptr);
  void reply_when_done(response_promise<std::vector<std::uint64_t>> promise, std::vector<std::uint64_t> versions,
                       std::shared_ptr<work_status> status);

  kvstore::options options_;
  std::unique_ptr<device_manager> owned_devices_;
  device device_;
  stream stream_;
  std::vector<std::pair<device, stream>> transfer_streams_;  // of the devices of tensors of another kind
  store_place place_;
  key_map keys_;
  std::optional<key_map> staged_;  // a shard's part of a load, until shard_commit
  std::optional<bool> int_keys_;   // kind of the keys held, once the first key is stored
  update_rule rule_;
  compression_type compression_ = compression_type::none;  // set_gradient_compression
  float compression_threshold_ = 0.5f;
  kvstore::lr_scheduler scheduler_;  // of the optimizer in rule_, or monostate
  bool multi_precision_ = false;     // of the optimizer in rule_ (set_optimizer)
  std::vector<parked_pull> parked_;
  admission_queue admission_;
};

}  // namespace strata::kvstore::internal
