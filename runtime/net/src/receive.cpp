// What the communication thread does with the frames other ranks send.

#include <string>

#include "staging.hpp"
#include "state.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/extension/transport.hpp"
#include "strata/trace.hpp"

namespace strata::net::detail {

using strata::detail::envelope;
using strata::detail::message_kind;

namespace {
/// Owns an envelope until it is delivered (frames parked for a name not yet published).
struct envelope_owner {
  envelope* e = nullptr;
  explicit envelope_owner(envelope* env) noexcept : e(env) {}
  envelope_owner(const envelope_owner&) = delete;
  envelope_owner& operator=(const envelope_owner&) = delete;
  ~envelope_owner() { delete e; }
};
}  // namespace

template <class F>
void endpoint_state::with_target(int src, bool by_name, std::uint64_t key, F fn) {
  actor_ref target;
  bool first = false;
  {
    std::lock_guard lock(mu);
    if (!by_name) {
      if (auto h = handing_over.find(key); h != handing_over.end()) {
        // An actor whose name publish() is handing frames over to: a sender that learned its id
        // (the `resolved` frame) sends by id, and those frames wait behind the ones by name.
        parked[h->second].push_back(parked_frame{src, std::function<void(const actor_ref&)>(std::move(fn))});
        return;
      }
      if (auto it = exported.find(key); it != exported.end()) target = it->second;
    } else if (auto it = names.find(key); it != names.end() && !parked.contains(key)) {
      target = it->second;
      first = resolved_sent.emplace(src, key).second;
    } else {
      // Not published, or published and publish() still hands the waiting frames over: this
      // one waits behind them (one sender's order).
      parked[key].push_back(parked_frame{src, std::function<void(const actor_ref&)>(std::move(fn))});
      return;
    }
  }
  if (first) {  // before anything the actor sends back, so its replies name the same handle
    std::vector<std::byte> bytes;
    std::vector<tensor> none;
    writer w(bytes, none, this);
    w(frame::resolved, key, target.id());
    (void)push_frame(src, std::move(bytes));
  }
  fn(target);
}

tensor endpoint_state::receive_tensor(int src, std::vector<std::int64_t> shape, dtype type) {
  if (!recv_device) {
    recv_device = config.receive_device ? config.receive_device : make_devices("cpu:1").front();
    recv_stream = recv_device.create_stream();
  }
  std::size_t numel = 1;
  for (auto d : shape) numel *= static_cast<std::size_t>(d);
  const std::size_t bytes = numel * size_of(type);
  buffer storage = recv_device.allocate(bytes, recv_stream);
  const std::size_t n = chunk_count(bytes);
  if (n == 0) return tensor(std::move(shape), type, std::move(storage));
  const strata::detail::manual_event arrived;  // completes when every chunk has landed
  tensor t(std::move(shape), type, storage, arrived.ready());
  auto whole = std::make_shared<landing>();
  whole->chunks_left = static_cast<int>(n);
  auto* base = static_cast<std::byte*>(storage.data());
#if STRATA_HAS_CUDA
  if (recv_device.kind() == device_kind::cuda) {
    // The chunks land in pinned host memory; then one copy on the receive stream takes them to
    // the GPU, and the tensor is ready when that copy is done.
    auto pinned = take_pinned(recv_device, bytes);
    base = pinned.get();
    whole->done = [t, pinned, arrived, s = recv_stream](std::exception_ptr failed) {
      if (failed) return arrived.complete(failed);
      try {
        enqueue_from_host(s, t, pinned.get());
        stream(s).on_complete([arrived, pinned](std::exception_ptr e) { arrived.complete(e); });
      } catch (...) {
        arrived.complete(std::current_exception());
      }
    };
  }
#endif
  if (!whole->done) whole->done = [t, arrived](std::exception_ptr failed) { arrived.complete(failed); };
  for (std::size_t i = 0; i < n; ++i) {
    incoming_chunk c;
    c.data = base + i * chunk_bytes;
    c.size = std::min(chunk_bytes, bytes - i * chunk_bytes);
    c.src = src;
    c.tag = decode_tag;
    decode_tag = tag_after(decode_tag, 1);
    c.whole = whole;
    receives.push_back(std::move(c));
  }
  tensor_bytes_received.fetch_add(bytes, std::memory_order_relaxed);
  return t;
}

void endpoint_state::handle_frame(int src, const std::byte* data, std::size_t n) {
  frames_received.fetch_add(1, std::memory_order_relaxed);
  reader r(data, n, this, src);
  frame kind{};
  r.read(kind);
  bool by_name = false;
  std::uint64_t key = 0;
  switch (kind) {
    case frame::message: {
      message_kind mk{};
      bool urgent = false;
      actor_ref sender;
      std::uint64_t request_id = 0, remote_msg = 0, wire = 0;
      std::int32_t first_tag = 0;
      std::uint32_t chunks = 0;
      r(mk, urgent, by_name, key, sender, request_id, remote_msg, wire, first_tag, chunks);
      decode_tag = first_tag;
      const codec* c = find_codec(wire);
      envelope* e = nullptr;
      if (c == nullptr) {
        send_error_reply(sender, mk == message_kind::user ? request_id : 0,
                         error(errc::invalid_argument, "rank " + std::to_string(rank) +
                                                           " does not know the message type (wire id " +
                                                           std::to_string(wire) + "): declare it on every rank"));
        return;
      }
      try {
        e = c->decode(r);
      } catch (const error_exception& ex) {
        send_error_reply(sender, mk == message_kind::user ? request_id : 0, ex.error());
        return;
      }
      e->kind = mk;
      e->urgent = urgent;
      e->request_id = request_id;
      e->sender = sender;
      e->msg_id = strata::detail::next_message_id();
      if (mk == message_kind::response || mk == message_kind::error_response) {
        std::lock_guard lock(mu);
        in_flight.erase(std::make_tuple(src, key, request_id));
      }
      actor_ref notifier;  // a down/exit from a remote actor: its proxy forgets the watcher
      bool link = false;
      if (e->type == type_of<down_msg>()) notifier = static_cast<down_msg*>(e->payload())->source;
      if (e->type == type_of<exit_msg>()) {
        notifier = static_cast<exit_msg*>(e->payload())->source;
        link = true;
      }
      auto owner = std::make_shared<envelope_owner>(e);
      const int me = rank;
      const bool carries_data = chunks != 0;
      with_target(src, by_name, key, [owner, notifier, link, me, key, src, remote_msg, carries_data](const actor_ref& target) {
        envelope* env = std::exchange(owner->e, nullptr);
        // Links this rank's id of the message to the sender's (strata-trace merge joins them).
        if (target)
          trace::emit(trace::event_kind::remote_recv, target.id(), remote_msg, env->msg_id, env->type ? env->type->id : 0,
                      static_cast<std::uint32_t>(src));
        if (!target) {
          strata::detail::reject(env, error(errc::target_terminated, "rank " + std::to_string(me) +
                                                                        " has no actor with id " + std::to_string(key)));
          return;
        }
        if (notifier && notifier.cell()->remote) static_cast<proxy_cell*>(notifier.cell())->forget_watcher(target, link);
        // An inline handler must not wait for this message's tensors: their receives are
        // posted only after this frame (and the thread must not block on them meanwhile).
        const bool hosting = carries_data ? strata::detail::host_inline_runs(false) : false;
        (void)strata::detail::deliver(target.cell(), env);
        if (carries_data) strata::detail::host_inline_runs(hosting);
      });
      return;
    }
    case frame::watch:
    case frame::unwatch: {
      std::uint64_t watcher_id = 0;
      bool link = false;
      r(by_name, key, watcher_id, link);
      actor_ref watcher = import(src, false, watcher_id);
      with_target(src, by_name, key, [watcher, link, kind](const actor_ref& target) {
        if (kind == frame::unwatch) {
          if (target) strata::detail::remove_link(target.cell(), watcher);
        } else if (target) {
          strata::detail::add_watcher(target.cell(), watcher, link);
        } else {
          deliver_down(watcher, target, error(errc::target_terminated, "the monitored actor is unknown"), link);
        }
      });
      return;
    }
    case frame::stop: {
      error reason;
      r(by_name, key, reason);
      actor_system* system = sys;
      with_target(src, by_name, key, [system, reason](const actor_ref& target) { system->stop(target, reason); });
      return;
    }
    case frame::resolved: {
      std::uint64_t id = 0;
      r(key, id);
      std::lock_guard lock(mu);
      auto named = proxies.find(std::make_tuple(src, true, key));
      if (named != proxies.end()) proxies.try_emplace(std::make_tuple(src, false, id), named->second);
      return;
    }
    case frame::goodbye:
      peer_left(src);
      return;
    case frame::heartbeat:  // the link was idle: it says only that its sender lives (comm_loop.cpp)
      return;
    case frame::large:  // the communication thread takes these apart before they get here
      throw error_exception(error(errc::invalid_argument, "rank " + std::to_string(src) +
                                                              " sent a large frame inside a large frame"));
    case frame::flowing: {
      std::int32_t first_tag = 0;
      std::uint32_t chunks = 0;
      r(first_tag, chunks);
      flowing_frames.fetch_add(1, std::memory_order_relaxed);
      for (std::uint32_t i = 0; i < chunks; ++i) {
        auto it = data_receives.find({src, tag_after(first_tag, i)});
        if (it == data_receives.end() || it->second) continue;  // already complete (or named twice)
        it->second = true;
        ++flowing_receives;
      }
      return;
    }
  }
  throw error_exception(error(errc::invalid_argument, "rank " + std::to_string(src) + " sent an unknown frame"));
}

void endpoint_state::peer_left(int peer) {
  std::vector<actor_ref> gone;
  std::vector<std::pair<actor_ref, std::uint64_t>> requests;
  {
    std::lock_guard lock(mu);
    peer_gone[static_cast<std::size_t>(peer)].store(true, std::memory_order_release);
    for (auto& [k, ref] : proxies)
      if (std::get<0>(k) == peer) gone.push_back(ref);
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      if (std::get<0>(it->first) == peer) {
        requests.emplace_back(it->second, std::get<2>(it->first));
        it = in_flight.erase(it);
      } else {
        ++it;
      }
    }
  }
  const error reason = rank_down_error(peer);
  for (auto& ref : gone) static_cast<proxy_cell*>(ref.cell())->go_down(reason);
  for (auto& [requester, id] : requests) send_error_reply(requester, id, reason);
}

}  // namespace strata::net::detail
