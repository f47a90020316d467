// CAF 0.17 side of the messaging benchmark (see messaging_workloads.hpp).
//
// The same four workloads as the strata side, written the way CAF is meant to
// be used for speed: function-based event-based actors, asynchronous `send`,
// no blocking actors anywhere near a hot loop, default (work-stealing)
// scheduler with `scheduler.max-threads` = params.threads, default
// `scheduler.max-throughput` (unbounded in 0.17) and default work-stealing
// poll/sleep settings.
//
// Each workload runs in its own caf::actor_system, created and destroyed
// outside the timed region, so that one workload's leftovers (mailbox
// allocations, sleeping workers) cannot influence the next one.
//
// Completion is signalled from the final handler through a std::promise; the
// calling (non-CAF) thread waits on the matching future.  All time stamps are
// std::chrono::steady_clock.
//
// Caveats (also in the report):
//  * Actors are spawned with the default flags (not `lazy_init`), so a spawn
//    schedules the actor once to run its initialisation (make_behavior) on a
//    worker.  The spawn figure counts an actor as spawned once that
//    initialisation has run, i.e. its behaviour is installed.
//  * Memory per idle actor is RSS growth (/proc/self/statm) across the spawn
//    of `spawn_count` actors whose handles are kept alive, divided by
//    `spawn_count`; malloc_trim(0) is called before the first reading so that
//    memory freed by earlier work is not reused silently (which would hide
//    part of the growth).  The handle vector is reserved before the reading.
//  * Integer payloads are `int`; counts that do not fit in an int are
//    rejected with std::invalid_argument.

#include "messaging_workloads.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <malloc.h>
#include <unistd.h>

#include "caf_all.hpp"

namespace strata::bench {
namespace {

using clock_type = std::chrono::steady_clock;

using continue_atom = caf::atom_constant<caf::atom("continue")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using set_next_atom = caf::atom_constant<caf::atom("setnext")>;

/// Number of int messages a fan-in sender sends per handler invocation before
/// it sends itself a `continue` message (same chunk size as the strata side).
constexpr std::size_t fan_in_chunk = 1000;

int checked_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument(std::string("caf workloads: ") + what
                                + " does not fit in an int");
  return static_cast<int>(n);
}

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Resident set size in bytes, from /proc/self/statm.
std::size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr)
    return 0;
  unsigned long size_pages = 0;
  unsigned long resident_pages = 0;
  int got = std::fscanf(f, "%lu %lu", &size_pages, &resident_pages);
  std::fclose(f);
  if (got != 2)
    return 0;
  return static_cast<std::size_t>(resident_pages)
         * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

/// Scheduler configuration shared by every workload.
void configure(caf::actor_system_config& cfg, std::size_t threads) {
  if (threads == 0)
    threads = 1;
  cfg.set("scheduler.policy", caf::atom("stealing"));
  cfg.set("scheduler.max-threads", static_cast<caf::config_value::integer>(threads));
}

void check_workers(caf::actor_system& sys, std::size_t threads) {
  if (threads == 0)
    threads = 1;
  if (sys.scheduler().num_workers() != threads)
    throw std::runtime_error("caf workloads: scheduler.max-threads not applied");
}

/// Counts down from n; the thread that reaches zero fulfils the promise.
struct countdown {
  explicit countdown(std::size_t n) : remaining(n) {
    if (n == 0)
      done.set_value();
  }
  void count_down() {
    if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1)
      done.set_value();
  }
  void wait() { done.get_future().wait(); }
  std::atomic<std::size_t> remaining;
  std::promise<void> done;
};

/// Stops every actor in `actors` and waits for all actors of `sys`.
void shut_down(caf::actor_system& sys, std::vector<caf::actor>& actors) {
  for (auto& a : actors)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors.clear();
  sys.await_all_actors_done();
}

// -- ping-pong ----------------------------------------------------------------

struct ping_pong_shared {
  clock_type::time_point start;
  std::promise<clock_type::time_point> finished;
};

caf::behavior pong_actor(caf::event_based_actor*) {
  // Returning the value sends it back to the sender (plain asynchronous
  // message, since the incoming message is not a request).
  return {
    [](int x) { return x; },
  };
}

