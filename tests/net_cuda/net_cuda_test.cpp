// CUDA tensors between 2 ranks through strata::net's pinned host staging (both ranks may share
// one GPU). Rank 0 receives on cpu, rank 1 on cuda; rank 0 sends cuda tensors to rank 1, which
// echoes what it received (cuda tensors again), so every path runs: cuda -> cuda receive device,
// cuda -> cpu receive device. Without a GPU every case is skipped (exit 77); with
// STRATA_REQUIRE_GPU=1 a skip fails. Run under mpirun -np 2 (ctest net_cuda_np2).
#define BOOST_TEST_MODULE strata_net_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <random>
#include <vector>

#include "../net/messages.hpp"
#include "gpu_main.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/net/endpoint.hpp"

using namespace std::chrono_literals;
using nettest::tensor_msg;

namespace {
boost::test_tools::assertion_result has_gpu(boost::unit_test::test_unit_id) {
  return strata::test::gpu_precondition(1);
}
}  // namespace

BOOST_AUTO_TEST_CASE(cuda_tensors_cross_ranks_bitwise_through_pinned_memory, *boost::unit_test::precondition(has_gpu)) {
  auto gpu = strata::make_devices("cuda:0").front();
  auto cpu = strata::make_devices("cpu:1").front();
  strata::actor_system sys{strata::system_config{.worker_threads = 1}};
  const bool server = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr && std::string(std::getenv("OMPI_COMM_WORLD_RANK")) == "1";
  strata::net::endpoint net{sys, strata::net::endpoint_config{.receive_device = server ? gpu : cpu}};
  BOOST_REQUIRE_MESSAGE(net.size() == 2, "run under mpirun -np 2");
  if (net.rank() == 1) {
    std::promise<void> bye;
    auto done = bye.get_future();
    BOOST_REQUIRE(net.publish(sys.spawn([&bye](strata::actor&) -> strata::behavior {
                                return {[&bye](tensor_msg m) {
                                  if (m.label == "bye") bye.set_value();
                                  else m.label = m.tensors.empty() ? "none" : m.tensors.front().get_device().name();
                                  return m;
                                }};
                              }),
                              "echo"));
    done.wait();
  } else {
    auto echo = net.remote(1, "echo").value();
    strata::stream s = gpu.create_stream();
    std::mt19937 rng(7);
    std::vector<std::vector<std::uint8_t>> sent;
    tensor_msg msg;
    for (std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{3} << 20}) {
      std::vector<std::uint8_t> bytes(n);
      for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
      msg.tensors.push_back(strata::tensor::from_host<std::uint8_t>(bytes, gpu, s));
      sent.push_back(std::move(bytes));
    }
    std::vector<float> values(15);
    for (auto& v : values) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    msg.tensors.push_back(strata::tensor::from_host<float>(values, {3, 5}, gpu, s));
    auto reply = sys.request<tensor_msg>(echo, 60s, msg).get();
    BOOST_REQUIRE_MESSAGE(reply, (reply ? "" : reply.error().message()));
    BOOST_TEST(reply->label == "cuda:0");  // rank 1 received them on its cuda receive device
    BOOST_REQUIRE(reply->tensors.size() == sent.size() + 1);
    strata::stream hs = cpu.create_stream();
    for (std::size_t i = 0; i < sent.size(); ++i) {
      const auto& t = reply->tensors[i];
      BOOST_TEST((t.get_device().kind() == strata::device_kind::cpu));
      BOOST_TEST((t.to_host<std::uint8_t>(hs) == sent[i]), "tensor of " << sent[i].size() << " bytes differs");
    }
    const auto& f = reply->tensors.back();
    BOOST_TEST((f.shape() == std::vector<std::int64_t>{3, 5}));
    BOOST_TEST((f.to_host<float>(hs) == values));
    tensor_msg bye;
    bye.label = "bye";
    BOOST_REQUIRE(sys.request<tensor_msg>(echo, 60s, bye).get());
  }
  net.shutdown();
  sys.shutdown();
}

int main(int argc, char* argv[]) {
  return strata::test::run_gpu_tests("test_net_cuda", &init_unit_test, argc, argv);
}
