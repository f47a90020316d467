// The worker's side of a distributed store: blocking calls that reach the owner's server shard.

#include <atomic>
#include <map>
#include <span>
#include <stdexcept>
#include <utility>

#include "protocol.hpp"
#include "strata/checksum.hpp"

namespace strata::kvstore_dist {

namespace internal {

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
  std::string name;
};

}  // namespace internal

namespace {

template <class R, class M>
expected<R> ask(internal::worker_state& w, const actor_ref& to, M msg) {
  auto got = w.sys->request<R>(to, w.options.timeout, std::move(msg)).get();
  if (!got) return got.error();
  if constexpr (std::is_same_v<R, void>) return {};
  else return std::move(*got);
}

expected<void> done(expected<unit_t> r) {
  if (!r) return r.error();
  return {};
}

}  // namespace

store::store(actor_system& system, net::endpoint& endpoint, store_options options)
    : state_(std::make_unique<internal::worker_state>()) {
  auto& w = *state_;
  w.sys = &system;
  w.net = &endpoint;
  w.options = std::move(options);
  w.rank = endpoint.rank();
  w.world = endpoint.size();
  w.dev = w.options.value_device ? w.options.value_device : make_devices("cpu:1").front();
  if (w.dev.kind() != device_kind::cpu)
    throw std::invalid_argument("kvstore_dist::store: value_device is " + w.dev.name() + "; expected a cpu device.");
  w.s = w.dev.create_stream();
  w.server = internal::spawn_server(system, w.world, w.options.mode, w.options.timeout, w.dev);
  // Stores are collectives, made in the same order on every rank: the n-th store of each rank
  // publishes its shard under the same name.
  static std::atomic<int> stores_made{0};
  w.name = std::string(internal::server_name) + "/" + std::to_string(stores_made.fetch_add(1));
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
}

store::~store() {
  if (state_) state_->sys->stop(state_->server);
}

std::string store::type() const { return state_->options.mode == mode::sync ? "dist_sync" : "dist_async"; }
int store::rank() const noexcept { return state_->rank; }
int store::num_workers() const noexcept { return state_->world; }

int store::owner(const kvstore::key& key) const {
  // FNV-1a of the key's kind and text: the same on every rank of one build.
  const std::string text = (key.is_int() ? "i:" : "s:") + key.to_string();
  return static_cast<int>(fnv1a64(text) % static_cast<std::uint64_t>(state_->world));
}

expected<void> store::barrier() {
  auto& w = *state_;
  ++w.barriers;
  return done(ask<unit_t>(w, w.servers[0], internal::barrier_msg{w.rank, w.barriers}));
}

expected<void> store::init(const kvstore::key& key, const tensor& value) {
  auto& w = *state_;
  expected<void> result;
  if (w.rank == 0) result = done(ask<unit_t>(w, w.servers[static_cast<std::size_t>(owner(key))],
                                             internal::init_msg{internal::to_wire(key), value}));
  // Everyone waits for rank 0's init, failed or not, so that the job stays in step.
  auto passed = barrier();
  if (!result) return result;
  if (!passed) return passed;
  return {};
}

expected<void> store::push(const kvstore::key& key, const std::vector<tensor>& values) {
  auto& w = *state_;
  if (values.empty())
    return error(errc::invalid_argument, "kvstore dist push: no values for key " + key.to_string() + ".");
  tensor value = values.front();
  if (values.size() > 1) {
    // Several local values (one per device, as MXNet's workers): summed here, in the order given.
    for (const auto& v : values) {
      if (v.dtype() != dtype::float32 || v.shape() != value.shape() || v.get_device().kind() != device_kind::cpu)
        return error(errc::invalid_argument, "kvstore dist push: the values for key " + key.to_string() +
                                                 " must be float32 cpu tensors of one shape.");
    }
    std::vector<float> sum = values.front().to_host<float>(w.s);
    for (std::size_t i = 1; i < values.size(); ++i) {
      std::vector<float> next = values[i].to_host<float>(w.s);
      for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += next[j];
    }
    value = tensor::from_host<float>(std::span<const float>(sum), value.shape(), w.dev, w.s);
  }
  const std::uint64_t seq = w.pushes[key] + 1;
  auto sent = done(ask<unit_t>(w, w.servers[static_cast<std::size_t>(owner(key))],
                               internal::push_msg{internal::to_wire(key), w.rank, seq, std::move(value)}));
  if (!sent) return sent;
  w.pushes[key] = seq;
  return {};
}

expected<tensor> store::pull(const kvstore::key& key) {
  auto& w = *state_;
  const std::uint64_t min_version = w.options.mode == mode::sync ? w.pushes[key] : 0;
  return ask<tensor>(w, w.servers[static_cast<std::size_t>(owner(key))],
                     internal::pull_msg{internal::to_wire(key), min_version});
}

expected<tensor> store::pushpull(const kvstore::key& key, const std::vector<tensor>& values) {
  auto pushed = push(key, values);
  if (!pushed) return pushed.error();
  return pull(key);
}

expected<void> store::set_optimizer(kernels::sgd_options options) {
  auto& w = *state_;
  return done(ask<unit_t>(w, w.server, internal::optimizer_msg{options}));
}

expected<void> store::set_optimizer(kernels::adam_options options) {
  auto& w = *state_;
  return done(ask<unit_t>(w, w.server, internal::optimizer_msg{options}));
}

}  // namespace strata::kvstore_dist
