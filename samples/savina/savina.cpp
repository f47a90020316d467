// The five Savina workloads on strata (see savina.hpp). Each runs in its own actor_system;
// completion reaches the calling thread through a std::promise, and the result is checked
// against what the algorithm must produce.

#include "savina.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "strata/strata.hpp"

namespace savina {

using strata::actor;
using strata::actor_ref;
using strata::actor_system;
using strata::behavior;
using strata::system_config;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

result checked(double seconds, std::uint64_t got, std::uint64_t expected, const char* what) {
  return {seconds, got == expected,
          std::string(what) + " " + std::to_string(got) + " of " + std::to_string(expected)};
}

/// Sums what every actor in `actors` answers to `Query` (a request each).
template <class Query>
std::uint64_t sum_of_answers(actor_system& sys, const std::vector<actor_ref>& actors) {
  std::uint64_t sum = 0;
  for (const auto& a : actors) {
    auto answer = sys.request<std::uint64_t>(a, 30s, Query{}).get();
    if (answer) sum += *answer;
  }
  return sum;
}

// ---- counting ----------------------------------------------------------------------------------

struct increment {};
struct retrieve {};
struct total {
  std::uint64_t value;
};
struct start {};

}  // namespace

result counting(const params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::promise<std::uint64_t> done;
  auto finished = done.get_future();
  auto counter = sys.spawn([](actor& self) -> behavior {
    auto count = std::make_shared<std::uint64_t>(0);
    return {[count](increment) { ++*count; },
            [&self, count](retrieve) { self.send(self.current_sender(), total{*count}); }};
  });
  auto producer = sys.spawn([counter, n = p.counting_messages, &done](actor& self) -> behavior {
    return {[&self, counter, n](start) {
              for (std::size_t i = 0; i < n; ++i) self.send(counter, increment{});
              self.send(counter, retrieve{});
            },
            [&self, &done](const total& t) {
              done.set_value(t.value);
              self.quit();
            }};
  });
  const auto t0 = clock_type::now();
  sys.send(producer, start{});
  const std::uint64_t count = finished.get();
  return checked(seconds_since(t0), count, p.counting_messages, "count");
}

// ---- fork-join throughput ----------------------------------------------------------------------

namespace {
struct work {
  double theta;
};
struct handled_count {};
}  // namespace

result fork_join(const params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::atomic<std::size_t> busy{p.fork_join_workers};
  std::promise<void> done;
  auto finished = done.get_future();
  std::vector<actor_ref> workers;
  for (std::size_t w = 0; w < p.fork_join_workers; ++w) {
    workers.push_back(sys.spawn([n = p.fork_join_messages, &busy, &done](actor&) -> behavior {
      auto count = std::make_shared<std::uint64_t>(0);
      auto sum = std::make_shared<double>(0);
      return {[count, sum, n, &busy, &done](const work& m) {
                // Savina's "perform computation": a little floating-point work per message.
                *sum += std::sqrt(std::abs(std::sin(m.theta) * std::cos(m.theta) + 1.0));
                if (++*count == n && busy.fetch_sub(1) == 1) done.set_value();
              },
              [count, sum](handled_count) -> std::uint64_t { return *sum > 0 ? *count : 0; }};
    }));
  }
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < p.fork_join_messages; ++i)
    for (const auto& w : workers) sys.send(w, work{static_cast<double>(i)});
  finished.wait();
  const double seconds = seconds_since(t0);
  return checked(seconds, sum_of_answers<handled_count>(sys, workers), p.fork_join_messages * p.fork_join_workers,
                 "messages handled");
}

// ---- thread ring -------------------------------------------------------------------------------

namespace {
struct token {
  std::uint64_t remaining;
};
struct next_is {
  actor_ref next;
};
struct tokens_seen {};
}  // namespace

result thread_ring(const params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::promise<void> done;
  auto finished = done.get_future();
  std::vector<actor_ref> ring;
  for (std::size_t i = 0; i < p.ring_actors; ++i) {
    ring.push_back(sys.spawn([&done](actor& self) -> behavior {
      auto next = std::make_shared<actor_ref>();
      auto seen = std::make_shared<std::uint64_t>(0);
      return {[next](next_is& m) { *next = std::move(m.next); },
              [&self, next, seen, &done](const token& t) {
                ++*seen;
                if (t.remaining == 0) done.set_value();
                else self.send(*next, token{t.remaining - 1});
              },
              [seen](tokens_seen) -> std::uint64_t { return *seen; }};
    }));
  }
  for (std::size_t i = 0; i < ring.size(); ++i)
    (void)sys.request<void>(ring[i], 30s, next_is{ring[(i + 1) % ring.size()]}).get();
  const auto t0 = clock_type::now();
  sys.send(ring[0], token{p.ring_hops});
  finished.wait();
  const double seconds = seconds_since(t0);
  auto r = checked(seconds, sum_of_answers<tokens_seen>(sys, ring), p.ring_hops + 1, "tokens handled");
  for (const auto& a : ring) sys.stop(a);  // the ring's handles form a cycle
  return r;
}

// ---- chameneos ---------------------------------------------------------------------------------

