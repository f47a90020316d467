// Handles to actors on other ranks: the proxy control block, and what it delivers locally
// (error replies, down and exit messages).

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "state.hpp"

namespace strata::net::detail {

using strata::detail::envelope;
using strata::detail::message_kind;
using strata::detail::typed_envelope;

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

}  // namespace strata::net::detail
