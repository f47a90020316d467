// strata::nccl without a GPU: the unique-id exchange packing, NCCL's error sentences, and the
// refusals of bad devices and collective inputs, which come before any NCCL call.
#define BOOST_TEST_MODULE strata_nccl_host
#include <boost/test/unit_test.hpp>

#include <nccl.h>

#include <random>
#include <string>
#include <vector>

#include "logic.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/nccl/communicator.hpp"
#include "strata/net/endpoint.hpp"

namespace nd = strata::nccl::detail;

namespace {
nd::unique_id random_id(unsigned seed) {
  std::mt19937 rng(seed);
  nd::unique_id id{};
  for (auto& b : id) b = static_cast<std::byte>(rng() & 0xff);
  return id;
}
std::vector<float> sum_over_ranks(const std::vector<std::vector<float>>& parts) {
  std::vector<float> s(parts.front().size(), 0.0f);
  for (const auto& p : parts)
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += p[i];
  return s;
}
}  // namespace

BOOST_AUTO_TEST_CASE(the_id_exchange_gives_every_rank_rank_zeros_id) {
  const auto id = random_id(3);
  std::vector<std::vector<float>> parts{nd::pack_id_exchange(true, &id)};
  for (int r = 1; r < 4; ++r) parts.push_back(nd::pack_id_exchange(true, nullptr));
  auto got = nd::unpack_id_exchange(sum_over_ranks(parts), 4);
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
  BOOST_TEST((*got == id));
  // Every byte value survives (0 and 255 included).
  nd::unique_id all{};
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::byte>(i * 2 + 1 > 255 ? 255 : i * 2);
  BOOST_TEST((nd::unpack_id_exchange(nd::pack_id_exchange(true, &all), 1).value() == all));
}

BOOST_AUTO_TEST_CASE(a_rank_that_cannot_take_part_fails_the_exchange_on_every_rank) {
  const auto id = random_id(4);
  std::vector<std::vector<float>> parts{nd::pack_id_exchange(true, &id), nd::pack_id_exchange(false, nullptr),
                                        nd::pack_id_exchange(true, nullptr)};
  auto got = nd::unpack_id_exchange(sum_over_ranks(parts), 3);
  BOOST_REQUIRE(!got);
  BOOST_TEST((got.error().code() == strata::errc::runtime_failure));
  BOOST_TEST(got.error().message().rfind("1 of 3 ranks could not take part in making the NCCL communicator", 0) == 0);
}

BOOST_AUTO_TEST_CASE(a_corrupted_or_misordered_exchange_is_refused) {
  const auto id = random_id(5);
  // Two ranks that both think they are rank 0: bytes add up past 255 or stay whole but wrong;
  // a byte past 255 is caught.
  auto a = nd::pack_id_exchange(true, &id);
  a[1] = 300.0f;
  auto got = nd::unpack_id_exchange(a, 1);
  BOOST_REQUIRE(!got);
  BOOST_TEST(got.error().message().find("the NCCL unique id arrived corrupted (byte 0 is 300") == 0);
  a[1] = 1.5f;
  BOOST_TEST(!nd::unpack_id_exchange(a, 1));
  a.pop_back();
  auto short_one = nd::unpack_id_exchange(a, 1);
  BOOST_REQUIRE(!short_one);
  BOOST_TEST(short_one.error().message() == "the NCCL id exchange has 128 values; expected 129");
}

BOOST_AUTO_TEST_CASE(nccl_errors_become_one_sentence_naming_the_call) {
  BOOST_TEST(nd::failure_text("ncclAllReduce", ncclGetErrorString(ncclInvalidUsage)) ==
             std::string("ncclAllReduce failed: ") + ncclGetErrorString(ncclInvalidUsage));
  BOOST_TEST(nd::failure_text("ncclCommInitRankConfig", "unhandled system error", "Duplicate GPU detected") ==
             "ncclCommInitRankConfig failed: unhandled system error (Duplicate GPU detected)");
  BOOST_TEST(std::string(ncclGetErrorString(ncclUnhandledCudaError)).size() > 0);
}

BOOST_AUTO_TEST_CASE(a_communicator_needs_a_cuda_device) {
  auto cpu = strata::make_devices("cpu:1").front();
  BOOST_TEST(nd::check_device({}).error().message() == "an NCCL communicator needs a cuda device; it was given none");
  auto single = strata::nccl::communicator::create_single(cpu);
  BOOST_REQUIRE(!single);
  BOOST_TEST((single.error().code() == strata::errc::invalid_argument));
  BOOST_TEST(single.error().message() == "an NCCL communicator needs a cuda device; it was given cpu:0");
  // Over an endpoint (a world of one here): the rank still joins the exchange, then refuses.
  strata::actor_system sys{strata::system_config{.worker_threads = 1}};
  strata::net::endpoint net(sys);
  auto joined = strata::nccl::communicator::create(net, cpu);
  BOOST_REQUIRE(!joined);
  BOOST_TEST(joined.error().message() == "an NCCL communicator needs a cuda device; it was given cpu:0");
  net.shutdown();
  sys.shutdown();
}

BOOST_AUTO_TEST_CASE(allreduce_inputs_are_checked_before_anything_is_enqueued) {
  auto cpu = strata::make_devices("cpu:1").front();
  strata::stream s = cpu.create_stream();
  std::vector<float> f{1, 2, 3};
  std::vector<std::int32_t> i{1, 2, 3};
  auto check = [&](std::vector<strata::tensor> ts) { return nd::check_allreduce_inputs(ts, 0, s).error().message(); };
  BOOST_TEST(check({strata::tensor()}) == "allreduce_sum: tensor 0 is empty (no buffer)");
  BOOST_TEST(check({strata::tensor::from_host<std::int32_t>(i, cpu, s)}) ==
             "allreduce_sum: tensor 0 is int32; expected float32");
  BOOST_TEST(check({strata::tensor::from_host<float>(f, cpu, s)}) ==
             "allreduce_sum: tensor 0 is on cpu:0; expected a cuda tensor on the communicator's GPU 0");
  BOOST_TEST(check({}) == "allreduce_sum: the stream is on cpu:0; expected a stream of a cuda device on the "
                          "communicator's GPU 0");
  BOOST_TEST(nd::check_allreduce_inputs({}, 0, strata::stream()).error().message() ==
             "allreduce_sum: the stream is empty");
  s.synchronize();
}
