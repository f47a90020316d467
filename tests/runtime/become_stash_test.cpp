// Contract tests of the behavior stack (become with keep_old, unbecome) and of the stash.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace become_stash_test {

struct push_level {
  int level;
};
struct replace_level {
  int level;
};
struct pop_level {};
struct which_level {};
struct push_twice_pop_once {
  int first;
  int second;
};
struct pop_twice_after_one_push {
  int level;
};

/// Answers `which_level` with the level of the behavior on top of its stack (0 at first).
class layered : public strata::actor {
public:
  strata::behavior make_behavior() override { return level(0); }

private:
  strata::behavior level(int n) {
    return {[n](const which_level&) { return n; },
            [this](const push_level& p) { become(level(p.level), strata::keep_old); },
            [this](const replace_level& r) { become(level(r.level)); },
            [this](const pop_level&) { unbecome(); },
            [this](const push_twice_pop_once& p) {
              become(level(p.first), strata::keep_old);
              become(level(p.second), strata::keep_old);
              unbecome();
            },
            [this](const pop_twice_after_one_push& p) {
              become(level(p.level), strata::keep_old);
              unbecome();
              unbecome();
            }};
  }
};

struct item {
  int value;
};
struct open_gate {};
struct close_gate {};
struct seen_query {};
struct fail_gate {};
struct refill {
  std::vector<int> values;
};

/// While closed, stashes `item`s; `open_gate` pushes the open behavior and re-delivers them; in
/// the open behavior items are recorded and `close_gate` returns to the closed one.
class gate : public strata::actor {
public:
  strata::behavior make_behavior() override {
    return {[this](const item&) { stash(); },
            [this](const open_gate&) {
              become(open_behavior(), strata::keep_old);
              unstash_all();
            },
            [](const close_gate&) {},
            [this](const seen_query&) { return seen_; },
            [this](const refill& r) {
              // Newer mail, queued before the stash is re-delivered: it must come after it.
              for (int v : r.values) send(self(), item{v});
              become(open_behavior(), strata::keep_old);
              unstash_all();
            },
            [](const fail_gate&) -> void { throw std::runtime_error("the gate failed on purpose"); }};
  }

private:
  strata::behavior open_behavior() {
    return {[this](const item& i) { seen_.push_back(i.value); },
            [](const open_gate&) {},
            [this](const close_gate&) { unbecome(); },
            [this](const seen_query&) { return seen_; }};
  }
  std::vector<int> seen_;
};

/// Resolves `p` with the reason when `target` terminates.
void watch(strata::actor_system& sys, const strata::actor_ref& target, std::shared_ptr<std::promise<strata::error>> p) {
  sys.spawn([target, p](strata::actor& self) -> strata::behavior {
    self.monitor(target);
    return {[&self, p](const strata::down_msg& d) {
      p->set_value(d.reason);
      self.quit();
    }};
  });
}

BOOST_AUTO_TEST_SUITE(become_and_stash)

BOOST_AUTO_TEST_CASE(become_with_keep_old_pushes_and_unbecome_returns_to_the_behavior_it_covered) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto a = sys.spawn<layered>();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> level(1, 1'000'000);
  std::vector<int> model{0};  // the stack as the test expects it, top last
  for (int step = 0; step < 400; ++step) {
    const int choice = std::uniform_int_distribution<int>(0, 2)(rng);
    if (choice == 0 || model.size() == 1) {
      model.push_back(level(rng));
      sys.send(a, push_level{model.back()});
    } else if (choice == 1) {
      model.pop_back();
      sys.send(a, pop_level{});
    } else {
      model.back() = level(rng);
      sys.send(a, replace_level{model.back()});
    }
    auto top = sys.request<int>(a, 5s, which_level{});
    BOOST_REQUIRE_EQUAL(await(top).value(), model.back());
  }
}

BOOST_AUTO_TEST_CASE(become_without_keep_old_replaces_only_the_top_of_the_stack) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto a = sys.spawn<layered>();
  sys.send(a, push_level{17});
  sys.send(a, replace_level{23});
  auto top = sys.request<int>(a, 5s, which_level{});
  BOOST_TEST(await(top).value() == 23);
  sys.send(a, pop_level{});
  auto bottom = sys.request<int>(a, 5s, which_level{});
  BOOST_TEST(await(bottom).value() == 0);
}

BOOST_AUTO_TEST_CASE(changes_requested_in_one_handler_apply_in_the_order_requested) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto a = sys.spawn<layered>();
  sys.send(a, push_twice_pop_once{31, 47});
  auto top = sys.request<int>(a, 5s, which_level{});
  BOOST_TEST(await(top).value() == 31);
  sys.send(a, pop_level{});
  auto bottom = sys.request<int>(a, 5s, which_level{});
  BOOST_TEST(await(bottom).value() == 0);
}

BOOST_AUTO_TEST_CASE(unbecome_with_nothing_to_return_to_fails_the_actor_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto a = sys.spawn<layered>();
  auto down = std::make_shared<std::promise<strata::error>>();
  auto reason = down->get_future();
  watch(sys, a, down);
  auto answer = sys.request<void>(a, 5s, pop_level{});
  auto failed = await(answer);
  BOOST_REQUIRE(!failed);
  BOOST_TEST(failed.error().code() == strata::errc::unhandled_exception);
  const strata::error r = await(reason);
  BOOST_TEST(r.code() == strata::errc::unhandled_exception);
  BOOST_TEST(r.message().find("has no earlier behavior to return to") != std::string::npos, r.message());
}

