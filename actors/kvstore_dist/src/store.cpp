// The worker's side of a distributed store: blocking calls that reach the owner's server shard.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>

#include "worker.hpp"
#include "strata/checksum.hpp"
#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"

namespace strata::kvstore_dist {

namespace {

error never_initialised(const char* call, const kvstore::key& key) {
  return error(errc::invalid_argument, std::string("kvstore dist ") + call + ": key " + key.to_string() +
                                           " was never initialised; call init first (every worker).");
}

expected<void> done(expected<unit_t> r) {
  if (!r) return r.error();
  return {};
}

}  // namespace

namespace detail {

/// A cpu tensor's elements as host floats: float32 as they are, float16 and bfloat16 widened
/// (exactly).
std::vector<float> widened(worker_state& w, const tensor& t) {
  if (!kernels::is_half(t.dtype())) return t.to_host<float>(w.s);
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(t.numel()));
  t.copy_to_host(bits.data(), w.s).synchronize();
  std::vector<float> out(bits.size());
  kernels::cpu::widen(t.dtype(), bits.size(), bits.data(), out.data());
  return out;
}

expected<std::vector<float>> local_sum(worker_state& w, const kvstore::key& key,
                                       const std::vector<tensor>& values, const std::vector<std::int64_t>* shape,
                                       dtype* type) {
  if (values.empty()) return error(errc::invalid_argument, "kvstore dist push: no values for key " + key.to_string() + ".");
  const dtype first = values.front().dtype();
  const bool takes = first == dtype::float32 || (type != nullptr && kernels::is_half(first));
  for (const auto& v : values) {
    if (!takes || !v.valid() || v.dtype() != first || v.shape() != values.front().shape() || v.get_device().kind() != device_kind::cpu)
      return error(errc::invalid_argument, "kvstore dist push: the values for key " + key.to_string() +
                                               (type != nullptr ? " must be cpu tensors of one shape and one dtype, "
                                                                  "float32, float16 or bfloat16."
                                                                : " must be float32 cpu tensors of one shape."));
    if (shape != nullptr && v.shape() != *shape)
      return error(errc::invalid_argument, "kvstore dist push: the value for key " + key.to_string() + " is " +
                                               shape_text(v.shape()) + ", expected " + std::string(to_string(first)) +
                                               " " + shape_text(*shape) + ".");
  }
  if (type != nullptr) *type = first;
  std::vector<float> sum = widened(w, values.front());
  for (std::size_t i = 1; i < values.size(); ++i) {
    std::vector<float> next = widened(w, values[i]);
    for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += next[j];
  }
  return sum;
}

}  // namespace detail

namespace {

/// MXNet's name of a mode (`store::type`).
std::string mode_name(mode m) {
  switch (m) {
    case mode::sync: return "dist_sync";
    case mode::async: return "dist_async";
    case mode::allreduce: return "dist_sync_allreduce";
  }
  return "dist_sync";
}

}  // namespace

