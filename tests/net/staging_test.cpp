// The staging decision of strata::net (which memory a tensor's bytes cross ranks from and into)
// and the endpoint's refusal of a receive device that holds no data. Runs without mpirun or a GPU
// (a world of one), in every build with strata::net.
#define BOOST_TEST_MODULE strata_net_staging
#include <boost/test/unit_test.hpp>

#include <string>

#include "staging.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/net/endpoint.hpp"
#include "strata/net/serialize.hpp"

using strata::device_kind;
using strata::net::detail::receive_staging;
using strata::net::detail::send_staging;
using strata::net::detail::staging;

BOOST_AUTO_TEST_CASE(cpu_tensors_leave_from_their_own_buffer_and_land_in_place) {
  BOOST_TEST((send_staging(device_kind::cpu, "cpu:0").value() == staging::direct));
  BOOST_TEST((receive_staging(device_kind::cpu, "cpu:0").value() == staging::direct));
}

BOOST_AUTO_TEST_CASE(cuda_tensors_go_through_pinned_host_memory_where_cuda_is_built) {
  auto out = send_staging(device_kind::cuda, "cuda:0");
  auto in = receive_staging(device_kind::cuda, "cuda:0");
#if STRATA_HAS_CUDA
  BOOST_TEST((out.value() == staging::pinned_host));
  BOOST_TEST((in.value() == staging::pinned_host));
#else
  BOOST_REQUIRE(!out);
  BOOST_TEST(out.error().message().find("no CUDA support") != std::string::npos);
  BOOST_REQUIRE(!in);
#endif
}

BOOST_AUTO_TEST_CASE(sim_tensors_are_refused_in_one_sentence) {
  auto out = send_staging(device_kind::sim, "sim:0");
  BOOST_REQUIRE(!out);
  BOOST_TEST((out.error().code() == strata::errc::invalid_argument));
  BOOST_TEST(out.error().message() ==
             "a tensor on sim:0 cannot cross ranks: sim tensors hold no data (send a cpu or cuda tensor)");
  auto in = receive_staging(device_kind::sim, "sim:1");
  BOOST_REQUIRE(!in);
  BOOST_TEST(in.error().message().find("receive_device is sim:1, a sim device, which holds no data") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_endpoint_refuses_a_sim_receive_device) {
  strata::actor_system sys{strata::system_config{.worker_threads = 1}};
  auto sim = strata::make_devices("sim:1").front();
  try {
    strata::net::endpoint net(sys, strata::net::endpoint_config{.receive_device = sim});
    BOOST_FAIL("the endpoint accepted a sim receive device");
  } catch (const strata::error_exception& e) {
    BOOST_TEST((e.error().code() == strata::errc::invalid_argument));
    BOOST_TEST(std::string(e.what()).find("a sim device, which holds no data") != std::string::npos);
  }
  // The refused endpoint left nothing behind: another one starts.
  strata::net::endpoint net(sys);
  BOOST_TEST(net.size() == 1);
  net.shutdown();
  sys.shutdown();
}
