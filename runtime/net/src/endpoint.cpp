#include "strata/net/endpoint.hpp"

#include <cstdlib>
#include <future>
#include <limits>
#include <string>
#include <utility>

#include "staging.hpp"
#include "state.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/trace.hpp"

namespace strata::net {

using strata::detail::envelope;
using strata::detail::message_kind;
using strata::detail::typed_envelope;

namespace detail {

namespace {
/// Proxy ids live apart from local ids (top bit set) so that handles hash and order sensibly.
std::uint64_t proxy_id(int peer, bool by_name, std::uint64_t key) noexcept {
  return (std::uint64_t{1} << 63) | (std::uint64_t{by_name} << 62) |
         (static_cast<std::uint64_t>(peer & 0xffff) << 46) | (key & ((std::uint64_t{1} << 46) - 1));
}
}  // namespace

void send_error_reply(const actor_ref& requester, std::uint64_t request_id, error err) {
  if (!requester || request_id == 0) return;
  auto* reply = new typed_envelope<error>(std::move(err));
  reply->kind = message_kind::error_response;
  reply->request_id = request_id;
  reply->urgent = true;
  reply->msg_id = strata::detail::next_message_id();
  (void)strata::detail::deliver(requester.cell(), reply);
}

void deliver_down(const actor_ref& to, const actor_ref& source, const error& reason, bool link) {
  envelope* e = link ? static_cast<envelope*>(new typed_envelope<exit_msg>(exit_msg{source, reason}))
                     : new typed_envelope<down_msg>(down_msg{source, reason});
  e->sender = source;
  e->urgent = link;
  e->msg_id = strata::detail::next_message_id();
  (void)strata::detail::deliver(to.cell(), e);
}

// ---- proxies ------------------------------------------------------------------------------------

proxy_cell::proxy_cell(std::shared_ptr<endpoint_state> owner, int peer, bool named, std::uint64_t target_key)
    : ep(std::move(owner)), rank(peer), by_name(named), key(target_key) {
  id = proxy_id(peer, named, target_key);
}

expected<void> proxy_cell::forward(envelope* e) noexcept { return ep->forward(*this, e); }

void proxy_cell::watch(const actor_ref& watcher, bool link) {
  bool was_down = false;
  {
    std::lock_guard lock(mu);
    was_down = down;
    if (!down) (link ? links : watchers).push_back(watcher);
  }
  if (!was_down) {
    std::vector<std::byte> bytes;
    std::vector<tensor> none;
    writer w(bytes, none, ep.get());
    w(frame::watch, by_name, key, watcher.id(), link);
    (void)ep->address_of(watcher);  // export it: the down message comes back addressed to it
    if (ep->push_frame(rank, std::move(bytes))) return;
  }
  error reason;
  {
    std::lock_guard lock(mu);
    reason = down ? down_reason : ep->rank_down_error(rank);
  }
  forget_watcher(watcher, link);
  deliver_down(watcher, actor_ref::from_cell(this), reason, link);
}

void proxy_cell::unwatch(const actor_ref& watcher, bool link) {
  forget_watcher(watcher, link);
  std::vector<std::byte> bytes;
  std::vector<tensor> none;
  writer w(bytes, none, ep.get());
  w(frame::unwatch, by_name, key, watcher.id(), link);
  (void)ep->push_frame(rank, std::move(bytes));
}

void proxy_cell::stop(error reason) {
  std::vector<std::byte> bytes;
  std::vector<tensor> none;
  writer w(bytes, none, ep.get());
  w(frame::stop, by_name, key, reason);
  (void)ep->push_frame(rank, std::move(bytes));
}

void proxy_cell::forget_watcher(const actor_ref& watcher, bool link) {
  std::lock_guard lock(mu);
  auto& list = link ? links : watchers;
  if (auto it = std::find(list.begin(), list.end(), watcher); it != list.end()) list.erase(it);
}

void proxy_cell::go_down(const error& reason) {
  std::vector<actor_ref> w, l;
  {
    std::lock_guard lock(mu);
    if (down) return;
    down = true;
    down_reason = reason;
    w.swap(watchers);
    l.swap(links);
  }
  actor_ref me = actor_ref::from_cell(this);
  for (auto& x : w) deliver_down(x, me, reason, false);
  for (auto& x : l) deliver_down(x, me, reason, true);
}

// ---- sending ------------------------------------------------------------------------------------

void endpoint_state::size_tables() {
  goodbye_sent.assign(static_cast<std::size_t>(size), 0);
  peer_gone.reset(new std::atomic<bool>[static_cast<std::size_t>(size)]);
  for (int i = 0; i < size; ++i) peer_gone[static_cast<std::size_t>(i)].store(false);
  next_tag.reset(new std::atomic<std::uint64_t>[static_cast<std::size_t>(size)]);
  for (int i = 0; i < size; ++i) next_tag[static_cast<std::size_t>(i)].store(0);
}

error endpoint_state::rank_down_error(int peer) const {
  return error(errc::rank_down, "rank " + std::to_string(peer) + " has left the job (or this rank is leaving it)");
}

int endpoint_state::allocate_tags(int dst, std::size_t n) {
  if (n == 0) return 0;
  // Tags 1..tag_ub; each frame's chunks take consecutive tags (wrapping is harmless long before
  // 2^31 chunks are in flight between one pair of ranks).
  std::uint64_t base = next_tag[static_cast<std::size_t>(dst)].fetch_add(n, std::memory_order_relaxed);
  return static_cast<int>(1 + base % static_cast<std::uint64_t>(tag_ub - 1));
}

bool endpoint_state::push_frame(int dst, std::vector<std::byte> bytes) {
  std::lock_guard lock(out_mu);
  if (goodbye_sent[static_cast<std::size_t>(dst)]) return false;
  // On the communication thread, with nothing queued: every frame pushed before this one is
  // posted already (the thread posts its batch before it handles frames), so FIFO holds.
  if (direct_path* path = direct_here; path != nullptr && path->owner == this && outbox.empty()) {
    path->post(*path, dst, std::move(bytes));
    frames_posted_directly.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  outgoing o;
  o.dst = dst;
  o.frame_bytes = std::move(bytes);
  outbox.push_back(std::move(o));
  wake_locked();
  return true;
}

void endpoint_state::push_chunks(int dst, const outgoing_tensor& t, int first_tag, std::exception_ptr failed) {
  std::size_t n = chunk_count(t.bytes);
  // A failed tensor's chunks are shorter than announced (every chunk holds at least one byte, so
  // at most size - 1 bytes): the receiver tells them from data by their length. The first
  // carries the error's text, the others nothing; the data itself is not sent.
  std::shared_ptr<std::string> text;
  if (failed) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    text = std::make_shared<std::string>(std::move(what));
    text->resize(std::min(text->size(), std::min(chunk_bytes, t.bytes) - 1));
  }
  // Bytes of a big tensor are about to flow: say so first (same tag 0 as the message frame that
  // announced them, so it arrives after it), and the receiver polls without sleeping meanwhile.
  if (!text && t.bytes >= flowing_bytes) {
    std::vector<std::byte> flowing;
    std::vector<tensor> none;
    writer w(flowing, none, this);
    w(frame::flowing, static_cast<std::int32_t>(first_tag), static_cast<std::uint32_t>(n));
    (void)push_frame(dst, std::move(flowing));  // dropped once this rank said goodbye to `dst`
  }
  std::lock_guard lock(out_mu);
  for (std::size_t i = 0; i < n; ++i) {
    outgoing o;
    o.dst = dst;
    if (text) {
      o.staged = std::shared_ptr<std::byte>(text, reinterpret_cast<std::byte*>(text->data()));
      o.data = o.staged.get();
      o.size = i == 0 ? text->size() : 0;
    } else {
      o.hold = t.hold;
      o.staged = t.staged;
      o.data = t.data + i * chunk_bytes;
      o.size = std::min(chunk_bytes, t.bytes - i * chunk_bytes);
    }
    o.tag = tag_after(first_tag, i);
    outbox.push_back(std::move(o));
  }
  chunks_owed.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  wake_locked();
}

stream endpoint_state::staging_stream(const device& dev) {
  std::lock_guard lock(mu);
  for (auto& [d, s] : staging_streams)
    if (d == dev) return s;
  device d = dev;
  stream s = d.create_stream();
  staging_streams.emplace_back(std::move(d), s);
  return s;
}

std::vector<outgoing_tensor> endpoint_state::prepare_sends(const std::vector<tensor>& tensors,
                                                           const std::vector<tensor_bytes>& ranges) {
  std::vector<outgoing_tensor> out;
  out.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const tensor& t = tensors[i];
    const std::size_t offset = ranges[i].offset;  // all of it, but for a tensor_slice
    outgoing_tensor o;
    o.bytes = ranges[i].size;
    if (o.bytes == 0) {
      out.push_back(std::move(o));
      continue;
    }
#if STRATA_HAS_CUDA
    if (t.storage().kind() == device_kind::cuda) {
      // MPI cannot read GPU memory here: copy the bytes, once the tensor is ready, on a stream of
      // its own device into pinned host memory, and send them from there.
      const device dev = t.get_device();
      o.staged = take_pinned(dev, t.bytes());  // the whole tensor is staged, the range sent
      o.data = o.staged.get() + offset;
      stream s = staging_stream(dev);
      enqueue_to_host(s, o.staged.get(), t);
      o.ready = s.record();
      out.push_back(std::move(o));
      continue;
    }
#endif
    o.data = static_cast<const std::byte*>(t.raw_data()) + offset;  // a cpu tensor leaves from its own buffer
    o.hold = t;
    o.ready = t.ready_event();
    out.push_back(std::move(o));
  }
  return out;
}

expected<void> endpoint_state::forward(proxy_cell& to, envelope* e) noexcept {
  auto refuse = [&](error err) -> expected<void> {
    refused.fetch_add(1, std::memory_order_relaxed);
    strata::detail::reject(e, err);
    return err;
  };
  if (peer_gone[static_cast<std::size_t>(to.rank)].load(std::memory_order_acquire))
    return refuse(rank_down_error(to.rank));
  const codec* c = find_codec(e->type);
  if (c == nullptr)
    return refuse(error(errc::invalid_argument,
                        "message type '" + (e->type ? e->type->name : std::string("?")) +
                            "' cannot be sent to an actor on rank " + std::to_string(to.rank) +
                            ": it declares no serialization (give it serialize(Archive&, T&) and declare it "
                            "with STRATA_NET_DECLARE or a protocol passed to endpoint::remote/publish)"));
  try {
    std::vector<std::byte> bytes;
    bytes.reserve(256);  // a message frame's header is about 60 bytes: small payloads fit without growing
    std::vector<tensor> tensors;
    writer w(bytes, tensors, this);
    w(frame::message, e->kind, e->urgent, to.by_name, to.key);
    w.write(e->sender);
    w(e->request_id, e->msg_id, c->wire_id);
    const std::size_t tag_at = bytes.size();
    std::int32_t first_tag = 0;
    std::uint32_t chunks = 0;
    w(first_tag, chunks);
    c->encode(w, e->payload());
    std::size_t n = 0;
    const auto& ranges = w.tensor_ranges();
    for (const auto& r : ranges) n += chunk_count(r.size);
    std::vector<outgoing_tensor> sends;
    try {
      sends = prepare_sends(tensors, ranges);
    } catch (const std::exception& ex) {
      throw error_exception(error(errc::runtime_failure, "a tensor for rank " + std::to_string(to.rank) +
                                                             " could not be staged in host memory: " + ex.what()));
    }
    first_tag = allocate_tags(to.rank, n);
    chunks = static_cast<std::uint32_t>(n);
    std::memcpy(bytes.data() + tag_at, &first_tag, sizeof first_tag);
    std::memcpy(bytes.data() + tag_at + sizeof first_tag, &chunks, sizeof chunks);
    const bool request = e->kind == message_kind::user && e->request_id != 0 && e->sender;
    if (request) {
      std::lock_guard lock(mu);
      in_flight.emplace(std::make_tuple(to.rank, e->sender.id(), e->request_id), e->sender);
    }
    chunks_owed.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    // Stamped before the push: the receiving rank may handle the message before this thread
    // records anything.
    const std::uint64_t sent_at = trace::stamp();
    if (!push_frame(to.rank, std::move(bytes))) {
      chunks_owed.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_relaxed);
      // A staging copy may be in flight: its pinned memory stays owned until the copy is done.
      for (auto& t : sends)
        if (t.staged) t.ready.then([staged = t.staged](std::exception_ptr) {});
      if (request) {
        std::lock_guard lock(mu);
        in_flight.erase(std::make_tuple(to.rank, e->sender.id(), e->request_id));
      }
      return refuse(rank_down_error(to.rank));
    }
    frames_sent.fetch_add(1, std::memory_order_relaxed);
    trace::emit_stamped(sent_at, trace::event_kind::remote_send, e->sender.id(), to.id, e->msg_id,
                        e->type ? e->type->id : 0, static_cast<std::uint32_t>(to.rank));
    int tag = first_tag;
    auto self = shared_from_this();
    for (auto& t : sends) {
      const std::size_t k = chunk_count(t.bytes);
      if (k == 0) continue;
      tensor_bytes_sent.fetch_add(t.bytes, std::memory_order_relaxed);
      // The data leaves once the producer's work (and, for cuda, the staging copy) is done.
      event ready = t.ready;
      ready.then([self, dst = to.rank, t = std::move(t), tag](std::exception_ptr failed) {
        self->push_chunks(dst, t, tag, failed);
      });
      tag = tag_after(tag, k);
    }
  } catch (const error_exception& ex) {
    return refuse(ex.error());
  } catch (const std::exception& ex) {
    return refuse(error(errc::invalid_argument, std::string("a message for rank ") + std::to_string(to.rank) +
                                                    " could not be serialized: " + ex.what()));
  }
  delete e;
  return {};
}

