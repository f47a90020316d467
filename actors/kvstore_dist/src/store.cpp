// The worker's side of a distributed store: blocking calls that reach the owner's server shard.

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <map>
#include <span>
#include <stdexcept>
#include <utility>

#include "protocol.hpp"
#include "strata/checksum.hpp"
#include "strata/device/shape.hpp"

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
  // dist_sync_allreduce: this rank's replica of every key, and the keys' shapes.
  std::unique_ptr<kvstore::client> replica;
  std::map<kvstore::key, std::vector<std::int64_t>> shapes;
  // set_gradient_compression: the setting and this worker's residual of each key it pushed.
  kvstore::compression_type compression = kvstore::compression_type::none;
  float threshold = 0.5f;
  std::map<kvstore::key, std::vector<float>> residuals;
  std::uint64_t bytes_pushed = 0;
};

}  // namespace internal

namespace {

template <class R, class M>
expected<R> ask(internal::worker_state& w, const actor_ref& to, M msg) {
  return w.sys->request<R>(to, w.options.timeout, std::move(msg)).get();
}

error never_initialised(const char* call, const kvstore::key& key) {
  return error(errc::invalid_argument, std::string("kvstore dist ") + call + ": key " + key.to_string() +
                                           " was never initialised; call init first (every worker).");
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
  if (w.options.mode == mode::allreduce) {
    w.replica = std::make_unique<kvstore::client>(system, kvstore::spawn(system, kvstore::options{.name = "kvstore_dist.replica"}),
                                                  w.options.timeout);
    return;
  }
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
  if (!state_) return;
  if (state_->replica) {
    actor_ref replica = state_->replica->store();
    state_->replica.reset();
    state_->sys->stop(replica);
  }
  if (state_->server) state_->sys->stop(state_->server);
}

std::string store::type() const {
  switch (state_->options.mode) {
    case mode::sync: return "dist_sync";
    case mode::async: return "dist_async";
    case mode::allreduce: return "dist_sync_allreduce";
  }
  return "dist_sync";
}
int store::rank() const noexcept { return state_->rank; }
int store::num_workers() const noexcept { return state_->world; }

int store::owner(const kvstore::key& key) const {
  // FNV-1a of the key's kind and text: the same on every rank of one build.
  const std::string text = (key.is_int() ? "i:" : "s:") + key.to_string();
  return static_cast<int>(fnv1a64(text) % static_cast<std::uint64_t>(state_->world));
}

namespace {

/// Sums `host` over all ranks in place (one allreduce).
expected<void> allreduce(internal::worker_state& w, std::vector<float>& host) {
  return w.net->allreduce_sum(std::span<float>(host)).get();
}

/// `values` summed on this worker, in the order given, as host floats.
expected<std::vector<float>> local_sum(internal::worker_state& w, const kvstore::key& key,
                                       const std::vector<tensor>& values, const std::vector<std::int64_t>* shape) {
  if (values.empty()) return error(errc::invalid_argument, "kvstore dist push: no values for key " + key.to_string() + ".");
  for (const auto& v : values) {
    if (v.dtype() != dtype::float32 || v.shape() != values.front().shape() || v.get_device().kind() != device_kind::cpu)
      return error(errc::invalid_argument, "kvstore dist push: the values for key " + key.to_string() +
                                               " must be float32 cpu tensors of one shape.");
    if (shape != nullptr && v.shape() != *shape)
      return error(errc::invalid_argument, "kvstore dist push: the value for key " + key.to_string() + " is " +
                                               shape_text(v.shape()) + ", expected float32 " + shape_text(*shape) + ".");
  }
  std::vector<float> sum = values.front().to_host<float>(w.s);
  for (std::size_t i = 1; i < values.size(); ++i) {
    std::vector<float> next = values[i].to_host<float>(w.s);
    for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += next[j];
  }
  return sum;
}

/// dist_sync_allreduce: `sums[i]` (this worker's value of `keys[i]`, a key of the replica) summed
/// over the ranks by one allreduce, packed in key order; then the same update on every replica.
/// Answers the replica's values, in the order of `keys`.
expected<std::vector<tensor>> fused_pushpull(internal::worker_state& w, const std::vector<kvstore::key>& keys,
                                             std::vector<std::vector<float>> sums) {
  std::vector<std::size_t> order(keys.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  for (std::size_t i = 1; i < order.size(); ++i)
    if (keys[order[i]] == keys[order[i - 1]])
      return error(errc::invalid_argument, "kvstore dist pushpull: key " + keys[order[i]].to_string() +
                                               " appears twice; dist_sync_allreduce takes each key once per call.");
  std::vector<float> packed;
  std::vector<std::size_t> offsets;
  for (std::size_t i : order) {
    offsets.push_back(packed.size());
    packed.insert(packed.end(), sums[i].begin(), sums[i].end());
  }
  if (auto summed = allreduce(w, packed); !summed) return summed.error();
  w.bytes_pushed += packed.size() * sizeof(float);
  std::vector<kvstore::key> push_keys;
  std::vector<tensor> merged, outs;
  for (std::size_t j = 0; j < order.size(); ++j) {
    const auto& key = keys[order[j]];
    const auto& shape = w.shapes[key];
    const std::size_t n = sums[order[j]].size();
    push_keys.push_back(key);
    merged.push_back(tensor::from_host<float>(std::span<const float>(packed.data() + offsets[j], n), shape, w.dev, w.s));
    outs.push_back(tensor::empty(shape, dtype::float32, w.dev, w.s));
  }
  if (auto pushed = w.replica->push(push_keys, merged).get(); !pushed) return pushed.error();
  auto pulled = w.replica->pull(push_keys, outs).get();
  if (!pulled) return pulled.error();
  std::vector<tensor> result(keys.size());
  for (std::size_t j = 0; j < order.size(); ++j) result[order[j]] = std::move((*pulled)[j]);
  return result;
}

}  // namespace

expected<void> store::barrier() {
  auto& w = *state_;
  if (w.replica) {
    std::vector<float> token{1.0f};
    return allreduce(w, token);
  }
  ++w.barriers;
  return done(ask<unit_t>(w, w.servers[0], internal::barrier_msg{w.rank, w.barriers}));
}

expected<void> store::init(const kvstore::key& key, const tensor& value) {
  auto& w = *state_;
  if (w.replica) {
    // Rank 0's value reaches every replica: the others add zeros (x + 0 is x, exactly).
    if (value.dtype() != dtype::float32 || value.get_device().kind() != device_kind::cpu)
      return error(errc::invalid_argument, "kvstore dist init: the value for key " + key.to_string() +
                                               " must be a float32 cpu tensor.");
    std::vector<float> host = w.rank == 0 ? value.to_host<float>(w.s) : std::vector<float>(static_cast<std::size_t>(value.numel()), 0.0f);
    if (auto summed = allreduce(w, host); !summed) return summed;
    if (w.shapes.count(key) != 0)
      return error(errc::invalid_argument, "kvstore dist init: key " + key.to_string() + " exists already.");
    auto got = w.replica->init(key, tensor::from_host<float>(std::span<const float>(host), value.shape(), w.dev, w.s)).get();
    if (!got) return got.error();
    w.shapes[key] = value.shape();
    return {};
  }
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
  if (w.replica)
    return error(errc::invalid_argument, "kvstore dist_sync_allreduce push of key " + key.to_string() +
                                             ": this store type supports pushpull only (push and pull in one call).");
  const std::uint64_t seq = w.pushes[key] + 1;
  const actor_ref& to = w.servers[static_cast<std::size_t>(owner(key))];
  expected<void> sent;
  std::uint64_t bytes = 0;
  if (w.compression != kvstore::compression_type::none) {
    auto sum = local_sum(w, key, values, nullptr);
    if (!sum) return sum.error();
    const std::size_t n = sum->size();
    // The rule adds the gradient to the residual (r = residual + grad, commutative in IEEE
    // floats): handing it the old residual as the gradient and the sum as the residual leaves the
    // new residual in the sum, no copy made, and the kept one untouched until the owner has taken
    // the push, so a refused push loses nothing.
    auto kept = w.residuals.find(key);
    const std::vector<float> zeros(kept == w.residuals.end() || kept->second.size() != n ? n : 0, 0.0f);
    const float* old = zeros.empty() ? kept->second.data() : zeros.data();
    internal::compressed_push_msg m{internal::to_wire(key), w.rank, seq, w.compression, w.threshold,
                                    values.front().shape(), std::vector<std::uint32_t>(kvstore::packed_words(w.compression, n))};
    kvstore::compress_packed(w.compression, w.threshold, old, sum->data(), m.codes.data(), n);
    bytes = m.codes.size() * sizeof(std::uint32_t) + sizeof(float);
    sent = done(ask<unit_t>(w, to, std::move(m)));
    if (sent) w.residuals[key] = std::move(*sum);
  } else {
    tensor value = values.empty() ? tensor() : values.front();
    if (values.size() != 1) {
      // Several local values (one per device, as MXNet's workers): summed here, in the order given.
      auto sum = local_sum(w, key, values, nullptr);
      if (!sum) return sum.error();
      value = tensor::from_host<float>(std::span<const float>(*sum), value.shape(), w.dev, w.s);
    }
    bytes = static_cast<std::uint64_t>(value.numel()) * sizeof(float);
    sent = done(ask<unit_t>(w, to, internal::push_msg{internal::to_wire(key), w.rank, seq, std::move(value)}));
  }
  if (!sent) return sent;
  w.pushes[key] = seq;
  w.bytes_pushed += bytes;
  return {};
}

expected<tensor> store::pull(const kvstore::key& key) {
  auto& w = *state_;
  if (w.replica) {
    auto shape = w.shapes.find(key);
    if (shape == w.shapes.end()) return never_initialised("pull", key);
    auto got = w.replica->pull(key, tensor::empty(shape->second, dtype::float32, w.dev, w.s)).get();
    if (!got) return got.error();
    return std::move(got->front());
  }
  const std::uint64_t min_version = w.options.mode == mode::sync ? w.pushes[key] : 0;
  return ask<tensor>(w, w.servers[static_cast<std::size_t>(owner(key))],
                     internal::pull_msg{internal::to_wire(key), min_version});
}

expected<tensor> store::pushpull(const kvstore::key& key, const std::vector<tensor>& values) {
  if (state_->replica) {
    auto& w = *state_;
    auto shape = w.shapes.find(key);
    if (shape == w.shapes.end()) return never_initialised("pushpull", key);
    auto sum = local_sum(w, key, values, &shape->second);
    if (!sum) return sum.error();
    std::vector<std::vector<float>> sums;
    sums.push_back(std::move(*sum));
    auto got = fused_pushpull(w, {key}, std::move(sums));
    if (!got) return got.error();
    return std::move(got->front());
  }
  auto pushed = push(key, values);
  if (!pushed) return pushed.error();
  return pull(key);
}

expected<std::vector<tensor>> store::pushpull(const std::vector<kvstore::key>& keys, const std::vector<tensor>& values) {
  auto& w = *state_;
  if (keys.size() != values.size())
    return error(errc::invalid_argument, "kvstore dist pushpull: " + std::to_string(keys.size()) + " keys but " +
                                             std::to_string(values.size()) + " values; expected one value per key.");
  if (!w.replica) {
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
  std::vector<std::vector<float>> sums;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto shape = w.shapes.find(keys[i]);
    if (shape == w.shapes.end()) return never_initialised("pushpull", keys[i]);
    auto host = local_sum(w, keys[i], {values[i]}, &shape->second);
    if (!host) return host.error();
    sums.push_back(std::move(*host));
  }
  return fused_pushpull(w, keys, std::move(sums));
}

namespace {

/// Collective: true on every rank when `ok` on every rank (an allreduce of the failures).
bool all_ok(internal::worker_state& w, bool ok) {
  std::vector<float> failures{ok ? 0.0f : 1.0f};
  auto summed = allreduce(w, failures);
  return summed && failures[0] == 0.0f;
}

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
    mine = done(ask<unit_t>(w, w.server, internal::save_msg{part_path(path, w.rank, w.world)}));
    if (all_ok(w, static_cast<bool>(mine)) && w.rank == 0) {
      // Rank 0 joins the parts into one file: the commit of the whole save.
      std::vector<kvstore::checkpoint_entry> entries;
      for (int r = 0; r < w.world && mine; ++r) {
        auto part = kvstore::read_checkpoint(part_path(path, r, w.world));
        if (!part) {
          mine = part.error();
          break;
        }
        for (auto& e : part->entries) entries.push_back(std::move(e));
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
    std::vector<internal::loaded_key> keys;
    std::map<kvstore::key, std::uint64_t> versions;
    for (const auto& e : file->entries) versions[e.key] = e.version;
    for (auto& e : file->entries) {
      if (owner(e.key) != w.rank) continue;
      keys.push_back(internal::loaded_key{e.key, e.shape, e.version});
      owned.push_back(std::move(e));
    }
    const std::string mine_path = path + ".load" + std::to_string(w.rank);
    mine = kvstore::write_checkpoint(mine_path, owned);
    if (mine) mine = done(ask<unit_t>(w, w.server, internal::load_msg{mine_path, std::move(keys)}));
    std::remove(mine_path.c_str());
    if (mine) {
      w.pushes = std::move(versions);
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
expected<void> change_rule(internal::worker_state& w, OnReplica on_replica, Msg msg) {
  if (w.replica) return done(on_replica(*w.replica).get());
  return done(ask<unit_t>(w, w.server, std::move(msg)));
}

}  // namespace

expected<void> store::set_optimizer(kernels::sgd_options options) {
  return change_rule(*state_, [&](kvstore::client& c) { return c.set_optimizer(options); }, internal::optimizer_msg{options});
}

expected<void> store::set_optimizer(kernels::adam_options options) {
  return change_rule(*state_, [&](kvstore::client& c) { return c.set_optimizer(options); }, internal::optimizer_msg{options});
}

expected<void> store::set_learning_rate(double lr) {
  return change_rule(*state_, [&](kvstore::client& c) { return c.set_learning_rate(lr); }, internal::learning_rate_msg{lr});
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
