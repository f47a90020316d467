// Load tests (ctest label "load", release CI only): a million actors, a hundred million messages
// through a mesh, and a bounded mailbox under a producer far faster than its consumer. Each test
// prints its figures (BOOST_TEST_MESSAGE: run with --log_level=message) and checks exact counts.
//
// Sizes scale with STRATA_LOAD_SCALE (default 1).

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "strata/strata.hpp"

using namespace std::chrono_literals;

namespace {

double load_scale() {
  const char* s = std::getenv("STRATA_LOAD_SCALE");
  if (!s || !*s) return 1.0;
  const double v = std::strtod(s, nullptr);
  return v > 0 ? v : 1.0;
}
std::uint64_t scaled(std::uint64_t n) { return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(n * load_scale())); }

/// Resident set size of this process, in bytes (/proc/self/statm).
std::size_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  std::size_t pages_total = 0, pages_resident = 0;
  in >> pages_total >> pages_resident;
  return pages_resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Waits until `pred` holds, at most `limit`; true if it did.
template <class P>
bool wait_until(P pred, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);  // a poll's period, not a wait for an event
  }
  return true;
}

struct token {
  std::uint64_t hops_left;
};
struct peers_msg {
  std::vector<strata::actor_ref> peers;
};
struct count_query {};

}  // namespace

BOOST_AUTO_TEST_SUITE(load)

BOOST_AUTO_TEST_CASE(a_million_actors_are_spawned_and_all_terminate) {
  const std::uint64_t count = scaled(1'000'000);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::vector<strata::actor_ref> refs;
  refs.reserve(count);
  const std::size_t rss_start = rss_bytes();
  std::size_t first_growth = 0;
  // Two waves: the second shows whether the memory of terminated actors is reused.
  for (int wave = 1; wave <= 2; ++wave) {
    const auto before = sys.stats();
    const std::size_t rss0 = rss_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < count; ++i)
      refs.push_back(sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; }));
    const double spawn_s = seconds_since(t0);
    const std::size_t rss1 = rss_bytes();
    BOOST_TEST(sys.stats().live_actors == count);
    const auto t1 = std::chrono::steady_clock::now();
    for (auto& r : refs) sys.stop(r);
    refs.clear();
    BOOST_REQUIRE(wait_until([&] { return sys.stats().live_actors == 0; }, 120s));
    const double stop_s = seconds_since(t1);
    const auto after = sys.stats();
    BOOST_TEST(after.live_actors == 0u);
    BOOST_TEST(after.spawned - before.spawned == count);
    BOOST_TEST(after.terminated - before.terminated == count);
    BOOST_TEST(after.failed == before.failed);
    const std::size_t rss2 = rss_bytes();
    const std::size_t growth = rss1 > rss0 ? rss1 - rss0 : 0;
    if (wave == 1) first_growth = growth;
    std::cout << "load: wave " << wave << ", " << count << " actors: spawn " << spawn_s << " s ("
              << static_cast<double>(count) / spawn_s << "/s), stop " << stop_s << " s; RSS +" << (growth >> 20)
              << " MiB while live = " << static_cast<double>(growth) / static_cast<double>(count)
              << " bytes per actor (8 B of it the test's handle); RSS after all terminated: +"
              << (rss2 > rss_start ? (rss2 - rss_start) >> 20 : 0) << " MiB over the start\n";
    if (wave == 1) BOOST_TEST(static_cast<double>(growth) / static_cast<double>(count) < 4096.0);
  }
  // The second wave reuses what the first freed: it may not grow RSS by half the first's growth.
  BOOST_TEST(rss_bytes() - rss_start < first_growth + first_growth / 2);
}

