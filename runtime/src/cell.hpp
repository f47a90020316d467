#pragma once
// The private control block of an actor.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mailbox.hpp"
#include "strata/actor.hpp"
#include "strata/actor_ref.hpp"
#include "strata/error.hpp"

namespace strata::detail {

struct system_impl;
struct group_state;
class cell_runner;

/// Result of one turn of an actor on a thread.
enum class run_result : std::uint8_t {
  idle,        ///< Mailbox empty and marked blocked: the next push schedules the actor again.
  reschedule,  ///< Budget used up with messages left: put the actor back in a run queue.
  done,        ///< Terminated or suspended (waiting for its supervisor): not runnable.
};

struct actor_cell : cell_base {
  // Owning: the system state outlives every handle, so late deliveries after ~actor_system stay
  // valid. Declared first so that it is destroyed last (after the instance and the mailbox).
  std::shared_ptr<system_impl> sys;
  mailbox box;
  std::unique_ptr<actor> instance;
  std::string name;

  // Stop requests from other threads: the flag is checked before every message.
  std::atomic<bool> stop_requested{false};
  // Owned by the running thread.
  bool quit_pending = false;
  bool trap_exit = false;
  bool suspended = false;  // failed, waiting for the supervisor's decision
  // The note for the supervisor (child_failed or child_suspended), sent by the run loop only
  // after this thread has let go of the cell: the supervisor may restart it at once.
  envelope* supervisor_note = nullptr;
  error quit_reason;
  // Messages the instance stashed (owned by the running thread; oldest first), and their bound.
  std::vector<envelope*> stash;
  std::size_t stash_capacity = 0;
  // User messages that arrived while the instance awaited a response (request(...).await):
  // oldest first, owned by the running thread, still counted against a bounded mailbox.
  std::vector<envelope*> deferred;

  // Guarded by `mu`: termination state, watchers and links.
  std::mutex mu;
  bool terminated = false;
  error stop_reason;
  std::vector<actor_ref> watchers;
  std::vector<actor_ref> links;
  bool named = false;                          // registered under a name at least once
  std::vector<std::weak_ptr<group_state>> groups;  // groups this actor is a member of

  // Supervision: the supervisor and how to build a fresh instance.
  actor_ref supervisor;
  std::function<std::unique_ptr<actor>()> factory;

  // A router's hook: takes a user message the behavior has no handler for (ownership passes on
  // true). Only consulted on the unhandled path, so ordinary dispatch pays nothing.
  bool (*forward_unhandled)(actor_cell* self, envelope* e) = nullptr;

  // Placement: null runs on the worker pool; else a dedicated thread or the deterministic scheduler.
  cell_runner* runner = nullptr;
  // spawn_options::handle_remote_inline: a thread that hosts inline runs may run it on delivery.
  bool inline_delivery = false;

  // Bounded mailboxes only.
  std::size_t capacity = 0;
  overflow_policy overflow = overflow_policy::fail;
  std::atomic<std::size_t> queued{0};

  // Intrusive list of live actors (guarded by the registry shard's lock).
  actor_cell* reg_prev = nullptr;
  actor_cell* reg_next = nullptr;
  std::uint32_t name_string = 0;  // interned trace string id, 0 if not interned
};

inline actor_cell* as_cell(cell_base* base) noexcept { return static_cast<actor_cell*>(base); }

/// Runs up to `budget` messages of `cell` on the calling thread.
run_result run_actor(actor_cell* cell, std::size_t budget) noexcept;

/// Terminates `cell` (on the thread that owns it now: its runner, or its supervisor while it is
/// suspended): closes the mailbox, answers queued requests with errors, tells watchers and links.
void terminate_actor(actor_cell* cell, error reason) noexcept;

/// Puts the stashed messages back at the front of the mailbox, in stash order (owner only).
void requeue_stash(actor_cell* cell) noexcept;
/// Puts the messages deferred during an await back at the front of the mailbox, in order.
void requeue_deferred(actor_cell* cell) noexcept;

/// Makes `cell` a fresh instance from its factory and resumes it (the supervisor's restart).
bool restart_actor(actor_cell* cell) noexcept;

/// Binds `instance` to `cell` (before it starts).
void attach_instance(actor_cell* cell, std::unique_ptr<actor> instance) noexcept;
/// Runs the instance's make_behavior(); on an exception fills `failure` and returns false.
bool start_instance(actor_cell* cell, error& failure) noexcept;

/// The first of `required` that the cell's current behavior has no handler for, or null.
const type_meta* missing_handler(actor_cell* cell, const std::vector<const type_meta*>& required) noexcept;

/// Installs `hook` as `self`'s handler of messages its behavior does not handle (pool routers).
void set_forwarder(actor& self, bool (*hook)(actor_cell*, envelope*)) noexcept;
actor_cell* cell_of(actor& self) noexcept;

/// "'name' (id 7)", how error texts name an actor.
std::string describe(const actor_cell* cell);

/// The actor running on this thread, or nullptr.
actor_cell* current_cell() noexcept;

}  // namespace strata::detail
