// Contract tests of fan-out requests: select_all (every response, in target order) and
// select_any (the first), one timeout, errors reaching one handler once.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace select_test {

struct scale {
  int value;
};
struct release {};

/// Answers `scale` with value * factor, but only once it has been released (it keeps the
/// request's promise until then), so the test decides in which order the responses arrive.
class held_worker : public strata::actor {
public:
  using protocol = strata::protocol<scale, release>;
  explicit held_worker(int factor) : factor_(factor) {}
  strata::behavior make_behavior() override {
    return {[this](const scale& s) {
              auto promise = make_response_promise<int>();
              if (released_) promise.deliver(s.value * factor_);
              else held_.push_back({std::move(promise), s.value});
            },
            [this](const release&) {
              released_ = true;
              for (auto& [promise, value] : held_) promise.deliver(value * factor_);
              held_.clear();
            }};
  }

private:
  int factor_;
  bool released_ = false;
  std::vector<std::pair<strata::response_promise<int>, int>> held_;
};

struct go {};

/// What a coordinator saw: the values (or value) and every error, in order.
struct outcome {
  std::vector<int> values;
  std::vector<strata::error> errors;
  int value_calls = 0;
};

/// Spawns an actor that runs `start(self, result)` on `go` and, once the system is idle, is
/// asked for its outcome.
template <class Start>
strata::actor_ref coordinator(strata::actor_system& sys, Start start) {
  return sys.spawn([start](strata::actor& self) -> strata::behavior {
    auto result = std::make_shared<outcome>();
    return {[&self, start, result](const go&) { start(self, result); },
            [result](const outcome&) { return *result; }};
  });
}

outcome outcome_of(strata::actor_system& sys, const strata::actor_ref& c) {
  BOOST_REQUIRE(sys.await_idle(20s));
  auto f = sys.request<outcome>(c, 5s, outcome{});
  return await(f).value();
}

strata::actor_ref dead_actor(strata::actor_system& sys) {
  auto a = sys.spawn([](strata::actor& self) -> strata::behavior {
    self.quit();
    return {[](const scale& s) { return s.value; }};
  });
  BOOST_REQUIRE(sys.await_idle(5s));
  return a;
}

BOOST_AUTO_TEST_SUITE(select_fan_out)

BOOST_AUTO_TEST_CASE(select_all_continues_with_every_response_in_the_order_of_the_targets) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  for (int round = 0; round < 20; ++round) {
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    std::vector<strata::typed_actor<held_worker::protocol>> workers;
    std::vector<int> factors;
    for (int i = 0; i < n; ++i) {
      factors.push_back(dist(rng));
      workers.push_back(sys.spawn<held_worker>(factors.back()));
    }
    const int x = dist(rng);
    auto c = coordinator(sys, [workers, x](strata::actor& self, std::shared_ptr<outcome> result) {
      self.select_all<int>(workers, strata::no_timeout, scale{x})
          .then(
              [result](std::vector<int>& all) {
                ++result->value_calls;
                result->values = all;
              },
              [result](const strata::error& err) { result->errors.push_back(err); });
    });
    sys.send(c, go{});
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);  // responses arrive in a random order
    for (int i : order) sys.send(workers[i], release{});
    const outcome o = outcome_of(sys, c);
    std::vector<int> expected_values;
    for (int f : factors) expected_values.push_back(x * f);
    BOOST_TEST(o.value_calls == 1);
    BOOST_TEST(o.errors.empty());
    BOOST_TEST(o.values == expected_values, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(select_any_continues_with_the_first_response_and_counts_the_others_as_late) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> dist(2, 1000);
  const int n = 6;
  std::vector<strata::actor_ref> workers;
  std::vector<int> factors;
  for (int i = 0; i < n; ++i) {
    factors.push_back(dist(rng));
    workers.push_back(sys.spawn<held_worker>(factors.back()));
  }
  const int first = std::uniform_int_distribution<int>(0, n - 1)(rng);
  auto c = coordinator(sys, [workers](strata::actor& self, std::shared_ptr<outcome> result) {
    self.select_any<int>(workers, strata::no_timeout, scale{7})
        .then(
            [result](int& v) {
              ++result->value_calls;
              result->values.push_back(v);
            },
            [result](const strata::error& err) { result->errors.push_back(err); });
  });
  sys.send(c, go{});
  sys.send(workers[first], release{});
  outcome o = outcome_of(sys, c);
  BOOST_TEST(o.value_calls == 1);
  BOOST_TEST(o.errors.empty());
  BOOST_REQUIRE(o.values.size() == 1u);
  BOOST_TEST(o.values[0] == 7 * factors[first]);
  const auto late_before = sys.stats().late_responses;
  for (int i = 0; i < n; ++i)
    if (i != first) sys.send(workers[i], release{});
  o = outcome_of(sys, c);
  BOOST_TEST(o.value_calls == 1);
  BOOST_TEST(sys.stats().late_responses - late_before == static_cast<std::uint64_t>(n - 1));
}

