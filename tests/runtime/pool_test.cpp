// Contract tests of worker pools: routing strategies, replies from workers, resizing, restarts.

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace pool_test {

struct who {};           // answered with the worker's id
struct who_ref {};       // answered with the worker's handle
struct square {
  long x;
};
struct keyed {
  std::uint64_t key;
};
struct note {
  int value;
};
struct blocking {
  bool routed;
};
struct fail_now {};

/// What the workers of one test saw; `done` resolves when `expected` notes or blocking
/// messages were handled.
struct pool_log {
  std::mutex m;
  std::vector<std::pair<std::uint64_t, int>> notes;                // (worker, value)
  std::map<std::uint64_t, std::pair<int, int>> blocking_by_worker;  // worker -> (routed, direct)
  std::size_t handled = 0;
  std::size_t expected = 0;
  std::promise<void> done;
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  void count() {
    if (++handled == expected) done.set_value();
  }
};

class worker : public strata::actor {
public:
  explicit worker(std::shared_ptr<pool_log> log) : log_(std::move(log)) {}
  strata::behavior make_behavior() override {
    return {
        [this](const who&) { return id(); },
        [this](const who_ref&) { return self(); },
        [](const square& s) { return s.x * s.x; },
        [this](const keyed&) { return id(); },
        [this](const note& n) {
          std::lock_guard lock(log_->m);
          log_->notes.emplace_back(id(), n.value);
          log_->count();
        },
        [this](const blocking& b) {
          log_->open.wait();  // the test holds every worker here on purpose
          std::lock_guard lock(log_->m);
          auto& counts = log_->blocking_by_worker[id()];
          (b.routed ? counts.first : counts.second) += 1;
          log_->count();
        },
        [](const fail_now&) -> void { throw std::runtime_error("worker failed on purpose"); },
    };
  }

private:
  std::shared_ptr<pool_log> log_;
};

template <class R, class T>
R ask(strata::actor_system& sys, const strata::actor_ref& to, T msg) {
  auto f = sys.request<R>(to, 10s, std::move(msg));
  return await(f).value();
}

BOOST_AUTO_TEST_SUITE(pools)

BOOST_AUTO_TEST_CASE(requests_through_a_round_robin_pool_are_answered_by_each_worker_in_turn) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(std::random_device{}());
  const std::size_t n = 2 + rng() % 5;
  auto pool = sys.spawn_pool<worker>(strata::pool_options{.size = n}, std::make_shared<pool_log>());
  BOOST_TEST(ask<std::size_t>(sys, pool, strata::pool_size{}) == n);
  std::map<std::uint64_t, int> answers;
  const int rounds = 3 + static_cast<int>(rng() % 4);
  for (std::size_t i = 0; i < n * static_cast<std::size_t>(rounds); ++i) {
    long x = static_cast<long>(rng() % 2000001) - 1000000;
    BOOST_TEST(ask<long>(sys, pool, square{x}) == x * x);
  }
  for (std::size_t i = 0; i < n * static_cast<std::size_t>(rounds); ++i) ++answers[ask<std::uint64_t>(sys, pool, who{})];
  BOOST_TEST(answers.size() == n);
  for (const auto& [id, count] : answers) {
    BOOST_TEST(id != pool.id());
    BOOST_TEST(count == rounds);
  }
}

BOOST_AUTO_TEST_CASE(a_broadcast_pool_gives_every_worker_a_copy) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(std::random_device{}());
  const std::size_t n = 2 + rng() % 5;
  const std::size_t messages = 1 + rng() % 20;
  auto log = std::make_shared<pool_log>();
  log->expected = n * messages;
  auto done = log->done.get_future();
  auto pool = sys.spawn_pool<worker>(strata::pool_options{.size = n, .strategy = strata::routing::broadcast}, log);
  std::vector<int> values;
  for (std::size_t i = 0; i < messages; ++i) {
    values.push_back(static_cast<int>(rng()));
    sys.send(pool, note{values.back()});
  }
  await(done);
  std::lock_guard lock(log->m);
  std::map<std::uint64_t, std::vector<int>> per_worker;
  for (const auto& [w, v] : log->notes) per_worker[w].push_back(v);
  BOOST_TEST(per_worker.size() == n);
  for (const auto& [w, seen] : per_worker) BOOST_TEST(seen == values);  // one sender: in order
}

