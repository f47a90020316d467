// strata::requester: calls from outside actors that keep their order, barriers, and what happens
// to open requests when the requester or the system goes away.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace requester_test {

struct entry {
  int i = 0;
};
struct numbered {
  int i = 0;
};
struct read_log {};

/// Logs sends (`entry`) and requests (`numbered`, answered with their number) in arrival order.
class recorder : public strata::actor {
public:
  using protocol = strata::protocol<entry, int(numbered), std::vector<int>(read_log)>;
  strata::behavior make_behavior() override {
    return strata::typed_behavior<protocol>{
        [this](const entry& e) { log_.push_back(e.i); },
        [this](const numbered& n) {
          log_.push_back(n.i);
          return n.i;
        },
        [this](const read_log&) { return log_; },
    };
  }

private:
  std::vector<int> log_;
};

struct question {};
struct release {};

/// Answers `question` with 42 once it gets `release`.
class oracle : public strata::actor {
public:
  strata::behavior make_behavior() override {
    return {[this](const question&) {
              owed_.push_back(make_response_promise<int>());
              return owed_.back();
            },
            [this](const release&) {
              for (auto& p : owed_) p.deliver(42);
              const int released = static_cast<int>(owed_.size());
              owed_.clear();
              return released;
            }};
  }

private:
  std::vector<strata::response_promise<int>> owed_;
};

BOOST_AUTO_TEST_SUITE(requester_calls)

BOOST_AUTO_TEST_CASE(requests_and_sends_of_one_requester_arrive_in_the_order_they_were_made) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto rec = sys.spawn<recorder>();
  strata::requester caller(sys);
  std::mt19937 rng(42);
  std::vector<std::future<strata::expected<int>>> answers;
  std::vector<int> asked;
  for (int i = 0; i < 500; ++i) {
    if (rng() % 2 == 0) {
      BOOST_REQUIRE(caller.send(rec, entry{i}).has_value());
    } else {
      auto f = caller.request(rec, 10s, numbered{i});
      static_assert(std::is_same_v<decltype(f), std::future<strata::expected<int>>>);
      answers.push_back(std::move(f));
      asked.push_back(i);
    }
  }
  auto log = caller.request(rec, 10s, read_log{});
  auto got = await(log);
  BOOST_REQUIRE(got.has_value());
  std::vector<int> want(500);
  for (int i = 0; i < 500; ++i) want[static_cast<std::size_t>(i)] = i;
  BOOST_TEST(*got == want, boost::test_tools::per_element());
  for (std::size_t k = 0; k < answers.size(); ++k) BOOST_TEST(await(answers[k]).value() == asked[k]);
}

BOOST_AUTO_TEST_CASE(a_barrier_resolves_once_every_earlier_request_is_answered) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto o = sys.spawn<oracle>();
  auto rec = sys.spawn<recorder>();
  strata::requester caller(sys);
  auto slow = caller.request<int>(o, 10s, question{});
  auto quick = caller.request(rec, 10s, numbered{7});
  auto barrier = caller.barrier();
  BOOST_TEST(await(quick).value() == 7);  // answered, but the slow one is not
  BOOST_TEST((barrier.wait_for(30ms) == std::future_status::timeout), "the barrier passed an open request");
  sys.send(o, release{});
  BOOST_TEST(await(barrier).has_value());
  BOOST_TEST((slow.wait_for(0s) == std::future_status::ready));
  BOOST_TEST(slow.get().value() == 42);
}

BOOST_AUTO_TEST_CASE(a_destroyed_requester_still_delivers_the_answers_it_asked_for) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto o = sys.spawn<oracle>();
  std::future<strata::expected<int>> answer;
  {
    strata::requester caller(sys);
    answer = caller.request<int>(o, 10s, question{});
  }
  // The requester's actor asks on its own time: release until the question has been there.
  BOOST_REQUIRE(strata::test::eventually([&] {
    auto r = sys.request<int>(o, 10s, release{});
    return await(r).value() != 0;
  }));
  BOOST_TEST(await(answer).value() == 42);
  // The requester's actor stops once its answer is in; the oracle lives on.
  BOOST_TEST(strata::test::eventually([&] { return sys.stats().live_actors == 1u; }));
}

BOOST_AUTO_TEST_CASE(a_shutdown_answers_a_requesters_open_requests_with_an_error) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto o = sys.spawn<oracle>();
  strata::requester caller(sys);
  auto answer = caller.request<int>(o, strata::no_timeout, question{});
  auto barrier = caller.barrier();
  (void)sys.shutdown();
  auto got = await(answer);
  BOOST_REQUIRE(!got.has_value());
  BOOST_TEST((got.error().code() == strata::errc::stopped), got.error().to_string());
  BOOST_TEST(!await(barrier).has_value());
}

// An actor that blocks the system's only scheduler thread on a requester's future is served when
// the requester (and the actor it asks) run on threads of their own.
BOOST_AUTO_TEST_CASE(a_requester_on_a_thread_of_its_own_serves_an_actor_that_holds_the_only_scheduler_thread) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto target = sys.spawn_with<recorder>(strata::spawn_options{.name = "recorder", .dedicated_thread = true});
  strata::requester caller(sys, strata::spawn_options{.name = "requester", .dedicated_thread = true});
  std::promise<int> inside;
  auto answered = inside.get_future();
  auto waiter = sys.spawn([&](strata::actor&) -> strata::behavior {
    return {[&](const question&) {
      auto got = caller.request<int>(target, 20s, numbered{7}).get();  // holds the thread meanwhile
      inside.set_value(got ? *got : -1);
    }};
  });
  BOOST_REQUIRE(sys.send(waiter, question{}));
  BOOST_REQUIRE((answered.wait_for(20s) == std::future_status::ready));
  BOOST_TEST(answered.get() == 7);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace requester_test
