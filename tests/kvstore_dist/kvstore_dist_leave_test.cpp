// A rank that leaves a dist_sync store, under mpirun (2 or more ranks): the last rank closes its
// store while the job goes on, then, in a second store, leaves the job. The other ranks' rounds
// and barriers that need its pushes fail at once with one sentence naming the key (or barrier)
// and the rank, well before the store's timeout; a version it pushed before it left completes.
// The cases run in order on every rank: the second one ends the last rank's endpoint.
#define BOOST_TEST_MODULE strata_kvstore_dist_leave
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/kvstore_dist/store.hpp"
#include "support/dist_world.hpp"

using namespace std::chrono_literals;
using namespace strata::test::dist;

namespace {

/// A 2 x 3 value of `x`.
strata::tensor filled(world& w, float x) { return w.make(std::vector<float>(6, x), {2, 3}); }

// Each call that must fail has to fail within this, against a store timeout of 30 s.
constexpr auto store_timeout = 30s;
constexpr double at_once_s = 10.0;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Integer keys 0..11, split into those the leaving rank owns and the others.
struct keys_by_owner {
  std::vector<strata::kvstore::key> of_leaver, of_others;
};
keys_by_owner sort_keys(const kvd::store& kv, int leaver) {
  keys_by_owner k;
  for (std::int64_t i = 0; i < 12; ++i) (kv.owner(i) == leaver ? k.of_leaver : k.of_others).emplace_back(i);
  return k;
}

/// Every rank inits every key (zeros) and pushpulls each with ones x (rank + 1): version 1, the
/// merged sum n(n+1)/2 everywhere.
void first_round(world& w, kvd::store& kv, const keys_by_owner& k) {
  const int n = kv.num_workers();
  for (const auto* list : {&k.of_leaver, &k.of_others})
    for (const auto& key : *list) BOOST_REQUIRE(kv.init(key, filled(w, 0.0f)));
  for (const auto* list : {&k.of_leaver, &k.of_others})
    for (const auto& key : *list) {
      auto got = kv.pushpull(key, {filled(w, static_cast<float>(kv.rank() + 1))});
      BOOST_REQUIRE_MESSAGE(got, got.error().message());
      for (float v : w.host(*got)) BOOST_TEST(v == static_cast<float>(n * (n + 1) / 2));
    }
}

/// A count of messages from other ranks, published on this rank as `name`: `wait()` returns once
/// `expected` have arrived, each sent by `tell`. Names are one per case.
class countdown {
public:
  countdown(world& w, int expected, const std::string& name) {
    auto all = std::make_shared<std::promise<void>>();
    all_ = all->get_future();
    auto left = std::make_shared<int>(expected);
    if (*left == 0) all->set_value();
    BOOST_REQUIRE(w.net.publish(w.sys.spawn([left, all](strata::actor&) -> strata::behavior {
                                  return {[left, all](std::int32_t) {
                                    if (--*left == 0) all->set_value();
                                  }};
                                }),
                                name));
  }
  /// True once every message has arrived; false if they have not within a minute.
  bool wait() { return all_.wait_for(60s) == std::future_status::ready; }
  /// Sends this rank's message to the countdown published as `name` on rank `to`.
  static bool tell(world& w, int to, const std::string& name) {
    return static_cast<bool>(w.sys.send(w.net.remote(to, name).value(), std::int32_t{w.net.rank()}));
  }

private:
  std::future<void> all_;
};

/// The ranks but the leaver (`leaver`, the last): after their checks each waits for the others',
/// so that none closes its store or leaves the job (which fails the others' calls naming it
/// instead of the leaver) while another still checks. `name`: one per case.
class survivors {
public:
  survivors(world& w, int leaver, std::string name)
      : w_(w), leaver_(leaver), name_(std::move(name)), all_(w, leaver - 1, name_) {}
  /// Tells the other survivors that this rank is done, and waits until they all are.
  bool all_done() {
    for (int r = 0; r < leaver_; ++r)
      if (r != w_.net.rank()) (void)countdown::tell(w_, r, name_);
    return all_.wait();
  }

private:
  world& w_;
  int leaver_;
  std::string name_;
  countdown all_;
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(world_fixture);

BOOST_AUTO_TEST_CASE(a_rank_that_closes_its_store_fails_the_rounds_and_barriers_that_wait_for_it_at_once) {
  world& w = *the_world;
  auto kv = std::make_unique<kvd::store>(w.sys, w.net, kvd::store_options{.timeout = store_timeout, .value_device = w.cpu});
  const int n = kv->num_workers();
  const int leaver = n - 1;
  BOOST_REQUIRE(n >= 2);
  const auto k = sort_keys(*kv, leaver);
  BOOST_REQUIRE(!k.of_leaver.empty());
  BOOST_REQUIRE(!k.of_others.empty());
  std::unique_ptr<survivors> others;
  if (kv->rank() != leaver) others = std::make_unique<survivors>(w, leaver, "kvstore_dist_leave_test.closed");
  first_round(w, *kv, k);
  if (kv->rank() == leaver) {
    // Its push of version 2 of the others' keys is in before it closes the store: that version
    // still completes on their shards.
    for (const auto& key : k.of_others) BOOST_REQUIRE(kv->push(key, {filled(w, static_cast<float>(leaver + 1))}));
    kv.reset();
    return;
  }
  const std::string rank = "rank " + std::to_string(leaver);
  for (const auto& key : k.of_others) {
    auto got = kv->pushpull(key, {filled(w, static_cast<float>(kv->rank() + 1))});
    BOOST_REQUIRE_MESSAGE(got, got.error().message());
    for (float v : w.host(*got)) BOOST_TEST(v == static_cast<float>(n * (n + 1) / 2));
  }
  // Version 3 waits for a push the leaving rank will never make.
  auto t0 = std::chrono::steady_clock::now();
  for (const auto& key : k.of_others) {
    auto got = kv->pushpull(key, {filled(w, 1.0f)});
    BOOST_REQUIRE(!got);
    BOOST_TEST(got.error().code() == strata::errc::rank_down);
    BOOST_TEST(got.error().message() == "kvstore dist_sync: key " + key.to_string() + " cannot complete version 3: " +
                                            rank + " has closed this store.");
  }
  // Its own keys: its shard has stopped, and the sentence names its rank.
  for (const auto& key : k.of_leaver) {
    auto got = kv->pushpull(key, {filled(w, 1.0f)});
    BOOST_REQUIRE(!got);
    BOOST_TEST(got.error().code() == strata::errc::target_terminated, got.error().message());
    BOOST_TEST(got.error().message() == "kvstore dist: the shard of " + rank +
                                            " has stopped (that rank closed this store, or its actor system ended).");
  }
  auto b = kv->barrier();
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().code() == strata::errc::rank_down);
  BOOST_TEST(b.error().message() == "kvstore dist barrier: barrier 1 cannot complete: " + rank + " has closed this store.");
  const double took = seconds_since(t0);
  BOOST_TEST_MESSAGE("rank " << kv->rank() << ": every call failed after " << took << " s");
  BOOST_TEST(took < at_once_s);
  BOOST_TEST(others->all_done());
}

BOOST_AUTO_TEST_CASE(a_rank_that_leaves_the_job_fails_the_rounds_and_barriers_that_wait_for_it_at_once) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.timeout = store_timeout, .value_device = w.cpu});
  const int n = kv.num_workers();
  const int leaver = n - 1;
  const auto k = sort_keys(kv, leaver);
  std::unique_ptr<survivors> others;
  if (kv.rank() != leaver) others = std::make_unique<survivors>(w, leaver, "kvstore_dist_leave_test.left");
  first_round(w, kv, k);
  if (kv.rank() == leaver) {
    w.net.shutdown();  // leaves the job with its store still open; waits there for the others
    return;
  }
  const std::string rank = "rank " + std::to_string(leaver);
  auto t0 = std::chrono::steady_clock::now();
  for (const auto& key : k.of_others) {
    auto got = kv.pushpull(key, {filled(w, 1.0f)});
    BOOST_REQUIRE(!got);
    BOOST_TEST(got.error().code() == strata::errc::rank_down);
    BOOST_TEST(got.error().message() == "kvstore dist_sync: key " + key.to_string() + " cannot complete version 2: " +
                                            rank + " has left the job.");
  }
  for (const auto& key : k.of_leaver) {
    auto got = kv.pushpull(key, {filled(w, 1.0f)});
    BOOST_REQUIRE(!got);
    BOOST_TEST(got.error().code() == strata::errc::rank_down, got.error().message());
  }
  auto b = kv.barrier();
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().code() == strata::errc::rank_down);
  BOOST_TEST(b.error().message() == "kvstore dist barrier: barrier 1 cannot complete: " + rank + " has left the job.");
  const double took = seconds_since(t0);
  BOOST_TEST_MESSAGE("rank " << kv.rank() << ": every call failed after " << took << " s");
  BOOST_TEST(took < at_once_s);
  BOOST_TEST(others->all_done());
}

