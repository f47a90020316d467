// Contract tests of the rest-for-one supervisor and of restarts with exponential backoff.

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.hpp"
#include "strata/test_coordinator.hpp"
#include "support/await.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace rest_for_one_backoff_test {

struct fail_now {};
struct count_query {};
using clock_type = std::chrono::steady_clock;

/// When instances of one child started and when they failed.
struct timeline {
  std::mutex m;
  std::vector<clock_type::time_point> starts;
  std::vector<clock_type::time_point> failures;
  std::atomic<int> instances{0};
};

/// Counts int messages; throws on `fail_now`; records its life in `life`.
class member : public strata::actor {
public:
  explicit member(std::shared_ptr<timeline> life) : life_(std::move(life)) {
    std::lock_guard lock(life_->m);
    life_->starts.push_back(clock_type::now());
    life_->instances.fetch_add(1);
  }
  strata::behavior make_behavior() override {
    return {[this](int) { ++count_; },
            [this](const fail_now&) -> void {
              {
                std::lock_guard lock(life_->m);
                life_->failures.push_back(clock_type::now());
              }
              throw std::runtime_error("member failed on purpose");
            },
            [this](const count_query&) { return count_; }};
  }

private:
  std::shared_ptr<timeline> life_;
  int count_ = 0;
};

/// Whether `life` counts `n` instances (polled, bounded).
bool wait_for_instances(const timeline& life, int n) {
  return strata::test::eventually([&] { return life.instances.load() >= n; });
}

int count_of(strata::actor_system& sys, const strata::actor_ref& child) {
  auto n = sys.request<int>(child, 10s, count_query{});
  return await(n).value();
}

BOOST_AUTO_TEST_SUITE(rest_for_one_and_backoff)

BOOST_AUTO_TEST_CASE(a_rest_for_one_supervisor_restarts_the_failed_child_and_those_started_after_it) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(std::random_device{}());
  auto sup = sys.spawn_supervisor(strata::restart_policy{.strategy = strata::restart_strategy::rest_for_one});
  const std::size_t n = 3 + rng() % 4;
  const std::size_t failing = rng() % n;
  std::vector<std::shared_ptr<timeline>> lives;
  std::vector<strata::actor_ref> children;
  std::vector<int> sent;
  for (std::size_t i = 0; i < n; ++i) {
    lives.push_back(std::make_shared<timeline>());
    children.push_back(sys.spawn_child<member>(sup, strata::spawn_options{.name = "member-" + std::to_string(i)}, lives.back()));
    sent.push_back(1 + static_cast<int>(rng() % 9));
    for (int k = 0; k < sent.back(); ++k) sys.send(children.back(), k);
  }
  for (std::size_t i = 0; i < n; ++i) BOOST_REQUIRE(count_of(sys, children[i]) == sent[i]);
  sys.send(children[failing], fail_now{});
  for (std::size_t i = failing; i < n; ++i) BOOST_REQUIRE(wait_for_instances(*lives[i], 2));
  for (std::size_t i = 0; i < n; ++i) {
    const bool restarted = i >= failing;
    BOOST_TEST(count_of(sys, children[i]) == (restarted ? 0 : sent[i]), "child " << i << " of " << n << ", failing " << failing);
    BOOST_TEST(lives[i]->instances.load() == (restarted ? 2 : 1), "child " << i);
  }
  BOOST_TEST(sys.stats().restarts == n - failing);
}

BOOST_AUTO_TEST_CASE(a_restart_waits_out_a_backoff_that_grows_by_its_factor_up_to_its_maximum) {
  // On the manual clock: the restart comes exactly when its backoff has passed, never earlier.
  strata::actor_system sys(strata::system_config{.deterministic = true});
  strata::test_coordinator coord(sys);
  const strata::restart_backoff backoff{.initial = 8ms, .factor = 2.0, .max = 20ms};
  auto sup = sys.spawn_supervisor(strata::restart_policy{.max_restarts = 10, .within = 60s, .backoff = backoff});
  auto life = std::make_shared<timeline>();
  auto child = sys.spawn_child<member>(sup, strata::spawn_options{.name = "member"}, life);
  const std::vector<std::chrono::milliseconds> waits{8ms, 16ms, 20ms, 20ms};
  for (std::size_t k = 0; k < waits.size(); ++k) {
    sys.send(child, fail_now{});
    sys.send(child, 7);  // queued while the child waits: the fresh instance handles it
    coord.run();
    BOOST_REQUIRE(coord.pending_timers() == 1u);  // the supervisor's reminder
    const auto failed_at = coord.now();
    BOOST_TEST(coord.advance_time(waits[k] - 1ns) == 0u, "restart " << k);
    coord.run();
    BOOST_TEST(life->instances.load() == static_cast<int>(k) + 1, "restart " << k << " came early");
    BOOST_TEST(coord.advance_time(1ns) == 1u);
    coord.run();
    BOOST_TEST(life->instances.load() == static_cast<int>(k) + 2, "restart " << k);
    BOOST_TEST((coord.now() - failed_at == waits[k]));
    auto n = sys.request<int>(child, 10s, count_query{});
    BOOST_TEST(coord.await(n).value() == 1);
  }
  BOOST_TEST(life->failures.size() == waits.size());
  BOOST_TEST(sys.stats().restarts == waits.size());
}

BOOST_AUTO_TEST_CASE(a_child_waiting_out_its_backoff_terminates_with_its_supervisor) {
  strata::actor_system sys(strata::system_config{.deterministic = true});
  strata::test_coordinator coord(sys);
  auto sup = sys.spawn_supervisor(strata::restart_policy{.backoff = {.initial = 60s, .factor = 1.0, .max = 60s}});
  auto life = std::make_shared<timeline>();
  auto child = sys.spawn_child<member>(sup, strata::spawn_options{.name = "member"}, life);
  strata::test::shared_promise<strata::error> down;
  auto f = down.future();
  sys.spawn([child, p = down.p](strata::actor& self) -> strata::behavior {
    self.monitor(child);
    return {[&self, p](const strata::down_msg& d) {
      p->set_value(d.reason);
      self.quit();
    }};
  });
  sys.send(child, fail_now{});
  coord.run();
  BOOST_REQUIRE(sys.stats().failed == 1u);
  BOOST_REQUIRE(coord.pending_timers() == 1u);  // the wait has begun
  sys.stop(sup);
  auto reason = coord.await(f);
  BOOST_TEST(reason.code() != strata::errc::none);
  BOOST_TEST(coord.pending_timers() == 0u);  // the supervisor cancelled the reminder
  BOOST_TEST(life->instances.load() == 1);
  BOOST_TEST(sys.stats().restarts == 0u);
}

BOOST_AUTO_TEST_CASE(a_backoff_with_a_factor_below_one_or_a_maximum_below_its_start_is_refused_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  try {
    sys.spawn_supervisor(strata::restart_policy{.backoff = {.initial = 10ms, .factor = 0.5, .max = 1s}},
                         strata::spawn_options{.name = "shrinking"});
    BOOST_FAIL("a backoff factor of 0.5 was accepted");
  } catch (const strata::error_exception& e) {
    BOOST_TEST(e.error().code() == strata::errc::invalid_argument);
    BOOST_TEST(e.error().message().find("supervisor 'shrinking': restart backoff needs") == 0u, e.error().message());
  }
  BOOST_CHECK_THROW(sys.spawn_supervisor(strata::restart_policy{.backoff = {.initial = 2s, .factor = 2.0, .max = 1s}}),
                    strata::error_exception);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace rest_for_one_backoff_test