caf::behavior ping_actor(caf::event_based_actor* self, caf::actor pong,
                         int round_trips, ping_pong_shared* shared) {
  shared->start = clock_type::now();
  self->send(pong, 1);
  return {
    [=](int x) {
      if (x == round_trips) {
        shared->finished.set_value(clock_type::now());
        return;
      }
      self->send(pong, x + 1);
    },
  };
}

double run_ping_pong(const messaging_params& p) {
  if (p.ping_pong_round_trips == 0)
    return 0;
  int n = checked_int(p.ping_pong_round_trips, "ping_pong_round_trips");
  caf::actor_system_config cfg;
  configure(cfg, p.threads);
  caf::actor_system sys{cfg};
  check_workers(sys, p.threads);
  ping_pong_shared shared;
  auto finished = shared.finished.get_future();
  std::vector<caf::actor> actors;
  actors.push_back(sys.spawn(pong_actor));
  actors.push_back(sys.spawn(ping_actor, actors[0], n, &shared));
  auto stop = finished.get();
  double ns = std::chrono::duration<double, std::nano>(stop - shared.start).count();
  shut_down(sys, actors);
  return ns / static_cast<double>(n);
}

// -- fan-in -------------------------------------------------------------------

struct fan_in_shared {
  std::size_t senders = 0;
  std::size_t expected = 0;
  countdown ready;
  std::promise<std::pair<clock_type::time_point, std::size_t>> finished;
  explicit fan_in_shared(std::size_t actors) : ready(actors) {}
};

struct fan_in_receiver_state {
  std::size_t received = 0;
  std::size_t senders_done = 0;
};

caf::behavior fan_in_receiver(caf::stateful_actor<fan_in_receiver_state>* self,
                              fan_in_shared* shared) {
  shared->ready.count_down();
  return {
    [=](int) { ++self->state.received; },
    [=](done_atom) {
      // Per-sender FIFO order: once every sender's `done` has arrived, all
      // of its ints have arrived too, so the count must be exact here.
      if (++self->state.senders_done == shared->senders)
        shared->finished.set_value({clock_type::now(), self->state.received});
    },
  };
}

struct fan_in_sender_state {
  std::size_t left = 0;
};

caf::behavior fan_in_sender(caf::stateful_actor<fan_in_sender_state>* self,
                            caf::actor receiver, std::size_t messages,
                            fan_in_shared* shared) {
  self->state.left = messages;
  shared->ready.count_down();
  return {
    [=](continue_atom) {
      auto& left = self->state.left;
      std::size_t chunk = left < fan_in_chunk ? left : fan_in_chunk;
      for (std::size_t i = 0; i < chunk; ++i)
        self->send(receiver, static_cast<int>(i));
      left -= chunk;
      if (left > 0)
        self->send(self, continue_atom::value);
      else
        self->send(receiver, done_atom::value);
    },
  };
}

double run_fan_in(const messaging_params& p) {
  std::size_t total = p.fan_in_senders * p.fan_in_messages_per_sender;
  if (p.fan_in_senders == 0 || total == 0)
    return 0;
  caf::actor_system_config cfg;
  configure(cfg, p.threads);
  caf::actor_system sys{cfg};
  check_workers(sys, p.threads);
  fan_in_shared shared{p.fan_in_senders + 1};
  shared.senders = p.fan_in_senders;
  shared.expected = total;
  auto finished = shared.finished.get_future();
  std::vector<caf::actor> actors;
  auto receiver = sys.spawn(fan_in_receiver, &shared);
  actors.push_back(receiver);
  std::vector<caf::actor> senders;
  for (std::size_t i = 0; i < p.fan_in_senders; ++i)
    senders.push_back(
      sys.spawn(fan_in_sender, receiver, p.fan_in_messages_per_sender, &shared));
  shared.ready.wait(); // all behaviours installed before the clock starts
  auto start = clock_type::now();
  for (auto& s : senders)
    caf::anon_send(s, continue_atom::value);
  auto [stop, received] = finished.get();
  if (received != total)
    throw std::runtime_error("caf fan-in: receiver counted "
                             + std::to_string(received) + " messages, expected "
                             + std::to_string(total));
  actors.insert(actors.end(), senders.begin(), senders.end());
  senders.clear();
  receiver = caf::actor{};
  shut_down(sys, actors);
  return static_cast<double>(total) / seconds_between(start, stop);
}

