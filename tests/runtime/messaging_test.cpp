// Contract tests: sending, ordering, urgent lane, unhandled messages, typed handles.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace messaging_test {

struct seq_msg {
  int producer;
  std::uint64_t seq;
};
struct finish {};
/// STRATA_TEST_SCALE (e.g. 0.1 under sanitizers, tools/ci/sanitizers.sh) scales the message counts.
std::uint64_t scaled(std::uint64_t n) {
  const char* s = std::getenv("STRATA_TEST_SCALE");
  const double f = s && *s ? std::strtod(s, nullptr) : 1.0;
  return f > 0 ? std::max<std::uint64_t>(1000, static_cast<std::uint64_t>(static_cast<double>(n) * f)) : n;
}
constexpr int producers = 4;
const std::uint64_t per_producer = scaled(50'000);
constexpr int many_producers = 8;
const std::uint64_t many_per_producer = scaled(1'000'000);

BOOST_AUTO_TEST_SUITE(messaging)

BOOST_AUTO_TEST_CASE(messages_from_one_sender_arrive_in_the_order_sent) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::test::shared_promise<bool> ok;
  auto result = ok.future();
  auto receiver = sys.spawn([p = ok.p](strata::actor& self) -> strata::behavior {
    auto next = std::make_shared<std::vector<std::uint64_t>>(producers, 0);
    auto in_order = std::make_shared<bool>(true);
    auto total = std::make_shared<std::uint64_t>(0);
    return {[&self, p, next, in_order, total](const seq_msg& m) {
      if ((*next)[m.producer] != m.seq) *in_order = false;
      (*next)[m.producer] = m.seq + 1;
      if (++*total == producers * per_producer) {
        p->set_value(*in_order);
        self.quit();
      }
    }};
  });
  // Half the producers are actors (sending in bursts), half are plain threads.
  std::vector<std::thread> threads;
  for (int i = 0; i < producers; ++i) {
    if (i % 2 == 0) {
      sys.spawn([receiver, i](strata::actor& self) -> strata::behavior {
        for (std::uint64_t s = 0; s < per_producer; ++s) self.send(receiver, seq_msg{i, s});
        self.quit();
        return {[](const finish&) {}};
      });
    } else {
      threads.emplace_back([&sys, receiver, i] {
        for (std::uint64_t s = 0; s < per_producer; ++s) sys.send(receiver, seq_msg{i, s});
      });
    }
  }
  for (auto& t : threads) t.join();
  BOOST_TEST(await(result));
}

BOOST_AUTO_TEST_CASE(eight_many_producers_of_one_million_messages_each_are_all_counted_exactly) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::test::shared_promise<std::uint64_t> done;
  auto result = done.future();
  auto receiver = sys.spawn([p = done.p](strata::actor& self) -> strata::behavior {
    auto count = std::make_shared<std::uint64_t>(0);
    auto sum = std::make_shared<std::uint64_t>(0);
    return {[&self, p, count, sum](std::uint64_t v) {
      *sum += v;
      if (++*count == many_producers * many_per_producer) {
        p->set_value(*sum);
        self.quit();
      }
    }};
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < many_producers; ++i)
    threads.emplace_back([&sys, receiver] {
      for (std::uint64_t s = 1; s <= many_per_producer; ++s) sys.send(receiver, s);
    });
  for (auto& t : threads) t.join();
  const std::uint64_t expected_sum = many_producers * (many_per_producer * (many_per_producer + 1) / 2);
  BOOST_TEST(await(result) == expected_sum);
  auto report = sys.shutdown();
  BOOST_TEST(report.stats.undeliverable == 0u);
  BOOST_TEST(report.stats.dropped == 0u);
  BOOST_TEST(report.stats.messages_handled >= many_producers * many_per_producer);
}

BOOST_AUTO_TEST_CASE(urgent_messages_overtake_queued_normal_messages) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::promise<void> gate;
  auto gate_future = gate.get_future().share();
  std::promise<void> entered;
  auto entered_future = entered.get_future();
  strata::test::shared_promise<std::vector<int>> order;
  auto result = order.future();
  auto target = sys.spawn([&, p = order.p](strata::actor& self) -> strata::behavior {
    auto seen = std::make_shared<std::vector<int>>();
    return {
        [&entered, gate_future](const std::string&) {
          entered.set_value();
          gate_future.wait();  // holds the actor so that the next messages queue up
        },
        [&self, seen, p](int v) {
          seen->push_back(v);
          if (seen->size() == 6) {
            p->set_value(*seen);
            self.quit();
          }
        }};
  });
  sys.send(target, std::string("hold"));
  entered_future.wait();
  for (int i = 1; i <= 4; ++i) sys.send(target, i);
  sys.send_urgent(target, 100);
  sys.send_urgent(target, 101);
  gate.set_value();
  auto seen = await(result);
  BOOST_TEST(seen == (std::vector<int>{100, 101, 1, 2, 3, 4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_message_without_handler_is_counted_and_fails_its_request) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto target = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  sys.send(target, std::string("nobody handles me"));
  auto reply = sys.request<int>(target, 5s, 2.5);
  auto r = await(reply);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code() == strata::errc::unhandled_message);
  BOOST_TEST(r.error().message().find("double") != std::string::npos);
  auto report = sys.shutdown();
  BOOST_TEST(report.stats.unhandled == 2u);
}

