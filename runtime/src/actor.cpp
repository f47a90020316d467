#include "strata/actor.hpp"

#include <tbb/scalable_allocator.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>

#include "cell.hpp"
#include "strata/extension/transport.hpp"
#include "supervisor_msgs.hpp"
#include "system_impl.hpp"
#include "strata/trace.hpp"

namespace strata {

using detail::actor_cell;
using detail::describe;
using detail::envelope;
using detail::message_kind;
using trace::event_kind;

// ---- envelopes ----------------------------------------------------------------------------------

// Envelopes come from oneTBB's scalable allocator (per-thread free lists: a message freed on the
// receiver's thread is reused there). Under ThreadSanitizer they come from malloc, which TSan
// intercepts: Debian's tbbmalloc is not instrumented, and every reuse of an envelope's memory on
// another thread would be reported as a race in whatever handler read the payload. So a user's
// TSan build of a program with strata needs no preload and no suppression for it.
namespace {
#if defined(__SANITIZE_THREAD__)
void* envelope_malloc(std::size_t size) noexcept { return std::malloc(size); }
void envelope_free(void* ptr) noexcept { std::free(ptr); }
#else
void* envelope_malloc(std::size_t size) noexcept { return scalable_malloc(size); }
void envelope_free(void* ptr) noexcept { scalable_free(ptr); }
#endif
}  // namespace

void* detail::envelope::operator new(std::size_t size) {
  void* p = envelope_malloc(size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void detail::envelope::operator delete(void* ptr) noexcept { envelope_free(ptr); }

std::uint64_t detail::next_message_id() noexcept {
  static std::atomic<std::uint64_t> next_thread{1};
  thread_local std::uint64_t base = next_thread.fetch_add(1, std::memory_order_relaxed) << 40;
  thread_local std::uint64_t counter = 0;
  return base | ++counter;
}

namespace {

thread_local actor_cell* tls_current = nullptr;
thread_local bool tls_inline_host = false;  // detail::host_inline_runs
thread_local std::uint64_t tls_inline_runs = 0;

/// Answers a request that will not be handled with `err`; deletes `e`.
void bounce(envelope* e, error err) noexcept {
  if (e->kind == message_kind::user && e->request_id != 0 && e->sender) {
    try {
      auto* reply = new detail::typed_envelope<error>(std::move(err));
      reply->kind = message_kind::error_response;
      reply->request_id = e->request_id;
      reply->msg_id = detail::next_message_id();
      reply->urgent = true;
      (void)detail::deliver(e->sender.cell(), reply);
    } catch (...) {
      // Out of memory: the requester's timeout still answers it.
    }
  }
  delete e;
}

}  // namespace

// ---- delivery -----------------------------------------------------------------------------------

void detail::reject(envelope* e, error err) noexcept { bounce(e, std::move(err)); }

expected<void> detail::deliver(cell_base* target, envelope* e, system_impl* origin) noexcept {
  if (target != nullptr && target->remote) return static_cast<remote_cell*>(target)->forward(e);
  const std::uint64_t sender_id = e->sender.id();
  const std::uint64_t msg_id = e->msg_id;
  const std::uint32_t type_id = e->type ? e->type->id : 0;
  if (target == nullptr) {
    error err(errc::invalid_argument, "message sent to an empty actor handle");
    system_impl* counted_in = origin;
    if (counted_in == nullptr && e->sender && !e->sender.cell()->remote) counted_in = as_cell(e->sender.cell())->sys.get();
    if (counted_in == nullptr && tls_current != nullptr) counted_in = tls_current->sys.get();
    if (counted_in != nullptr) {
      counted_in->undeliverable.fetch_add(1, std::memory_order_relaxed);
      if (counted_in->dead_letter_subscribers.load(std::memory_order_relaxed) != 0)
        counted_in->offer_dead_letter(*e, actor_ref{}, err);
    }
    trace::emit(event_kind::drop, 0, sender_id, msg_id, type_id, static_cast<std::uint32_t>(err.code()));
    bounce(e, err);
    return err;
  }
  actor_cell* c = as_cell(target);
  trace::emit(event_kind::send, sender_id, c->id, msg_id, type_id);
  const bool counted = c->capacity != 0 && e->kind == message_kind::user;
  if (counted) {
    std::size_t q = c->queued.fetch_add(1, std::memory_order_relaxed) + 1;
    if (q > c->capacity) {
      c->queued.fetch_sub(1, std::memory_order_relaxed);
      if (c->overflow == overflow_policy::drop) {
        c->sys->dropped.fetch_add(1, std::memory_order_relaxed);
        if (c->sys->dead_letter_subscribers.load(std::memory_order_relaxed) != 0)
          c->sys->offer_dead_letter(*e, actor_ref::from_cell(c),
                                    error(errc::mailbox_full, "the mailbox of actor " + describe(c) + " is full (capacity " +
                                                                  std::to_string(c->capacity) + "); the message was dropped"));
        trace::emit(event_kind::drop, c->id, sender_id, msg_id, type_id, static_cast<std::uint32_t>(errc::mailbox_full));
        delete e;
        return {};
      }
      c->sys->mailbox_full.fetch_add(1, std::memory_order_relaxed);
      error err(errc::mailbox_full, "the mailbox of actor " + describe(c) + " is full (capacity " +
                                        std::to_string(c->capacity) + ")");
      if (c->sys->dead_letter_subscribers.load(std::memory_order_relaxed) != 0)
        c->sys->offer_dead_letter(*e, actor_ref::from_cell(c), err);
      trace::emit(event_kind::drop, c->id, sender_id, msg_id, type_id, static_cast<std::uint32_t>(err.code()));
      bounce(e, err);
      return err;
    }
  }
  // The enqueue is stamped before the push: once the message is in the mailbox, the receiver may
  // handle it (and stamp that) before this thread gets to record anything.
  const std::uint64_t enqueued_at = trace::stamp();
  switch (c->box.push(e)) {
    case mailbox::push_result::queued:
      trace::emit_stamped(enqueued_at, event_kind::enqueue, c->id, sender_id, msg_id, type_id, 0);
      c->sys->note_queued_send(c);
      return {};
    case mailbox::push_result::queued_and_wake:
      trace::emit_stamped(enqueued_at, event_kind::enqueue, c->id, sender_id, msg_id, type_id, 1);
      // This thread now owns the idle actor's next turn: a host of inline runs takes it itself
      // (never nested inside another actor's turn), every other thread hands it to its runner.
      if (c->inline_delivery && tls_inline_host && tls_current == nullptr && c->runner == nullptr) {
        ++tls_inline_runs;
        if (run_actor(c, std::max<std::size_t>(c->sys->config.throughput, 1)) == run_result::reschedule) c->sys->schedule(c);
        return {};
      }
      c->sys->schedule(c);
      return {};
    case mailbox::push_result::closed:
      break;
  }
  if (counted) c->queued.fetch_sub(1, std::memory_order_relaxed);
  c->sys->undeliverable.fetch_add(1, std::memory_order_relaxed);
  trace::emit(event_kind::drop, c->id, sender_id, msg_id, type_id, static_cast<std::uint32_t>(errc::target_terminated));
  error err(errc::target_terminated, "actor " + describe(c) + " has terminated");
  if (c->sys->dead_letter_subscribers.load(std::memory_order_relaxed) != 0)
    c->sys->offer_dead_letter(*e, actor_ref::from_cell(c), err);
  bounce(e, err);
  return err;
}

detail::system_impl* detail::system_of(cell_base* cell) noexcept { return as_cell(cell)->sys.get(); }
actor_system& detail::public_system(system_impl* sys) noexcept { return *sys->pub; }
detail::actor_cell* detail::current_cell() noexcept { return tls_current; }
bool detail::host_inline_runs(bool allowed) noexcept { return std::exchange(tls_inline_host, allowed); }
std::uint64_t detail::inline_runs_here() noexcept { return tls_inline_runs; }

std::string detail::describe(const actor_cell* c) { return "'" + c->name + "' (id " + std::to_string(c->id) + ")"; }

void detail::count_unanswered_result() noexcept {
  if (tls_current != nullptr) tls_current->sys->unanswered_results.fetch_add(1, std::memory_order_relaxed);
}

void detail::destroy_cell(cell_base* cell) noexcept {
  if (cell->remote) delete static_cast<remote_cell*>(cell);
  else delete as_cell(cell);
}

// ---- failure, termination, restart --------------------------------------------------------------

namespace {

void fail_actor(actor_cell* c, error reason) {
  c->sys->failed.fetch_add(1, std::memory_order_relaxed);
  if (c->supervisor && c->supervisor_note == nullptr) {
    // Suspended until the supervisor decides; the run loop sends the note once it has stopped
    // touching the cell and its instance.
    c->suspended = true;
    auto* e = new detail::typed_envelope<detail::child_failed>(
        detail::child_failed{actor_ref::from_cell(c), reason});
    e->urgent = true;
    e->msg_id = detail::next_message_id();
    e->sender = actor_ref::from_cell(c);
    c->supervisor_note = e;
    return;
  }
  if (!c->quit_pending) {
    c->quit_pending = true;
    c->quit_reason = std::move(reason);
  }
}

/// Sends a suspended cell's note to its supervisor. True: the cell now belongs to the supervisor
/// and the calling thread must not touch it again. False: no supervisor took it; a failed actor
/// is then marked to quit, a suspended sibling carries on.
bool hand_to_supervisor(actor_cell* c) noexcept {
  envelope* note = std::exchange(c->supervisor_note, nullptr);
  error reason;
  if (note->type == type_of<detail::child_failed>())
    reason = static_cast<detail::typed_envelope<detail::child_failed>*>(note)->value.reason;
  if (detail::deliver(c->supervisor.cell(), note)) return true;
  c->suspended = false;
  if (reason && !c->quit_pending) {
    c->quit_pending = true;
    c->quit_reason = std::move(reason);
  }
  return false;
}

void handle_link_exit(actor_cell* c, const exit_msg& m) {
  {
    std::lock_guard lock(c->mu);
    std::erase(c->links, m.source);
  }
}

}  // namespace

struct detail::actor_access {
  static void dispatch(actor_cell* c, envelope* e);
  static void cancel_pending(actor& a) noexcept {
    for (auto& [id, entry] : a.pending_) cancel_timer(entry.timer);
  }
  static void attach(actor& a, actor_cell* c) noexcept {
    a.cell_ = c;
    a.sys_ = c->sys.get();
  }
  static void start(actor& a) {
    a.behavior_ = a.make_behavior();
    if (!a.changes_.empty()) a.apply_behavior_changes();  // a become() in make_behavior counts at once
  }
  static actor_cell* cell(actor& a) noexcept { return a.cell_; }
  static const behavior::handler* find(const actor& a, const type_meta* t) noexcept { return a.behavior_.find(t); }
};

void detail::set_forwarder(actor& self, bool (*hook)(actor_cell*, envelope*)) noexcept {
  actor_access::cell(self)->forward_unhandled = hook;
}
detail::actor_cell* detail::cell_of(actor& self) noexcept { return actor_access::cell(self); }

void detail::attach_instance(actor_cell* c, std::unique_ptr<actor> instance) noexcept {
  actor_access::attach(*instance, c);
  c->instance = std::move(instance);
}

bool detail::start_instance(actor_cell* c, error& failure) noexcept {
  actor_cell* outer = tls_current;
  tls_current = c;
  try {
    actor_access::start(*c->instance);
  } catch (const std::exception& ex) {
    failure = error(errc::unhandled_exception, "actor " + describe(c) + " failed to start: " + ex.what());
  } catch (...) {
    failure = error(errc::unhandled_exception, "actor " + describe(c) + " failed to start");
  }
  tls_current = outer;
  return !failure;
}

const type_meta* detail::missing_handler(actor_cell* c, const std::vector<const type_meta*>& required) noexcept {
  for (const type_meta* t : required)
    if (actor_access::find(*c->instance, t) == nullptr) return t;
  return nullptr;
}

void detail::actor_access::dispatch(actor_cell* c, envelope* e) {
  actor& self = *c->instance;
  const std::uint32_t type_id = e->type ? e->type->id : 0;
  switch (e->kind) {
    case message_kind::user: {
      if (!self.awaited_.empty() && e->type != type_of<exit_msg>()) {
        // request(...).await: other messages wait until the awaited responses are in.
        if (c->capacity != 0) c->queued.fetch_add(1, std::memory_order_relaxed);
        c->deferred.push_back(e);
        return;
      }
      if (e->type == type_of<exit_msg>()) {
        auto& m = *static_cast<exit_msg*>(e->payload());
        handle_link_exit(c, m);
        if (!c->trap_exit) {
          if (!m.reason.is_normal() && !c->quit_pending) {
            c->quit_pending = true;
            c->quit_reason = error(errc::linked_exit, "linked actor " + std::to_string(m.source.id()) +
                                                          " exited: " + m.reason.to_string());
            c->sys->failed.fetch_add(1, std::memory_order_relaxed);
          }
          delete e;
          return;
        }
      }
      const behavior::handler* h = self.behavior_.find(e->type);
      if (h == nullptr && c->forward_unhandled != nullptr && c->forward_unhandled(c, e)) return;
      if (h == nullptr) {
        c->sys->unhandled.fetch_add(1, std::memory_order_relaxed);
        trace::emit(event_kind::unhandled, c->id, e->sender.id(), e->msg_id, type_id);
        error err(errc::unhandled_message, "actor " + describe(c) + " has no handler for message type " +
                                               (e->type ? e->type->name : std::string("?")));
        if (c->sys->dead_letter_subscribers.load(std::memory_order_relaxed) != 0)
          c->sys->offer_dead_letter(*e, actor_ref::from_cell(c), err);
        bounce(e, std::move(err));
        return;
      }
      trace::emit(event_kind::handler_begin, c->id, e->sender.id(), e->msg_id, type_id);
      const std::uint64_t msg_id = e->msg_id;
      self.current_ = e;
      bool threw = false;
      try {
        h->invoke(self, *e);
      } catch (const std::exception& ex) {
        threw = true;
        const auto* named = dynamic_cast<const error_exception*>(&ex);
        error reason = named != nullptr && named->error().code() == errc::stash_full
                           ? named->error()
                           : error(errc::unhandled_exception, "actor " + describe(c) + " failed handling " +
                                                                  (e->type ? e->type->name : std::string("?")) + ": " +
                                                                  ex.what());
        if (!self.promise_taken_ && !self.current_stashed_) {
          self.current_ = nullptr;
          bounce(e, reason);
          e = nullptr;
        }
        fail_actor(c, std::move(reason));
      } catch (...) {
        threw = true;
        error reason(errc::unhandled_exception, "actor " + describe(c) + " failed handling " +
                                                    (e->type ? e->type->name : std::string("?")) + ": unknown exception");
        if (!self.promise_taken_ && !self.current_stashed_) {
          self.current_ = nullptr;
          bounce(e, reason);
          e = nullptr;
        }
        fail_actor(c, std::move(reason));
      }
      self.current_ = nullptr;
      self.promise_taken_ = false;
      if (self.current_stashed_) {
        self.current_stashed_ = false;
        e = nullptr;  // the stash owns it now
      }
      trace::emit(event_kind::handler_end, c->id, 0, msg_id, type_id, threw ? 1u : 0u);
      if (!self.changes_.empty()) self.apply_behavior_changes();
      delete e;
      return;
    }
    case message_kind::response:
    case message_kind::error_response:
    case message_kind::request_timeout: {
      trace::emit(event_kind::handler_begin, c->id, e->sender.id(), e->msg_id, type_id);
      try {
        if (e->kind == message_kind::request_timeout) self.handle_timeout(e->request_id);
        else self.handle_response(*e);
      } catch (const std::exception& ex) {
        fail_actor(c, error(errc::unhandled_exception,
                            "actor " + describe(c) + " failed in a response callback: " + ex.what()));
      } catch (...) {
        fail_actor(c, error(errc::unhandled_exception, "actor " + describe(c) + " failed in a response callback"));
      }
      trace::emit(event_kind::handler_end, c->id, 0, e->msg_id, type_id, 0);
      if (!self.changes_.empty()) self.apply_behavior_changes();
      if (self.awaited_.empty() && !c->deferred.empty()) requeue_deferred(c);
      delete e;
      return;
    }
    case message_kind::stop:
      delete e;
      return;
    case message_kind::control:
      if (e->type == type_of<retire_worker>()) {
        if (!c->quit_pending) {
          c->quit_pending = true;
          c->quit_reason = error(errc::normal_exit, "the worker was retired by its pool");
        }
      } else if (e->type == type_of<suspend_for_restart>() && c->supervisor) {
        // An all-for-one supervisor restarts this child with a failed sibling.
        if (c->supervisor_note == nullptr) {
          c->suspended = true;
          auto* note = new typed_envelope<child_suspended>(child_suspended{actor_ref::from_cell(c)});
          note->urgent = true;
          note->msg_id = next_message_id();
          note->sender = actor_ref::from_cell(c);
          c->supervisor_note = note;  // sent by the run loop (hand_to_supervisor)
        }
      }
      delete e;
      return;
  }
  delete e;
}


// ---- the run loop -------------------------------------------------------------------------------

detail::run_result detail::run_actor(actor_cell* c, std::size_t budget) noexcept {
  std::atomic<std::uint64_t>& handled = c->sys->handled;
  actor_cell* outer = tls_current;
  tls_current = c;
  run_result result = run_result::reschedule;
  std::size_t n = 0;
  for (;;) {
    if (c->stop_requested.load(std::memory_order_relaxed)) {
      error reason;
      {
        std::lock_guard lock(c->mu);
        reason = c->stop_reason;
      }
      terminate_actor(c, std::move(reason));
      result = run_result::done;
      break;
    }
    if (n == budget) {
      result = run_result::reschedule;
      break;
    }
    envelope* e = c->box.pop();
    if (e == nullptr) {
      if (c->box.fetch()) continue;
      if (c->box.try_block()) {
        result = run_result::idle;
        break;
      }
      continue;
    }
    ++n;
    if (c->capacity != 0 && e->kind == message_kind::user) c->queued.fetch_sub(1, std::memory_order_relaxed);
    actor_access::dispatch(c, e);
    if (c->quit_pending) {
      delete std::exchange(c->supervisor_note, nullptr);
      c->suspended = false;
      error reason = std::move(c->quit_reason);
      terminate_actor(c, std::move(reason));
      result = run_result::done;
      break;
    }
    if (c->suspended) {
      if (hand_to_supervisor(c)) {
        result = run_result::done;
        break;  // the supervisor may be restarting `c` already: not touched again here
      }
      if (c->quit_pending) {
        error reason = std::move(c->quit_reason);
        terminate_actor(c, std::move(reason));
        result = run_result::done;
        break;
      }
    }
    if ((n & 31) == 0) c->box.fetch();  // let newly arrived urgent messages overtake
  }
  tls_current = outer;
  if (n != 0) handled.fetch_add(n, std::memory_order_relaxed);
  return result;
}

void detail::terminate_actor(actor_cell* c, error reason) noexcept {
  {
    std::lock_guard lock(c->mu);
    if (c->terminated) return;
    c->terminated = true;
    c->stop_reason = reason;
  }
  system_impl* sys = c->sys.get();
  actor_cell* outer = tls_current;
  tls_current = c;
  if (c->instance) {
    try {
      c->instance->on_exit(reason);
    } catch (...) {
      // on_exit must not throw; the actor terminates regardless.
    }
    actor_access::cancel_pending(*c->instance);
  }
  requeue_deferred(c);
  requeue_stash(c);  // stashed (then deferred) messages are discarded with the queued ones, in order
  std::uint64_t discarded = 0;
  const std::string why = "actor " + describe(c) + " terminated before handling the message (" +
                          reason.to_string() + ")";
  c->box.close([&](envelope* e) {
    if (e->kind == message_kind::user) {
      ++discarded;
      if (e->type == type_of<child_failed>()) {
        // A child waiting for this (dead) supervisor's decision: it terminates too.
        auto& m = *static_cast<child_failed*>(e->payload());
        terminate_actor(as_cell(m.child.cell()), m.reason);
      } else if (e->type == type_of<child_added>()) {
        // A child this supervisor had not yet taken on the list its on_exit stops.
        auto& m = *static_cast<child_added*>(e->payload());
        sys->pub->stop(m.child, error(errc::stopped, "its supervisor " + describe(c) + " terminated (" +
                                                         reason.to_string() + ")"));
      } else if (e->type == type_of<child_suspended>()) {
        // A sibling suspended for a restart (all or rest for one) that nobody will now restart.
        auto& m = *static_cast<child_suspended*>(e->payload());
        terminate_actor(as_cell(m.child.cell()),
                        error(errc::stopped, "its supervisor " + describe(c) +
                                                 " terminated while it waited to restart (" + reason.to_string() + ")"));
      }
      trace::emit(event_kind::drop, c->id, e->sender.id(), e->msg_id, e->type ? e->type->id : 0,
                  static_cast<std::uint32_t>(errc::target_terminated));
      error err(errc::target_terminated, why);
      if (sys->dead_letter_subscribers.load(std::memory_order_relaxed) != 0)
        sys->offer_dead_letter(*e, actor_ref::from_cell(c), err);
      bounce(e, std::move(err));
    } else {
      delete e;
    }
  });
  sys->discarded.fetch_add(discarded, std::memory_order_relaxed);

  std::vector<actor_ref> watchers;
  std::vector<actor_ref> links;
  std::vector<std::weak_ptr<group_state>> groups;
  bool named = false;
  {
    std::lock_guard lock(c->mu);
    watchers.swap(c->watchers);
    links.swap(c->links);
    groups.swap(c->groups);
    named = c->named;  // registrations happen under mu before `terminated` was set: all are seen
  }
  if (named) sys->forget_names(c);
  if (!groups.empty()) leave_groups(c, groups);
  actor_ref me = actor_ref::from_cell(c);
  for (auto& w : watchers) {
    auto* e = new typed_envelope<down_msg>(down_msg{me, reason});
    e->sender = me;
    e->msg_id = next_message_id();
    (void)deliver(w.cell(), e);
  }
  for (auto& l : links) {
    auto* e = new typed_envelope<exit_msg>(exit_msg{me, reason});
    e->sender = me;
    e->msg_id = next_message_id();
    e->urgent = true;
    (void)deliver(l.cell(), e);
  }
  std::uint32_t text = trace::enabled() ? trace::intern(reason.message()) : 0;
  trace::emit(event_kind::exit, c->id, 0, text, 0, static_cast<std::uint32_t>(reason.code()));
  c->instance.reset();
  c->supervisor = actor_ref{};
  c->factory = nullptr;
  tls_current = outer;
  sys->terminated.fetch_add(1, std::memory_order_relaxed);
  sys->unregister_cell(c);  // may drop the last reference: `c` is not used after this
}

bool detail::restart_actor(actor_cell* c) noexcept {
  if (!c->factory) return false;
  std::unique_ptr<actor> fresh;
  try {
    fresh = c->factory();
  } catch (...) {
    return false;
  }
  if (c->instance) actor_access::cancel_pending(*c->instance);
  requeue_deferred(c);  // the fresh instance awaits nothing: it handles what the old one deferred,
  requeue_stash(c);     // after what it stashed
  attach_instance(c, std::move(fresh));
  error failure;
  if (!start_instance(c, failure)) return false;
  c->suspended = false;
  c->quit_pending = false;
  c->sys->restarts.fetch_add(1, std::memory_order_relaxed);
  c->sys->schedule(c);  // the suspended actor was never marked blocked: schedule it ourselves
  return true;
}

}  // namespace strata