BOOST_AUTO_TEST_CASE(a_hundred_million_messages_through_a_mesh_are_counted_exactly) {
  const std::uint64_t total = scaled(100'000'000);
  const std::uint64_t actors = 100, tokens = 1000;
  const std::uint64_t per_token = total / tokens;  // hops per token (the last handler ends it)
  const std::uint64_t sent_total = per_token * tokens;
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto finished = std::make_shared<std::atomic<std::uint64_t>>(0);
  auto all_done = std::make_shared<std::promise<void>>();
  std::vector<strata::actor_ref> mesh;
  for (std::uint64_t i = 0; i < actors; ++i) {
    mesh.push_back(sys.spawn([finished, all_done, tokens, i](strata::actor& self) -> strata::behavior {
      auto peers = std::make_shared<std::vector<strata::actor_ref>>();
      auto handled = std::make_shared<std::uint64_t>(0);
      auto sent = std::make_shared<std::uint64_t>(0);
      auto rng = std::make_shared<std::minstd_rand>(static_cast<unsigned>(i + 1));
      return {
          [peers](peers_msg& p) { *peers = std::move(p.peers); },
          [&self, peers, handled, sent, rng, finished, all_done, tokens](const token& t) {
            ++*handled;
            if (t.hops_left > 1) {
              const auto to = (*rng)() % peers->size();
              ++*sent;
              if (!self.send((*peers)[to], token{t.hops_left - 1})) throw std::runtime_error("a mesh send failed");
            } else if (finished->fetch_add(1) + 1 == tokens) {
              all_done->set_value();
            }
          },
          [handled, sent](const count_query&) { return std::make_pair(*handled, *sent); },
      };
    }));
  }
  for (auto& a : mesh) sys.send(a, peers_msg{mesh});
  const auto before = sys.stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t k = 0; k < tokens; ++k) BOOST_REQUIRE(sys.send(mesh[k % actors], token{per_token}).has_value());
  auto done = all_done->get_future();
  BOOST_REQUIRE_MESSAGE(done.wait_for(600s) == std::future_status::ready, "the mesh did not finish in 600 s");
  const double secs = seconds_since(t0);
  std::uint64_t handled = 0, sent = tokens;  // the injected tokens were sent from outside
  for (auto& a : mesh) {
    auto r = sys.request<std::pair<std::uint64_t, std::uint64_t>>(a, 10s, count_query{}).get();
    BOOST_REQUIRE(r.has_value());
    handled += r->first;
    sent += r->second;
  }
  const auto after = sys.stats();
  BOOST_TEST(handled == sent);
  BOOST_TEST(handled == sent_total);
  BOOST_TEST(after.undeliverable == before.undeliverable);
  BOOST_TEST(after.failed == before.failed);
  std::cout << "load: " << handled << " messages through a mesh of " << actors << " actors in " << secs << " s ("
            << static_cast<double>(handled) / secs / 1e6 << " M msg/s)\n";
}

BOOST_AUTO_TEST_CASE(a_bounded_dropping_mailbox_keeps_memory_bounded_under_a_fast_producer) {
  const std::uint64_t count = scaled(10'000'000);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto handled = std::make_shared<std::atomic<std::uint64_t>>(0);
  auto consumer = sys.spawn_fn_with(
      strata::spawn_options{.name = "slow-consumer", .mailbox_capacity = 1000, .overflow = strata::overflow_policy::drop},
      [handled](strata::actor&) -> strata::behavior {
        return {[handled](std::uint64_t v) {
          // A slow consumer: ~2 us of work per message.
          volatile std::uint64_t x = v;
          for (int i = 0; i < 500; ++i) x = x * 2862933555777941757ull + 3037000493ull;
          handled->fetch_add(1, std::memory_order_relaxed);
        }};
      });
  const auto before = sys.stats();
  // Warm the allocator so the "before" RSS includes the runtime's steady state.
  for (std::uint64_t i = 0; i < 100'000; ++i) (void)sys.send(consumer, i);
  // Warm once every one of them is handled or dropped: the mailbox is empty again.
  BOOST_REQUIRE(wait_until([&] { return handled->load() + (sys.stats().dropped - before.dropped) == 100'000; }, 10s));
  const auto warm = sys.stats();
  const std::uint64_t warm_handled = handled->load();
  const std::size_t rss0 = rss_bytes();
  std::size_t rss_peak = rss0;
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t refused = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (!sys.send(consumer, i)) ++refused;  // drop policy: the send reports success
    if ((i & 0xFFFFF) == 0) rss_peak = std::max(rss_peak, rss_bytes());
  }
  BOOST_TEST(refused == 0u);
  const double send_s = seconds_since(t0);
  rss_peak = std::max(rss_peak, rss_bytes());
  const std::uint64_t sent = count + 100'000;
  // Everything sent is either handled or dropped, once the consumer has drained its 1000.
  BOOST_REQUIRE(wait_until(
      [&] {
        return handled->load() + (sys.stats().dropped - before.dropped) == sent;
      },
      60s));
  const auto after = sys.stats();
  const std::uint64_t dropped = after.dropped - before.dropped;
  BOOST_TEST(handled->load() + dropped == sent);
  BOOST_TEST(after.mailbox_full == before.mailbox_full);
  BOOST_TEST(dropped > 0u);
  const double growth_mib = static_cast<double>(rss_peak - rss0) / (1 << 20);
  std::cout << "load: " << count << " sends to a bounded (1000, drop) mailbox in " << send_s << " s ("
            << static_cast<double>(count) / send_s / 1e6 << " M/s): handled " << handled->load() - warm_handled
            << ", dropped " << dropped - (warm.dropped - before.dropped) << "; peak RSS growth " << growth_mib
            << " MiB\n";
  BOOST_TEST(growth_mib < 16.0);
}

BOOST_AUTO_TEST_SUITE_END()