// ---- addresses ----------------------------------------------------------------------------------

std::tuple<int, bool, std::uint64_t> endpoint_state::address_of(const actor_ref& ref) {
  if (!ref) return {-1, false, 0};
  if (ref.cell()->remote) {
    auto* p = static_cast<proxy_cell*>(ref.cell());
    return {p->rank, p->by_name, p->key};
  }
  std::lock_guard lock(mu);
  exported.try_emplace(ref.id(), ref);
  return {rank, false, ref.id()};
}

actor_ref endpoint_state::proxy_locked(int peer, bool by_name, std::uint64_t key) {
  auto k = std::make_tuple(peer, by_name, key);
  if (auto it = proxies.find(k); it != proxies.end()) return it->second;
  auto* cell = new proxy_cell(shared_from_this(), peer, by_name, key);
  actor_ref ref = actor_ref::adopt(cell);
  if (peer_gone[static_cast<std::size_t>(peer)]) cell->go_down(rank_down_error(peer));
  proxies.emplace(k, ref);
  return ref;
}

actor_ref endpoint_state::import(int from_rank, bool by_name, std::uint64_t key) {
  std::lock_guard lock(mu);
  if (from_rank == rank) {
    auto& table = by_name ? names : exported;
    auto it = table.find(key);
    return it == table.end() ? actor_ref{} : it->second;
  }
  if (from_rank >= size) return {};
  return proxy_locked(from_rank, by_name, key);
}