store::store(actor_system& system, net::endpoint& endpoint, store_options options)
    : state_(std::make_unique<detail::worker_state>()) {
  auto& w = *state_;
  w.sys = &system;
  w.net = &endpoint;
  w.options = std::move(options);
  w.rank = endpoint.rank();
  w.world = endpoint.size();
  if (w.options.group) {
    const device& replica = w.options.replica_device;
    if (w.options.mode != mode::allreduce || (replica && replica.kind() != device_kind::cpu))
      throw std::invalid_argument("kvstore_dist::store: store_options::group is for dist_sync_allreduce stores on a cpu "
                                  "replica; this store is " + mode_name(w.options.mode) +
                                  (replica ? " on " + replica.name() : std::string()) + ".");
    w.group = *w.options.group;
    w.rank = w.group.rank;
    w.world = w.group.size;
  }
  w.dev = w.options.value_device ? w.options.value_device : make_devices("cpu:1").front();
  if (w.dev.kind() != device_kind::cpu)
    throw std::invalid_argument("kvstore_dist::store: value_device is " + w.dev.name() + "; expected a cpu device.");
  if (w.options.big_array_bound < 0)
    throw std::invalid_argument("kvstore_dist::store: big_array_bound is " + std::to_string(w.options.big_array_bound) +
                                "; expected 0 or more elements (keys with more elements than it are split over the ranks).");
  w.s = w.dev.create_stream();
  const device& given = w.options.replica_device;
  auto path = detail::choose_sum_path(w.options.mode, given ? std::optional<device_kind>(given.kind()) : std::nullopt,
                                        given ? given.name() : std::string(), w.options.cuda_sum, detail::nccl_built());
  if (!path) throw std::invalid_argument(path.error().message());
  w.path = *path;
  if (w.options.mode == mode::allreduce) {
    w.replica_dev = w.path == detail::sum_path::host_mpi ? w.dev : given;
    w.rs = w.replica_dev.create_stream();
    kvstore::options replica{.name = "kvstore_dist.replica"};
    if (w.path != detail::sum_path::host_mpi) {
      replica.kind = kvstore::kind::device;
      replica.merge_device = w.replica_dev;
    }
    detail::open_sum_link(w);
    // The replica (a kvstore actor) has a thread of its own, and so has the client's requester:
    // a caller that blocks a scheduler thread in a step (an actor, e.g. a pipeline stage summing
    // its gradients over the replicas) never waits for a thread it holds.
    w.replica = std::make_unique<kvstore::client>(system, kvstore::spawn(system, std::move(replica)), w.options.timeout,
                                                  spawn_options{.name = "kvstore_dist.client", .dedicated_thread = true});
    return;
  }
  w.server = detail::spawn_server(system, w.rank, w.world, w.options.mode, w.options.timeout, w.dev);
  // Stores are collectives, made in the same order on every rank: the n-th store of each rank
  // publishes its shard under the same name.
  static std::atomic<int> stores_made{0};
  w.name = std::string(detail::server_name) + "/" + std::to_string(stores_made.fetch_add(1));
  auto published = endpoint.publish(w.server, w.name);
  if (!published) {
    system.stop(w.server);
    throw error_exception(published.error());
  }
  for (int r = 0; r < w.world; ++r) {
    auto ref = endpoint.remote(r, w.name);
    if (!ref) throw error_exception(ref.error());
    w.servers.push_back(std::move(*ref));
  }
  // The shard monitors the others: a rank that leaves fails what waits for it at once.
  (void)system.send(w.server, detail::peers_msg{w.servers});
}

store::~store() {
  if (!state_) return;
  if (state_->replica) {
    actor_ref replica = state_->replica->store();
    state_->replica.reset();
    state_->sys->stop(replica);
    detail::close_sum_link(*state_);
  }
  if (state_->server) state_->sys->stop(state_->server);
}

std::string store::type() const { return mode_name(state_->options.mode); }
int store::rank() const noexcept { return state_->rank; }
int store::num_workers() const noexcept { return state_->world; }

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

namespace {

/// The rank that keeps `key` whole: FNV-1a of the key's kind and text, the same on every rank of
/// one build.
int home_of(const kvstore::key& key, int world) {
  const std::string text = (key.is_int() ? "i:" : "s:") + key.to_string();
  return static_cast<int>(fnv1a64(text) % static_cast<std::uint64_t>(world));
}

}  // namespace

int store::owner(const kvstore::key& key) const {
  if (state_->splits.count(key) != 0) return -1;
  return home_of(key, state_->world);
}

std::vector<int> store::owners(const kvstore::key& key) const {
  auto split = state_->splits.find(key);
  if (split == state_->splits.end()) return {home_of(key, state_->world)};
  std::vector<int> ranks;
  for (int p = 0; p < split->second.parts(); ++p) ranks.push_back(p);
  return ranks;
}

