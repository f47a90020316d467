// Contract tests: several work observers per device (device::add_work_observer and its handle,
// device::set_work_observer beside them), on the cpu and sim backends.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "helpers.hpp"

using namespace strata;

namespace work_observer_test {
/// The names an observer saw, in the order it saw them.
struct name_log {
  std::mutex mu;
  std::vector<std::string> names;
  work_observer observer() {
    return [this](const work_record& r) {
      std::lock_guard lk(mu);
      names.push_back(*r.name);
    };
  }
  std::vector<std::string> seen() {
    std::lock_guard lk(mu);
    return names;
  }
};

/// Launches items named `<prefix>0` .. `<prefix>n-1` on `s` and waits for them.
void run_items(stream& s, const std::string& prefix, int n) {
  for (int i = 0; i < n; ++i) s.launch({.name = prefix + std::to_string(i), .flops = 1e6, .cpu = [] {}});
  s.synchronize();
}

std::vector<std::string> names(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

const char* const specs[] = {"cpu:1", "sim:1"};

BOOST_AUTO_TEST_SUITE(work_observers)

BOOST_AUTO_TEST_CASE(two_added_observers_both_see_every_work_record_on_cpu_and_sim) {
  for (const char* spec : specs) {
    BOOST_TEST_CONTEXT(spec) {
      auto dev = make_devices(spec, test::deterministic_sim());
      name_log a, b;
      auto ha = dev[0].add_work_observer(a.observer());
      auto hb = dev[0].add_work_observer(b.observer());
      auto s = dev[0].create_stream();
      run_items(s, "k", 20);
      BOOST_TEST(a.seen() == names("k", 20), boost::test_tools::per_element());
      BOOST_TEST(b.seen() == names("k", 20), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_removed_observer_sees_nothing_more_while_the_other_still_does_on_cpu_and_sim) {
  for (const char* spec : specs) {
    BOOST_TEST_CONTEXT(spec) {
      auto dev = make_devices(spec, test::deterministic_sim());
      name_log a, b, c;
      auto ha = dev[0].add_work_observer(a.observer());
      auto hb = dev[0].add_work_observer(b.observer());
      auto s = dev[0].create_stream();
      run_items(s, "before", 3);
      BOOST_TEST(ha.active());
      ha.remove();
      BOOST_TEST(!ha.active());
      ha.remove();  // a second time: nothing
      run_items(s, "after", 3);
      {
        auto hc = dev[0].add_work_observer(c.observer());
        run_items(s, "scoped", 2);
      }  // the handle's destructor removes c
      hb = work_observer_handle{};  // assigning removes b
      run_items(s, "unobserved", 2);
      BOOST_TEST(a.seen() == names("before", 3), boost::test_tools::per_element());
      auto expected_b = names("before", 3);
      for (const auto& more : {names("after", 3), names("scoped", 2)}) expected_b.insert(expected_b.end(), more.begin(), more.end());
      BOOST_TEST(b.seen() == expected_b, boost::test_tools::per_element());
      BOOST_TEST(c.seen() == names("scoped", 2), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(set_work_observer_replaces_only_its_own_observer_on_cpu_and_sim) {
  for (const char* spec : specs) {
    BOOST_TEST_CONTEXT(spec) {
      auto dev = make_devices(spec, test::deterministic_sim());
      name_log added, first, second;
      auto h = dev[0].add_work_observer(added.observer());
      dev[0].set_work_observer(first.observer());
      auto s = dev[0].create_stream();
      run_items(s, "a", 2);
      dev[0].set_work_observer(second.observer());
      run_items(s, "b", 2);
      dev[0].set_work_observer({});
      run_items(s, "c", 2);
      BOOST_TEST(first.seen() == names("a", 2), boost::test_tools::per_element());
      BOOST_TEST(second.seen() == names("b", 2), boost::test_tools::per_element());
      auto all = names("a", 2);
      for (const auto& more : {names("b", 2), names("c", 2)}) all.insert(all.end(), more.begin(), more.end());
      BOOST_TEST(added.seen() == all, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_handle_moves_its_observer_and_outliving_the_device_removes_nothing) {
  work_observer_handle kept;
  std::atomic<int> calls{0};
  {
    auto dev = make_devices("cpu:1");
    auto h = dev[0].add_work_observer([&](const work_record&) { ++calls; });
    kept = std::move(h);
    BOOST_TEST(!h.active());
    BOOST_TEST(kept.active());
    auto s = dev[0].create_stream();
    run_items(s, "k", 3);
  }
  BOOST_TEST(calls.load() == 3);
  BOOST_CHECK_NO_THROW(kept.remove());
  BOOST_TEST(!kept.active());
}

BOOST_AUTO_TEST_CASE(an_observer_may_remove_itself_during_its_call) {
  auto dev = make_devices("cpu:1");
  std::atomic<int> calls{0};
  work_observer_handle self;
  std::promise<void> removed;
  self = dev[0].add_work_observer([&](const work_record&) {
    if (++calls == 1) {
      self.remove();  // not waited for: this is the call in progress
      removed.set_value();
    }
  });
  auto s = dev[0].create_stream();
  run_items(s, "k", 3);
  auto f = removed.get_future();
  BOOST_REQUIRE(test::ready_within(f));
  BOOST_TEST(calls.load() == 1);
  BOOST_TEST(!self.active());
}

BOOST_AUTO_TEST_CASE(remove_returns_after_a_call_in_progress_on_a_device_thread_has_finished) {
  auto dev = make_devices("cpu:1");
  test::gate hold;
  std::promise<void> entered;
  std::atomic<bool> call_finished{false}, passed{false};
  auto h = dev[0].add_work_observer([&](const work_record& r) {
    if (*r.name != "held") return;
    entered.set_value();
    passed = hold.pass();  // checked on the test's thread: Boost.Test is not thread-safe
    call_finished = true;
  });
  auto s = dev[0].create_stream();
  s.launch({.name = "held", .cpu = [] {}});
  auto in_call = entered.get_future();
  BOOST_REQUIRE(test::ready_within(in_call));
  std::promise<void> removing;
  std::atomic<bool> finished_when_removed{false};
  std::thread remover([&] {
    removing.set_value();
    h.remove();
    finished_when_removed = call_finished.load();
  });
  removing.get_future().wait();
  hold.open();
  remover.join();
  s.synchronize();
  BOOST_TEST(passed.load());
  BOOST_TEST(finished_when_removed.load());
}

BOOST_AUTO_TEST_CASE(an_empty_observer_is_refused) {
  auto dev = make_devices("cpu:1");
  BOOST_CHECK_THROW((void)dev[0].add_work_observer({}), device_error);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace work_observer_test