expected<void> endpoint_state::publish(const actor_ref& target, const std::string& name) {
  if (!target || target.cell()->remote)
    return error(errc::invalid_argument, "endpoint::publish needs a handle to a local actor (name '" + name + "')");
  const std::uint64_t key = name_key(name);
  {
    std::lock_guard lock(mu);
    if (!names.emplace(key, target).second)
      return error(errc::invalid_argument, "the name '" + name + "' is published already on rank " + std::to_string(rank));
    exported.try_emplace(target.id(), target);
    if (parked.contains(key)) handing_over[target.id()] = key;
  }
  // Frames that waited for the name run here, in the order they came. Their entry in `parked`
  // stays until it is empty: the communication thread queues the frames that arrive meanwhile
  // behind them (with_target) rather than delivering them first.
  for (;;) {
    std::vector<parked_frame> waiting;
    {
      std::lock_guard lock(mu);
      auto it = parked.find(key);
      if (it == parked.end() || it->second.empty()) {
        if (it != parked.end()) parked.erase(it);
        handing_over.erase(target.id());
        break;
      }
      waiting.swap(it->second);
    }
    for (auto& p : waiting) {
      bool first = false;
      {
        std::lock_guard lock(mu);
        first = resolved_sent.emplace(p.src, key).second;
      }
      if (first) {
        std::vector<std::byte> bytes;
        std::vector<tensor> none;
        writer w(bytes, none, this);
        w(frame::resolved, key, target.id());
        (void)push_frame(p.src, std::move(bytes));
      }
      p.run(target);
    }
  }
  return {};
}

