// A server shard of a distributed store: one per rank, in front of a kvstore actor. It orders
// the workers' pushes into versions (dist_sync) or forwards each at once (dist_async), parks
// pulls until their version, and coordinates barriers (rank 0's shard).

#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "protocol.hpp"
#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"

namespace strata::kvstore_dist::internal {

wire_key to_wire(const kvstore::key& key) {
  wire_key w;
  if (key.is_int()) {
    w.is_int = 1;
    w.number = std::get<std::int64_t>(key.value());
  } else {
    w.is_int = 0;
    w.text = std::get<std::string>(key.value());
  }
  return w;
}

kvstore::key from_wire(const wire_key& key) {
  if (key.is_int != 0) return kvstore::key(key.number);
  return kvstore::key(key.text);
}

namespace {

/// A slice's elements as a tensor of their own: the base itself when the slice is all of it (a
/// message from another rank always is: the slice crossed as a tensor); else (from this rank's own
/// worker, delivered without serialization) a copy of the part, enqueued on `s` after the base.
tensor part_of(net::tensor_slice& slice, device& dev, stream& s) {
  if (!slice.base.valid() || (slice.offset == 0 && slice.base.shape() == slice.shape)) return std::move(slice.base);
  tensor part = tensor::empty(slice.shape, slice.base.dtype(), dev, s);
  s.wait(slice.base.ready_event());
  const std::size_t element = size_of(part.dtype());
  s.launch({.name = "kvstore_dist.part",
            .bytes = static_cast<double>(part.bytes()),
            .cpu = [to = part.raw_data(), from = static_cast<const std::byte*>(slice.base.raw_data()) +
                                                 static_cast<std::size_t>(slice.offset) * element,
                    n = part.bytes(), hold = slice.base] { std::memcpy(to, from, n); }});
  part.set_ready_event(s.record());
  return part;
}

class server final : public actor {
public:
  server(int world, kvstore_dist::mode mode, std::chrono::nanoseconds timeout, device dev)
      : world_(world), mode_(mode), timeout_(timeout), dev_(std::move(dev)) {}

  behavior make_behavior() override {
    stream_ = dev_.create_stream();
    store_ = kvstore::spawn(system(), kvstore::options{.name = "kvstore_dist.shard"});
    return {
        [this](init_msg& m) { on_init(m); },
        [this](push_msg& m) { on_push(m); },
        [this](compressed_push_msg& m) { on_compressed_push(m); },
        [this](const pull_msg& m) { on_pull(m); },
        [this](const barrier_msg& m) { on_barrier(m); },
        [this](optimizer_msg& m) { on_optimizer(m); },
        [this](const learning_rate_msg& m) {
          auto reply = make_response_promise<unit_t>();
          request<void>(store_, timeout_, kvstore::set_learning_rate{m.lr})
              .then([reply]() mutable { reply.deliver(unit_t{}); }, [reply](error e) mutable { reply.deliver(std::move(e)); });
        },
        [this](const save_msg& m) { on_save(m); },
        [this](load_msg& m) { on_load(m); },
    };
  }

  void on_exit(const error&) override { system().stop(store_); }

private:
  struct parked_pull {
    std::uint64_t min_version = 0;
    response_promise<tensor> reply;
  };
  struct version_slots {
    std::vector<tensor> values;  // by rank
    std::vector<char> have;
    int count = 0;
  };
  struct key_state {
    std::vector<std::int64_t> shape;
    dtype type = dtype::float32;                         // the dtype the key was initialised with
    std::uint64_t done = 0;                              // updates applied
    std::map<std::uint64_t, version_slots> versions;     // dist_sync: the values of each version
    bool merging = false;
    std::vector<parked_pull> pulls;
  };