BOOST_AUTO_TEST_CASE(unbecome_counts_the_pushes_and_pops_requested_earlier_in_the_same_handler) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto a = sys.spawn<layered>();
  auto down = std::make_shared<std::promise<strata::error>>();
  auto reason = down->get_future();
  watch(sys, a, down);
  sys.send(a, pop_twice_after_one_push{5});
  const strata::error r = await(reason);
  BOOST_TEST(r.message().find("has no earlier behavior to return to") != std::string::npos, r.message());
}

BOOST_AUTO_TEST_CASE(stashed_messages_come_back_in_order_across_random_opening_and_closing) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto g = sys.spawn<gate>();
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> value(-100'000, 100'000);
  std::vector<int> expected_seen;
  std::vector<int> waiting;  // stashed in the model
  bool open = false;
  for (int step = 0; step < 3000; ++step) {
    const int choice = std::uniform_int_distribution<int>(0, 9)(rng);
    if (choice < 8) {
      const int v = value(rng);
      sys.send(g, item{v});
      if (open) expected_seen.push_back(v);
      else waiting.push_back(v);
    } else if (choice == 8) {
      sys.send(g, open_gate{});
      if (!open) {
        expected_seen.insert(expected_seen.end(), waiting.begin(), waiting.end());
        waiting.clear();
        open = true;
      }
    } else {
      sys.send(g, close_gate{});
      open = false;
    }
  }
  auto seen = sys.request<std::vector<int>>(g, 5s, seen_query{});
  BOOST_TEST(await(seen).value() == expected_seen, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unstash_all_redelivers_the_stash_before_mail_that_is_already_queued) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto g = sys.spawn<gate>();
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> value(-1000, 1000);
  std::vector<int> stashed_values(50);
  std::vector<int> newer(50);
  for (int& v : stashed_values) v = value(rng);
  for (int& v : newer) v = value(rng);
  for (int v : stashed_values) sys.send(g, item{v});
  sys.send(g, refill{newer});  // the gate queues `newer` to itself, then re-delivers the stash
  std::vector<int> expected_seen = stashed_values;
  expected_seen.insert(expected_seen.end(), newer.begin(), newer.end());
  BOOST_REQUIRE(sys.await_idle(10s));  // the items the gate sent itself are handled too
  auto seen = sys.request<std::vector<int>>(g, 5s, seen_query{});
  BOOST_TEST(await(seen).value() == expected_seen, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_stashed_request_is_answered_when_the_stash_redelivers_it) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto echo_gate = sys.spawn([](strata::actor& self) -> strata::behavior {
    return {[&self](const item&) { self.stash(); },
            [&self](const open_gate&) {
              self.become({[](const item& i) { return i.value * 3; }}, strata::keep_old);
              self.unstash_all();
            }};
  });
  auto answer = sys.request<int>(echo_gate, strata::no_timeout, item{-14});
  BOOST_TEST(sys.await_idle(5s));
  BOOST_TEST((answer.wait_for(0s) == std::future_status::timeout));  // waiting in the stash
  BOOST_TEST(sys.stats().unanswered_results == 0u);
  sys.send(echo_gate, open_gate{});
  BOOST_TEST(await(answer).value() == -42);
}

BOOST_AUTO_TEST_CASE(stashing_past_the_bound_fails_the_actor_with_reason_stash_full) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto g = sys.spawn_with<gate>(strata::spawn_options{.name = "small-gate", .stash_capacity = 3});
  auto down = std::make_shared<std::promise<strata::error>>();
  auto reason = down->get_future();
  watch(sys, g, down);
  const auto discarded_before = sys.stats().discarded;
  for (int i = 0; i < 3; ++i) sys.send(g, item{i});
  auto refused = sys.request<void>(g, 5s, item{3});
  const strata::error r = await(reason);
  BOOST_TEST(r.code() == strata::errc::stash_full);
  BOOST_TEST(r.message() ==
             "actor 'small-gate' (id " + std::to_string(g.id()) +
                 ") cannot stash a message of type " + strata::type_of<item>()->name +
                 ": its stash already holds its bound of 3 messages");
  auto answer = await(refused);
  BOOST_REQUIRE(!answer);
  BOOST_TEST(answer.error().code() == strata::errc::stash_full);
  // The three stashed messages were discarded with the mailbox, as queued ones are.
  BOOST_TEST(sys.stats().discarded - discarded_before == 3u);
}

BOOST_AUTO_TEST_CASE(a_supervisor_restart_redelivers_the_stash_to_the_fresh_instance) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto sup = sys.spawn_supervisor();
  auto g = sys.spawn_child<gate>(sup, strata::spawn_options{.name = "restarted-gate"});
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> value(-500, 500);
  std::vector<int> values(20);
  for (int& v : values) v = value(rng);
  for (int v : values) sys.send(g, item{v});
  sys.send(g, fail_gate{});
  sys.send(g, open_gate{});
  auto seen = sys.request<std::vector<int>>(g, 5s, seen_query{});
  BOOST_TEST(await(seen).value() == values, boost::test_tools::per_element());
  BOOST_TEST(sys.stats().restarts == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace become_stash_test
