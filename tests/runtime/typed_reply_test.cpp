// Typed replies: a protocol entry R(T) declares that T is answered with R; requests through a
// typed handle then return R without naming it, and typed_behavior checks the handlers against
// the protocol at compile time (tests/compile_fail/typed_reply.cpp has the rejected cases).

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace typed_reply_test {

struct add {
  int a = 0;
  int b = 0;
};
struct reset {};
struct total_query {};
struct later_add {
  int a = 0;
  int b = 0;
};
struct flush {};
struct note {
  std::string text;
};

/// Adds pairs and keeps the running total; `later_add` is answered on the next `flush`.
class calculator : public strata::actor {
public:
  using protocol = strata::protocol<int(add), void(reset), long(total_query), int(later_add), flush, note>;

  strata::behavior make_behavior() override {
    return strata::typed_behavior<protocol>{
        [this](const add& m) {
          total_ += m.a + m.b;
          return m.a + m.b;
        },
        [this](const reset&) { total_ = 0; },
        [this](const total_query&) -> strata::expected<long> { return total_; },
        [this](const later_add& m) {
          auto promise = make_response_promise<int>();
          owed_.push_back({promise, m.a + m.b});
          send(self(), flush{});
          return promise;
        },
        [this](const flush&) {
          for (auto& [promise, sum] : owed_) promise.deliver(sum);
          owed_.clear();
        },
        [this](const note& n) { notes_.push_back(n.text); },
    };
  }

private:
  long total_ = 0;
  std::vector<std::pair<strata::response_promise<int>, int>> owed_;
  std::vector<std::string> notes_;
};

using calc_protocol = calculator::protocol;
static_assert(calc_protocol::declares_reply<add>);
static_assert(std::is_same_v<calc_protocol::reply_to<const add&>, int>);
static_assert(std::is_same_v<calc_protocol::reply_to<reset>, void>);
static_assert(!calc_protocol::declares_reply<note>);
static_assert(calc_protocol::handles<note> && !calc_protocol::handles<int>);
static_assert(calc_protocol::answers_with<add, int> && !calc_protocol::answers_with<add, long>);
static_assert(calc_protocol::answers_with<note, std::string>);  // undeclared: any reply may be asked for

BOOST_AUTO_TEST_SUITE(typed_replies)

BOOST_AUTO_TEST_CASE(a_request_through_a_typed_handle_returns_the_declared_reply_type) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto calc = sys.spawn<calculator>();
  static_assert(std::is_same_v<decltype(calc), strata::typed_actor<calc_protocol>>);
  std::mt19937 rng(20261204);
  std::uniform_int_distribution<int> value(-1000, 1000);
  long expected_total = 0;
  for (int i = 0; i < 50; ++i) {
    add m{value(rng), value(rng)};
    auto sum = sys.request(calc, 5s, m);
    static_assert(std::is_same_v<decltype(sum), std::future<strata::expected<int>>>);
    auto got = await(sum);
    BOOST_REQUIRE(got.has_value());
    BOOST_TEST(*got == m.a + m.b);
    expected_total += m.a + m.b;
  }
  auto total = sys.request(calc, 5s, total_query{});
  static_assert(std::is_same_v<decltype(total), std::future<strata::expected<long>>>);
  BOOST_TEST(await(total).value() == expected_total);
  auto cleared = sys.request(calc, 5s, reset{});
  static_assert(std::is_same_v<decltype(cleared), std::future<strata::expected<strata::unit_t>>>);
  BOOST_TEST(await(cleared).has_value());
  auto zero = sys.request(calc, 5s, total_query{});
  BOOST_TEST(await(zero).value() == 0);
  // Naming the declared type still compiles, and an entry without a declared reply keeps the
  // untyped request (answered with unit here).
  auto named = sys.request<int>(calc, 5s, add{2, 3});
  BOOST_TEST(await(named).value() == 5);
  auto noted = sys.request<void>(calc, 5s, note{"hello"});
  BOOST_TEST(await(noted).has_value());
}

BOOST_AUTO_TEST_CASE(an_actor_requests_through_a_typed_handle_and_continues_with_the_declared_type) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto calc = sys.spawn<calculator>();
  strata::test::shared_promise<int> result;
  auto f = result.future();
  sys.spawn([calc, p = result.p](strata::actor& self) -> strata::behavior {
    self.request(calc, 5s, add{40, 2}).then([p](int& sum) { p->set_value(sum); },
                                            [p](const strata::error&) { p->set_value(-1); });
    return {[](const strata::unit_t&) {}};
  });
  BOOST_TEST(await(f) == 42);
}

BOOST_AUTO_TEST_CASE(a_handler_that_returns_its_response_promise_answers_later) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto calc = sys.spawn<calculator>();
  std::vector<std::future<strata::expected<int>>> sums;
  for (int i = 0; i < 20; ++i) sums.push_back(sys.request(calc, 5s, later_add{i, 3 * i}));
  for (int i = 0; i < 20; ++i) {
    auto got = await(sums[static_cast<std::size_t>(i)]);
    BOOST_REQUIRE(got.has_value());
    BOOST_TEST(*got == 4 * i);
  }
  // A plain send of a message whose handler returns a promise answers nobody and counts nothing.
  const auto before = sys.stats().unanswered_results;
  sys.send(calc, later_add{1, 1});
  auto total = sys.request(calc, 5s, total_query{});
  BOOST_TEST(await(total).has_value());
  BOOST_TEST(sys.stats().unanswered_results == before);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace typed_reply_test
