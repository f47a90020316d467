#pragma once
// The math of a merge: what one merge work item sums and updates, how its failures are reported,
// and the update rules. The store (store_work.cpp) decides what to merge and enqueues the items.
// Private to strata::kvstore.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "strata/device/tensor.hpp"
#include "strata/kernels/on_stream.hpp"
#include "strata/kernels/ops.hpp"
#include "strata/kernels/optimizers.hpp"
#include "strata/kernels/cuda.hpp"  // declarations only (no CUDA headers): builds without CUDA see them too
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore::internal {

/// What runs when a key's version completes: assign, a user function, SGD or Adam.
using update_rule = std::variant<std::monostate, kvstore::updater, kernels::sgd_options, kernels::adam_options>;

/// Failure text of a request's work items; the first failure is kept. Written by the work items
/// (cpu: on the store's stream; cuda: when the device layer issues them, on the actor's thread or
/// its dispatcher thread; a cuda store's user updater: on the actor's thread) and read by the
/// completion callback that follows them on the same stream, hence the lock.
class work_status {
public:
  void fail(std::string text) {
    std::lock_guard lock(mu_);
    if (failure_.empty()) failure_ = std::move(text);
  }
  bool failed() const {
    std::lock_guard lock(mu_);
    return !failure_.empty();
  }
  std::string failure() const {
    std::lock_guard lock(mu_);
    return failure_;
  }

private:
  mutable std::mutex mu_;
  std::string failure_;
};

/// Names a work item in its failure text: "kvstore <action> of key <key> failed: <why>".
struct work_label {
  const char* action;  // e.g. "push: the update"
  kvstore::key key;
};

/// Runs the body of a work item. Its exception becomes the request's failure instead of the
/// stream's sticky error, which would fail every later request of the store.
template <class F>
void run_guarded(work_status& status, const work_label& label, F&& body) noexcept {
  auto what = [&] { return std::string("kvstore ") + label.action + " of key " + label.key.to_string() + " failed"; };
  try {
    body();
  } catch (const std::exception& e) {
    status.fail(what() + ": " + e.what());
  } catch (...) {
    status.fail(what() + ".");
  }
}

/// A value or an output as a store uses it: elements [offset, offset + n) of `t`, n being the
/// key's element count. Callers' messages give whole tensors (offset 0); a sharded store's router
/// gives slices of the caller's tensors, so splitting a key into chunks copies no bytes.
struct slice_ref {
  tensor t;
  std::size_t offset = 0;
};

/// Whole tensors as slices.
std::vector<slice_ref> whole(const std::vector<tensor>& ts);

/// `values[i]` grouped by `keys[i]`, groups in order of first appearance, values in order given.
/// One map lookup per value: O(k log k) comparisons for k values (a linear search over the groups
/// made a push of k chunk keys cost k^2 and a push of 500k chunks take 68 s). `Less` orders keys.
template <class Key, class Value, class Less = std::less<Key>>
std::vector<std::pair<Key, std::vector<Value>>> group_by_key(const std::vector<Key>& keys,
                                                             const std::vector<Value>& values, Less less = {}) {
  std::vector<std::pair<Key, std::vector<Value>>> groups;
  std::map<Key, std::size_t, Less> group_of(less);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = group_of.try_emplace(keys[i], groups.size());
    if (fresh) groups.emplace_back(keys[i], std::vector<Value>{values[i]});
    else groups[it->second].second.push_back(values[i]);
  }
  return groups;
}

/// One merge: sums the values (after `accumulated`, when valid) into `merged` from element
/// `merged_offset`, unless `in_place` (the one value is the sum), then, when `complete`, applies
/// the update rule to `stored`. A 16-bit key (cpu and cuda stores): its values are widened and
/// summed into a float32 `merged`; assign rounds the sum into `stored`; SGD and Adam update `master`
/// (the multi_precision master copy, or without one a temporary the value is widened into) in
/// float32 and round the result into `stored`. Runs as a work item on the store's stream
/// (kernels::on_stream); on cuda with kernels::cuda only (no allocation in the item).
struct merge_work {
  kvstore::key key;  // the caller's key: failure texts and user updaters
  std::vector<slice_ref> values;
  tensor accumulated;  // earlier values of this version, or empty
  tensor merged;
  std::size_t merged_offset = 0;
  bool in_place = false;
  bool complete = false;
  tensor stored;
  update_rule rule;
  std::vector<tensor> opt_state;  // sgd: momentum; adam: exp_avg, exp_avg_sq
  bool fresh_state = false;       // opt_state was just created: zeroed first
  tensor master;                  // a 16-bit key under SGD or Adam: its float32 master copy (multi_precision)
                                  // or a temporary; empty otherwise
  bool fresh_master = false;      // master was just created (always so for a temporary): the value
                                  // widened into it first
  std::int64_t step = 0;
  std::size_t n = 0;

  /// On the host, inside the cpu stream's work item; user updaters run here too.
  void run(kernels::cpu_target) const;
  /// Enqueued on the cuda stream of the work item. User updaters are host code that launches its
  /// own work: the store calls them after the item (kvstore_actor::run_user_updater).
  void run(kernels::cuda_target target) const;
};

}  // namespace strata::kvstore::internal
