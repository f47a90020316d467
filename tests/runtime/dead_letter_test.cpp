// Contract tests of dead letters: undeliverable and unhandled messages offered to subscribers.

#include <boost/test/unit_test.hpp>

#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace dead_letter_test {

using strata::test::await_down;

/// What a dead-letter subscriber saw; `done` resolves once `expected` letters arrived.
struct letters {
  std::mutex m;
  std::vector<strata::dead_letter> seen;
  std::size_t expected = 0;
  std::promise<void> done;
};

strata::actor_ref spawn_subscriber(strata::actor_system& sys, std::shared_ptr<letters> out) {
  auto ref = sys.spawn([out](strata::actor&) -> strata::behavior {
    return {[out](const strata::dead_letter& d) {
      std::lock_guard lock(out->m);
      out->seen.push_back(d);
      if (out->seen.size() == out->expected) out->done.set_value();
    }};
  });
  BOOST_REQUIRE(sys.subscribe_dead_letters(ref));
  return ref;
}

std::vector<int> random_ints(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> v(n);
  for (auto& x : v) x = static_cast<int>(rng() % 100000);
  return v;
}

BOOST_AUTO_TEST_SUITE(dead_letters)

BOOST_AUTO_TEST_CASE(a_subscriber_receives_a_dead_letter_for_each_message_sent_to_a_terminated_actor) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto target = sys.spawn([](strata::actor& self) -> strata::behavior { return {[&self](int) { self.quit(); }}; });
  sys.send(target, 0);
  await_down(sys, target);
  auto out = std::make_shared<letters>();
  const auto values = random_ints(5 + std::random_device{}() % 40, 3);
  out->expected = values.size();
  auto done = out->done.get_future();
  spawn_subscriber(sys, out);
  const auto before = sys.stats().undeliverable;
  auto sender = sys.spawn([target, values](strata::actor& self) -> strata::behavior {
    for (int v : values) (void)self.send(target, v);
    return {[](const strata::unit_t&) {}};
  });
  await(done);
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  std::lock_guard lock(out->m);
  BOOST_TEST(out->seen.size() == values.size());
  BOOST_TEST(sys.stats().undeliverable - before == values.size());
  for (const auto& d : out->seen) {
    BOOST_TEST(d.type_name == "int");
    BOOST_TEST((d.sender == sender));
    BOOST_TEST((d.receiver == target));
    BOOST_TEST(d.reason.code() == strata::errc::target_terminated);
    BOOST_TEST(!d.request);
  }
}

BOOST_AUTO_TEST_CASE(sends_to_an_empty_handle_and_unhandled_types_become_dead_letters_with_their_reason) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto ints_only = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  auto out = std::make_shared<letters>();
  out->expected = 3;
  auto done = out->done.get_future();
  spawn_subscriber(sys, out);
  BOOST_TEST(!sys.send(strata::actor_ref{}, 42));
  sys.send(ints_only, std::string("not an int"));
  auto reply = sys.request<int>(ints_only, 5s, 2.5);  // a request: its requester gets the error too
  BOOST_TEST(await(reply).error().code() == strata::errc::unhandled_message);
  await(done);
  std::lock_guard lock(out->m);
  int empty = 0, unhandled = 0, requests = 0;
  for (const auto& d : out->seen) {
    if (d.reason.code() == strata::errc::invalid_argument) {
      ++empty;
      BOOST_TEST(!d.receiver);
      BOOST_TEST(d.type_name == "int");
    } else if (d.reason.code() == strata::errc::unhandled_message) {
      ++unhandled;
      BOOST_TEST((d.receiver == ints_only));
      BOOST_TEST(d.reason.message().find("has no handler for message type") != std::string::npos);
      if (d.request) {
        ++requests;
        BOOST_TEST(d.type_name == "double");
      }
    }
  }
  BOOST_TEST(empty == 1);
  BOOST_TEST(unhandled == 2);
  BOOST_TEST(requests == 1);
}