BOOST_AUTO_TEST_CASE(select_all_reports_a_dead_target_once_naming_it) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::vector<strata::actor_ref> targets;
  for (int i = 0; i < 4; ++i) targets.push_back(sys.spawn<held_worker>(i + 1));
  targets[2] = dead_actor(sys);
  auto c = coordinator(sys, [targets](strata::actor& self, std::shared_ptr<outcome> result) {
    self.select_all<int>(targets, 10s, scale{1})
        .then([result](std::vector<int>&) { ++result->value_calls; },
              [result](const strata::error& err) { result->errors.push_back(err); });
  });
  sys.send(c, go{});
  for (int i : {0, 1, 3}) sys.send(targets[i], release{});
  const outcome o = outcome_of(sys, c);
  BOOST_TEST(o.value_calls == 0);
  BOOST_REQUIRE(o.errors.size() == 1u);
  BOOST_TEST(o.errors[0].code() == strata::errc::target_terminated);
  const std::string prefix = "select_all: target 2 of 4 (actor id " + std::to_string(targets[2].id()) + "): ";
  BOOST_TEST(o.errors[0].message().rfind(prefix, 0) == 0u, o.errors[0].message());
}

BOOST_AUTO_TEST_CASE(select_all_times_out_once_saying_how_many_responses_arrived) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::vector<strata::actor_ref> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(sys.spawn<held_worker>(i + 2));
  sys.send(workers[0], release{});
  sys.send(workers[2], release{});  // workers[1] never answers
  auto c = coordinator(sys, [workers](strata::actor& self, std::shared_ptr<outcome> result) {
    self.select_all<int>(workers, 50ms, scale{3})
        .then([result](std::vector<int>&) { ++result->value_calls; },
              [result](const strata::error& err) { result->errors.push_back(err); });
  });
  sys.send(c, go{});
  outcome o = outcome_of(sys, c);
  BOOST_TEST(o.value_calls == 0);
  BOOST_REQUIRE(o.errors.size() == 1u);
  BOOST_TEST(o.errors[0].code() == strata::errc::request_timeout);
  BOOST_TEST(o.errors[0].message() == "select_all timed out with 2 of 3 responses");
  // The straggler's response, once it comes, is late: no second call.
  sys.send(workers[1], release{});
  o = outcome_of(sys, c);
  BOOST_TEST(o.errors.size() == 1u);
  BOOST_TEST(o.value_calls == 0);
}

BOOST_AUTO_TEST_CASE(select_any_fails_once_only_when_every_target_failed) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::vector<strata::actor_ref> dead{dead_actor(sys), dead_actor(sys), dead_actor(sys)};
  auto all_dead = coordinator(sys, [dead](strata::actor& self, std::shared_ptr<outcome> result) {
    self.select_any<int>(dead, 10s, scale{1})
        .then([result](int&) { ++result->value_calls; },
              [result](const strata::error& err) { result->errors.push_back(err); });
  });
  sys.send(all_dead, go{});
  outcome o = outcome_of(sys, all_dead);
  BOOST_TEST(o.value_calls == 0);
  BOOST_REQUIRE(o.errors.size() == 1u);
  BOOST_TEST(o.errors[0].code() == strata::errc::target_terminated);
  BOOST_TEST(o.errors[0].message().rfind("select_any: all 3 requests failed; the first, target 0 (actor id ", 0) == 0u,
             o.errors[0].message());

  auto alive = sys.spawn<held_worker>(5);
  sys.send(alive, release{});
  std::vector<strata::actor_ref> mixed{dead[0], alive, dead[1]};
  auto one_alive = coordinator(sys, [mixed](strata::actor& self, std::shared_ptr<outcome> result) {
    self.select_any<int>(mixed, 10s, scale{9})
        .then([result](int& v) { result->values.push_back(v); },
              [result](const strata::error& err) { result->errors.push_back(err); });
  });
  sys.send(one_alive, go{});
  o = outcome_of(sys, one_alive);
  BOOST_TEST(o.errors.empty());
  BOOST_TEST(o.values == std::vector<int>{45}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_select_with_no_targets_is_refused_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto c = coordinator(sys, [](strata::actor& self, std::shared_ptr<outcome> result) {
    self.select_all<int>(std::vector<strata::actor_ref>{}, 1s, scale{1})
        .then([result](std::vector<int>&) { ++result->value_calls; },
              [result](const strata::error& err) { result->errors.push_back(err); });
  });
  sys.send(c, go{});
  const outcome o = outcome_of(sys, c);
  BOOST_TEST(o.value_calls == 0);
  BOOST_REQUIRE(o.errors.size() == 1u);
  BOOST_TEST(o.errors[0].code() == strata::errc::invalid_argument);
  BOOST_TEST(o.errors[0].message() == "select_all needs at least one target; it was given none");
}

BOOST_AUTO_TEST_CASE(without_an_error_continuation_a_failed_select_fails_the_requesting_actor) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::vector<strata::actor_ref> targets{dead_actor(sys)};
  auto c = coordinator(sys, [targets](strata::actor& self, std::shared_ptr<outcome>) {
    self.select_all<int>(targets, 10s, scale{1}).then([](std::vector<int>&) {});
  });
  auto down = std::make_shared<std::promise<strata::error>>();
  auto reason = down->get_future();
  sys.spawn([c, down](strata::actor& self) -> strata::behavior {
    self.monitor(c);
    return {[&self, down](const strata::down_msg& d) {
      down->set_value(d.reason);
      self.quit();
    }};
  });
  sys.send(c, go{});
  const strata::error r = await(reason);
  BOOST_TEST(r.code() == strata::errc::unhandled_exception);
  BOOST_TEST(r.message().find("select_all: target 0 of 1") != std::string::npos, r.message());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace select_test
