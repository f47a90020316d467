// Contract tests of the all-for-one supervisor (the one-for-one contract is in lifecycle_test).

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace supervisor_test {

struct fail_now {};
struct count_query {};

/// Counts int messages; throws on `fail_now`. Counts its constructions in `instances`.
class member : public strata::actor {
public:
  explicit member(std::shared_ptr<std::atomic<int>> instances) : instances_(std::move(instances)) {
    instances_->fetch_add(1);
  }
  strata::behavior make_behavior() override {
    return {[this](int) { ++count_; },
            [](const fail_now&) -> void { throw std::runtime_error("member failed on purpose"); },
            [this](const count_query&) { return count_; }};
  }

private:
  std::shared_ptr<std::atomic<int>> instances_;
  int count_ = 0;
};

/// Whether every counter reaches `n` (polled, bounded: a bug fails the test instead of hanging it).
bool wait_for_instances(const std::vector<std::shared_ptr<std::atomic<int>>>& counters, int n) {
  return strata::test::eventually([&] {
    for (const auto& c : counters)
      if (c->load() < n) return false;
    return true;
  });
}

/// Spawns `n` members under `sup`, each counting its constructions in its own counter; names them
/// "member-i" if `named`.
std::pair<std::vector<strata::actor_ref>, std::vector<std::shared_ptr<std::atomic<int>>>> spawn_members(
    strata::actor_system& sys, const strata::actor_ref& sup, int n, bool named) {
  std::vector<strata::actor_ref> children;
  std::vector<std::shared_ptr<std::atomic<int>>> instances;
  for (int i = 0; i < n; ++i) {
    instances.push_back(std::make_shared<std::atomic<int>>(0));
    strata::spawn_options options;
    if (named) options.name = "member-" + std::to_string(i);
    children.push_back(sys.spawn_child<member>(sup, std::move(options), instances.back()));
  }
  return {std::move(children), std::move(instances)};
}

BOOST_AUTO_TEST_SUITE(all_for_one_supervisor)

BOOST_AUTO_TEST_CASE(a_failed_child_restarts_every_child_behind_the_same_handles) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto sup = sys.spawn_supervisor(strata::restart_policy{
      .max_restarts = 3, .within = 10s, .strategy = strata::restart_strategy::all_for_one});
  auto [children, instances] = spawn_members(sys, sup, 3, true);
  for (auto& c : children)
    for (int k = 0; k < 4; ++k) sys.send(c, k);
  for (auto& c : children) {
    auto n = sys.request<int>(c, 5s, count_query{});
    BOOST_REQUIRE(await(n).value() == 4);
  }
  sys.send(children[1], fail_now{});
  BOOST_REQUIRE(wait_for_instances(instances, 2));
  for (std::size_t i = 0; i < children.size(); ++i) {
    auto n = sys.request<int>(children[i], 5s, count_query{});
    BOOST_TEST(await(n).value() == 0, "child " << i << " kept the state of its first instance");
    BOOST_TEST(instances[i]->load() == 2);
  }
  BOOST_TEST(sys.stats().restarts == 3u);
  // The fresh instances work on the old handles.
  for (auto& c : children) sys.send(c, 1);
  for (auto& c : children) {
    auto n = sys.request<int>(c, 5s, count_query{});
    BOOST_TEST(await(n).value() == 1);
  }
}