  void on_init(init_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<unit_t>();
    if (keys_.count(key) != 0) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist init: key " + key.to_string() + " exists already."));
      return;
    }
    tensor value = part_of(m.value, dev_, stream_);
    auto shape = value.shape();
    const dtype type = value.dtype();
    request<void>(store_, timeout_, kvstore::init{{key}, {std::move(value)}})
        .then(
            [this, key, shape, type, reply]() mutable {
              keys_[key].shape = shape;
              keys_[key].type = type;
              reply.deliver(unit_t{});
            },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_push(push_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<unit_t>();
    key_state* st = pushable(key, m.value.shape, m.value.base.dtype(), reply);
    if (st == nullptr) return;
    take(key, *st, m.rank, m.seq, part_of(m.value, dev_, stream_), reply);
  }

  // A worker's compressed push: its codes become the floats they stand for (in the key's dtype,
  // which must hold them exactly), then as a push.
  void on_compressed_push(compressed_push_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<unit_t>();
    key_state* st = pushable(key, m.shape, m.value_type, reply);
    if (st == nullptr) return;
    std::size_t n = 1;
    for (auto d : m.shape) n *= static_cast<std::size_t>(d);
    if (m.type == kvstore::compression_type::none || m.type > kvstore::compression_type::two_bit ||
        m.codes.size() != kvstore::packed_words(m.type, n)) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist push: the compressed value for key " + key.to_string() +
                                                       " has " + std::to_string(m.codes.size()) +
                                                       " code words, not those of a 1bit or 2bit " + shape_text(m.shape) +
                                                       " value."));
      return;
    }
    std::vector<float> floats(n);
    kvstore::decompress(m.type, m.threshold, m.codes.data(), floats.data(), n);
    if (kernels::is_half(st->type))
      for (float x : floats)
        if (kernels::half_value(st->type, kernels::half_bits(st->type, x)) != x) {
          reply.deliver(error(errc::invalid_argument, "kvstore dist push: key " + key.to_string() + " is " +
                                                           std::string(to_string(st->type)) +
                                                           ", which does not hold the 2bit threshold " +
                                                           std::to_string(m.threshold) +
                                                           " exactly; choose one it holds (such as 0.5 or 0.25)."));
          return;
        }
    take(key, *st, m.rank, m.seq, rounded(floats, m.shape, st->type, dev_, stream_), reply);
  }