BOOST_AUTO_TEST_CASE(a_smallest_mailbox_pool_routes_around_a_worker_with_a_long_queue) {
  strata::actor_system sys(strata::system_config{.worker_threads = 4});
  std::mt19937 rng(std::random_device{}());
  const std::size_t n = 2 + rng() % 3;
  auto log = std::make_shared<pool_log>();
  auto pool = sys.spawn_pool<worker>(strata::pool_options{.size = n, .strategy = strata::routing::smallest_mailbox}, log);
  // Idle workers tie at zero: ties go in turn, so n requests meet every worker.
  std::set<strata::actor_ref> found;
  for (std::size_t i = 0; i < n; ++i) found.insert(ask<strata::actor_ref>(sys, pool, who_ref{}));
  BOOST_REQUIRE(found.size() == n);
  const strata::actor_ref loaded = *found.begin();
  // `loaded` gets p messages directly and blocks on the first: at least p-1 stay queued. Every
  // worker blocks, so the others' queues only grow; routing keeps them within 2 of each other,
  // so with m = (n-1)(p-4) routed messages none of them reaches p-1, and `loaded` gets none.
  const int p = 8 + static_cast<int>(rng() % 8);
  const std::size_t m = (n - 1) * static_cast<std::size_t>(p - 4);
  log->expected = m + static_cast<std::size_t>(p);
  auto done = log->done.get_future();
  for (int i = 0; i < p; ++i) sys.send(loaded, blocking{false});
  for (std::size_t i = 0; i < m; ++i) sys.send(pool, blocking{true});
  BOOST_REQUIRE(ask<std::size_t>(sys, pool, strata::pool_size{}) == n);  // the router has routed them all
  log->gate.set_value();
  await(done);
  std::lock_guard lock(log->m);
  BOOST_TEST(log->blocking_by_worker[loaded.id()].first == 0);
  BOOST_TEST(log->blocking_by_worker[loaded.id()].second == p);
  int routed = 0;
  for (const auto& [w, counts] : log->blocking_by_worker) routed += counts.first;
  BOOST_TEST(routed == static_cast<int>(m));
}

BOOST_AUTO_TEST_CASE(a_consistent_hash_pool_sends_one_key_to_one_worker_and_a_resize_moves_only_the_new_workers_keys) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937_64 rng(std::random_device{}());
  auto pool = sys.spawn_pool<worker>(
      strata::pool_options{.size = 4,
                           .strategy = strata::routing::consistent_hash,
                           .key = strata::hash_key<keyed>([](const keyed& k) { return k.key; })},
      std::make_shared<pool_log>());
  std::vector<std::uint64_t> keys(150);
  for (auto& k : keys) k = rng();
  std::map<std::uint64_t, std::uint64_t> owner;
  std::set<std::uint64_t> old_workers;
  for (auto k : keys) {
    owner[k] = ask<std::uint64_t>(sys, pool, keyed{k});
    old_workers.insert(owner[k]);
  }
  BOOST_TEST(old_workers.size() == 4u);
  for (auto k : keys) BOOST_TEST(ask<std::uint64_t>(sys, pool, keyed{k}) == owner[k]);
  BOOST_REQUIRE(ask<std::size_t>(sys, pool, strata::pool_resize{5}) == 5u);
  std::size_t moved = 0;
  std::set<std::uint64_t> new_owner;
  for (auto k : keys) {
    auto w = ask<std::uint64_t>(sys, pool, keyed{k});
    if (w != owner[k]) {
      ++moved;
      BOOST_TEST(old_workers.count(w) == 0u, "a key moved between two old workers");
      new_owner.insert(w);
    }
  }
  BOOST_TEST(moved > 0u);
  BOOST_TEST(moved < keys.size() / 2);
  BOOST_TEST(new_owner.size() == 1u);
  BOOST_REQUIRE(ask<std::size_t>(sys, pool, strata::pool_resize{4}) == 4u);
  for (auto k : keys) BOOST_TEST(ask<std::uint64_t>(sys, pool, keyed{k}) == owner[k]);
}