BOOST_AUTO_TEST_CASE(the_restart_limit_counts_failures_of_any_child_and_then_stops_them_all) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto sup = sys.spawn_supervisor(strata::restart_policy{
      .max_restarts = 2, .within = 10s, .strategy = strata::restart_strategy::all_for_one});
  strata::test::shared_promise<strata::error> sup_down;
  auto sup_f = sup_down.future();
  sys.spawn([sup, p = sup_down.p](strata::actor& self) -> strata::behavior {
    self.monitor(sup);
    return {[&self, p](const strata::down_msg& d) {
      p->set_value(d.reason);
      self.quit();
    }};
  });
  auto [children, instances] = spawn_members(sys, sup, 2, true);
  // Two failures of different children: within the limit of two for the group.
  sys.send(children[0], fail_now{});
  BOOST_REQUIRE(wait_for_instances(instances, 2));
  sys.send(children[1], fail_now{});
  BOOST_REQUIRE(wait_for_instances(instances, 3));
  // The third failure of the group is one too many, though each child failed less often.
  sys.send(children[0], fail_now{});
  auto reason = await(sup_f);
  BOOST_TEST(reason.code() == strata::errc::restart_limit);
  BOOST_TEST(reason.message().find("member-0") != std::string::npos, reason.message());
  for (auto& c : children) {
    auto n = sys.request<int>(c, 5s, count_query{});
    BOOST_TEST(!await(n).has_value());  // every child stopped with its supervisor
  }
}

/// Spawns a watcher that fulfils the returned future once every one of `children` has terminated.
static std::future<void> all_terminated(strata::actor_system& sys, const std::vector<strata::actor_ref>& children) {
  strata::test::shared_promise<void> all_down;
  auto f = all_down.future();
  sys.spawn([children, p = all_down.p](strata::actor& self) -> strata::behavior {
    for (auto& c : children) self.monitor(c);
    return {[&self, p, left = std::make_shared<std::size_t>(children.size())](const strata::down_msg&) {
      if (--*left == 0) {
        p->set_value();
        self.quit();
      }
    }};
  });
  return f;
}

/// Busy-waits `us` microseconds (a sleep would be far coarser than the races below).
static void spin_for(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

BOOST_AUTO_TEST_CASE(children_spawned_just_before_their_supervisor_stops_terminate_with_it) {
  // The supervisor learns of a child from a message; stopped before it has read that message, it
  // must still take the child with it, or the child runs on with nobody to stop it.
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto counter = std::make_shared<std::atomic<int>>(0);
  int rounds = 0;
  for (int round = 0; round < 200; ++round, ++rounds) {
    auto sup = sys.spawn_supervisor(strata::restart_policy{.strategy = strata::restart_strategy::all_for_one});
    std::vector<strata::actor_ref> children;
    for (int i = 0; i < 3; ++i) children.push_back(sys.spawn_child<member>(sup, strata::spawn_options{}, counter));
    auto down = all_terminated(sys, children);
    spin_for(round % 20 * 5);
    sys.stop(sup);
    if (down.wait_for(10s) != std::future_status::ready)
      BOOST_FAIL("round " << round << ": a child of the stopped supervisor never terminated");
  }
  BOOST_TEST(rounds == 200);
}

BOOST_AUTO_TEST_CASE(siblings_suspended_for_a_restart_terminate_when_the_supervisor_stops_first) {
  // A failure makes the supervisor suspend every sibling; a sibling's note that it is ready may
  // reach the supervisor's mailbox after the supervisor was told to stop. Such a sibling belongs
  // to nobody else, so it must terminate with its supervisor, not wait for a restart for ever.
  // The race is narrow: many rounds, each stopping the supervisor a little later.
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  int rounds = 0;
  for (int round = 0; round < 200; ++round, ++rounds) {
    auto sup = sys.spawn_supervisor(strata::restart_policy{
        .max_restarts = 3, .within = 10s, .strategy = strata::restart_strategy::all_for_one});
    auto [children, instances] = spawn_members(sys, sup, 3, false);
    // A first failure and restart of all three: the supervisor knows every child now.
    sys.send(children[1], fail_now{});
    BOOST_REQUIRE(wait_for_instances(instances, 2));
    auto down = all_terminated(sys, children);
    sys.send(children[0], fail_now{});
    spin_for(round % 40 * 5);
    sys.stop(sup);
    if (down.wait_for(10s) != std::future_status::ready)
      BOOST_FAIL("round " << round << ": a child of the stopped supervisor never terminated");
  }
  BOOST_TEST(rounds == 200);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace supervisor_test