// dist_sync_allreduce: a rank that closes its store, or leaves the job, while the others wait in
// a step (each case in a job of its own: the others' sums that it never joined stay posted). The
// others' steps fail at once, naming the rank, and so do their later steps and barriers; the
// endpoints still end.
BOOST_AUTO_TEST_SUITE(allreduce_leave)

void others_fail_at_once(world& w, kvd::store& kv, int leaver, const std::string& why) {
  const std::string head = "kvstore dist pushpull: the allreduce of this step failed, and no replica was updated: ";
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < 2; ++step) {  // the waiting step, then a later one
    auto got = kv.pushpull("g", {filled(w, 1.0f)});
    BOOST_REQUIRE(!got);
    BOOST_TEST(got.error().code() == strata::errc::rank_down);
    BOOST_TEST(got.error().message() == head + why + " (rank " + std::to_string(leaver) + ")");
  }
  auto b = kv.barrier();
  BOOST_REQUIRE(!b);
  BOOST_TEST(b.error().code() == strata::errc::rank_down);
  BOOST_TEST(b.error().message() == "kvstore dist barrier: " + why + " (rank " + std::to_string(leaver) + ")");
  const double took = seconds_since(t0);
  BOOST_TEST_MESSAGE("rank " << kv.rank() << ": every call failed after " << took << " s");
  BOOST_TEST(took < at_once_s);
}

