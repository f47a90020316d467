// CAF 0.17 twins of the five Savina workloads in samples/savina (same algorithms, same sizes,
// same checks), for strata-bench-messaging. Written as CAF is meant to be used for speed:
// function-based event-based actors with state, asynchronous sends, atoms as message tags, the
// default work-stealing scheduler with `scheduler.max-threads` = params.threads. Completion
// reaches the calling thread through a std::promise; counts are read back with a scoped actor's
// requests after the timed region.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "savina_twins.hpp"

#include "caf_all.hpp"

namespace strata::bench {
namespace {

using clock_type = std::chrono::steady_clock;
using savina::params;
using savina::result;

using inc_atom = caf::atom_constant<caf::atom("inc")>;
using total_atom = caf::atom_constant<caf::atom("total")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using count_atom = caf::atom_constant<caf::atom("count")>;
using next_atom = caf::atom_constant<caf::atom("next")>;
using meet_atom = caf::atom_constant<caf::atom("meet")>;
using change_atom = caf::atom_constant<caf::atom("change")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using met_atom = caf::atom_constant<caf::atom("met")>;
using peers_atom = caf::atom_constant<caf::atom("peers")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

result checked(double seconds, std::uint64_t got, std::uint64_t expected, const char* what) {
  return {seconds, got == expected, std::string(what) + " " + std::to_string(got) + " of " + std::to_string(expected)};
}

void configure_scheduler(caf::actor_system_config& cfg, std::size_t threads) {
  cfg.set("scheduler.policy", caf::atom("stealing"));
  cfg.set("scheduler.max-threads", static_cast<caf::config_value::integer>(std::max<std::size_t>(1, threads)));
}

std::uint64_t sum_of_counts(caf::actor_system& sys, const std::vector<caf::actor>& actors) {
  caf::scoped_actor self{sys};
  std::uint64_t sum = 0;
  for (const auto& a : actors)
    self->request(a, std::chrono::seconds(30), count_atom::value)
        .receive([&](std::uint64_t n) { sum += n; }, [](caf::error&) {});
  return sum;
}

void stop_all(std::vector<caf::actor>& actors) {
  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors.clear();
}

}  // namespace

result caf_counting(const params& p) {
  caf::actor_system_config cfg;
  configure_scheduler(cfg, p.threads);
  caf::actor_system sys{cfg};
  std::promise<std::uint64_t> done;
  auto finished = done.get_future();
  auto counter = sys.spawn([](caf::stateful_actor<std::uint64_t>* self) -> caf::behavior {
    return {[=](inc_atom) { ++self->state; }, [=](total_atom) { return self->state; }};
  });
  auto producer = sys.spawn([counter, n = p.counting_messages, &done](caf::event_based_actor* self) -> caf::behavior {
    return {[=](start_atom) {
              for (std::size_t i = 0; i < n; ++i) self->send(counter, inc_atom::value);
              self->send(counter, total_atom::value);
            },
            [=, &done](std::uint64_t total) {
              done.set_value(total);
              self->quit();
            }};
  });
  const auto t0 = clock_type::now();
  caf::anon_send(producer, start_atom::value);
  const std::uint64_t count = finished.get();
  auto r = checked(seconds_since(t0), count, p.counting_messages, "count");
  caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
  return r;
}

result caf_fork_join(const params& p) {
  caf::actor_system_config cfg;
  configure_scheduler(cfg, p.threads);
  caf::actor_system sys{cfg};
  struct worker_state {
    std::uint64_t count = 0;
    double sum = 0;
  };
  std::atomic<std::size_t> busy{p.fork_join_workers};
  std::promise<void> done;
  auto finished = done.get_future();
  std::vector<caf::actor> workers;
  for (std::size_t w = 0; w < p.fork_join_workers; ++w)
    workers.push_back(sys.spawn(
        [n = p.fork_join_messages, &busy, &done](caf::stateful_actor<worker_state>* self) -> caf::behavior {
          return {[=, &busy, &done](double theta) {
                    self->state.sum += std::sqrt(std::abs(std::sin(theta) * std::cos(theta) + 1.0));
                    if (++self->state.count == n && busy.fetch_sub(1) == 1) done.set_value();
                  },
                  [=](count_atom) { return self->state.sum > 0 ? self->state.count : std::uint64_t{0}; }};
        }));
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < p.fork_join_messages; ++i)
    for (const auto& w : workers) caf::anon_send(w, static_cast<double>(i));
  finished.wait();
  const double seconds = seconds_since(t0);
  auto r = checked(seconds, sum_of_counts(sys, workers), p.fork_join_messages * p.fork_join_workers, "messages handled");
  stop_all(workers);
  return r;
}

