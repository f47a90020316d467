// strata::nccl on a GPU: a world of one (no MPI), the same over an endpoint, and under
// mpirun -np N (ctest nccl_cuda_np2) a sum over every rank, which needs N GPUs (NCCL puts one
// rank per GPU; with fewer the case is skipped, not failed). Without a GPU every case is skipped
// (exit 77); with STRATA_REQUIRE_GPU=1 a skip fails.
#define BOOST_TEST_MODULE strata_nccl_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "gpu_main.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/nccl/communicator.hpp"
#include "strata/net/endpoint.hpp"

namespace {
using strata::test::gpu_per_rank;
using strata::test::one_gpu_without_mpirun;

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = std::uniform_real_distribution<float>(-2, 2)(rng);
  return v;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_one_rank_allreduce_leaves_every_tensor_as_it_was, *boost::unit_test::precondition(one_gpu_without_mpirun)) {
  auto gpu = strata::make_devices("cuda:0").front();
  auto comm = strata::nccl::communicator::create_single(gpu);
  BOOST_REQUIRE_MESSAGE(comm, (comm ? "" : comm.error().message()));
  BOOST_TEST(comm->rank() == 0);
  BOOST_TEST(comm->size() == 1);
  strata::stream s = gpu.create_stream();
  const auto a = random_values(1000, 1), b = random_values(15, 2);
  std::vector<strata::tensor> ts{strata::tensor::from_host<float>(a, gpu, s),
                                 strata::tensor::from_host<float>(b, {3, 5}, gpu, s)};
  auto r = comm->allreduce_sum(ts, s);
  BOOST_REQUIRE_MESSAGE(r, (r ? "" : r.error().message()));
  BOOST_TEST((ts[0].to_host<float>(s) == a));  // the sum over one rank is the tensor, bitwise
  BOOST_TEST((ts[1].to_host<float>(s) == b));

  // Bad input is one sentence, nothing enqueued.
  std::vector<std::int32_t> ints{1, 2, 3};
  std::vector<strata::tensor> bad{strata::tensor::from_host<std::int32_t>(ints, gpu, s)};
  auto refused = comm->allreduce_sum(bad, s);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(refused.error().message() == "allreduce_sum: tensor 0 is int32; expected float32");

  comm->abort("the test says so");
  auto after = comm->allreduce_sum(ts, s);
  BOOST_REQUIRE(!after);
  BOOST_TEST(after.error().message().find("was aborted: the test says so") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_endpoint_communicator_sums_every_ranks_tensor, *boost::unit_test::precondition(gpu_per_rank)) {
  strata::actor_system sys{strata::system_config{.worker_threads = 1}};
  strata::net::endpoint net{sys};
  const int ordinal = net.rank();
  auto gpu = strata::make_devices("cuda:" + std::to_string(ordinal)).front();
  {
    auto comm = strata::nccl::communicator::create(net, gpu);
    BOOST_REQUIRE_MESSAGE(comm, (comm ? "" : comm.error().message()));
    BOOST_TEST(comm->size() == net.size());
    BOOST_TEST(comm->rank() == net.rank());
    strata::stream s = gpu.create_stream();
    // Small integers: float sums are exact in any order, so the result is known bitwise.
    std::vector<float> mine(4096), expected(4096);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const float base = static_cast<float>(static_cast<int>(i % 97) - 48);
      mine[i] = base * static_cast<float>(net.rank() + 1);
      expected[i] = base * static_cast<float>(net.size() * (net.size() + 1) / 2);
    }
    std::vector<strata::tensor> ts{strata::tensor::from_host<float>(mine, gpu, s)};
    auto r = comm->allreduce_sum(ts, s);
    BOOST_REQUIRE_MESSAGE(r, (r ? "" : r.error().message()));
    BOOST_TEST((ts[0].to_host<float>(s) == expected));
  }
  net.shutdown();
  sys.shutdown();
}

int main(int argc, char* argv[]) {
  return strata::test::run_gpu_tests("test_nccl_cuda", &init_unit_test, argc, argv);
}