BOOST_AUTO_TEST_CASE(a_send_to_a_terminated_actor_returns_an_error_and_is_counted) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto target = sys.spawn([](strata::actor& self) -> strata::behavior {
    return {[&self](int) { self.quit(); }};
  });
  sys.send(target, 1);
  BOOST_REQUIRE(sys.await_all_for(5s));
  auto r = sys.send(target, 2);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code() == strata::errc::target_terminated);
  BOOST_TEST(sys.stats().undeliverable == 1u);
  strata::actor_ref empty;
  auto e = sys.send(empty, 3);
  BOOST_TEST(e.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(sys.stats().undeliverable == 2u);  // an empty handle counts too (docs/runtime.md)
}

BOOST_AUTO_TEST_CASE(a_send_to_an_empty_handle_from_an_actor_is_counted_undeliverable) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto sender = sys.spawn([](strata::actor& self) -> strata::behavior {
    return {[&self](int n) {
      strata::actor_ref nobody;
      for (int i = 0; i < n; ++i) BOOST_CHECK(!self.send(nobody, i).has_value());
    }};
  });
  std::mt19937 rng(std::random_device{}());
  const int n = 1 + static_cast<int>(rng() % 50);
  sys.send(sender, n);
  auto report = sys.shutdown();  // drains first
  BOOST_TEST(report.stats.undeliverable == static_cast<std::uint64_t>(n));
}

BOOST_AUTO_TEST_CASE(a_handler_result_for_a_plain_send_is_dropped_and_counted) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto doubler = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int x) { return 2 * x; }}; });
  std::mt19937 rng(std::random_device{}());
  const int sends = 1 + static_cast<int>(rng() % 40);
  for (int i = 0; i < sends; ++i) sys.send(doubler, i);
  auto reply = sys.request<int>(doubler, 5s, 21);  // a request is answered, not counted
  auto answered = await(reply);
  BOOST_REQUIRE(answered.has_value());
  BOOST_TEST(*answered == 42);
  auto report = sys.shutdown();  // drains first
  BOOST_TEST(report.stats.unanswered_results == static_cast<std::uint64_t>(sends));
}

struct add {
  int value;
};
struct get_total {};
class accumulator : public strata::actor {
public:
  using protocol = strata::protocol<add, get_total>;
  explicit accumulator(int start) : total_(start) {}
  strata::behavior make_behavior() override {
    return {[this](const add& a) { total_ += a.value; }, [this](const get_total&) { return total_; }};
  }

private:
  int total_;
};
/// Declares get_total but forgot its handler.
class forgetful : public strata::actor {
public:
  using protocol = strata::protocol<add, get_total>;
  strata::behavior make_behavior() override {
    return {[](const add&) {}};
  }
};

BOOST_AUTO_TEST_CASE(spawning_a_typed_actor_whose_behavior_misses_a_protocol_type_fails_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  try {
    (void)sys.spawn<forgetful>();
    BOOST_FAIL("the spawn should have thrown");
  } catch (const strata::error_exception& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("get_total") != std::string::npos);
    BOOST_TEST(what.find("no handler") != std::string::npos);
  }
  auto report = sys.shutdown();
  BOOST_TEST(report.stats.live_actors == 0u);
  BOOST_TEST(report.actors_stopped == 0u);  // the actor never ran
}

BOOST_AUTO_TEST_CASE(class_based_actors_get_typed_handles_and_keep_private_state) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::typed_actor<accumulator::protocol> acc = sys.spawn<accumulator>(10);
  std::mt19937 rng(42);
  int expected = 10;
  for (int i = 0; i < 1000; ++i) {
    int v = static_cast<int>(rng() % 100);
    expected += v;
    sys.send(acc, add{v});
  }
  auto total = sys.request<int>(acc, 5s, get_total{});
  BOOST_TEST(await(total).value() == expected);
}

BOOST_AUTO_TEST_CASE(actor_handles_are_cheap_values_that_compare_by_identity) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto a = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  auto b = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  strata::actor_ref a2 = a;
  BOOST_TEST(sizeof(strata::actor_ref) == sizeof(void*));
  BOOST_TEST((a2 == a));
  BOOST_TEST(!(a == b));
  BOOST_TEST(a.id() != b.id());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace messaging_test
