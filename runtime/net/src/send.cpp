// Sending: a message's frame and its tensors' chunks into the outbox, for the communication
// thread to post (docs/distributed.md, "Wire format").

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "staging.hpp"
#include "state.hpp"
#include "strata/trace.hpp"

namespace strata::net::detail {

using strata::detail::envelope;
using strata::detail::message_kind;

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

}  // namespace strata::net::detail