int complement(int a, int b) noexcept { return a == b ? a : 3 - a - b; }  // colours 0, 1, 2

namespace {
struct meet {
  actor_ref who;
  int colour;
};
struct change {
  int colour;
};
struct leave {};
struct met {
  std::uint64_t meetings;
};
}  // namespace

result chameneos(const params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::promise<std::uint64_t> done;
  auto finished = done.get_future();
  auto mall = sys.spawn([left = p.chameneos_meetings, creatures = p.chameneos, &done](actor& self) -> behavior {
    struct state {
      std::uint64_t left;
      std::size_t creatures;
      std::optional<meet> waiting;
      std::uint64_t meetings = 0;
    };
    auto s = std::make_shared<state>(state{left, creatures, {}});
    return {[&self, s](meet& m) {
              if (s->left == 0) {
                self.send(m.who, leave{});
              } else if (!s->waiting) {
                s->waiting = std::move(m);
              } else {
                --s->left;
                self.send(s->waiting->who, std::move(m));
                s->waiting.reset();
              }
            },
            [&self, s, &done](const met& m) {
              s->meetings += m.meetings;
              if (--s->creatures == 0) {
                done.set_value(s->meetings);
                self.quit();
              }
            }};
  });
  const auto t0 = clock_type::now();
  for (std::size_t c = 0; c < p.chameneos; ++c) {
    sys.spawn([mall, colour = static_cast<int>(c % 3)](actor& self) -> behavior {
      auto mine = std::make_shared<int>(colour);
      auto meetings = std::make_shared<std::uint64_t>(0);
      self.send(mall, meet{self.self(), *mine});
      return {[&self, mall, mine, meetings](const meet& partner) {
                *mine = complement(*mine, partner.colour);
                ++*meetings;
                self.send(partner.who, change{*mine});
                self.send(mall, meet{self.self(), *mine});
              },
              [&self, mall, mine, meetings](const change& news) {
                *mine = news.colour;
                ++*meetings;
                self.send(mall, meet{self.self(), *mine});
              },
              [&self, mall, meetings](leave) {
                self.send(mall, met{*meetings});
                self.quit();
              }};
    });
  }
  const std::uint64_t meetings = finished.get();
  return checked(seconds_since(t0), meetings, 2 * p.chameneos_meetings, "creature meetings");
}

// ---- big ---------------------------------------------------------------------------------------

namespace {
struct peers {
  std::shared_ptr<const std::vector<actor_ref>> all;
};
struct ping {};
struct pong {};
struct pings_seen {};
}  // namespace

result big(const params& p) {
  actor_system sys(system_config{.worker_threads = p.threads});
  std::atomic<std::size_t> busy{p.big_actors};
  std::promise<void> done;
  auto finished = done.get_future();
  std::vector<actor_ref> actors;
  for (std::size_t i = 0; i < p.big_actors; ++i) {
    actors.push_back(sys.spawn([i, pings = p.big_pings, &busy, &done](actor& self) -> behavior {
      struct state {
        std::shared_ptr<const std::vector<actor_ref>> all;
        std::minstd_rand rng;
        std::uint64_t sent = 0;
        std::uint64_t seen = 0;
      };
      auto s = std::make_shared<state>(state{{}, std::minstd_rand(static_cast<unsigned>(i + 1))});
      auto ping_someone = [&self, s, i] {
        std::size_t j = s->rng() % (s->all->size() - 1);
        if (j >= i) ++j;  // never itself
        ++s->sent;
        self.send((*s->all)[j], ping{});
      };
      return {[s, ping_someone](peers& m) {
                s->all = std::move(m.all);
                ping_someone();
              },
              [&self, s](ping) {
                ++s->seen;
                self.send(self.current_sender(), pong{});
              },
              [s, ping_someone, pings, &busy, &done](pong) {
                if (s->sent < pings) ping_someone();
                else if (busy.fetch_sub(1) == 1) done.set_value();
              },
              [s](pings_seen) -> std::uint64_t { return s->seen; }};
    }));
  }
  auto all = std::make_shared<const std::vector<actor_ref>>(actors);
  const auto t0 = clock_type::now();
  for (const auto& a : actors) sys.send(a, peers{all});
  finished.wait();
  const double seconds = seconds_since(t0);
  auto r = checked(seconds, sum_of_answers<pings_seen>(sys, actors), p.big_actors * p.big_pings, "pings answered");
  for (const auto& a : actors) sys.stop(a);  // every actor holds every handle
  return r;
}

params params::scaled_down(std::size_t divisor) const {
  auto down = [divisor](std::size_t n) { return std::max<std::size_t>(2, n / std::max<std::size_t>(1, divisor)); };
  params q = *this;
  q.counting_messages = down(counting_messages);
  q.fork_join_workers = down(fork_join_workers);
  q.fork_join_messages = down(fork_join_messages);
  q.ring_actors = down(ring_actors);
  q.ring_hops = down(ring_hops);
  q.chameneos = down(chameneos);
  q.chameneos_meetings = down(chameneos_meetings);
  q.big_actors = down(big_actors);
  q.big_pings = down(big_pings);
  return q;
}

}  // namespace savina
