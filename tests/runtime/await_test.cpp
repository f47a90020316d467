// request(...).await: until the awaited response (or its error) is handled, the actor handles no
// other message; those wait in arrival order and come next.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace await_test {

struct question {
  int n = 0;
};
struct release {};
struct go {};
struct entry {
  int i = 0;
};
struct read_log {};

/// Answers `question{n}` with 2n, but only once it gets `release` (the test decides when).
class oracle : public strata::actor {
public:
  strata::behavior make_behavior() override {
    return {[this](const question& q) {
              owed_.push_back({make_response_promise<int>(), 2 * q.n});
              return owed_.back().first;
            },
            [this](const release&) {
              for (auto& [promise, value] : owed_) promise.deliver(value);
              owed_.clear();
            }};
  }

private:
  std::vector<std::pair<strata::response_promise<int>, int>> owed_;
};

/// On `go`, asks the oracle (awaiting or not, and with what timeout) and logs what it handles.
class asker : public strata::actor {
public:
  asker(strata::actor_ref oracle, bool awaiting, std::chrono::nanoseconds timeout)
      : oracle_(std::move(oracle)), awaiting_(awaiting), timeout_(timeout) {}
  strata::behavior make_behavior() override {
    return {[this](const go&) {
              auto on_value = [this](int& v) { log_.push_back("response " + std::to_string(v)); };
              auto on_error = [this](const strata::error& e) { log_.push_back(std::string("error ") + strata::to_string(e.code())); };
              auto handle = request<int>(oracle_, timeout_, question{21});
              if (awaiting_) handle.await(on_value, on_error);
              else handle.then(on_value, on_error);
            },
            [this](const entry& e) { log_.push_back(std::to_string(e.i)); },
            [this](const read_log&) { return log_; }};
  }

private:
  strata::actor_ref oracle_;
  bool awaiting_;
  std::chrono::nanoseconds timeout_;
  std::vector<std::string> log_;
};

std::vector<std::string> numbers(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

BOOST_AUTO_TEST_SUITE(await_responses)

BOOST_AUTO_TEST_CASE(messages_that_arrive_while_an_actor_awaits_wait_until_the_response_is_handled) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto o = sys.spawn<oracle>();
  auto a = sys.spawn<asker>(o, true, std::chrono::nanoseconds(5s));
  sys.send(a, go{});
  for (int i = 0; i < 10; ++i) sys.send(a, entry{i});
  auto log = sys.request<std::vector<std::string>>(a, 10s, read_log{});  // waits too
  BOOST_TEST((log.wait_for(50ms) == std::future_status::timeout), "the actor handled a request while it awaited");
  sys.send(o, release{});
  auto got = await(log);
  BOOST_REQUIRE(got.has_value());
  auto want = numbers(10);
  want.insert(want.begin(), "response 42");
  BOOST_TEST(*got == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(with_then_instead_the_actor_handles_its_messages_while_the_request_is_open) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto o = sys.spawn<oracle>();
  auto a = sys.spawn<asker>(o, false, std::chrono::nanoseconds(5s));
  sys.send(a, go{});
  for (int i = 0; i < 10; ++i) sys.send(a, entry{i});
  auto before = sys.request<std::vector<std::string>>(a, 10s, read_log{});
  BOOST_TEST(await(before).value() == numbers(10), boost::test_tools::per_element());
  sys.send(o, release{});
  auto want = numbers(10);
  want.push_back("response 42");
  std::vector<std::string> after;
  strata::test::eventually([&] {  // the response lands soon after
    auto f = sys.request<std::vector<std::string>>(a, 10s, read_log{});
    after = await(f).value();
    return after == want;
  });
  BOOST_TEST(after == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_awaited_request_that_times_out_releases_the_waiting_messages_after_its_error) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto o = sys.spawn<oracle>();  // never released: the request times out
  auto a = sys.spawn<asker>(o, true, std::chrono::nanoseconds(50ms));
  sys.send(a, go{});
  for (int i = 0; i < 5; ++i) sys.send(a, entry{i});
  auto log = sys.request<std::vector<std::string>>(a, 10s, read_log{});
  auto got = await(log);
  BOOST_REQUIRE(got.has_value());
  auto want = numbers(5);
  want.insert(want.begin(), std::string("error ") + strata::to_string(strata::errc::request_timeout));
  BOOST_TEST(*got == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_stopped_actor_answers_the_requests_it_deferred_with_an_error) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto o = sys.spawn<oracle>();
  auto a = sys.spawn<asker>(o, true, strata::no_timeout);
  sys.send(a, go{});
  auto log = sys.request<std::vector<std::string>>(a, 10s, read_log{});
  BOOST_TEST((log.wait_for(20ms) == std::future_status::timeout));
  sys.stop(a);
  auto got = await(log);
  BOOST_REQUIRE(!got.has_value());
  BOOST_TEST((got.error().code() == strata::errc::target_terminated), got.error().to_string());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace await_test