BOOST_AUTO_TEST_CASE(refused_by_a_full_mailbox_or_discarded_at_termination_a_message_becomes_a_dead_letter) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  struct hold {};
  auto entered = std::make_shared<std::promise<void>>();
  auto gate = std::make_shared<std::promise<void>>();
  std::shared_future<void> open = gate->get_future().share();
  auto blocked = sys.spawn_fn_with(strata::spawn_options{.name = "blocked", .mailbox_capacity = 4},
                                   [entered, open](strata::actor&) -> strata::behavior {
                                     return {[entered, open](const hold&) {
                                               entered->set_value();
                                               open.wait();  // the test holds this actor here on purpose
                                             },
                                             [](int) {}};
                                   });
  auto out = std::make_shared<letters>();
  const auto values = random_ints(10 + std::random_device{}() % 20, 5);
  out->expected = values.size();  // capacity 4 queued, the rest refused; then the 4 are discarded
  auto done = out->done.get_future();
  spawn_subscriber(sys, out);
  sys.send(blocked, hold{});
  auto in = entered->get_future();
  await(in);
  std::size_t refused = 0;
  for (int v : values) refused += sys.send(blocked, v) ? 0 : 1;
  BOOST_TEST(refused == values.size() - 4);
  sys.stop(blocked);
  gate->set_value();
  await(done);
  await_down(sys, blocked);
  std::lock_guard lock(out->m);
  std::size_t full = 0, discarded = 0;
  for (const auto& d : out->seen) {
    BOOST_TEST((d.receiver == blocked));
    if (d.reason.code() == strata::errc::mailbox_full) ++full;
    if (d.reason.code() == strata::errc::target_terminated) {
      ++discarded;
      BOOST_TEST(d.reason.message().find("terminated before handling") != std::string::npos);
    }
  }
  BOOST_TEST(full == values.size() - 4);
  BOOST_TEST(discarded == 4u);
}

BOOST_AUTO_TEST_CASE(a_terminated_subscriber_is_dropped_without_looping) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto subscriber = sys.spawn([](strata::actor& self) -> strata::behavior {
    return {[](const strata::dead_letter&) {}, [&self](int) { self.quit(); }};
  });
  BOOST_REQUIRE(sys.subscribe_dead_letters(subscriber));
  sys.send(subscriber, 1);
  await_down(sys, subscriber);
  auto target = sys.spawn([](strata::actor& self) -> strata::behavior { return {[&self](int) { self.quit(); }}; });
  sys.send(target, 1);
  await_down(sys, target);
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  const auto before = sys.stats().undeliverable;
  BOOST_TEST(!sys.send(target, 2));
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  // The message and the dead letter to the dead subscriber; nothing offered again.
  BOOST_TEST(sys.stats().undeliverable - before == 2u);
  BOOST_TEST(!sys.unsubscribe_dead_letters(subscriber));  // already dropped
  BOOST_TEST(!sys.send(target, 3));
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  BOOST_TEST(sys.stats().undeliverable - before == 3u);
}

BOOST_AUTO_TEST_CASE(an_unsubscribed_actor_receives_no_more_dead_letters_and_an_empty_handle_cannot_subscribe) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto refused = sys.subscribe_dead_letters(strata::actor_ref{});
  BOOST_REQUIRE(!refused);
  BOOST_TEST(refused.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(refused.error().message() == "cannot subscribe an empty actor handle to dead letters");
  auto out = std::make_shared<letters>();
  out->expected = 1;
  auto done = out->done.get_future();
  auto sub = spawn_subscriber(sys, out);
  BOOST_TEST(static_cast<bool>(sys.subscribe_dead_letters(sub)));  // twice: still one subscription
  sys.send(strata::actor_ref{}, 1);
  await(done);
  BOOST_TEST(sys.unsubscribe_dead_letters(sub));
  sys.send(strata::actor_ref{}, 2);
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  std::lock_guard lock(out->m);
  BOOST_TEST(out->seen.size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace dead_letter_test
