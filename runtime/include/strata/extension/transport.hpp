#pragma once
/// \file
/// The transport extension: what a transport (strata::net, strata::nccl) may use of the actor
/// core and the device layer, and nothing else. Application code never includes it; no other
/// public header does. The names stay in `strata::detail`: they change with the runtime (a
/// transport is built with the runtime it plugs into) and they work on the core's own `detail`
/// types (envelope, cell_base) that the public templates already need.
///
/// What a transport gets here, and the thread rules of each:
/// - **Remote cell** (`remote_cell`): the control block behind a handle to an actor in another
///   process. The core hands sends, monitors, links and stops aimed at such a handle to it.
/// - **Delivery** (`deliver`, declared in strata/actor.hpp because `actor::send` needs it):
///   puts an envelope into a local actor's mailbox; any thread, never blocks, takes ownership.
///   `host_inline_runs` and `inline_runs_here` let a communication thread run a waiting actor's
///   turn at once instead of scheduling it.
/// - **Rejection** (`reject`): answers an envelope the transport cannot deliver.
/// - **Watchers** (`add_watcher`, `remove_link`): monitors and links that a peer process asks for
///   on a local actor.
/// - **Manually completed events** (`manual_event`): a device event that completes when the
///   transport says so (a tensor's bytes have arrived), so that the device-event rules hold
///   across processes; and pinned host memory for staging CUDA tensors (`pinned_host_memory`).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>

#include "strata/actor.hpp"
#include "strata/actor_ref.hpp"
#include "strata/device/device.hpp"
#include "strata/device/event.hpp"
#include "strata/error.hpp"
#include "strata/message.hpp"

namespace strata::detail {

// ---- remote cells -------------------------------------------------------------------------------

/// The control block behind a handle to an actor in another process, implemented by a transport.
/// `deliver`, `actor::monitor`, `actor::link_to` (and their undoing) and `actor_system::stop`
/// hand remote targets to these members instead of a local mailbox. A transport creates one with
/// `new` and hands out `actor_ref::adopt(cell)` (which takes the first reference); the core
/// deletes it through this base when the last handle goes, on whichever thread drops that handle.
///
/// Thread rules: every member may be called from any thread, concurrently (any actor's handler,
/// a thread outside the actors, the transport's own thread), and must not block on the network.
struct remote_cell : cell_base {
  remote_cell() noexcept { remote = true; }
  remote_cell(const remote_cell&) = delete;
  remote_cell& operator=(const remote_cell&) = delete;
  virtual ~remote_cell() = default;
  /// Forwards `e` (ownership taken in every case); a failure bounces a request as `deliver` does
  /// (with `reject`) and returns the error.
  virtual expected<void> forward(envelope* e) noexcept = 0;
  /// `watcher` (local) gets `down_msg` (or, with `link`, `exit_msg`) when the remote actor ends.
  virtual void watch(const actor_ref& watcher, bool link) = 0;
  virtual void unwatch(const actor_ref& watcher, bool link) = 0;
  /// Asks the remote actor to stop with `reason` (`actor_system::stop` on a remote handle).
  virtual void stop(error reason) = 0;
};

// ---- delivery -----------------------------------------------------------------------------------

// `expected<void> deliver(cell_base* target, envelope* e, system_impl* origin = nullptr)` is
// declared in strata/actor.hpp: the envelope goes to `target` (local mailbox, or the remote
// cell's `forward`); on failure it is counted, traced, deleted and a request gets a failed reply.
// Any thread; takes ownership of `e` in every case; never blocks.

/// Whether `deliver` on the calling thread may run an idle actor spawned with
/// `spawn_options::handle_remote_inline` at once, here, instead of scheduling it (a transport's
/// communication thread sets it around the deliveries it may host). Thread-local: affects only
/// the calling thread. Returns the previous value.
bool host_inline_runs(bool allowed) noexcept;
/// How many turns `deliver` has run inline on the calling thread so far (thread-local).
std::uint64_t inline_runs_here() noexcept;

// ---- rejection ----------------------------------------------------------------------------------

/// Answers `e` with `err` if it is a request (the requester gets a failed reply), counts nothing,
/// deletes `e`. For what a remote cell or transport cannot deliver. Any thread; never throws.
void reject(envelope* e, error err) noexcept;

// ---- watchers -----------------------------------------------------------------------------------

/// Adds `watcher` (any handle, local or remote) to the monitors (or, with `link`, the links) of
/// the local actor `target`; if `target` has terminated already, `watcher` gets its down (exit)
/// message at once. Any thread; takes the actor's lock briefly.
void add_watcher(cell_base* target, const actor_ref& watcher, bool link);
/// Removes `watcher` from the links of the local actor `target`. Any thread.
void remove_link(cell_base* target, const actor_ref& watcher);

// ---- manually completed events ------------------------------------------------------------------

class event_point;

/// A cpu-kind event that completes when `complete` is called rather than when stream work ends:
/// a tensor received from another process carries `ready()`, and streams that wait on it wait
/// for the transport. Copies share the one completion.
///
/// Thread rules: `complete` may be called from any thread, once (later calls are ignored);
/// callbacks registered on the event (`stream::on_complete` after a wait, `event::wait`) run or
/// are released on that thread, so it must not hold locks they take.
class manual_event {
 public:
  /// A fresh event, not complete.
  manual_event();
  /// The event to hand out (e.g. as a tensor's ready event).
  const event& ready() const noexcept { return ready_; }
  /// Completes the event; with a `failure`, every stream that waits on it adopts that error.
  void complete(std::exception_ptr failure = nullptr) const;

 private:
  event ready_;
  std::shared_ptr<event_point> point_;
};

/// Page-locked host memory of at least `bytes` from cuda device `on`'s cache, returned to it when
/// the last owner drops the pointer (on any thread; no CUDA call then). For staging a CUDA
/// tensor's bytes through host memory.
/// \throws device_error (invalid_argument) if `on` is not a cuda device or the runtime was built
///   without CUDA; device_error (out_of_memory, backend_failure) if CUDA cannot allocate.
std::shared_ptr<std::byte> pinned_host_memory(const device& on, std::size_t bytes);

}  // namespace strata::detail