/// Every rank inits "g" and makes one step (the sum n(n+1)/2 everywhere).
void one_step(world& w, kvd::store& kv) {
  const int n = kv.num_workers();
  BOOST_REQUIRE(kv.init("g", filled(w, 0.0f)));
  auto got = kv.pushpull("g", {filled(w, static_cast<float>(kv.rank() + 1))});
  BOOST_REQUIRE_MESSAGE(got, got.error().message());
  for (float v : w.host(*got)) BOOST_TEST(v == static_cast<float>(n * (n + 1) / 2));
}

BOOST_AUTO_TEST_CASE(a_rank_that_closes_its_store_fails_the_others_steps_at_once) {
  world& w = *the_world;
  auto kv = std::make_unique<kvd::store>(
      w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .timeout = store_timeout, .value_device = w.cpu});
  const int leaver = kv->num_workers() - 1;
  // The leaver closes its store once every other rank has said it is about to wait in its next
  // step (a step that begins only after the close fails alike, as the later step shows); it stays in the job until every other rank has checked (its leaving would else race
  // its store's closing to their watches): each sends it one message for each.
  const std::string waiting_name = "kvstore_dist_leave_test.allreduce_closed.waiting";
  const std::string checked_name = "kvstore_dist_leave_test.allreduce_closed.checked";
  std::unique_ptr<countdown> waiting, checked;
  if (kv->rank() == leaver) {
    waiting = std::make_unique<countdown>(w, leaver, waiting_name);
    checked = std::make_unique<countdown>(w, leaver, checked_name);
  }
  one_step(w, *kv);
  if (kv->rank() == leaver) {
    BOOST_REQUIRE(waiting->wait());
    kv.reset();
    BOOST_TEST(checked->wait());
    return;
  }
  BOOST_REQUIRE(countdown::tell(w, leaver, waiting_name));
  others_fail_at_once(w, *kv, leaver, "another rank closed this store");
  BOOST_REQUIRE(countdown::tell(w, leaver, checked_name));
}

BOOST_AUTO_TEST_CASE(a_rank_that_leaves_the_job_fails_the_others_steps_at_once) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .timeout = store_timeout, .value_device = w.cpu});
  const int leaver = kv.num_workers() - 1;
  // The leaver leaves once every other rank has said it is about to wait in its next step.
  const std::string waiting_name = "kvstore_dist_leave_test.allreduce_left.waiting";
  std::unique_ptr<countdown> waiting;
  if (kv.rank() == leaver) waiting = std::make_unique<countdown>(w, leaver, waiting_name);
  one_step(w, kv);
  if (kv.rank() == leaver) {
    BOOST_REQUIRE(waiting->wait());
    w.net.shutdown();  // leaves the job with its store still open
    return;
  }
  BOOST_REQUIRE(countdown::tell(w, leaver, waiting_name));
  others_fail_at_once(w, kv, leaver, "another rank left the job");
}

BOOST_AUTO_TEST_SUITE_END()