  /// The key's state when a push of `shape` and `type` fits it; else the reply gets the reason.
  key_state* pushable(const kvstore::key& key, const std::vector<std::int64_t>& shape, dtype type,
                      response_promise<unit_t>& reply) {
    auto it = keys_.find(key);
    if (it == keys_.end()) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist push: key " + key.to_string() +
                                                       " was never initialised; call init first (every worker)."));
      return nullptr;
    }
    if (type != it->second.type) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist push: the value for key " + key.to_string() +
                                                       " has dtype " + std::string(to_string(type)) + ", expected " +
                                                       std::string(to_string(it->second.type)) + "."));
      return nullptr;
    }
    if (shape != it->second.shape) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist push: the value for key " + key.to_string() + " is " +
                                                       shape_text(shape) + ", expected " +
                                                       std::string(to_string(type)) + " " +
                                                       shape_text(it->second.shape) + "."));
      return nullptr;
    }
    return &it->second;
  }

  /// One worker's value of `key`: an update at once (dist_async) or a slot of its version.
  void take(const kvstore::key& key, key_state& st, int rank, std::uint64_t seq, tensor value,
            response_promise<unit_t>& reply) {
    if (mode_ == kvstore_dist::mode::async) {
      if (!has_optimizer_) {
        reply.deliver(error(errc::invalid_argument,
                            "kvstore dist_async push: no optimizer is set; dist_async updates at every push and "
                            "needs set_optimizer first (as MXNet's)."));
        return;
      }
      request<void>(store_, timeout_, kvstore::push{{key}, {std::move(value)}})
          .then(
              [this, key, reply]() mutable {
                ++keys_[key].done;
                reply.deliver(unit_t{});
                serve_pulls(key);
              },
              [reply](error e) mutable { reply.deliver(std::move(e)); });
      return;
    }
    if (rank < 0 || rank >= world_ || seq <= st.done) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist push: push " + std::to_string(seq) + " of key " +
                                                       key.to_string() + " from rank " + std::to_string(rank) +
                                                       " is out of order."));
      return;
    }
    auto& slots = st.versions[seq];
    if (slots.values.empty()) {
      slots.values.resize(static_cast<std::size_t>(world_));
      slots.have.assign(static_cast<std::size_t>(world_), 0);
    }
    if (slots.have[static_cast<std::size_t>(rank)] != 0) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist push: rank " + std::to_string(rank) +
                                                       " pushed version " + std::to_string(seq) + " of key " +
                                                       key.to_string() + " twice."));
      return;
    }
    slots.values[static_cast<std::size_t>(rank)] = std::move(value);
    slots.have[static_cast<std::size_t>(rank)] = 1;
    ++slots.count;
    reply.deliver(unit_t{});
    try_merge(key);
  }

  // dist_sync: the next version of `key` runs once every worker's value is there, summed in rank
  // order by one kvstore push (values of one key are summed in the order given).
  void try_merge(const kvstore::key& key) {
    key_state& st = keys_[key];
    if (st.merging) return;
    auto it = st.versions.find(st.done + 1);
    if (it == st.versions.end()) return;
    if (it->second.count < world_) return;
    std::vector<tensor> values = std::move(it->second.values);
    st.versions.erase(it);
    st.merging = true;
    std::vector<kvstore::key> keys(values.size(), key);
    request<void>(store_, timeout_, kvstore::push{std::move(keys), std::move(values)})
        .then(
            [this, key]() {
              key_state& s = keys_[key];
              s.merging = false;
              ++s.done;
              serve_pulls(key);
              try_merge(key);
            },
            [this, key](error e) {
              key_state& s = keys_[key];
              s.merging = false;
              for (auto& p : s.pulls) p.reply.deliver(e);
              s.pulls.clear();
            });
  }

  void on_pull(const pull_msg& m) {
    auto key = from_wire(m.key);
    auto reply = make_response_promise<tensor>();
    auto it = keys_.find(key);
    if (it == keys_.end()) {
      reply.deliver(error(errc::invalid_argument, "kvstore dist pull: key " + key.to_string() +
                                                       " was never initialised; call init first (every worker)."));
      return;
    }
    if (it->second.done >= m.min_version) {
      send_value(key, std::move(reply));
      return;
    }
    it->second.pulls.push_back(parked_pull{m.min_version, std::move(reply)});
  }

  void serve_pulls(const kvstore::key& key) {
    key_state& st = keys_[key];
    std::vector<parked_pull> waiting;
    for (auto& p : st.pulls) {
      if (p.min_version <= st.done) send_value(key, std::move(p.reply));
      else waiting.push_back(std::move(p));
    }
    st.pulls = std::move(waiting);
  }

  void send_value(const kvstore::key& key, response_promise<tensor> reply) {
    tensor out = tensor::empty(keys_[key].shape, keys_[key].type, dev_, stream_);
    request<std::vector<tensor>>(store_, timeout_, kvstore::pull{{key}, {out}})
        .then([reply](std::vector<tensor> outs) mutable { reply.deliver(std::move(outs.front())); },
              [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_barrier(const barrier_msg& m) {
    auto reply = make_response_promise<unit_t>();
    auto& arrived = barriers_[m.generation];
    arrived.push_back(std::move(reply));
    if (static_cast<int>(arrived.size()) < world_) return;
    for (auto& r : arrived) r.deliver(unit_t{});
    barriers_.erase(m.generation);
  }

  void on_optimizer(optimizer_msg& m) {
    auto reply = make_response_promise<unit_t>();
    request<void>(store_, timeout_, std::move(m.rule))
        .then(
            [this, reply]() mutable {
              has_optimizer_ = true;
              reply.deliver(unit_t{});
            },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_save(const save_msg& m) {
    auto reply = make_response_promise<unit_t>();
    request<void>(store_, timeout_, kvstore::save{m.path})
        .then([reply]() mutable { reply.deliver(unit_t{}); }, [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  void on_load(load_msg& m) {
    auto reply = make_response_promise<unit_t>();
    request<void>(store_, timeout_, kvstore::load{m.path})
        .then(
            [this, reply, keys = std::move(m.keys)]() mutable {
              // The store's keys are the file's now: pulls parked for the old ones cannot be served.
              for (auto& [key, st] : keys_)
                for (auto& p : st.pulls)
                  p.reply.deliver(error(errc::invalid_argument, "kvstore dist pull of key " + key.to_string() +
                                                                     ": a checkpoint load replaced the store's keys."));
              keys_.clear();
              for (auto& k : keys) {
                key_state& st = keys_[k.key];
                st.shape = std::move(k.shape);
                st.type = k.type;
                st.done = k.version;
              }
              reply.deliver(unit_t{});
            },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
  }

  int world_;
  kvstore_dist::mode mode_;
  std::chrono::nanoseconds timeout_;
  device dev_;
  stream stream_;
  actor_ref store_;
  bool has_optimizer_ = false;
  std::map<kvstore::key, key_state> keys_;
  std::map<std::uint64_t, std::vector<response_promise<unit_t>>> barriers_;
};

}  // namespace

tensor rounded(const std::vector<float>& values, const std::vector<std::int64_t>& shape, dtype type, device& dev,
               const stream& s) {
  if (!kernels::is_half(type)) return tensor::from_host<float>(std::span<const float>(values), shape, dev, s);
  std::vector<std::uint16_t> bits(values.size());
  kernels::cpu::narrow(type, values.size(), values.data(), bits.data());
  auto raw = tensor::from_host<std::uint8_t>(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(bits.data()), bits.size() * sizeof(std::uint16_t)),
      dev, s);
  return tensor(shape, type, raw.storage(), raw.ready_event());
}

actor_ref spawn_server(actor_system& system, int world, kvstore_dist::mode mode, std::chrono::nanoseconds timeout,
                       device dev) {
  return system.spawn_with<server>(spawn_options{.name = "kvstore_dist.server"}, world, mode, timeout, std::move(dev));
}

}  // namespace strata::kvstore_dist::internal

STRATA_NET_DECLARE(strata::kvstore_dist::internal::init_msg, strata::kvstore_dist::internal::push_msg,
                   strata::kvstore_dist::internal::compressed_push_msg,
                   strata::kvstore_dist::internal::pull_msg, strata::kvstore_dist::internal::barrier_msg,
                   strata::tensor);
