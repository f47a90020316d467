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

namespace detail {

error never_initialised(const char* call, const kvstore::key& key) {
  return error(errc::invalid_argument, std::string("kvstore dist ") + call + ": key " + key.to_string() +
                                           " was never initialised; call init first (every worker).");
}

expected<void> done(expected<unit_t> r) {
  if (!r) return r.error();
  return {};
}

}  // namespace detail

using detail::all_ok;
using detail::allreduce;
using detail::allreduce_step;
using detail::done;
using detail::home_of;
using detail::never_initialised;
using detail::shape_of_rank0;

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

int home_of(const kvstore::key& key, int world) {
  const std::string text = (key.is_int() ? "i:" : "s:") + key.to_string();
  return static_cast<int>(fnv1a64(text) % static_cast<std::uint64_t>(world));
}

}  // namespace detail

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