std::atomic<bool> mpi_started_by_endpoint{false};

}  // namespace detail

// ---- endpoint -----------------------------------------------------------------------------------

namespace {
std::atomic<bool> endpoint_alive{false};

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return true;
  return false;
}

expected<int> env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1'000'000)
    return error(errc::invalid_argument, std::string(name) + "='" + v + "' is not a number of microseconds in [0, 1000000]");
  return static_cast<int>(x);
}

/// The STRATA_NET_* settings of the environment (docs/distributed.md, "Environment variables").
struct environment_settings {
  int spin_us = 200;
  int hot_us = 20;
  int max_sleep_us = 1000;
  bool bells = true;
};

expected<environment_settings> read_environment() {
  environment_settings e;
  for (auto [name, to] : {std::pair{"STRATA_NET_SPIN_US", &e.spin_us}, std::pair{"STRATA_NET_HOT_US", &e.hot_us},
                          std::pair{"STRATA_NET_MAX_SLEEP_US", &e.max_sleep_us}}) {
    auto x = env_int(name, *to);
    if (!x) return x.error();
    *to = *x;
  }
  if (const char* v = std::getenv("STRATA_NET_BELLS"); v != nullptr && *v != '\0') {
    const std::string b = v;
    if (b != "on" && b != "off") return error(errc::invalid_argument, "STRATA_NET_BELLS='" + b + "' is neither on nor off");
    e.bells = b == "on";
  }
  return e;
}
}  // namespace

