// Contract tests of publish / subscribe groups.

#include <boost/test/unit_test.hpp>

#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace group_test {

using strata::test::await_down;

struct tick {
  int publisher;
  int value;
};

/// What one member received; `done` resolves once `expected` ticks arrived.
struct inbox {
  std::mutex m;
  std::vector<tick> seen;
  std::size_t expected = 0;
  std::promise<void> done;
};

strata::actor_ref spawn_member(strata::actor_system& sys, std::shared_ptr<inbox> box) {
  return sys.spawn([box](strata::actor& self) -> strata::behavior {
    return {[box](const tick& t) {
              std::lock_guard lock(box->m);
              box->seen.push_back(t);
              if (box->seen.size() == box->expected) box->done.set_value();
            },
            [&self](const std::string&) { self.quit(); }};
  });
}

BOOST_AUTO_TEST_SUITE(groups)

BOOST_AUTO_TEST_CASE(every_member_receives_every_publication_in_each_publishers_order) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(std::random_device{}());
  const int publishers = 3;
  const std::size_t per_publisher = 50 + rng() % 200;
  std::vector<std::vector<int>> sequences(publishers);
  for (auto& s : sequences)
    for (std::size_t i = 0; i < per_publisher; ++i) s.push_back(static_cast<int>(rng() % 1000000));
  auto topic = sys.group("ticks");
  BOOST_TEST(topic.name() == "ticks");
  const std::size_t members = 2 + rng() % 5;
  std::vector<std::shared_ptr<inbox>> boxes;
  std::vector<std::future<void>> done;
  for (std::size_t i = 0; i < members; ++i) {
    boxes.push_back(std::make_shared<inbox>());
    boxes.back()->expected = per_publisher * publishers;
    done.push_back(boxes.back()->done.get_future());
    BOOST_REQUIRE(sys.group("ticks").subscribe(spawn_member(sys, boxes.back())));  // same name, same group
  }
  BOOST_TEST(topic.size() == members);
  // Publisher 0 is an actor; the others are outside threads.
  auto actor_publisher = sys.spawn([topic, seq = sequences[0]](strata::actor&) mutable -> strata::behavior {
    for (int v : seq) topic.publish(tick{0, v});
    return {[](const strata::unit_t&) {}};
  });
  std::vector<std::thread> threads;
  std::vector<std::size_t> short_publications(publishers, 0);  // checked here: Boost.Test is not thread-safe
  for (int p = 1; p < publishers; ++p)
    threads.emplace_back([&, p] {
      for (int v : sequences[static_cast<std::size_t>(p)])
        if (topic.publish(tick{p, v}) != members) ++short_publications[static_cast<std::size_t>(p)];
    });
  for (auto& t : threads) t.join();
  for (int p = 1; p < publishers; ++p) BOOST_TEST(short_publications[static_cast<std::size_t>(p)] == 0u);
  for (auto& d : done) await(d);
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  for (auto& box : boxes) {
    std::lock_guard lock(box->m);
    BOOST_REQUIRE(box->seen.size() == per_publisher * publishers);
    std::vector<std::vector<int>> per(publishers);
    for (const auto& t : box->seen) per[static_cast<std::size_t>(t.publisher)].push_back(t.value);
    for (int p = 0; p < publishers; ++p) BOOST_TEST(per[static_cast<std::size_t>(p)] == sequences[static_cast<std::size_t>(p)]);
  }
  (void)actor_publisher;
}

BOOST_AUTO_TEST_CASE(a_member_that_exits_leaves_the_group_and_an_unsubscribed_one_receives_nothing_more) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(std::random_device{}());
  auto topic = sys.group("members");
  const std::size_t n = 6 + rng() % 6;
  std::vector<strata::actor_ref> refs;
  std::vector<std::shared_ptr<inbox>> boxes;
  for (std::size_t i = 0; i < n; ++i) {
    boxes.push_back(std::make_shared<inbox>());
    refs.push_back(spawn_member(sys, boxes.back()));
    BOOST_REQUIRE(topic.subscribe(refs.back()));
    BOOST_REQUIRE(topic.subscribe(refs.back()));  // twice: one subscription
  }
  BOOST_TEST(topic.size() == n);
  std::size_t left = 0;
  std::vector<bool> gone(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (rng() % 3 != 0) continue;
    gone[i] = true;
    ++left;
    if (i % 2 == 0) sys.send(refs[i], std::string("quit"));
    else sys.stop(refs[i]);
    await_down(sys, refs[i]);
  }
  BOOST_TEST(topic.size() == n - left);
  std::size_t unsubscribed = n;
  for (std::size_t i = 0; i < n; ++i)
    if (!gone[i]) {
      BOOST_TEST(topic.unsubscribe(refs[i]));
      BOOST_TEST(!topic.unsubscribe(refs[i]));
      unsubscribed = i;
      break;
    }
  const std::size_t listening = n - left - (unsubscribed < n ? 1 : 0);
  const int value = static_cast<int>(rng());
  BOOST_TEST(topic.publish(tick{0, value}) == listening);
  BOOST_REQUIRE(sys.await_idle(strata::test::patience));
  for (std::size_t i = 0; i < n; ++i) {
    std::lock_guard lock(boxes[i]->m);
    const bool should = !gone[i] && i != unsubscribed;
    BOOST_TEST(boxes[i]->seen.size() == (should ? 1u : 0u), "member " << i);
    if (should && !boxes[i]->seen.empty()) BOOST_TEST(boxes[i]->seen[0].value == value);
  }
  // A terminated actor cannot join.
  if (left > 0) {
    for (std::size_t i = 0; i < n; ++i)
      if (gone[i]) {
        auto r = topic.subscribe(refs[i]);
        BOOST_REQUIRE(!r);
        BOOST_TEST(r.error().code() == strata::errc::target_terminated);
        break;
      }
  }
}

BOOST_AUTO_TEST_CASE(an_empty_handle_cannot_subscribe_and_a_group_needs_a_name) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  auto topic = sys.group("t");
  auto r = topic.subscribe(strata::actor_ref{});
  BOOST_REQUIRE(!r);
  BOOST_TEST(r.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(r.error().message() == "cannot subscribe an empty actor handle to group 't'");
  BOOST_CHECK_THROW(sys.group(""), std::invalid_argument);
  strata::group none;
  BOOST_TEST(!none.subscribe(sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; })));
  BOOST_TEST(none.publish(1) == 0u);
  BOOST_TEST(topic.publish(1) == 0u);
  BOOST_TEST((sys.group("t") == topic));
  BOOST_TEST(!(sys.group("u") == topic));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace group_test