// -- ring ---------------------------------------------------------------------

struct ring_shared {
  countdown ready;
  std::promise<clock_type::time_point> finished;
  explicit ring_shared(std::size_t actors) : ready(actors) {}
};

struct ring_state {
  caf::actor next;
};

caf::behavior ring_node(caf::stateful_actor<ring_state>* self, caf::actor next,
                        ring_shared* shared) {
  self->state.next = std::move(next);
  shared->ready.count_down();
  return {
    [=](set_next_atom, caf::actor n) { self->state.next = std::move(n); },
    [=](int hops_left) {
      if (hops_left == 0) {
        shared->finished.set_value(clock_type::now());
        return;
      }
      self->send(self->state.next, hops_left - 1);
    },
  };
}

double run_ring(const messaging_params& p) {
  if (p.ring_actors == 0 || p.ring_hops == 0)
    return 0;
  int hops = checked_int(p.ring_hops, "ring_hops");
  caf::actor_system_config cfg;
  configure(cfg, p.threads);
  caf::actor_system sys{cfg};
  check_workers(sys, p.threads);
  ring_shared shared{p.ring_actors};
  auto finished = shared.finished.get_future();
  // Built back to front: node i forwards to node i + 1, the last node is told
  // about node 0 afterwards (the strong references form a cycle, which the
  // explicit exit messages in shut_down break).
  std::vector<caf::actor> nodes(p.ring_actors);
  caf::actor next;
  for (std::size_t i = p.ring_actors; i-- > 0;) {
    nodes[i] = sys.spawn(ring_node, next, &shared);
    next = nodes[i];
  }
  caf::anon_send(nodes.back(), set_next_atom::value, nodes.front());
  shared.ready.wait();
  // The token carries the number of hops still to go; every actor-to-actor
  // send is one hop, so exactly `hops` hops happen before a node sees 0.
  auto start = clock_type::now();
  caf::anon_send(nodes.front(), hops);
  auto stop = finished.get();
  next = caf::actor{};
  shut_down(sys, nodes);
  return static_cast<double>(hops) / seconds_between(start, stop);
}

// -- spawn rate and memory per idle actor -------------------------------------

caf::behavior idle_actor(caf::event_based_actor*, countdown* ready) {
  ready->count_down();
  return {
    [](int) {},
  };
}

std::pair<double, double> run_spawn(const messaging_params& p) {
  if (p.spawn_count == 0)
    return {0, 0};
  caf::actor_system_config cfg;
  configure(cfg, p.threads);
  caf::actor_system sys{cfg};
  check_workers(sys, p.threads);
  countdown ready{p.spawn_count};
  std::vector<caf::actor> actors;
  actors.reserve(p.spawn_count);
  malloc_trim(0);
  std::size_t rss_before = resident_bytes();
  auto start = clock_type::now();
  for (std::size_t i = 0; i < p.spawn_count; ++i)
    actors.push_back(sys.spawn(idle_actor, &ready));
  ready.wait(); // every actor has run its initialisation
  auto stop = clock_type::now();
  std::size_t rss_after = resident_bytes();
  shut_down(sys, actors);
  double rate = static_cast<double>(p.spawn_count) / seconds_between(start, stop);
  double growth = rss_after > rss_before
                    ? static_cast<double>(rss_after - rss_before)
                    : 0.0;
  return {rate, growth / static_cast<double>(p.spawn_count)};
}

} // namespace

messaging_result run_caf_workloads(const messaging_params& params) {
  messaging_result r;
  // Spawn/memory first, while the heap is still small and clean.
  auto [rate, bytes] = run_spawn(params);
  r.spawn_per_s = rate;
  r.bytes_per_idle_actor = bytes;
  r.ping_pong_ns = run_ping_pong(params);
  r.fan_in_msgs_per_s = run_fan_in(params);
  r.ring_hops_per_s = run_ring(params);
  return r;
}

} // namespace strata::bench