expected<void> check_environment() {
  if (auto e = read_environment(); !e) return e.error();
  return {};
}

endpoint::endpoint(actor_system& sys, endpoint_config config) : state_(std::make_shared<detail::endpoint_state>()) {
  if (endpoint_alive.exchange(true))
    throw error_exception(error(errc::runtime_failure, "a strata::net::endpoint exists already in this process"));
  auto& s = *state_;
  s.sys = &sys;
  s.config = std::move(config);
  try {
    if (s.config.receive_device)
      if (auto path = detail::receive_staging(s.config.receive_device.kind(), s.config.receive_device.name()); !path)
        throw error_exception(path.error());
    auto env = read_environment();
    if (!env) throw error_exception(env.error());
    s.spin_us = env->spin_us;
    s.hot_us = env->hot_us;
    s.max_sleep_us = env->max_sleep_us;
    s.bells_wanted = env->bells;
    (void)declare<unit_t, error, down_msg, exit_msg, bool, std::int32_t, std::int64_t, std::uint32_t, std::uint64_t,
                  float, double, std::string, tensor, std::vector<float>, std::vector<std::int64_t>>();
    if (launched_by_mpi()) {
      s.mpi = true;
      auto started = std::make_shared<std::promise<expected<void>>>();
      auto ready = started->get_future();
      s.comm = std::thread([&s, started] {
        detail::run_comm(s, [started](expected<void> r) { started->set_value(std::move(r)); });
      });
      auto r = ready.get();
      if (!r) {
        s.comm.join();
        throw error_exception(r.error());
      }
    } else {
      s.size_tables();
    }
  } catch (...) {
    endpoint_alive.store(false);
    throw;
  }
}

endpoint::~endpoint() {
  shutdown();
  endpoint_alive.store(false);
}

int endpoint::rank() const noexcept { return state_->rank; }
int endpoint::size() const noexcept { return state_->size; }

expected<void> endpoint::publish(const actor_ref& target, const std::string& name) {
  return state_->publish(target, name);
}

expected<actor_ref> endpoint::remote(int rank, std::string_view name) {
  auto& s = *state_;
  if (rank < 0 || rank >= s.size)
    return error(errc::invalid_argument, "rank " + std::to_string(rank) + " does not exist (the job has " +
                                             std::to_string(s.size) + " rank" + (s.size == 1 ? ")" : "s)"));
  const std::uint64_t key = detail::name_key(name);
  if (rank == s.rank) {
    std::lock_guard lock(s.mu);
    if (auto it = s.names.find(key); it != s.names.end()) return it->second;
    return error(errc::invalid_argument, "no actor is published as '" + std::string(name) + "' on this rank (" +
                                             std::to_string(rank) + ")");
  }
  std::lock_guard lock(s.mu);
  return s.proxy_locked(rank, true, key);
}