namespace {

/// Sums `host` over the store's ranks in place (one allreduce). An allreduce store waits as its
/// steps do: when a rank leaves or closes its store, or no sum comes within the store's timeout,
/// the call fails at once with `what` and why (the buffer then stays with the posted allreduce).
expected<void> allreduce(detail::worker_state& w, std::vector<float>& host, const std::string& what = "kvstore dist: ") {
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

}  // namespace

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

expected<void> store::barrier() {
  auto& w = *state_;
  if (w.replica) {
    std::vector<float> token{1.0f};
    return allreduce(w, token, "kvstore dist barrier: ");
  }
  ++w.barriers;
  return done(ask<unit_t>(w, w.servers[0], detail::barrier_msg{w.rank, w.barriers}));
}

expected<void> store::init(const kvstore::key& key, const tensor& value) {
  auto& w = *state_;
  if (w.replica) {
    // Rank 0's value reaches every replica: its shape first (the others' values are ignored, as
    // in MXNet, so they cannot make the counts of the sum differ), then the value, to which the
    // others add zeros (x + 0 is x, exactly). A cuda replica also takes a value on its own GPU
    // (read on the replica's stream). Every rank knows the keys, so all refuse an existing one.
    if (w.shapes.count(key) != 0)
      return error(errc::invalid_argument, "kvstore dist init: key " + key.to_string() + " exists already.");
    const bool cuda_replica = w.replica_dev.kind() == device_kind::cuda;
    const bool on_replica = cuda_replica && value.valid() && value.get_device().kind() == device_kind::cuda &&
                            value.get_device().properties().gpu_ordinal == w.replica_dev.properties().gpu_ordinal;
    expected<void> mine;
    if (w.rank == 0 && (!value.valid() || value.dtype() != dtype::float32 ||
                        !(on_replica || value.get_device().kind() == device_kind::cpu)))
      mine = error(errc::invalid_argument, "kvstore dist init: the value for key " + key.to_string() + " must be a float32 " +
                                               (cuda_replica ? "tensor on cpu or on " + w.replica_dev.name() : std::string("cpu tensor")) +
                                               ".");
    dtype type = dtype::float32;
    auto shape = shape_of_rank0(w, static_cast<bool>(mine), w.rank == 0 && mine ? value.shape() : std::vector<std::int64_t>{}, &type);
    if (!shape) return shape.error();
    if (!*shape) {
      if (!mine) return mine;
      return error(errc::invalid_argument, "kvstore dist init of key " + key.to_string() + ": rank 0's value was refused; nothing was stored.");
    }
    std::size_t n = 1;
    for (auto d : **shape) n *= static_cast<std::size_t>(d);
    std::vector<float> host = w.rank == 0 ? value.to_host<float>(on_replica ? w.rs : w.s) : std::vector<float>(n, 0.0f);
    if (auto summed = allreduce(w, host, "kvstore dist init of key " + key.to_string() + ": "); !summed) return summed;
    auto got = w.replica->init(key, tensor::from_host<float>(std::span<const float>(host), **shape, w.replica_dev, w.rs)).get();
    if (!got) return got.error();
    w.shapes[key] = std::move(**shape);
    return {};
  }
  // Every rank knows the keys (init and load are collectives), so all refuse an existing one.
  if (w.known.count(key) != 0)
    return error(errc::invalid_argument, "kvstore dist init: key " + key.to_string() + " exists already.");
  expected<void> mine;
  if (w.rank == 0) {
    if (!value.valid())
      mine = error(errc::invalid_argument, "kvstore dist init: the value for key " + key.to_string() + " is no tensor.");
    else if (detail::split_of(value.shape(), w.options.big_array_bound, w.world) &&
             ((value.dtype() != dtype::float32 && !kernels::is_half(value.dtype())) ||
              value.get_device().kind() != device_kind::cpu))
      mine = error(errc::invalid_argument, "kvstore dist init: key " + key.to_string() + " has " +
                                               std::to_string(value.numel()) + " elements, more than big_array_bound " +
                                               std::to_string(w.options.big_array_bound) +
                                               ", so it is split over the ranks and must be a float32, float16 or "
                                               "bfloat16 cpu tensor.");
  }
  // Rank 0's shape decides on every rank whether the key is split (the others' values are
  // ignored, as in MXNet).
  dtype type = w.rank == 0 && value.valid() ? value.dtype() : dtype::float32;
  auto shape = shape_of_rank0(w, static_cast<bool>(mine), w.rank == 0 ? value.shape() : std::vector<std::int64_t>{}, &type);
  if (!shape) return shape.error();
  if (!*shape) {
    if (!mine) return mine;
    return error(errc::invalid_argument, "kvstore dist init of key " + key.to_string() + ": rank 0's value was refused; nothing was stored.");
  }
  auto layout = detail::split_of(**shape, w.options.big_array_bound, w.world);
  if (w.rank == 0) {
    if (!layout) {
      mine = done(ask<unit_t>(w, w.servers[static_cast<std::size_t>(home_of(key, w.world))],
                              detail::init_msg{detail::to_wire(key), net::tensor_slice{value, 0, value.shape()}}));
    } else {
      std::vector<std::future<expected<unit_t>>> replies;
      for (int p = 0; p < layout->parts(); ++p)
        replies.push_back(w.sys->request<unit_t>(
            w.servers[static_cast<std::size_t>(p)], w.options.timeout,
            detail::init_msg{detail::to_wire(key), net::tensor_slice{value, layout->offset(p), {layout->size(p)}}}));
      mine = detail::all_replies(replies);
    }
  }
  // Everyone waits for rank 0's init, failed or not, so that the job stays in step.
  const bool everyone = all_ok(w, static_cast<bool>(mine));
  if (!mine) return mine;
  if (!everyone) return error(errc::runtime_failure, "kvstore dist init of key " + key.to_string() + " failed on rank 0.");
  w.known.insert(key);
  w.types[key] = type;
  if (layout) w.splits[key] = std::move(*layout);
  return {};
}

expected<void> store::push(const kvstore::key& key, const std::vector<tensor>& values) {
  auto& w = *state_;
  if (w.replica)
    return error(errc::invalid_argument, "kvstore dist_sync_allreduce push of key " + key.to_string() +
                                             ": this store type supports pushpull only (push and pull in one call).");
  const std::uint64_t seq = w.pushes[key] + 1;
  if (auto split = w.splits.find(key); split != w.splits.end()) {
    auto bytes = detail::push_parts(w, key, split->second, values, seq);
    if (!bytes) return bytes.error();
    w.pushes[key] = seq;
    w.bytes_pushed += *bytes;
    return {};
  }
  const actor_ref& to = w.servers[static_cast<std::size_t>(home_of(key, w.world))];
  expected<void> sent;
  std::uint64_t bytes = 0;
  if (w.compression != kvstore::compression_type::none) {
    dtype type = dtype::float32;  // a 16-bit value is compressed widened; the owner checks the key's dtype
    auto sum = local_sum(w, key, values, nullptr, &type);
    if (!sum) return sum.error();
    const std::size_t n = sum->size();
    // The rule adds the gradient to the residual (r = residual + grad, commutative in IEEE
    // floats): handing it the old residual as the gradient and the sum as the residual leaves the
    // new residual in the sum, no copy made, and the kept one untouched until the owner has taken
    // the push, so a refused push loses nothing.
    auto kept = w.residuals.find(key);
    const std::vector<float> zeros(kept == w.residuals.end() || kept->second.size() != n ? n : 0, 0.0f);
    const float* old = zeros.empty() ? kept->second.data() : zeros.data();
    detail::compressed_push_msg m{detail::to_wire(key), w.rank, seq, w.compression, w.threshold,
                                    values.front().shape(), std::vector<std::uint32_t>(kvstore::packed_words(w.compression, n)), type};
    kvstore::compress_packed(w.compression, w.threshold, old, sum->data(), m.codes.data(), n);
    bytes = m.codes.size() * sizeof(std::uint32_t) + sizeof(float);
    sent = done(ask<unit_t>(w, to, std::move(m)));
    if (sent) w.residuals[key] = std::move(*sum);
  } else {
    tensor value = values.empty() ? tensor() : values.front();
    if (values.size() != 1) {
      // Several local values (one per device, as MXNet's workers): summed here, in the order given
      // (16-bit ones in float32, then rounded once to their dtype).
      dtype type = dtype::float32;
      auto sum = local_sum(w, key, values, nullptr, &type);
      if (!sum) return sum.error();
      value = detail::rounded(*sum, value.shape(), type, w.dev, w.s);
    }
    bytes = static_cast<std::uint64_t>(value.numel()) * size_of(value.dtype());
    sent = done(ask<unit_t>(w, to, detail::push_msg{detail::to_wire(key), w.rank, seq, net::tensor_slice{value, 0, value.shape()}}));
  }
  if (!sent) return sent;
  w.pushes[key] = seq;
  w.bytes_pushed += bytes;
  return {};
}

expected<tensor> store::broadcast(const kvstore::key& key, const tensor& value) {
  if (auto initialised = init(key, value); !initialised) return initialised.error();
  return pull(key);
}

expected<tensor> store::pull(const kvstore::key& key) {
  auto& w = *state_;
  if (w.replica) {
    auto shape = w.shapes.find(key);
    if (shape == w.shapes.end()) return never_initialised("pull", key);
    auto got = w.replica->pull(key, tensor::empty(shape->second, dtype::float32, w.replica_dev, w.rs)).get();
    if (!got) return got.error();
    return std::move(got->front());
  }
  const std::uint64_t min_version = w.options.mode == mode::sync ? w.pushes[key] : 0;
  if (auto split = w.splits.find(key); split != w.splits.end()) return detail::pull_parts(w, key, split->second, min_version);
  return ask<tensor>(w, w.servers[static_cast<std::size_t>(home_of(key, w.world))],
                     detail::pull_msg{detail::to_wire(key), min_version});
}

expected<tensor> store::pushpull(const kvstore::key& key, const std::vector<tensor>& values) {
  if (state_->replica) {
    auto got = allreduce_step(*state_, {key}, {values}, {});
    if (!got) return got.error();
    return std::move(got->front());
  }
  auto pushed = push(key, values);
  if (!pushed) return pushed.error();
  return pull(key);
}

expected<std::vector<tensor>> store::pushpull(const std::vector<kvstore::key>& keys, const std::vector<tensor>& values) {
  auto& w = *state_;
  expected<void> counted;
  if (keys.size() != values.size())
    counted = error(errc::invalid_argument, "kvstore dist pushpull: " + std::to_string(keys.size()) + " keys but " +
                                                std::to_string(values.size()) + " values; expected one value per key.");
  if (w.replica) {
    std::vector<std::vector<tensor>> each;
    if (counted)
      for (const auto& v : values) each.push_back({v});
    return allreduce_step(w, keys, each, std::move(counted));
  }
  if (!counted) return counted.error();
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (auto pushed = push(keys[i], {values[i]}); !pushed) return pushed.error();
  std::vector<tensor> outs;
  for (const auto& k : keys) {
    auto got = pull(k);
    if (!got) return got.error();
    outs.push_back(std::move(*got));
  }
  return outs;
}

namespace {

std::string part_path(const std::string& path, int rank, int world) {
  return path + ".part" + std::to_string(rank) + "of" + std::to_string(world);
}

}  // namespace

expected<void> store::save(const std::string& path) {
  auto& w = *state_;
  expected<void> mine;
  if (w.replica) {
    // Every replica holds every key alike: rank 0's is the checkpoint.
    if (w.rank == 0) {
      auto got = w.replica->save(path).get();
      if (!got) mine = got.error();
    }
  } else {
    mine = done(ask<unit_t>(w, w.server, detail::save_msg{part_path(path, w.rank, w.world)}));
    if (all_ok(w, static_cast<bool>(mine)) && w.rank == 0) {
      // Rank 0 joins the parts into one file: the commit of the whole save.
      // A split key's parts come from ranks 0, 1, ... in part order and become one entry.
      std::vector<kvstore::checkpoint_entry> entries;
      std::map<kvstore::key, std::vector<kvstore::checkpoint_entry>> parts;
      for (int r = 0; r < w.world && mine; ++r) {
        auto part = kvstore::read_checkpoint(part_path(path, r, w.world));
        if (!part) {
          mine = part.error();
          break;
        }
        for (auto& e : part->entries)
          (w.splits.count(e.key) != 0 ? parts[e.key] : entries).push_back(std::move(e));
      }
      for (auto& [key, got] : parts) {
        const auto& layout = w.splits.at(key);
        if (!mine) break;
        if (static_cast<int>(got.size()) != layout.parts())
          mine = error(errc::runtime_failure, "kvstore dist save of \"" + path + "\": the shards hold " +
                                                  std::to_string(got.size()) + " of the " + std::to_string(layout.parts()) +
                                                  " parts of key " + key.to_string() + "; the file was not written.");
        else
          entries.push_back(detail::join_parts(std::move(got), layout));
      }
      if (mine) {
        std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
        mine = kvstore::write_checkpoint(path, entries);
      }
    }
  }
  const bool everyone = all_ok(w, static_cast<bool>(mine));
  if (!w.replica) std::remove(part_path(path, w.rank, w.world).c_str());
  if (!mine) return mine;
  if (!everyone)
    return error(errc::runtime_failure, "kvstore dist save of \"" + path + "\": another rank failed; the file was not written.");
  return {};
}

expected<void> store::load(const std::string& path) {
  auto& w = *state_;
  auto file = kvstore::read_checkpoint(path);
  const bool read_everywhere = all_ok(w, static_cast<bool>(file));
  if (!file) return file.error();
  if (!read_everywhere)
    return error(errc::runtime_failure, "kvstore dist load of \"" + path + "\": another rank could not read it; nothing changed.");
  // Every rank reads the same file, so every rank refuses alike.
  if (w.replica)
    for (const auto& e : file->entries)
      if (e.type != dtype::float32)
        return error(errc::invalid_argument, "kvstore dist load of \"" + path + "\": key " + e.key.to_string() + " is " +
                                                 std::string(to_string(e.type)) +
                                                 ", and dist_sync_allreduce keeps float32 keys only; nothing changed.");
  expected<void> mine;
  if (w.replica) {
    auto got = w.replica->load(path).get();
    if (!got) mine = got.error();
    else {
      w.shapes.clear();
      for (const auto& e : file->entries) w.shapes[e.key] = e.shape;
    }
  } else {
    // This rank's keys (by today's placement) go to its shard through a file of their own.
    std::vector<kvstore::checkpoint_entry> owned;
    std::vector<detail::loaded_key> keys;
    std::map<kvstore::key, std::uint64_t> versions;
    std::map<kvstore::key, dtype> types;
    for (const auto& e : file->entries) {
      versions[e.key] = e.version;
      types[e.key] = e.type;
    }
    // Keys larger than today's bound are cut for today's ranks, whatever cut them when saved.
    std::map<kvstore::key, detail::split_layout> splits;
    for (auto& e : file->entries) {
      if (auto layout = detail::split_of(e.shape, w.options.big_array_bound, w.world)) {
        if (w.rank < layout->parts()) {
          owned.push_back(detail::cut_part(e, *layout, w.rank));
          keys.push_back(detail::loaded_key{e.key, owned.back().shape, e.version, e.type});
        }
        splits[e.key] = std::move(*layout);
        continue;
      }
      if (home_of(e.key, w.world) != w.rank) continue;
      keys.push_back(detail::loaded_key{e.key, e.shape, e.version, e.type});
      owned.push_back(std::move(e));
    }
    const std::string mine_path = path + ".load" + std::to_string(w.rank);
    mine = kvstore::write_checkpoint(mine_path, owned);
    if (mine) mine = done(ask<unit_t>(w, w.server, detail::load_msg{mine_path, std::move(keys)}));
    std::remove(mine_path.c_str());
    if (mine) {
      w.known.clear();
      for (const auto& [key, version] : versions) w.known.insert(key);
      w.types = std::move(types);
      w.pushes = std::move(versions);
      w.splits = std::move(splits);
      w.residuals.clear();  // the keys start again from the file's values
    }
  }
  const bool everyone = all_ok(w, static_cast<bool>(mine));
  if (!mine) return mine;
  if (!everyone) return error(errc::runtime_failure, "kvstore dist load of \"" + path + "\": another rank failed to load its keys.");
  return {};
}

namespace {

/// A change of this rank's update rule: through `on_replica(client)` to the replica in allreduce
/// mode, else as `msg` to this rank's server shard.
template <class OnReplica, class Msg>
expected<void> change_rule(detail::worker_state& w, OnReplica on_replica, Msg msg) {
  if (w.replica) return done(on_replica(*w.replica).get());
  return done(ask<unit_t>(w, w.server, std::move(msg)));
}

}  // namespace

expected<void> store::set_optimizer(kernels::sgd_options options) { return set_optimizer(kvstore::set_optimizer{options}); }

expected<void> store::set_optimizer(kernels::adam_options options) { return set_optimizer(kvstore::set_optimizer{options}); }

expected<void> store::set_optimizer(kvstore::set_optimizer rule) {
  return change_rule(*state_, [&](kvstore::client& c) { return c.send(rule); }, detail::optimizer_msg{rule});
}

expected<void> store::set_learning_rate(double lr) {
  return change_rule(*state_, [&](kvstore::client& c) { return c.set_learning_rate(lr); }, detail::learning_rate_msg{lr});
}

expected<void> store::set_gradient_compression(std::string type, float threshold) {
  auto& w = *state_;
  if (w.replica)
    return error(errc::invalid_argument,
                 "kvstore dist set_gradient_compression: dist_sync_allreduce sums float gradients with one allreduce "
                 "and does not compress them (neither does MXNet's); use dist_sync or dist_async.");
  auto parsed = kvstore::parse_compression(type, threshold);
  const bool everyone = all_ok(w, static_cast<bool>(parsed));
  if (!parsed) return parsed.error();
  if (!everyone)
    return error(errc::invalid_argument, "kvstore dist set_gradient_compression: another rank refused its setting; "
                                         "compression is unchanged.");
  w.compression = *parsed;
  w.threshold = threshold;
  w.residuals.clear();  // a new setting starts from zero residuals ("none" drops them)
  return {};
}

std::uint64_t store::bytes_pushed() const noexcept { return state_->bytes_pushed; }

}  // namespace strata::kvstore_dist