result caf_thread_ring(const params& p) {
  caf::actor_system_config cfg;
  configure_scheduler(cfg, p.threads);
  caf::actor_system sys{cfg};
  struct node_state {
    caf::actor next;
    std::uint64_t seen = 0;
  };
  std::promise<void> done;
  auto finished = done.get_future();
  std::vector<caf::actor> ring;
  for (std::size_t i = 0; i < p.ring_actors; ++i)
    ring.push_back(sys.spawn([&done](caf::stateful_actor<node_state>* self) -> caf::behavior {
      return {[=](next_atom, const caf::actor& next) { self->state.next = next; },
              [=, &done](std::uint64_t remaining) {
                ++self->state.seen;
                if (remaining == 0) done.set_value();
                else self->send(self->state.next, remaining - 1);
              },
              [=](count_atom) { return self->state.seen; }};
    }));
  {
    caf::scoped_actor self{sys};
    for (std::size_t i = 0; i < ring.size(); ++i)
      self->request(ring[i], std::chrono::seconds(30), next_atom::value, ring[(i + 1) % ring.size()])
          .receive([] {}, [](caf::error&) {});
  }
  const auto t0 = clock_type::now();
  caf::anon_send(ring[0], std::uint64_t{p.ring_hops});
  finished.wait();
  const double seconds = seconds_since(t0);
  auto r = checked(seconds, sum_of_counts(sys, ring), p.ring_hops + 1, "tokens handled");
  for (const auto& a : ring) caf::anon_send(a, next_atom::value, caf::actor{});  // break the cycle
  stop_all(ring);
  return r;
}

result caf_chameneos(const params& p) {
  caf::actor_system_config cfg;
  configure_scheduler(cfg, p.threads);
  caf::actor_system sys{cfg};
  struct mall_state {
    std::uint64_t left = 0;
    std::size_t creatures = 0;
    std::optional<std::pair<caf::actor, int>> waiting;
    std::uint64_t meetings = 0;
  };
  struct creature_state {
    int colour = 0;
    std::uint64_t meetings = 0;
  };
  std::promise<std::uint64_t> done;
  auto finished = done.get_future();
  auto mall = sys.spawn([left = p.chameneos_meetings, creatures = p.chameneos,
                         &done](caf::stateful_actor<mall_state>* self) -> caf::behavior {
    self->state.left = left;
    self->state.creatures = creatures;
    return {[=](meet_atom, const caf::actor& who, int colour) {
              auto& s = self->state;
              if (s.left == 0) {
                self->send(who, leave_atom::value);
              } else if (!s.waiting) {
                s.waiting.emplace(who, colour);
              } else {
                --s.left;
                self->send(s.waiting->first, meet_atom::value, who, colour);
                s.waiting.reset();
              }
            },
            [=, &done](met_atom, std::uint64_t meetings) {
              self->state.meetings += meetings;
              if (--self->state.creatures == 0) {
                done.set_value(self->state.meetings);
                self->quit();
              }
            }};
  });
  const auto t0 = clock_type::now();
  for (std::size_t c = 0; c < p.chameneos; ++c)
    sys.spawn([mall, colour = static_cast<int>(c % 3)](caf::stateful_actor<creature_state>* self) -> caf::behavior {
      self->state.colour = colour;
      self->send(mall, meet_atom::value, caf::actor_cast<caf::actor>(self), colour);
      return {[=](meet_atom, const caf::actor& partner, int partner_colour) {
                auto& s = self->state;
                s.colour = savina::complement(s.colour, partner_colour);
                ++s.meetings;
                self->send(partner, change_atom::value, s.colour);
                self->send(mall, meet_atom::value, caf::actor_cast<caf::actor>(self), s.colour);
              },
              [=](change_atom, int news) {
                self->state.colour = news;
                ++self->state.meetings;
                self->send(mall, meet_atom::value, caf::actor_cast<caf::actor>(self), news);
              },
              [=](leave_atom) {
                self->send(mall, met_atom::value, self->state.meetings);
                self->quit();
              }};
    });
  const std::uint64_t meetings = finished.get();
  return checked(seconds_since(t0), meetings, 2 * p.chameneos_meetings, "creature meetings");
}

result caf_big(const params& p) {
  caf::actor_system_config cfg;
  configure_scheduler(cfg, p.threads);
  caf::actor_system sys{cfg};
  struct big_state {
    std::vector<caf::actor> all;
    std::minstd_rand rng;
    std::uint64_t sent = 0;
    std::uint64_t seen = 0;
  };
  std::atomic<std::size_t> busy{p.big_actors};
  std::promise<void> done;
  auto finished = done.get_future();
  std::vector<caf::actor> actors;
  for (std::size_t i = 0; i < p.big_actors; ++i)
    actors.push_back(sys.spawn([i, pings = p.big_pings, &busy, &done](caf::stateful_actor<big_state>* self) -> caf::behavior {
      self->state.rng.seed(static_cast<unsigned>(i + 1));
      auto ping_someone = [self, i] {
        auto& s = self->state;
        std::size_t j = s.rng() % (s.all.size() - 1);
        if (j >= i) ++j;
        ++s.sent;
        self->send(s.all[j], ping_atom::value);
      };
      return {[=](peers_atom, const std::vector<caf::actor>& all) {
                self->state.all = all;
                if (!all.empty()) ping_someone();  // empty: the end, to break the cycle of handles
              },
              [=](ping_atom) {
                ++self->state.seen;
                return pong_atom::value;  // to the sender
              },
              [=, &busy, &done](pong_atom) {
                if (self->state.sent < pings) ping_someone();
                else if (busy.fetch_sub(1) == 1) done.set_value();
              },
              [=](count_atom) { return self->state.seen; }};
    }));
  const auto t0 = clock_type::now();
  for (const auto& a : actors) caf::anon_send(a, peers_atom::value, actors);
  finished.wait();
  const double seconds = seconds_since(t0);
  auto r = checked(seconds, sum_of_counts(sys, actors), p.big_actors * p.big_pings, "pings answered");
  for (const auto& a : actors) caf::anon_send(a, peers_atom::value, std::vector<caf::actor>{});
  stop_all(actors);
  return r;
}

}  // namespace strata::bench
