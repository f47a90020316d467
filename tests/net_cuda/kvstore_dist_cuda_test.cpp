// dist_sync_allreduce on cuda replicas (docs/kvstore.md, "Distributed stores"). Without mpirun
// (ctest kvstore_dist_cuda, also in tools/gpu-check.sh): a world of one on cuda:0, each sum path
// against the host replica on the same random data and against a float64 reference. Under
// mpirun -np 2 (ctest kvstore_dist_cuda_np2): the staged path with both ranks on cuda:0, and the
// NCCL path (one GPU per rank, else skipped) with exact integer sums and a rank that leaves.
// Without a GPU every case is skipped (exit 77); with STRATA_REQUIRE_GPU=1 a skip fails.
#define BOOST_TEST_MODULE strata_kvstore_dist_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "gpu_main.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/kvstore_dist/store.hpp"
#include "strata/net/endpoint.hpp"

namespace kd = strata::kvstore_dist;

namespace {

using strata::test::gpu_per_rank_under_mpirun;
using strata::test::one_gpu_under_mpirun;
using strata::test::one_gpu_without_mpirun;

/// One actor system and endpoint per process (an endpoint is one per process).
struct world {
  strata::actor_system sys{strata::system_config{.worker_threads = 2}};
  strata::net::endpoint net{sys};
  ~world() {
    net.shutdown();
    sys.shutdown();
  }
};
std::unique_ptr<world> made_world;  // made by the first case that runs, ended by main
world& the_world() {
  if (!made_world) made_world = std::make_unique<world>();
  return *made_world;
}

std::vector<float> random_values(std::size_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = std::uniform_real_distribution<float>(-2, 2)(rng);
  return v;
}

const std::vector<strata::kvstore::key> keys{"fc.w", 3, "emb", -1};
const std::vector<std::vector<std::int64_t>> shapes{{16, 8}, {5}, {1000}, {3, 7}};

std::size_t elements(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

/// Runs 3 steps of SGD with momentum (or none) on `kv` with `grads[step][key]` (one value per
/// key, through the fused pushpull, keys in a rotated order) on `dev`; answers the last values.
std::vector<std::vector<float>> steps(kd::store& kv, strata::device& dev, const std::vector<std::vector<float>>& init,
                                      const std::vector<std::vector<std::vector<float>>>& grads, bool sgd) {
  auto s = dev.create_stream();
  if (sgd) BOOST_REQUIRE(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9}));
  for (std::size_t k = 0; k < keys.size(); ++k)
    BOOST_REQUIRE(kv.init(keys[k], strata::tensor::from_host<float>(init[k], shapes[k], dev, s)));
  std::vector<std::vector<float>> last(keys.size());
  for (std::size_t step = 0; step < grads.size(); ++step) {
    std::vector<strata::kvstore::key> ks;
    std::vector<strata::tensor> vs;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::size_t k = (i + step) % keys.size();
      ks.push_back(keys[k]);
      vs.push_back(strata::tensor::from_host<float>(grads[step][k], shapes[k], dev, s));
      which.push_back(k);
    }
    auto got = kv.pushpull(ks, vs);
    BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
    for (std::size_t i = 0; i < ks.size(); ++i) {
      BOOST_TEST((*got)[i].get_device().name() == dev.name());
      last[which[i]] = (*got)[i].to_host<float>(s);
    }
  }
  return last;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_cuda_replica_gives_the_host_replicas_results_on_every_sum_path,
                     *boost::unit_test::precondition(one_gpu_without_mpirun)) {
  auto& w = the_world();
  auto gpu = strata::make_devices("cuda:0").front();
  auto cpu = strata::make_devices("cpu:1").front();
  std::mt19937 rng(4242);
  std::vector<std::vector<float>> init;
  for (const auto& sh : shapes) init.push_back(random_values(elements(sh), rng));
  std::vector<std::vector<std::vector<float>>> grads(3);
  for (auto& g : grads)
    for (const auto& sh : shapes) g.push_back(random_values(elements(sh), rng));

  for (bool sgd : {false, true}) {
    kd::store host(w.sys, w.net, {.mode = kd::mode::allreduce});
    const auto reference = steps(host, cpu, init, grads, sgd);
    // An independent float64 reference of the same rule.
    for (std::size_t k = 0; k < keys.size(); ++k) {
      std::vector<double> v(init[k].begin(), init[k].end()), m(v.size(), 0.0);
      for (std::size_t step = 0; step < grads.size(); ++step)
        for (std::size_t e = 0; e < v.size(); ++e) {
          const double g = grads[step][k][e];
          if (!sgd) {
            v[e] = g;
            continue;
          }
          m[e] = step == 0 ? g : 0.9 * m[e] + g;
          v[e] -= 0.1 * m[e];
        }
      for (std::size_t e = 0; e < v.size(); ++e) BOOST_REQUIRE(std::abs(reference[k][e] - v[e]) <= 1e-5 * (1 + std::abs(v[e])));
    }
    std::vector<kd::cuda_sum> paths{kd::cuda_sum::staged_mpi};
#if STRATA_HAS_NCCL
    paths.push_back(kd::cuda_sum::nccl);
#endif
    for (auto path : paths) {
      BOOST_TEST_CONTEXT("sgd " << sgd << ", path " << static_cast<int>(path)) {
        kd::store kv(w.sys, w.net, {.mode = kd::mode::allreduce, .replica_device = gpu, .cuda_sum = path});
        const auto got = steps(kv, gpu, init, grads, sgd);
        for (std::size_t k = 0; k < keys.size(); ++k) {
          if (!sgd) {
            // The sum of one rank is the value; assigned, it is the host replica's bit for bit.
            BOOST_TEST(std::memcmp(got[k].data(), reference[k].data(), got[k].size() * sizeof(float)) == 0);
            continue;
          }
          for (std::size_t e = 0; e < got[k].size(); ++e)
            BOOST_TEST(std::abs(got[k][e] - reference[k][e]) <= 1e-6f * (1 + std::abs(reference[k][e])));
        }
        std::size_t total = 0;
        for (const auto& sh : shapes) total += elements(sh);
        BOOST_TEST(kv.bytes_pushed() == 3 * total * sizeof(float));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_cuda_replica_sums_several_values_of_a_key_and_refuses_host_ones,
                     *boost::unit_test::precondition(one_gpu_without_mpirun)) {
  auto& w = the_world();
  auto gpu = strata::make_devices("cuda:0").front();
  auto cpu = strata::make_devices("cpu:1").front();
  auto s = gpu.create_stream();
  auto cs = cpu.create_stream();
  std::mt19937 rng(99);
  const auto a = random_values(300, rng), b = random_values(300, rng), c = random_values(300, rng);
  kd::store kv(w.sys, w.net, {.mode = kd::mode::allreduce, .replica_device = gpu});
  BOOST_REQUIRE(kv.init("k", strata::tensor::from_host<float>(a, cpu, cs)));  // a host init value is taken
  auto got = kv.pushpull("k", {strata::tensor::from_host<float>(a, gpu, s), strata::tensor::from_host<float>(b, gpu, s),
                               strata::tensor::from_host<float>(c, gpu, s)});
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
  std::vector<float> expected(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) expected[i] = (a[i] + b[i]) + c[i];
  const auto host = got->to_host<float>(s);
  BOOST_TEST(std::memcmp(host.data(), expected.data(), host.size() * sizeof(float)) == 0);
  auto pulled = kv.pull("k");
  BOOST_REQUIRE(pulled);
  BOOST_TEST((pulled->to_host<float>(s) == expected));

  // Mixed cpu and cuda values in one call: one sentence, the replica untouched.
  auto mixed = kv.pushpull("k", {strata::tensor::from_host<float>(b, gpu, s), strata::tensor::from_host<float>(b, cpu, cs)});
  BOOST_REQUIRE(!mixed);
  BOOST_TEST(mixed.error().message() == "kvstore dist pushpull: value 1 for key \"k\" is on " + cpu.name() +
                                            "; this dist_sync_allreduce store keeps its replica on " + gpu.name() +
                                            " and takes float32 tensors on that GPU.");
  BOOST_TEST((kv.pull("k")->to_host<float>(s) == expected));
  BOOST_TEST(!kv.push("k", {strata::tensor::from_host<float>(b, gpu, s)}));
}

BOOST_AUTO_TEST_CASE(two_ranks_on_one_gpu_sum_through_the_host_exactly, *boost::unit_test::precondition(one_gpu_under_mpirun)) {
  auto& w = the_world();
  auto gpu = strata::make_devices("cuda:0").front();
  auto s = gpu.create_stream();
  kd::store kv(w.sys, w.net, {.mode = kd::mode::allreduce, .replica_device = gpu, .cuda_sum = kd::cuda_sum::staged_mpi});
  // Small integers times (rank + 1): float sums are exact in any order.
  std::vector<float> mine(777), expected(777);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const float base = static_cast<float>(static_cast<int>(i % 61) - 30);
    mine[i] = base * static_cast<float>(w.net.rank() + 1);
    expected[i] = base * static_cast<float>(w.net.size() * (w.net.size() + 1) / 2);
  }
  BOOST_REQUIRE(kv.init(7, strata::tensor::from_host<float>(mine, gpu, s)));
  auto got = kv.pushpull(std::vector<strata::kvstore::key>{7}, {strata::tensor::from_host<float>(mine, gpu, s)});
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
  BOOST_TEST(((*got)[0].to_host<float>(s) == expected));
  // Rank 1 alone passes a host value: every rank fails the step (none waits in the sum), no
  // replica changes, and the next step sums again.
  auto cpu = strata::make_devices("cpu:1").front();
  auto cs = cpu.create_stream();
  const bool bad = w.net.rank() == 1;
  auto refused = kv.pushpull(std::vector<strata::kvstore::key>{7}, {bad ? strata::tensor::from_host<float>(mine, cpu, cs)
                                                                        : strata::tensor::from_host<float>(mine, gpu, s)});
  BOOST_REQUIRE(!refused);
  BOOST_TEST(refused.error().message() ==
             (bad ? "kvstore dist pushpull: value 0 for key 7 is on " + cpu.name() +
                        "; this dist_sync_allreduce store keeps its replica on " + gpu.name() +
                        " and takes float32 tensors on that GPU."
                  : std::string("kvstore dist pushpull: rank 1 refused its values for this step (a value of the wrong "
                                "shape, dtype or device); no replica was updated.")));
  BOOST_TEST((kv.pull(7)->to_host<float>(s) == expected));
  auto again = kv.pushpull(std::vector<strata::kvstore::key>{7}, {strata::tensor::from_host<float>(mine, gpu, s)});
  BOOST_REQUIRE_MESSAGE(again, (again ? "" : again.error().message()));
  BOOST_TEST(((*again)[0].to_host<float>(s) == expected));
  BOOST_REQUIRE(kv.barrier());
}

#if STRATA_HAS_NCCL
BOOST_AUTO_TEST_CASE(nccl_ranks_sum_exactly_and_a_rank_that_leaves_fails_the_others_step_by_name,
                     *boost::unit_test::precondition(gpu_per_rank_under_mpirun)) {
  auto& w = the_world();
  auto gpu = strata::make_devices("cuda:" + std::to_string(w.net.rank())).front();
  auto s = gpu.create_stream();
  auto kv = std::make_unique<kd::store>(w.sys, w.net,
                                        kd::store_options{.mode = kd::mode::allreduce, .timeout = std::chrono::seconds(60),
                                                          .replica_device = gpu, .cuda_sum = kd::cuda_sum::nccl});
  std::vector<float> mine(4096), expected(4096);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const float base = static_cast<float>(static_cast<int>(i % 97) - 48);
    mine[i] = base * static_cast<float>(w.net.rank() + 1);
    expected[i] = base * static_cast<float>(w.net.size() * (w.net.size() + 1) / 2);
  }
  BOOST_REQUIRE(kv->init("g", strata::tensor::from_host<float>(mine, gpu, s)));
  auto got = kv->pushpull("g", {strata::tensor::from_host<float>(mine, gpu, s)});
  BOOST_REQUIRE_MESSAGE(got, (got ? "" : got.error().message()));
  BOOST_TEST((got->to_host<float>(s) == expected));
  BOOST_REQUIRE(kv->barrier());
  if (w.net.rank() != 0) {
    w.net.shutdown();  // leaves without the next step; rank 0 waits in ncclAllReduce for it
    return;
  }
  auto lost = kv->pushpull("g", {strata::tensor::from_host<float>(mine, gpu, s)});
  BOOST_REQUIRE(!lost);
  BOOST_TEST(lost.error().code() == strata::errc::rank_down);
  BOOST_TEST(lost.error().message().find("kvstore dist pushpull: the allreduce of this step failed, and no replica "
                                         "was updated: another rank left the job") == 0,
             lost.error().message());
  BOOST_TEST((kv->pull("g")->to_host<float>(s) == expected));  // the replica kept the last sum
}
#endif

int main(int argc, char* argv[]) {
  const int rc = strata::test::run_gpu_tests("test_kvstore_dist_cuda", &init_unit_test, argc, argv);
  made_world.reset();
  return rc;
}
