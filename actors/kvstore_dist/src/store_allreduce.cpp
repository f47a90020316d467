// dist_sync_allreduce, the worker's side: sums over the ranks (host allreduce, rank 0's shape),
// the agreement before a step and the step itself (host path here; cuda paths: allreduce_cuda.cpp).

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>

#include "worker.hpp"

namespace strata::kvstore_dist {
namespace detail {

expected<std::vector<tensor>> replica_step(worker_state& w, const std::vector<kvstore::key>& keys, const pack_plan& plan,
                                           std::vector<tensor> merged) {
  std::vector<kvstore::key> push_keys;
  std::vector<tensor> outs;
  for (std::size_t i : plan.order) {
    push_keys.push_back(keys[i]);
    outs.push_back(tensor::empty(w.shapes[keys[i]], dtype::float32, w.replica_dev, w.rs));
  }
  if (auto pushed = w.replica->push(push_keys, std::move(merged)).get(); !pushed) return pushed.error();
  auto pulled = w.replica->pull(push_keys, outs).get();
  if (!pulled) return pulled.error();
  std::vector<tensor> result(keys.size());
  for (std::size_t j = 0; j < plan.order.size(); ++j) result[plan.order[j]] = std::move((*pulled)[j]);
  return result;
}

}  // namespace detail

namespace detail {

/// Sums `host` over the store's ranks in place (one allreduce). An allreduce store waits as its
/// steps do: when a rank leaves or closes its store, or no sum comes within the store's timeout,
/// the call fails at once with `what` and why (the buffer then stays with the posted allreduce).
expected<void> allreduce(worker_state& w, std::vector<float>& host, const std::string& what) {
  if (!w.link) return w.net->allreduce_sum(std::span<float>(host), w.group).get();
  if (error f = detail::sum_link_failure(*w.link)) return error(f.code(), what + f.message());
  auto buffer = std::make_shared<std::vector<float>>(std::move(host));
  auto summed = w.net->allreduce_sum(std::span<float>(*buffer), w.group);
  if (auto ok = detail::await_host_sum(*w.link, summed, buffer, w.options.timeout, what); !ok) return ok;
  host = std::move(*buffer);
  return {};
}

/// Collective: true on every rank when `ok` on every rank (an allreduce of the failures).
bool all_ok(detail::worker_state& w, bool ok) {
  std::vector<float> failures{ok ? 0.0f : 1.0f};
  auto summed = allreduce(w, failures);
  return summed && failures[0] == 0.0f;
}

/// Collective: rank 0's `shape` on every rank when `ok` on rank 0, else none (the other ranks'
/// arguments are ignored), and rank 0's `*type` in `*type`. An allreduce to which the others add
/// zeros; each dimension travels as four 16-bit pieces, exact in float.
expected<std::optional<std::vector<std::int64_t>>> shape_of_rank0(detail::worker_state& w, bool ok,
                                                                  const std::vector<std::int64_t>& shape, dtype* type) {
  std::vector<float> head{0.0f, 0.0f, 0.0f};
  if (w.rank == 0) head = {ok ? 1.0f : 0.0f, static_cast<float>(shape.size()), static_cast<float>(static_cast<int>(*type))};
  if (auto summed = allreduce(w, head); !summed) return summed.error();
  if (head[0] == 0.0f) return std::optional<std::vector<std::int64_t>>{};
  *type = static_cast<dtype>(static_cast<int>(head[2]));
  std::vector<float> pieces(static_cast<std::size_t>(head[1]) * 4, 0.0f);
  if (w.rank == 0)
    for (std::size_t i = 0; i < pieces.size(); ++i)
      pieces[i] = static_cast<float>((static_cast<std::uint64_t>(shape[i / 4]) >> (16 * (i % 4))) & 0xffffu);
  if (auto summed = allreduce(w, pieces); !summed) return summed.error();
  std::vector<std::int64_t> dims(pieces.size() / 4, 0);
  for (std::size_t i = 0; i < pieces.size(); ++i)
    dims[i / 4] = static_cast<std::int64_t>(static_cast<std::uint64_t>(dims[i / 4]) |
                                            (static_cast<std::uint64_t>(pieces[i]) << (16 * (i % 4))));
  return std::optional<std::vector<std::int64_t>>(std::move(dims));
}


/// dist_sync_allreduce, host path: `sums[i]` (this worker's value of `keys[i]`, a key of the
/// replica) summed over the ranks by one allreduce, packed in key order (`plan`); then the same
/// update on every replica. Answers the replica's values, in the order of `keys`.
expected<std::vector<tensor>> fused_pushpull(detail::worker_state& w, const std::vector<kvstore::key>& keys,
                                             std::vector<std::vector<float>> sums, const detail::pack_plan* plan) {
  std::vector<float> packed;
  packed.reserve(plan->total);
  for (std::size_t i : plan->order) packed.insert(packed.end(), sums[i].begin(), sums[i].end());
  if (auto summed = allreduce(w, packed, "kvstore dist pushpull: the allreduce of this step failed, and no replica was updated: ");
      !summed)
    return summed.error();
  w.bytes_pushed += packed.size() * sizeof(float);
  std::vector<tensor> merged;
  for (std::size_t j = 0; j < plan->order.size(); ++j)
    merged.push_back(tensor::from_host<float>(std::span<const float>(packed.data() + plan->offsets[j], sums[plan->order[j]].size()),
                                              w.shapes[keys[plan->order[j]]], w.dev, w.s));
  return detail::replica_step(w, keys, *plan, std::move(merged));
}

/// dist_sync_allreduce: one step of `values[i]` for `keys[i]` (`counted`: the caller's check of
/// the counts). Every rank checks its values, then the ranks agree, so that a refusal on any rank
/// fails the step on every rank before any data crosses (and no replica changes).
expected<std::vector<tensor>> allreduce_step(detail::worker_state& w, const std::vector<kvstore::key>& keys,
                                             const std::vector<std::vector<tensor>>& values, expected<void> counted) {
  expected<void> mine = std::move(counted);
  auto reason = mine ? detail::step_refusal::none : detail::step_refusal::bad_keys;
  for (std::size_t i = 0; i < keys.size() && mine; ++i)
    if (w.shapes.count(keys[i]) == 0) {
      mine = never_initialised("pushpull", keys[i]);
      reason = detail::step_refusal::unknown_key;
    }
  if (w.path != detail::sum_path::host_mpi) return detail::cuda_pushpull(w, keys, values, std::move(mine), reason);
  std::vector<std::vector<float>> sums;
  for (std::size_t i = 0; i < keys.size() && mine; ++i) {
    auto shape = w.shapes.find(keys[i]);
    auto host = detail::local_sum(w, keys[i], values[i], &shape->second);
    if (!host) {
      mine = host.error();
      reason = detail::step_refusal::bad_value;
      break;
    }
    sums.push_back(std::move(*host));
  }
  expected<detail::pack_plan> plan = detail::pack_plan{};
  if (mine) {
    std::vector<std::size_t> sizes;
    for (const auto& one : sums) sizes.push_back(one.size());
    plan = detail::plan_packing(keys, sizes);
    if (!plan) {
      mine = plan.error();
      reason = detail::step_refusal::bad_keys;
    }
  }
  if (auto agreed = detail::agree_on_step(w, mine, reason, keys); !agreed) return agreed.error();
  return fused_pushpull(w, keys, std::move(sums), &*plan);
}

}  // namespace detail

namespace detail {

expected<void> agree_on_step(worker_state& w, const expected<void>& mine, step_refusal reason,
                             const std::vector<kvstore::key>& keys) {
  // A failed link fails every later step at once, before the agreement, which a rank that left
  // would never join.
  if (w.link)
    if (auto ok = sum_link_ok(*w.link); !ok) return ok;
  auto slots = std::make_shared<std::vector<float>>(static_cast<std::size_t>(w.world) * step_slot_floats, 0.0f);
  fill_step_slot(*slots, w.rank, mine ? step_refusal::none : reason, keys_print(keys));
  auto agreed = w.net->allreduce_sum(std::span<float>(*slots), w.group);
  if (w.link) {
    // A cuda store gives up when its link fails (a rank left) or at its timeout; the allreduce
    // stays posted, so its buffer is kept for the life of the process.
    if (auto waited = await_agreement(*w.link, agreed, w.options.timeout); !waited) {
      static std::mutex mu;
      static std::vector<std::shared_ptr<std::vector<float>>> abandoned;
      std::lock_guard lock(mu);
      abandoned.push_back(std::move(slots));
      return waited.error();
    }
  }
  if (auto summed = agreed.get(); !summed)
    return error(summed.error().code(), "kvstore dist pushpull: the ranks could not agree on this step, and no replica "
                                         "was updated: " + summed.error().message());
  return step_verdict(*slots, mine);
}

}  // namespace detail

}  // namespace strata::kvstore_dist
