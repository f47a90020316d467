#pragma once
// Lock-free multi-producer, single-consumer mailbox with an urgent lane.
//
// Producers push onto one atomic LIFO stack with a CAS (one atomic operation per message).
// The consumer takes the whole stack with one exchange, reverses it (restoring arrival order,
// so each producer's messages stay FIFO) and splits it into an urgent and a normal local queue.
// Two tag values in the head encode the actor's scheduling state, so that exactly one producer
// learns it must schedule the actor:
//   blocked: the consumer found the mailbox empty and went idle; the next push schedules it.
//   closed:  the actor terminated; pushes fail.

#include <atomic>
#include <cstdint>

#include "strata/message.hpp"

namespace strata::detail {

class mailbox {
public:
  enum class push_result : std::uint8_t { queued, queued_and_wake, closed };

  mailbox() noexcept : head_(nullptr) {}

  /// Any thread. `queued_and_wake`: the caller must schedule the actor.
  push_result push(envelope* e) noexcept {
    envelope* old = head_.load(std::memory_order_relaxed);
    for (;;) {
      if (old == closed_tag()) return push_result::closed;
      e->next = old == blocked_tag() ? nullptr : old;
      // acq_rel: the pusher that wakes an idle actor also acquires what its previous turn wrote
      // (the local queues), so the next turn, on any thread, sees it.
      if (head_.compare_exchange_weak(old, e, std::memory_order_acq_rel, std::memory_order_relaxed))
        return old == blocked_tag() ? push_result::queued_and_wake : push_result::queued;
    }
  }

  /// Consumer only: the next message, urgent first; nullptr when the local queues are empty.
  envelope* pop() noexcept {
    if (urgent_head_) return take(urgent_head_, urgent_tail_);
    if (normal_head_) return take(normal_head_, normal_tail_);
    return nullptr;
  }

  /// Consumer only (or the owner of a suspended actor): puts `e` back at the front of its lane,
  /// before everything queued (the stash's re-delivery).
  void push_front_local(envelope* e) noexcept {
    envelope*& head = e->urgent ? urgent_head_ : normal_head_;
    envelope*& tail = e->urgent ? urgent_tail_ : normal_tail_;
    e->next = head;
    head = e;
    if (!tail) tail = e;
  }

  bool has_local() const noexcept { return urgent_head_ || normal_head_; }

  /// Consumer only: moves everything pushed so far into the local queues. True if it got any.
  bool fetch() noexcept {
    envelope* list = head_.exchange(nullptr, std::memory_order_acquire);
    if (list == nullptr) return false;
    absorb(list);
    return true;
  }

  /// Consumer only: marks the mailbox idle if nothing was pushed meanwhile. True when the
  /// consumer must stop now (the next push schedules it again).
  bool try_block() noexcept {
    envelope* expected = nullptr;
    return head_.compare_exchange_strong(expected, blocked_tag(), std::memory_order_acq_rel,
                                         std::memory_order_relaxed);
  }

  /// Marks the mailbox blocked at creation time (before any producer can see it).
  void init_blocked() noexcept { head_.store(blocked_tag(), std::memory_order_relaxed); }

  /// Consumer only (or the owner of a suspended actor): closes the mailbox and calls `fn` on
  /// every message still queued, in order, handing over ownership.
  template <class F>
  void close(F&& fn) noexcept {
    envelope* list = head_.exchange(closed_tag(), std::memory_order_acq_rel);
    if (list != blocked_tag() && list != closed_tag()) absorb(list);
    while (envelope* e = pop()) fn(e);
  }

  bool closed() const noexcept { return head_.load(std::memory_order_acquire) == closed_tag(); }

private:
  static envelope* blocked_tag() noexcept { return reinterpret_cast<envelope*>(std::uintptr_t{1}); }
  static envelope* closed_tag() noexcept { return reinterpret_cast<envelope*>(std::uintptr_t{2}); }
  // Reverses a taken LIFO stack into arrival order and appends it to the local queues.
  void absorb(envelope* list) noexcept {
    envelope* fifo = nullptr;
    while (list) {
      envelope* next = list->next;
      list->next = fifo;
      fifo = list;
      list = next;
    }
    while (fifo) {
      envelope* next = fifo->next;
      fifo->next = nullptr;
      if (fifo->urgent) append(urgent_head_, urgent_tail_, fifo);
      else append(normal_head_, normal_tail_, fifo);
      fifo = next;
    }
  }
  static envelope* take(envelope*& head, envelope*& tail) noexcept {
    envelope* e = head;
    head = e->next;
    if (!head) tail = nullptr;
    e->next = nullptr;
    return e;
  }
  static void append(envelope*& head, envelope*& tail, envelope* e) noexcept {
    if (tail) tail->next = e;
    else head = e;
    tail = e;
  }

  alignas(64) std::atomic<envelope*> head_;
  envelope* urgent_head_ = nullptr;
  envelope* urgent_tail_ = nullptr;
  envelope* normal_head_ = nullptr;
  envelope* normal_tail_ = nullptr;
};

}  // namespace strata::detail
