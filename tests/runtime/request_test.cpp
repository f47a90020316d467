// Contract tests: request/response, continuations, promises, timeouts.

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <future>
#include <random>
#include <string>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace request_test {
struct square {
  int x;
};
struct later {
  int x;
};
struct never {};
struct divide {
  int a, b;
};

strata::behavior math_behavior(strata::actor& self) {
  auto held = std::make_shared<std::vector<strata::response_promise<int>>>();
  return {
      [](const square& s) { return s.x * s.x; },
      [](const divide& d) -> strata::expected<int> {
        if (d.b == 0) return strata::error(strata::errc::invalid_argument, "division by zero");
        return d.a / d.b;
      },
      [&self](const later& l) {
        // Answer after a round trip through a timer.
        auto promise = self.make_response_promise<int>();
        auto helper = self.system().spawn([promise, l](strata::actor& h) mutable -> strata::behavior {
          h.delayed_send(h.self(), 5ms, 0);
          return {[&h, promise, l](int) mutable {
            promise.deliver(l.x + 1);
            h.quit();
          }};
        });
        (void)helper;
      },
      [&self, held](const never&) { held->push_back(self.make_response_promise<int>()); },
  };
}

BOOST_AUTO_TEST_SUITE(requests)

BOOST_AUTO_TEST_CASE(a_request_from_an_actor_continues_with_the_response) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto math = sys.spawn(math_behavior);
  strata::test::shared_promise<int> result;
  auto f = result.future();
  sys.spawn([math, p = result.p](strata::actor& self) -> strata::behavior {
    self.request<int>(math, 5s, square{12}).then([&self, p](int v) {
      p->set_value(v);
      self.quit();
    });
    return {[](int) {}};
  });
  BOOST_TEST(await(f) == 144);
}

BOOST_AUTO_TEST_CASE(a_failed_reply_reaches_the_error_continuation) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto math = sys.spawn(math_behavior);
  auto ok = sys.request<int>(math, 5s, divide{9, 3});
  BOOST_TEST(await(ok).value() == 3);
  auto bad = sys.request<int>(math, 5s, divide{1, 0});
  auto r = await(bad);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(r.error().message() == "division by zero");
}

BOOST_AUTO_TEST_CASE(a_response_promise_answers_later_from_another_actor) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto math = sys.spawn(math_behavior);
  auto f = sys.request<int>(math, 5s, later{41});
  BOOST_TEST(await(f).value() == 42);
}

BOOST_AUTO_TEST_CASE(a_request_without_response_times_out_with_an_error_not_a_hang) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto math = sys.spawn(math_behavior);
  auto start = std::chrono::steady_clock::now();
  auto f = sys.request<int>(math, 50ms, never{});
  auto r = await(f);
  auto waited = std::chrono::steady_clock::now() - start;
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code() == strata::errc::request_timeout);
  BOOST_TEST(waited >= 50ms);
}

BOOST_AUTO_TEST_CASE(a_request_to_a_terminated_actor_fails_at_once) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto gone = sys.spawn([](strata::actor& self) -> strata::behavior {
    self.quit();
    return {[](int) { return 1; }};
  });
  BOOST_REQUIRE(sys.await_all_for(5s));
  auto f = sys.request<int>(gone, 10s, 5);
  BOOST_REQUIRE(f.wait_for(5s) == std::future_status::ready);
  auto r = f.get();
  BOOST_TEST(r.error().code() == strata::errc::target_terminated);
}

BOOST_AUTO_TEST_CASE(a_response_of_the_wrong_type_is_an_error) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto math = sys.spawn(math_behavior);
  auto f = sys.request<std::string>(math, 5s, square{3});
  auto r = await(f);
  BOOST_TEST(r.error().code() == strata::errc::type_mismatch);
}

BOOST_AUTO_TEST_CASE(request_void_completes_when_the_handler_returns) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto counter = std::make_shared<std::atomic<int>>(0);
  auto target = sys.spawn([counter](strata::actor&) -> strata::behavior {
    return {[counter](int v) { counter->fetch_add(v); }};
  });
  auto f = sys.request<void>(target, 5s, 7);
  BOOST_TEST(await(f).has_value());
  BOOST_TEST(counter->load() == 7);
}

BOOST_AUTO_TEST_CASE(an_error_without_error_continuation_fails_the_requester) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto math = sys.spawn(math_behavior);
  strata::test::shared_promise<strata::error> down;
  auto f = down.future();
  sys.spawn([math, p = down.p](strata::actor& self) -> strata::behavior {
    auto requester = self.system().spawn([math](strata::actor& r) -> strata::behavior {
      r.request<int>(math, 5s, divide{1, 0}).then([](int) {});
      return {[](int) {}};
    });
    self.monitor(requester);
    return {[&self, p](const strata::down_msg& d) {
      p->set_value(d.reason);
      self.quit();
    }};
  });
  auto reason = await(f);
  BOOST_TEST(reason.code() == strata::errc::unhandled_exception);
  BOOST_TEST(reason.message().find("division by zero") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_request_without_timeout_arms_no_timer_and_waits_for_its_answer) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  // The server keeps the promise until told to answer: meanwhile the system is idle, which it
  // would not be with a timer armed for the request.
  auto kept = std::make_shared<strata::response_promise<int>>();
  auto server = sys.spawn([kept](strata::actor& self) -> strata::behavior {
    return {[&self, kept](int x) {
              *kept = self.make_response_promise<int>();
              (void)x;
            },
            [kept](const std::string& answer) { kept->deliver(static_cast<int>(answer.size())); }};
  });
  auto got = std::make_shared<std::promise<int>>();
  auto client = sys.spawn([server, got](strata::actor& self) -> strata::behavior {
    return {[&self, server, got](bool) {
      self.request<int>(server, strata::no_timeout, 1).then([got](int v) { got->set_value(v); });
    }};
  });
  sys.send(client, true);
  BOOST_REQUIRE(sys.await_idle(10s));  // idle while the request is unanswered: no timer
  std::mt19937 rng(std::random_device{}());
  std::string answer(1 + rng() % 100, 'x');
  sys.send(server, answer);
  auto f = got->get_future();
  BOOST_TEST(await(f) == static_cast<int>(answer.size()));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace request_test