BOOST_AUTO_TEST_CASE(a_pool_grows_and_shrinks_at_run_time_and_refuses_zero_workers) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(std::random_device{}());
  const std::size_t n = 1 + rng() % 3;
  auto pool = sys.spawn_pool<worker>(strata::pool_options{.size = n}, std::make_shared<pool_log>());
  const std::size_t grown = n + 1 + rng() % 4;
  BOOST_TEST(ask<std::size_t>(sys, pool, strata::pool_resize{grown}) == grown);
  BOOST_TEST(ask<std::size_t>(sys, pool, strata::pool_size{}) == grown);
  std::set<std::uint64_t> ids;
  for (std::size_t i = 0; i < 2 * grown; ++i) ids.insert(ask<std::uint64_t>(sys, pool, who{}));
  BOOST_TEST(ids.size() == grown);
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));  // request proxies have gone
  const auto live_before = sys.stats().live_actors;
  BOOST_TEST(ask<std::size_t>(sys, pool, strata::pool_resize{1}) == 1u);
  std::set<std::uint64_t> after;
  for (std::size_t i = 0; i < 2 * grown; ++i) after.insert(ask<std::uint64_t>(sys, pool, who{}));
  BOOST_TEST(after.size() == 1u);
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  BOOST_TEST(sys.stats().live_actors == live_before - (grown - 1));  // retired workers quit
  auto zero = sys.request<std::size_t>(pool, 10s, strata::pool_resize{0});
  auto r = await(zero);
  BOOST_REQUIRE(!r);
  BOOST_TEST(r.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(r.error().message().find("cannot be resized to 0 workers") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_failed_worker_is_restarted_behind_the_pool) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  const std::size_t n = 3;
  auto pool = sys.spawn_pool<worker>(strata::pool_options{.size = n}, std::make_shared<pool_log>());
  std::set<std::uint64_t> before;
  for (std::size_t i = 0; i < n; ++i) before.insert(ask<std::uint64_t>(sys, pool, who{}));
  auto failed = sys.request<strata::unit_t>(pool, 10s, fail_now{});
  BOOST_TEST(await(failed).error().code() == strata::errc::unhandled_exception);
  std::set<std::uint64_t> after;
  for (std::size_t i = 0; i < 2 * n; ++i) after.insert(ask<std::uint64_t>(sys, pool, who{}));
  BOOST_TEST((after == before));
  BOOST_TEST(sys.stats().restarts == 1u);
}

BOOST_AUTO_TEST_CASE(a_pool_without_workers_or_a_hash_pool_without_a_key_is_refused_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto log = std::make_shared<pool_log>();
  try {
    sys.spawn_pool<worker>(strata::pool_options{.size = 0, .name = "empty"}, log);
    BOOST_FAIL("a pool of 0 workers was spawned");
  } catch (const strata::error_exception& e) {
    BOOST_TEST(e.error().code() == strata::errc::invalid_argument);
    BOOST_TEST(e.error().message() == "pool 'empty' needs at least 1 worker (size was 0)");
  }
  try {
    sys.spawn_pool<worker>(strata::pool_options{.strategy = strata::routing::consistent_hash, .name = "keyless"}, log);
    BOOST_FAIL("a consistent-hash pool without a key was spawned");
  } catch (const strata::error_exception& e) {
    BOOST_TEST(e.error().code() == strata::errc::invalid_argument);
    BOOST_TEST(e.error().message().find("has no key function") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace pool_test
