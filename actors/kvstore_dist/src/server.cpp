// A server shard of a distributed store: one per rank, in front of a kvstore actor. It orders
// the workers' pushes into versions (dist_sync) or forwards each at once (dist_async), parks
// pulls until their version, and coordinates barriers (rank 0's shard). It monitors the other
// ranks' shards: a rank that leaves fails at once what would wait for it.

#include "server.hpp"

#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"

namespace strata::kvstore_dist::detail {

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


/// A copy of `slice`'s elements, enqueued on `s` after its base is ready.
tensor copy_of(const net::tensor_slice& slice, device& dev, stream& s) {
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

}  // namespace

tensor part_of(net::tensor_slice& slice, device& dev, stream& s) {
  if (!slice.base.valid() || (slice.offset == 0 && slice.base.shape() == slice.shape)) return std::move(slice.base);
  return copy_of(slice, dev, s);
}

tensor owned_part(net::tensor_slice& slice, bool from_this_rank, device& dev, stream& s) {
  if (from_this_rank && slice.base.valid()) return copy_of(slice, dev, s);
  return part_of(slice, dev, s);
}

behavior server::make_behavior() {
  stream_ = dev_.create_stream();
  store_ = kvstore::spawn(system(), kvstore::options{.name = "kvstore_dist.shard"});
  return {
      [this](init_msg& m) { on_init(m); },
      [this](push_msg& m) { on_push(m); },
      [this](compressed_push_msg& m) { on_compressed_push(m); },
      [this](sparse_push_msg& m) { on_sparse_push(m); },
      [this](const pull_msg& m) { on_pull(m); },
      [this](sparse_pull_msg& m) { on_sparse_pull(m); },
      [this](const barrier_msg& m) { on_barrier(m); },
      [this](peers_msg& m) { on_peers(m); },
      [this](const peer_down_msg& m) { on_peer_down(m); },
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

void server::on_exit(const error&) {
  system().stop(store_);
  for (auto& w : watches_) system().stop(w);
}

void server::on_init(init_msg& m) {
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

void server::on_push(push_msg& m) {
  auto key = from_wire(m.key);
  auto reply = make_response_promise<unit_t>();
  key_state* st = pushable(key, m.value.shape, m.value.base.dtype(), reply);
  if (st == nullptr) return;
  take(key, *st, m.rank, m.seq, contribution{owned_part(m.value, m.rank == rank_, dev_, stream_)}, reply);
}

void server::on_compressed_push(compressed_push_msg& m) {
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
  take(key, *st, m.rank, m.seq, contribution{rounded(floats, m.shape, st->type, dev_, stream_)}, reply);
}

void server::on_pull(const pull_msg& m) {
  auto key = from_wire(m.key);
  auto reply = make_response_promise<tensor>();
  key_state* st = initialised(key, "pull", reply);
  if (st == nullptr) return;
  if (st->done >= m.min_version) {
    send_value(key, std::move(reply));
    return;
  }
  if (auto why = unreachable(key, *st, m.min_version)) return reply.deliver(std::move(*why));
  st->pulls.push_back(parked_pull{m.min_version, std::move(reply)});
}

void server::serve_pulls(const kvstore::key& key) {
  key_state& st = keys_[key];
  std::vector<parked_pull> waiting;
  for (auto& p : st.pulls) {
    if (p.min_version > st.done) waiting.push_back(std::move(p));
    else if (p.rows) send_rows(key, *p.rows, std::move(p.reply));
    else send_value(key, std::move(p.reply));
  }
  st.pulls = std::move(waiting);
}

void server::send_value(const kvstore::key& key, response_promise<tensor> reply) {
  tensor out = tensor::empty(keys_[key].shape, keys_[key].type, dev_, stream_);
  request<std::vector<tensor>>(store_, timeout_, kvstore::pull{{key}, {out}})
      .then([reply](std::vector<tensor> outs) mutable { reply.deliver(std::move(outs.front())); },
            [reply](error e) mutable { reply.deliver(std::move(e)); });
}

void server::on_barrier(const barrier_msg& m) {
  auto reply = make_response_promise<unit_t>();
  if (m.rank >= 0 && m.rank < world_) {
    auto& reached = barriers_reached_[static_cast<std::size_t>(m.rank)];
    reached = std::max(reached, m.generation);
  }
  auto& arrived = barriers_[m.generation];
  arrived.push_back(std::move(reply));
  if (fail_barrier_without_left_ranks(m.generation)) return;
  if (static_cast<int>(arrived.size()) < world_) return;
  for (auto& r : arrived) r.deliver(unit_t{});
  barriers_.erase(m.generation);
}

bool server::fail_barrier_without_left_ranks(std::uint64_t generation) {
  for (const auto& [r, why] : left_) {
    if (barriers_reached_[static_cast<std::size_t>(r)] >= generation) continue;
    const error e(errc::rank_down, "kvstore dist barrier: barrier " + std::to_string(generation) +
                                       " cannot complete: rank " + std::to_string(r) + " " + why + ".");
    for (auto& reply : barriers_[generation]) reply.deliver(e);
    barriers_.erase(generation);
    return true;
  }
  return false;
}

void server::on_peers(peers_msg& m) {
  for (int r = 0; r < static_cast<int>(m.servers.size()); ++r) {
    if (r == rank_ || !m.servers[static_cast<std::size_t>(r)]) continue;
    watches_.push_back(system().spawn([peer = m.servers[static_cast<std::size_t>(r)], r, server = self()](actor& w) -> behavior {
      w.monitor(peer);
      return {[&w, r, server](const down_msg& d) {
        (void)w.send(server, peer_down_msg{r, d.reason});
        w.quit();
      }};
    }));
  }
}

void server::on_peer_down(const peer_down_msg& m) {
  const int r = m.rank;
  if (r < 0 || r >= world_ || r == rank_ || left_.count(r) != 0) return;
  if (m.reason.code() == errc::rank_down) left_[r] = "has left the job";
  else if (m.reason.code() == errc::stopped) left_[r] = "has closed this store";
  else return;
  if (mode_ == kvstore_dist::mode::sync)
    for (auto& [key, st] : keys_) give_up_unreachable(key, st);
  std::vector<std::uint64_t> waiting;
  for (const auto& [generation, arrived] : barriers_) waiting.push_back(generation);
  for (auto generation : waiting) fail_barrier_without_left_ranks(generation);
}

void server::on_optimizer(optimizer_msg& m) {
  auto reply = make_response_promise<unit_t>();
  request<void>(store_, timeout_, std::move(m.rule))
      .then(
          [this, reply]() mutable {
            has_optimizer_ = true;
            reply.deliver(unit_t{});
          },
          [reply](error e) mutable { reply.deliver(std::move(e)); });
}

void server::on_save(const save_msg& m) {
  auto reply = make_response_promise<unit_t>();
  request<void>(store_, timeout_, kvstore::save{m.path})
      .then([reply]() mutable { reply.deliver(unit_t{}); }, [reply](error e) mutable { reply.deliver(std::move(e)); });
}

void server::on_load(load_msg& m) {
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


tensor rounded(const std::vector<float>& values, const std::vector<std::int64_t>& shape, dtype type, device& dev,
               const stream& s) {
  if (!kernels::is_half(type)) return tensor::from_host<float>(std::span<const float>(values), shape, dev, s);
  std::vector<std::uint16_t> bits(values.size());
  kernels::cpu::narrow(type, values.size(), values.data(), bits.data());
  return tensor::from_host_words(bits, shape, type, dev, s);
}

actor_ref spawn_server(actor_system& system, int rank, int world, kvstore_dist::mode mode,
                       std::chrono::nanoseconds timeout, device dev) {
  return system.spawn_with<server>(spawn_options{.name = "kvstore_dist.server"}, rank, world, mode, timeout,
                                   std::move(dev));
}

}  // namespace strata::kvstore_dist::detail

STRATA_NET_DECLARE(strata::kvstore_dist::detail::init_msg, strata::kvstore_dist::detail::push_msg,
                   strata::kvstore_dist::detail::compressed_push_msg,
                   strata::kvstore_dist::detail::pull_msg, strata::kvstore_dist::detail::barrier_msg,
                   strata::tensor);
STRATA_NET_DECLARE(strata::kvstore_dist::detail::sparse_push_msg, strata::kvstore_dist::detail::sparse_pull_msg);
