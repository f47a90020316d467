// Contract tests of the registry: actors by name, typed and untyped look-ups, automatic removal.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace registry_test {

struct scale {
  int value;
};
struct halt {};

/// Multiplies by its factor; quits on `halt`.
class multiplier : public strata::actor {
public:
  using protocol = strata::protocol<scale, halt>;
  explicit multiplier(int factor) : factor_(factor) {}
  strata::behavior make_behavior() override {
    return {[this](const scale& s) { return s.value * factor_; }, [this](const halt&) { quit(); }};
  }

private:
  int factor_;
};

/// Resolves `p` when `target` terminates (the registry entry is gone by then).
void watch(strata::actor_system& sys, const strata::actor_ref& target, std::shared_ptr<std::promise<void>> p) {
  sys.spawn([target, p](strata::actor& self) -> strata::behavior {
    self.monitor(target);
    return {[&self, p](const strata::down_msg&) {
      p->set_value();
      self.quit();
    }};
  });
}

BOOST_AUTO_TEST_SUITE(registry)

BOOST_AUTO_TEST_CASE(a_registered_actor_is_found_by_its_name_typed_and_untyped) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  std::vector<int> factors;
  for (int i = 0; i < 8; ++i) {
    factors.push_back(dist(rng));
    auto ref = sys.spawn<multiplier>(factors.back());
    BOOST_REQUIRE(sys.register_name(ref, "multiplier-" + std::to_string(i)));
  }
  for (int i = 0; i < 8; ++i) {
    const std::string name = "multiplier-" + std::to_string(i);
    int x = dist(rng);
    auto typed = sys.lookup<multiplier::protocol>(name);
    BOOST_REQUIRE(typed);
    auto r1 = sys.request<int>(*typed, 5s, scale{x});
    BOOST_TEST(await(r1).value() == x * factors[i]);
    auto untyped = sys.lookup(name);
    BOOST_REQUIRE(untyped);
    BOOST_TEST((*untyped == typed->ref()));
    auto r2 = sys.request<int>(*untyped, 5s, scale{x + 1});
    BOOST_TEST(await(r2).value() == (x + 1) * factors[i]);
  }
  // A narrower protocol is a safe view of the same actor.
  BOOST_TEST(static_cast<bool>(sys.lookup<strata::protocol<scale>>("multiplier-3")));
  auto names = sys.registered_names();
  BOOST_TEST(names.size() == 8u);
  BOOST_TEST(std::is_sorted(names.begin(), names.end()));
  auto missing = sys.lookup("multiplier-8");
  BOOST_REQUIRE(!missing);
  BOOST_TEST(missing.error().code() == strata::errc::not_found);
  BOOST_TEST(missing.error().message() == "no actor is registered under the name 'multiplier-8'");
}

BOOST_AUTO_TEST_CASE(a_registry_entry_goes_away_when_its_actor_exits) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::mt19937 rng(11);
  std::vector<strata::typed_actor<multiplier::protocol>> refs;
  for (int i = 0; i < 12; ++i) {
    refs.push_back(sys.spawn<multiplier>(i));
    BOOST_REQUIRE(sys.register_name(refs.back(), "m" + std::to_string(i)));
  }
  std::vector<bool> halted(refs.size(), false);
  std::vector<std::future<void>> downs;
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (rng() % 2 == 0) continue;
    halted[i] = true;
    auto p = std::make_shared<std::promise<void>>();
    downs.push_back(p->get_future());
    watch(sys, refs[i], p);
    if (i % 3 == 0) sys.stop(refs[i]);  // stopped from outside ...
    else sys.send(refs[i], halt{});      // ... or quitting on its own
  }
  BOOST_REQUIRE(!downs.empty());
  for (auto& d : downs) await(d);
  for (std::size_t i = 0; i < refs.size(); ++i) {
    auto found = sys.lookup("m" + std::to_string(i));
    BOOST_TEST(static_cast<bool>(found) == !halted[i], "entry m" << i);
  }
  // A freed name can be taken again.
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (!halted[i]) continue;
    auto fresh = sys.spawn<multiplier>(100);
    BOOST_REQUIRE(sys.register_name(fresh, "m" + std::to_string(i)));
    BOOST_TEST((sys.lookup("m" + std::to_string(i)).value() == fresh.ref()));
    break;
  }
}

