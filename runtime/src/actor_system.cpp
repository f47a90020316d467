#include "strata/actor_system.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "cell.hpp"
#include "strata/extension/transport.hpp"
#include "supervisor_msgs.hpp"
#include "system_impl.hpp"
#include "strata/trace.hpp"

namespace strata {

namespace detail {

namespace {
std::size_t resolve_workers(std::size_t requested) {
  if (requested != 0) return requested;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}
}  // namespace

system_impl::system_impl(actor_system* owner, system_config cfg)
    : pub(owner),
      config(std::move(cfg)),
      sched(config.deterministic ? 1 : resolve_workers(config.worker_threads), config.throughput),
      timers(config.deterministic) {
  if (config.deterministic) {
    det = std::make_unique<deterministic_scheduler>(handled);
    config.worker_threads = 0;
  } else {
    config.worker_threads = sched.size();
  }
}

std::chrono::steady_clock::time_point system_impl::now() noexcept {
  if (det) return std::chrono::steady_clock::time_point(timers.now());
  return std::chrono::steady_clock::now();
}

void system_impl::register_cell(actor_cell* cell) {
  retain(cell);  // the registry keeps live actors alive
  auto& shard = registry[cell->id % registry.size()];
  {
    std::lock_guard lock(shard.m);
    cell->reg_next = shard.head;
    if (shard.head) shard.head->reg_prev = cell;
    shard.head = cell;
  }
  live.fetch_add(1, std::memory_order_relaxed);
  spawned.fetch_add(1, std::memory_order_relaxed);
}

void system_impl::unregister_cell(actor_cell* cell) {
  auto& shard = registry[cell->id % registry.size()];
  {
    std::lock_guard lock(shard.m);
    if (cell->reg_prev) cell->reg_prev->reg_next = cell->reg_next;
    else shard.head = cell->reg_next;
    if (cell->reg_next) cell->reg_next->reg_prev = cell->reg_prev;
    cell->reg_prev = cell->reg_next = nullptr;
  }
  if (live.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(live_m);
    live_cv.notify_all();
  }
  release(cell);
}

std::vector<actor_ref> system_impl::live_cells() {
  std::vector<actor_ref> out;
  out.reserve(live.load());
  for (auto& shard : registry) {
    std::lock_guard lock(shard.m);
    for (actor_cell* c = shard.head; c; c = c->reg_next) out.push_back(actor_ref::from_cell(c));
  }
  return out;
}

void system_impl::schedule(actor_cell* cell) noexcept {
  if (cell->runner) cell->runner->notify(cell);
  else sched.schedule(cell);
}

}  // namespace detail

using detail::actor_cell;

actor_system::actor_system(system_config config)
    : impl_(std::make_shared<detail::system_impl>(this, std::move(config))) {
  std::string file = impl_->config.trace_file;
  if (file.empty()) {
    if (const char* env = std::getenv("STRATA_TRACE"); env != nullptr && *env != '\0') file = env;
  }
  if (!file.empty()) {
    impl_->config.trace_file = file;
    impl_->tracing = trace::start(trace::options{file, impl_->config.trace_event_limit});
  }
  if (!impl_->det) impl_->sched.start();
}

actor_system::~actor_system() {
  bool shut_down = false;
  {
    std::lock_guard guard(impl_->shutdown_m);
    shut_down = impl_->shut_down;
  }
  auto report = shutdown(shutdown_mode::drain);
  // Nobody called shutdown() to receive the trace's error: a library must not lose a trace the
  // user asked for in silence, so say it once (docs/runtime.md, "Shutdown").
  if (!shut_down && !report.trace_error.empty())
    std::fprintf(stderr, "strata: %s\n", report.trace_error.c_str());
}

const system_config& actor_system::config() const noexcept { return impl_->config; }
std::size_t actor_system::worker_count() const noexcept { return impl_->det ? 0 : impl_->sched.size(); }

actor_ref actor_system::spawn_instance(std::unique_ptr<actor> instance, spawn_options options,
                                       const actor_ref& supervisor,
                                       std::function<std::unique_ptr<actor>()> factory,
                                       const std::vector<const type_meta*>& required) {
  if (!impl_->accepting.load(std::memory_order_acquire))
    throw error_exception(error(errc::runtime_failure, "cannot spawn an actor: the actor system has shut down"));
  auto* c = new actor_cell;
  c->sys = impl_;
  c->id = impl_->next_id.fetch_add(1, std::memory_order_relaxed);
  c->name = options.name.empty() ? "actor-" + std::to_string(c->id) : std::move(options.name);
  c->capacity = options.mailbox_capacity;
  c->overflow = options.overflow;
  c->stash_capacity = options.stash_capacity != 0 ? options.stash_capacity : impl_->config.stash_capacity;
  c->supervisor = supervisor;
  c->factory = std::move(factory);
  c->inline_delivery = options.handle_remote_inline;
  actor_ref ref = actor_ref::adopt(c);
  if (impl_->det) {
    c->runner = impl_->det.get();  // dedicated_thread too: one FIFO keeps the order repeatable
  } else if (options.dedicated_thread) {
    auto thread = std::make_unique<detail::dedicated_thread>(c);
    c->runner = thread.get();
    std::lock_guard lock(impl_->dedicated_m);
    impl_->dedicated.push_back(std::move(thread));
  }
  detail::attach_instance(c, std::move(instance));
  impl_->register_cell(c);
  if (trace::enabled()) {
    trace::emit(trace::event_kind::spawn, c->id, 0, 0, 0, trace::intern(c->name));
  }
  // The mailbox starts "owned" (not blocked): messages sent during start-up queue without
  // waking the actor; it is scheduled below if any arrived.
  error failure;
  if (!detail::start_instance(c, failure)) {
    if (c->supervisor) c->supervisor = actor_ref{};  // a child that cannot start is not restarted
    detail::terminate_actor(c, std::move(failure));
    return ref;
  }
  if (const type_meta* missing = detail::missing_handler(c, required)) {
    // A typed actor whose behavior does not cover its protocol: a programming error, said at once.
    if (c->supervisor) c->supervisor = actor_ref{};
    std::string text = "actor '" + c->name + "' declares " + missing->name +
                       " in its protocol, but make_behavior() has no handler for it";
    detail::terminate_actor(c, error(errc::invalid_argument, text));
    throw error_exception(error(errc::invalid_argument, text));
  }
  if (c->quit_pending) {  // quit() during start-up
    error reason = std::move(c->quit_reason);
    detail::terminate_actor(c, std::move(reason));
    return ref;
  }
  if (supervisor) {
    auto* e = new detail::typed_envelope<detail::child_added>(detail::child_added{ref});
    e->msg_id = detail::next_message_id();
    (void)detail::deliver(supervisor.cell(), e);
  }
  if (!c->box.try_block()) impl_->schedule(c);
  return ref;
}

void actor_system::stop(const actor_ref& target, error reason) {
  if (!target) return;
  if (target.cell()->remote) {
    static_cast<detail::remote_cell*>(target.cell())->stop(std::move(reason));
    return;
  }
  actor_cell* c = detail::as_cell(target.cell());
  {
    std::lock_guard lock(c->mu);
    if (c->terminated || c->stop_requested.load()) return;
    c->stop_reason = std::move(reason);
    c->stop_requested.store(true, std::memory_order_release);
  }
  auto* e = new detail::typed_envelope<unit_t>();
  e->kind = detail::message_kind::stop;
  e->urgent = true;
  e->msg_id = detail::next_message_id();
  (void)detail::deliver(c, e);
}

void actor_system::await_all() {
  if (impl_->det) {
    impl_->run_deterministic([this] { return impl_->live.load() == 0; });
    if (const std::size_t live = impl_->live.load(); live != 0)
      throw error_exception(error(errc::runtime_failure,
                                  "await_all on a deterministic system: " + std::to_string(live) +
                                      " actors are alive and none has a message to run (stop them, or fire "
                                      "their timers with a test_coordinator)"));
    return;
  }
  std::unique_lock lock(impl_->live_m);
  impl_->live_cv.wait(lock, [this] { return impl_->live.load(std::memory_order_acquire) == 0; });
}

bool actor_system::await_all_for(std::chrono::nanoseconds timeout) {
  if (impl_->det) {
    impl_->run_deterministic([this] { return impl_->live.load() == 0; });
    return impl_->live.load() == 0;
  }
  std::unique_lock lock(impl_->live_m);
  return impl_->live_cv.wait_for(lock, timeout, [this] { return impl_->live.load(std::memory_order_acquire) == 0; });
}

system_stats actor_system::stats() const {
  const auto& s = *impl_;
  system_stats out;
  out.live_actors = s.live.load();
  out.spawned = s.spawned.load();
  out.terminated = s.terminated.load();
  out.failed = s.failed.load();
  out.restarts = s.restarts.load();
  out.undeliverable = s.undeliverable.load();
  out.unhandled = s.unhandled.load();
  out.mailbox_full = s.mailbox_full.load();
  out.dropped = s.dropped.load();
  out.discarded = s.discarded.load();
  out.late_responses = s.late_responses.load();
  out.unanswered_results = s.unanswered_results.load();
  out.messages_handled = s.handled.load();
  return out;
}

bool actor_system::await_idle(std::chrono::nanoseconds timeout) {
  if (detail::current_cell() != nullptr)
    throw std::logic_error("actor_system::await_idle was called from inside an actor, whose own turn keeps the system busy");
  auto& s = *impl_;
  if (s.det) {
    s.run_deterministic([] { return false; });
    return s.timers.pending() == 0;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    bool busy = false;
    {
      std::lock_guard lock(s.dedicated_m);
      for (auto& d : s.dedicated)
        if (d->busy()) busy = true;
    }
    // Timers first: a timer that fires makes an actor runnable before it stops being pending.
    if (!busy && s.timers.pending() == 0 && s.sched.quiescent() && s.timers.pending() == 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
  }
}

shutdown_report actor_system::shutdown(shutdown_mode mode) {
  auto& s = *impl_;
  std::lock_guard guard(s.shutdown_m);
  if (s.shut_down) return s.report;
  shutdown_report report;
  report.mode = mode;
  report.timers_cancelled = s.timers.cancel_all();
  if (mode == shutdown_mode::drain && s.det) {
    // On this thread, in FIFO order; the real clock bounds it (actors that feed each other forever).
    const auto deadline = std::chrono::steady_clock::now() + s.config.drain_timeout;
    std::size_t n = 0;
    while (s.det->run_once()) {
      if (++n % 1024 == 0 && std::chrono::steady_clock::now() >= deadline) {
        report.drain_timed_out = s.det->runnable() != 0;
        break;
      }
    }
  } else if (mode == shutdown_mode::drain) {
    auto deadline = std::chrono::steady_clock::now() + s.config.drain_timeout;
    auto idle = [&] {
      {
        std::lock_guard lock(s.dedicated_m);
        for (auto& d : s.dedicated)
          if (d->busy()) return false;
      }
      return s.sched.quiescent();
    };
    while (!idle()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        report.drain_timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const std::uint64_t discarded_before = s.discarded.load();
  auto live = s.live_cells();
  report.actors_stopped = live.size();
  for (auto& ref : live) stop(ref, error(errc::stopped, "the actor system shut down"));
  // Suspended children whose supervisor is gone were terminated by the supervisor's exit;
  // everyone else handles the stop flag on its next turn (a deterministic system's on this thread).
  await_all_for(std::chrono::seconds(30));
  if (s.det) s.det->clear();  // the actors that did not stop are never run again
  live.clear();
  // Handles kept by the registry, dead-letter subscriptions and groups would keep their cells,
  // and through them this state, alive: a reference cycle. Every actor has stopped: drop them.
  {
    std::lock_guard lock(s.names_m);
    s.names.clear();
  }
  {
    std::lock_guard lock(s.dead_letter_m);
    s.dead_letter_watchers.clear();
    s.dead_letter_subscribers.store(0, std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(s.groups_m);
    s.groups.clear();
  }
  report.messages_discarded = s.discarded.load() - discarded_before;
  if (report.drain_timed_out)  // never silent: shutdown is not a wait (await_idle is)
    std::fprintf(stderr,
                 "strata: shutdown stopped draining after %lld ms with actors still busy; %llu queued "
                 "messages were discarded (wait with actor_system::await_idle first)\n",
                 static_cast<long long>(s.config.drain_timeout.count()),
                 static_cast<unsigned long long>(report.messages_discarded));
  s.accepting.store(false, std::memory_order_release);
  s.timers.stop();
  s.sched.stop();
  {
    std::lock_guard lock(s.dedicated_m);
    for (auto& d : s.dedicated) d->join();
  }
  if (s.tracing) {
    auto summary = trace::stop();
    report.trace_file = summary.file;
    report.trace_events = summary.events;
    report.trace_events_dropped = summary.dropped;
    report.trace_error = summary.error;
  }
  report.stats = stats();
  s.report = report;
  s.shut_down = true;
  return report;
}

}  // namespace strata
