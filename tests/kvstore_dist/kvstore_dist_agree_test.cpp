// Refusals that only some ranks meet. In dist_sync_allreduce a rank that refuses its values must
// not leave the others waiting in the allreduce: every rank fails the step with one sentence and
// no replica changes. A split key's push is checked whole on the worker, so that no owner takes
// its part of a push that another owner refuses.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <span>
#include <string>
#include <vector>

#include "support/dist_world.hpp"

using namespace strata::test::dist;
using strata::dtype;

namespace kvstore_dist_agree_test {

/// `call()`, which must return within `limit` on this rank: a rank left waiting in a collective
/// ends the job at once (with the reason) instead of at the test's timeout.
template <class F>
auto within(const kvd::store& kv, const char* what, F call, std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto running = std::async(std::launch::async, std::move(call));
  if (running.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "rank %d: %s did not return within %lld s (a rank waits in a collective)\n", kv.rank(), what,
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  return running.get();
}

/// A float16 tensor's elements, widened.
std::vector<float> widened(world& w, const strata::tensor& t) {
  auto bytes = strata::tensor({static_cast<std::int64_t>(t.bytes())}, dtype::uint8, t.storage(), t.ready_event())
                   .to_host<std::uint8_t>(w.s);
  std::vector<float> out(bytes.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint16_t b = 0;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    out[i] = strata::kernels::half_value(dtype::float16, b);
  }
  return out;
}

const std::vector<float> a0{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
const std::vector<float> b0{-1.0f, -2.0f, -3.0f, -4.0f, -5.0f};

/// The replicas still hold the values of `init`.
void unchanged(world& w, kvd::store& kv) {
  auto a = kv.pull("a");
  auto b = kv.pull("b");
  BOOST_REQUIRE(a && b);
  BOOST_TEST(w.host(*a) == a0);
  BOOST_TEST(w.host(*b) == b0);
}

BOOST_AUTO_TEST_SUITE(kvstore_dist_agree)

BOOST_AUTO_TEST_CASE(a_value_refused_on_one_rank_fails_the_allreduce_step_on_every_rank_and_no_replica_changes) {
  world& w = *the_world;
  kvd::store kv(w.sys, w.net, kvd::store_options{.mode = kvd::mode::allreduce, .value_device = w.cpu});
  const int n = kv.num_workers();
  const int bad = n > 1 ? 1 : 0;  // the rank that passes a bad value (in a world of one, itself)
  const bool me = kv.rank() == bad;
  // Init takes rank 0's value only: another rank's value of another dtype and size is ignored
  // (it cannot make the sum's counts differ).
  std::vector<std::int32_t> ints(17, 7);
  auto odd = strata::tensor::from_host<std::int32_t>(std::span<const std::int32_t>(ints), {17}, w.cpu, w.s);
  BOOST_REQUIRE(within(kv, "init", [&] { return kv.init("a", kv.rank() == 0 ? w.make(a0, {2, 3}) : odd); }));
  BOOST_REQUIRE(within(kv, "init", [&] { return kv.init("b", w.make(b0, {5})); }));
  unchanged(w, kv);
  // A bad value on rank 0 fails init on every rank, and the key stays free.
  auto refused_init = within(kv, "init", [&] { return kv.init("c", kv.rank() == 0 ? odd : w.make({1.0f}, {1})); });
  BOOST_REQUIRE(!refused_init);
  if (kv.rank() == 0)
    BOOST_TEST(refused_init.error().message() == "kvstore dist init: the value for key \"c\" must be a float32 cpu tensor.");
  else
    BOOST_TEST(refused_init.error().message() == "kvstore dist init of key \"c\": rank 0's value was refused; nothing was stored.");
  BOOST_TEST(!kv.pull("c"));

  strata::device_manager sims;
  auto sim = sims.create("sim:1").front();
  auto ss = sim.create_stream();
  const std::vector<float> ga(6, 0.5f), gb(5, 0.25f);
  struct bad_step {
    std::string what;
    std::vector<strata::kvstore::key> keys;  // rank `bad`'s
    std::vector<strata::tensor> values;      // rank `bad`'s
    std::string own;                         // its sentence
    std::string others;                      // every other rank's
  };
  const std::string refused = "kvstore dist pushpull: rank 1 refused its values for this step (";
  const std::vector<bad_step> steps{
      {"a wrong shape", {"a", "b"}, {w.make(ga, {6}), w.make(gb, {5})},
       "kvstore dist push: the value for key \"a\" is [6], expected float32 [2, 3].",
       refused + "a value of the wrong shape, dtype or device); no replica was updated."},
      {"a wrong device", {"a", "b"}, {w.make(ga, {2, 3}), strata::tensor::empty({5}, dtype::float32, sim, ss)},
       "kvstore dist push: the values for key \"b\" must be float32 cpu tensors of one shape.",
       refused + "a value of the wrong shape, dtype or device); no replica was updated."},
      {"no tensor", {"a", "b"}, {w.make(ga, {2, 3}), strata::tensor()},
       "kvstore dist push: the values for key \"b\" must be float32 cpu tensors of one shape.",
       refused + "a value of the wrong shape, dtype or device); no replica was updated."},
      {"a wrong dtype", {"a", "b"}, {make_as(w, dtype::float16, ga, {2, 3}), w.make(gb, {5})},
       "kvstore dist push: the values for key \"a\" must be float32 cpu tensors of one shape.",
       refused + "a value of the wrong shape, dtype or device); no replica was updated."},
      {"an unknown key", {"a", "z"}, {w.make(ga, {2, 3}), w.make(gb, {5})},
       "kvstore dist pushpull: key \"z\" was never initialised; call init first (every worker).",
       refused + "a key it never initialised); no replica was updated."},
      {"a key given twice", {"a", "a"}, {w.make(ga, {2, 3}), w.make(ga, {2, 3})},
       "kvstore dist pushpull: key \"a\" appears twice; dist_sync_allreduce takes each key once per call.",
       refused + "a key given twice, or keys and values of different counts); no replica was updated."},
      {"fewer values than keys", {"a", "b"}, {w.make(ga, {2, 3})},
       "kvstore dist pushpull: 2 keys but 1 values; expected one value per key.",
       refused + "a key given twice, or keys and values of different counts); no replica was updated."},
  };
  for (const auto& step : steps) {
    BOOST_TEST_CONTEXT("rank " << kv.rank() << ", rank " << bad << " passes " << step.what) {
      auto got = within(kv, "pushpull", [&] {
        return me ? kv.pushpull(step.keys, step.values)
                  : kv.pushpull(std::vector<strata::kvstore::key>{"a", "b"}, {w.make(ga, {2, 3}), w.make(gb, {5})});
      });
      BOOST_REQUIRE(!got);
      BOOST_TEST(got.error().message() == (me ? step.own : step.others));
      unchanged(w, kv);
    }
  }
  // The one-key call agrees too (its values summed on the worker first).
  auto one = within(kv, "pushpull", [&] {
    return kv.pushpull("a", me ? std::vector<strata::tensor>{w.make(ga, {2, 3}), w.make(ga, {3, 2})}
                               : std::vector<strata::tensor>{w.make(ga, {2, 3})});
  });
  BOOST_REQUIRE(!one);
  BOOST_TEST(one.error().message() ==
             (me ? std::string("kvstore dist push: the values for key \"a\" must be float32 cpu tensors of one shape.")
                 : refused + "a value of the wrong shape, dtype or device); no replica was updated."));
  unchanged(w, kv);
  if (n > 1) {
    // Known keys, but not rank 0's: no rank refuses its own values, and every rank fails alike.
    auto other = within(kv, "pushpull", [&] {
      return me ? kv.pushpull(std::vector<strata::kvstore::key>{"a"}, {w.make(ga, {2, 3})})
                : kv.pushpull(std::vector<strata::kvstore::key>{"a", "b"}, {w.make(ga, {2, 3}), w.make(gb, {5})});
    });
    BOOST_REQUIRE(!other);
    BOOST_TEST(other.error().message() ==
               "kvstore dist pushpull: rank 1 passed other keys than rank 0 to this step (every rank passes the same "
               "keys); no replica was updated.");
    unchanged(w, kv);
  }
  // The next good step sums every rank's values (no optimizer: the key becomes the sum).
  auto good = within(kv, "pushpull", [&] {
    return kv.pushpull(std::vector<strata::kvstore::key>{"b", "a"}, {w.make(gb, {5}), w.make(ga, {2, 3})});
  });
  BOOST_REQUIRE_MESSAGE(good, (good ? "" : good.error().message()));
  BOOST_TEST(w.host((*good)[0]) == std::vector<float>(5, 0.25f * static_cast<float>(n)));
  BOOST_TEST(w.host((*good)[1]) == std::vector<float>(6, 0.5f * static_cast<float>(n)));
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_CASE(a_split_push_that_any_owner_would_refuse_is_refused_before_any_part_leaves) {
  world& w = *the_world;
  // 20 elements, a bound of 10: one part per rank (up to 20 ranks).
  kvd::store kv(w.sys, w.net, kvd::store_options{.value_device = w.cpu, .big_array_bound = 10});
  const int n = kv.num_workers();
  std::vector<float> v0(20);
  for (std::size_t i = 0; i < v0.size(); ++i) v0[i] = static_cast<float>(i) + 1.0f;
  BOOST_REQUIRE(kv.init("big", make_as(w, dtype::float16, v0, {20})));
  BOOST_TEST(kv.owners("big").size() == static_cast<std::size_t>(std::min(n, 20)));
  auto same = [&] {
    auto got = kv.pull("big");
    BOOST_REQUIRE(got);
    BOOST_TEST((got->dtype() == dtype::float16));
    BOOST_TEST(widened(w, *got) == v0);
  };
  // A float32 value for a float16 key: the worker refuses it before any part leaves.
  auto wrong = kv.push("big", {w.make(v0, {20})});
  BOOST_REQUIRE(!wrong);
  BOOST_TEST(wrong.error().message() == "kvstore dist push: the value for key \"big\" has dtype float32, expected float16.");
  same();
  // 2bit with a threshold float16 does not hold (0.3): the first element's part would be sent as
  // zeros (every element below the threshold), which its owner takes, and the last part's as
  // +-0.3, which its owner refuses. The worker refuses the whole push first.
  BOOST_REQUIRE(kv.set_gradient_compression("2bit", 0.3f));
  std::vector<float> g(20, 0.125f);
  g.back() = 1.0f;
  auto inexact = kv.push("big", {make_as(w, dtype::float16, g, {20})});
  BOOST_REQUIRE(!inexact);
  BOOST_TEST(inexact.error().message() ==
             "kvstore dist push: key \"big\" is float16, which does not hold the 2bit threshold 0.300000 exactly; choose "
             "one it holds (such as 0.5 or 0.25).");
  BOOST_REQUIRE(kv.barrier());  // every rank's refused push has happened (none was taken anywhere)
  same();
  // The next good push (uncompressed) is every part's version 1: the key becomes the sum.
  BOOST_REQUIRE(kv.set_gradient_compression("none"));
  auto good = kv.pushpull("big", {make_as(w, dtype::float16, g, {20})});
  BOOST_REQUIRE_MESSAGE(good, (good ? "" : good.error().message()));
  auto summed = widened(w, *good);
  BOOST_REQUIRE(summed.size() == g.size());
  for (std::size_t i = 0; i < g.size(); ++i) BOOST_TEST(summed[i] == g[i] * static_cast<float>(n), "element " << i);
  BOOST_REQUIRE(kv.barrier());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_dist_agree_test