void endpoint::shutdown() {
  auto& s = *state_;
  {
    std::lock_guard guard(s.shutdown_mu);
    if (s.shut_down) return;
    s.shut_down = true;
  }
  if (s.mpi) {
    {
      std::lock_guard lock(s.out_mu);
      for (int peer = 0; peer < s.size; ++peer) {
        if (peer == s.rank) continue;
        detail::outgoing o;
        o.dst = peer;
        o.frame_bytes.push_back(static_cast<std::byte>(detail::frame::goodbye));
        s.outbox.push_back(std::move(o));
        s.goodbye_sent[static_cast<std::size_t>(peer)] = 1;
      }
      s.leaving = true;
      s.wake_locked();
    }
    s.comm.join();
  }
  // Break the cycle proxies -> state -> proxies; frames for names never published are dropped
  // (their requesters' timeouts answer them).
  for (int peer = 0; peer < s.size; ++peer)
    if (peer != s.rank) s.peer_left(peer);  // local watchers of remote actors get down_msg
  std::unordered_map<std::uint64_t, std::vector<detail::endpoint_state::parked_frame>> parked;
  std::map<std::tuple<int, bool, std::uint64_t>, actor_ref> proxies;
  std::vector<std::pair<device, stream>> staging;
  {
    std::lock_guard lock(s.mu);
    parked.swap(s.parked);
    s.handing_over.clear();
    proxies.swap(s.proxies);
    s.exported.clear();
    s.names.clear();
    staging.swap(s.staging_streams);  // dropped here, on the caller's thread (not CUDA's)
  }
}

std::future<expected<void>> endpoint::allreduce_sum(std::span<float> values) { return allreduce_sum(values, rank_group{}); }

std::future<expected<void>> endpoint::allreduce_sum(std::span<float> values, const rank_group& group) {
  auto& s = *state_;
  auto done = std::make_shared<std::promise<expected<void>>>();
  auto future = done->get_future();
  if (!s.mpi || s.size == 1 || (group.id >= 0 && group.size == 1)) {
    done->set_value({});
    return future;
  }
  if (group.id >= s.groups_made.load()) {
    done->set_value(error(errc::invalid_argument, "allreduce_sum: group " + std::to_string(group.id) +
                                                      " was not made by this endpoint's split."));
    return future;
  }
  if (values.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    done->set_value(error(errc::invalid_argument, "allreduce_sum: " + std::to_string(values.size()) +
                                                      " values exceed MPI's int count; split them."));
    return future;
  }
  std::lock_guard lock(s.out_mu);
  if (s.leaving) {
    done->set_value(error(errc::rank_down, "allreduce_sum: rank " + std::to_string(s.rank) + " has left the job"));
    return future;
  }
  s.collectives.push_back(detail::endpoint_state::collective{values.data(), values.size(), std::move(done), group.id});
  s.wake_locked();
  return future;
}

expected<rank_group> endpoint::split(int color) {
  auto& s = *state_;
  if (color < 0)
    return error(errc::invalid_argument, "split: color " + std::to_string(color) + " is negative; expected 0 or more.");
  if (!s.mpi || s.size == 1) return rank_group{.id = -1, .rank = 0, .size = 1, .members = {s.rank}};
  auto made = std::make_shared<std::promise<expected<rank_group>>>();
  auto future = made->get_future();
  {
    std::lock_guard lock(s.out_mu);
    if (s.leaving) return error(errc::rank_down, "split: rank " + std::to_string(s.rank) + " has left the job");
    s.collectives.push_back(detail::endpoint_state::collective{.color = color, .made = std::move(made)});
    s.wake_locked();
  }
  return future.get();
}

endpoint_stats endpoint::stats() const {
  auto& s = *state_;
  return endpoint_stats{s.frames_sent.load(),           s.frames_received.load(), s.tensor_bytes_sent.load(),
                        s.tensor_bytes_received.load(), s.refused.load(),         s.flowing_frames.load(),
                        static_cast<std::uint64_t>(s.flowing_receives.load()), s.peers_with_bells.load(),
                        s.woken_by_peers.load(), s.frames_posted_directly.load()};
}

}  // namespace strata::net