BOOST_AUTO_TEST_CASE(registering_a_taken_name_an_empty_handle_or_a_terminated_actor_is_refused_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto a = sys.spawn<multiplier>(2);
  auto b = sys.spawn<multiplier>(3);
  BOOST_REQUIRE(sys.register_name(a, "doubler"));
  auto taken = sys.register_name(b, "doubler");
  BOOST_REQUIRE(!taken);
  BOOST_TEST(taken.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(taken.error().message().find("the name 'doubler' is already registered to actor") == 0u);
  BOOST_TEST((sys.lookup("doubler").value() == a.ref()));

  auto empty = sys.register_name(strata::actor_ref{}, "nobody");
  BOOST_REQUIRE(!empty);
  BOOST_TEST(empty.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(empty.error().message() == "cannot register an empty actor handle under the name 'nobody'");

  auto unnamed = sys.register_name(b, "");
  BOOST_REQUIRE(!unnamed);
  BOOST_TEST(unnamed.error().code() == strata::errc::invalid_argument);

  auto p = std::make_shared<std::promise<void>>();
  auto down = p->get_future();
  watch(sys, b, p);
  sys.send(b, halt{});
  await(down);
  auto late = sys.register_name(b, "tripler");
  BOOST_REQUIRE(!late);
  BOOST_TEST(late.error().code() == strata::errc::target_terminated);
  BOOST_TEST(!sys.lookup("tripler"));
}

BOOST_AUTO_TEST_CASE(a_typed_lookup_of_an_actor_registered_untyped_or_with_another_protocol_is_refused) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto typed = sys.spawn<multiplier>(5);
  BOOST_REQUIRE(sys.register_name(typed.ref(), "untyped"));  // an actor_ref carries no protocol
  auto r = sys.lookup<multiplier::protocol>("untyped");
  BOOST_REQUIRE(!r);
  BOOST_TEST(r.error().code() == strata::errc::type_mismatch);
  BOOST_TEST(static_cast<bool>(sys.lookup("untyped")));

  BOOST_REQUIRE(sys.register_name(typed, "typed"));
  auto wrong = sys.lookup<strata::protocol<scale, std::string>>("typed");
  BOOST_REQUIRE(!wrong);
  BOOST_TEST(wrong.error().code() == strata::errc::type_mismatch);
  BOOST_TEST(wrong.error().message().find("does not handle") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(of_threads_racing_for_one_name_exactly_one_wins_and_unregistering_frees_it) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  constexpr int threads = 6;
  std::vector<strata::typed_actor<multiplier::protocol>> refs;
  for (int i = 0; i < threads; ++i) refs.push_back(sys.spawn<multiplier>(i));
  std::atomic<int> wins{0};
  std::vector<std::thread> racers;
  for (int i = 0; i < threads; ++i)
    racers.emplace_back([&, i] {
      if (sys.register_name(refs[i], "contested")) wins.fetch_add(1);
    });
  for (auto& t : racers) t.join();
  BOOST_TEST(wins.load() == 1);
  auto winner = sys.lookup<multiplier::protocol>("contested").value();
  auto r = sys.request<int>(winner, 5s, scale{1});
  int factor = await(r).value();
  BOOST_TEST((winner == refs[static_cast<std::size_t>(factor)]));
  BOOST_TEST(sys.unregister_name("contested"));
  BOOST_TEST(!sys.unregister_name("contested"));
  BOOST_TEST(!sys.lookup("contested"));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace registry_test
