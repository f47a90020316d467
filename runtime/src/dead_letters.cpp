// Dead letters: messages that could not be delivered or handled, offered to subscribers.

#include <algorithm>
#include <utility>
#include <vector>

#include "cell.hpp"
#include "system_impl.hpp"
#include "strata/actor_system.hpp"

namespace strata {

void detail::system_impl::offer_dead_letter(const envelope& e, const actor_ref& receiver,
                                            const error& reason) noexcept {
  // Runtime-internal kinds are not user messages; an undeliverable dead letter is never offered
  // again (a terminated subscriber must not loop).
  if (e.kind == message_kind::stop || e.kind == message_kind::control || e.kind == message_kind::request_timeout)
    return;
  if (e.type == type_of<dead_letter>()) return;
  try {
    std::vector<actor_ref> subscribers;
    {
      std::lock_guard lock(dead_letter_m);
      subscribers = dead_letter_watchers;
    }
    std::vector<actor_ref> gone;
    for (const auto& s : subscribers) {
      auto* d = new typed_envelope<dead_letter>(dead_letter{e.type ? e.type->name : std::string("?"), e.sender, receiver,
                                                            reason, e.kind == message_kind::user && e.request_id != 0});
      d->msg_id = next_message_id();
      auto sent = deliver(s.cell(), d, this);
      if (!sent && sent.error().code() == errc::target_terminated) gone.push_back(s);
    }
    if (!gone.empty()) {
      std::lock_guard lock(dead_letter_m);
      for (const auto& g : gone) std::erase(dead_letter_watchers, g);
      dead_letter_subscribers.store(dead_letter_watchers.size(), std::memory_order_relaxed);
    }
  } catch (...) {
    // Out of memory: the message is still counted; only the offer is lost.
  }
}

expected<void> actor_system::subscribe_dead_letters(const actor_ref& subscriber) {
  if (!subscriber) return error(errc::invalid_argument, "cannot subscribe an empty actor handle to dead letters");
  std::lock_guard lock(impl_->dead_letter_m);
  auto& w = impl_->dead_letter_watchers;
  if (std::find(w.begin(), w.end(), subscriber) == w.end()) w.push_back(subscriber);
  impl_->dead_letter_subscribers.store(w.size(), std::memory_order_relaxed);
  return {};
}

bool actor_system::unsubscribe_dead_letters(const actor_ref& subscriber) {
  std::lock_guard lock(impl_->dead_letter_m);
  auto& w = impl_->dead_letter_watchers;
  const bool erased = std::erase(w, subscriber) != 0;
  impl_->dead_letter_subscribers.store(w.size(), std::memory_order_relaxed);
  return erased;
}

}  // namespace strata
