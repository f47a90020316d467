// Contract tests: device spec strings and creating devices from them.
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>

#include "helpers.hpp"

namespace spec_test {

using namespace strata;

BOOST_AUTO_TEST_SUITE(device_specs)

BOOST_AUTO_TEST_CASE(a_cpu_spec_names_the_number_of_devices) {
  auto s = parse_device_spec("cpu:3");
  BOOST_TEST((s.kind == device_kind::cpu));
  BOOST_TEST(s.count == 3);
  BOOST_TEST(s.device_count() == 3);
  BOOST_TEST(s.to_string() == "cpu:3");
}

BOOST_AUTO_TEST_CASE(bare_kind_names_mean_one_device_and_cuda_means_gpu_0) {
  BOOST_TEST(parse_device_spec("cpu").count == 1);
  BOOST_TEST(parse_device_spec("sim").to_string() == "sim:1:h200");
  BOOST_TEST(parse_device_spec("cuda").to_string() == "cuda:0");
}

BOOST_AUTO_TEST_CASE(a_sim_spec_defaults_to_the_h200_profile_and_accepts_a_named_one) {
  auto s = parse_device_spec("sim:4");
  BOOST_TEST((s.kind == device_kind::sim));
  BOOST_TEST(s.count == 4);
  BOOST_TEST(s.profile == "h200");
  BOOST_TEST(parse_device_spec("sim:2:cpu").profile == "cpu");
  BOOST_TEST(parse_device_spec("sim:2:h200").to_string() == "sim:2:h200");
}

BOOST_AUTO_TEST_CASE(a_cuda_spec_lists_gpus_and_how_many_devices_share_each) {
  auto two = parse_device_spec("cuda:0,1");
  BOOST_TEST((two.gpus == std::vector<gpu_share>{{0, 1}, {1, 1}}));
  BOOST_TEST(two.device_count() == 2);
  auto shared = parse_device_spec("cuda:0x4");
  BOOST_TEST((shared.gpus == std::vector<gpu_share>{{0, 4}}));
  BOOST_TEST(shared.device_count() == 4);
  auto mixed = parse_device_spec("cuda:1x2,0");
  BOOST_TEST(mixed.device_count() == 3);
  BOOST_TEST(mixed.to_string() == "cuda:1x2,0");
}

BOOST_AUTO_TEST_CASE(every_malformed_spec_is_rejected_with_one_sentence_naming_it_and_what_was_expected) {
  const std::vector<std::string> bad = {"",        "cpu:0",   "cpu:x",   "cpu:",     "cpu:-1",   "cpu:2:extra",
                                        "cpu:99999", "gpu:1", "CPU:1",   "sim:0",    "sim:x",    "sim:2:unknownprofile",
                                        "sim:2:",  "cuda:",   "cuda:0x0", "cuda:x",  "cuda:0,",  "cuda:0,0",
                                        "cuda:-1", "cuda:0x", " cpu:1"};
  for (const auto& text : bad) {
    BOOST_TEST_CONTEXT("spec \"" << text << "\"") {
      std::string error;
      auto r = try_parse_device_spec(text, &error);
      BOOST_TEST(!r.has_value());
      BOOST_TEST(error.find("\"" + text + "\"") != std::string::npos, "names the input: " << error);
      BOOST_TEST(error.find("expected") != std::string::npos, "says what was expected: " << error);
      BOOST_TEST(error.find('\n') == std::string::npos);
      BOOST_CHECK_THROW(parse_device_spec(text), std::invalid_argument);
      BOOST_CHECK_THROW(make_devices(text), std::invalid_argument);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_sim_profile_error_lists_the_known_ones) {
  std::string error;
  BOOST_TEST(!try_parse_device_spec("sim:2:unknownprofile", &error));
  BOOST_TEST(error.find("unknownprofile") != std::string::npos);
  BOOST_TEST(error.find("h200") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_user_defined_sim_profile_is_usable_by_name_through_the_manager) {
  device_options o = test::deterministic_sim();
  o.sim_profiles.push_back({.name = "mine",
                            .matmul_flops = 1e12,
                            .vector_flops = 1e11,
                            .memory_bandwidth = 1e11,
                            .host_bandwidth = 1e10,
                            .peer_bandwidth = 1e10,
                            .launch_latency = 0,
                            .memory_bytes = 1 << 30});
  device_manager m(o);
  auto d = m.create("sim:1:mine");
  BOOST_REQUIRE(d.size() == 1u);
  BOOST_TEST(d[0].properties().sim->name == "mine");
  BOOST_TEST(d[0].properties().total_memory == std::size_t{1} << 30);
  BOOST_CHECK_THROW(parse_device_spec("sim:1:mine"), std::invalid_argument);  // unknown without the manager
}

BOOST_AUTO_TEST_CASE(created_devices_are_named_by_kind_and_index) {
  device_manager m(test::deterministic_sim());
  auto cpus = m.create("cpu:2");
  BOOST_REQUIRE(cpus.size() == 2u);
  BOOST_TEST(cpus[0].name() == "cpu:0");
  BOOST_TEST(cpus[1].name() == "cpu:1");
  BOOST_TEST(cpus[1].index() == 1);
  BOOST_TEST((cpus[0].kind() == device_kind::cpu));
  BOOST_TEST(cpus[0].properties().concurrency >= 1);
  BOOST_TEST(cpus[0].properties().total_memory > 0u);
  auto more = m.create("cpu:1");
  BOOST_TEST(more[0].name() == "cpu:2");
  auto sims = m.create("sim:3:h200");
  BOOST_REQUIRE(sims.size() == 3u);
  BOOST_TEST(sims[2].name() == "sim:2");
  BOOST_TEST(sims[0].properties().total_memory == 141'000'000'000ULL);
  BOOST_TEST(sims[0].properties().sim->matmul_flops == 494e12);
}

BOOST_AUTO_TEST_CASE(cpu_devices_use_the_configured_number_of_threads) {
  device_options o;
  o.cpu_threads_per_device = 3;
  auto d = make_devices("cpu:2", o);
  BOOST_TEST(d[0].properties().concurrency == 3);
  BOOST_TEST(d[1].properties().concurrency == 3);
}

BOOST_AUTO_TEST_CASE(bad_device_options_are_rejected_with_a_sentence) {
  device_options o;
  o.sim_time_scale = -1;
  BOOST_CHECK_THROW(device_manager{o}, std::invalid_argument);
  device_options p;
  p.sim_profiles.push_back({.name = "zero"});
  BOOST_CHECK_THROW(device_manager{p}, std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(creating_cuda_devices_without_a_gpu_fails_with_a_clear_error,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       return boost::test_tools::assertion_result(cuda_gpu_count() == 0);
                     })) {
  for (const char* spec : {"cuda:0", "cuda:0x4", "cuda:0,1"}) {
    try {
      make_devices(spec);
      BOOST_FAIL("expected an error for " << spec);
    } catch (const device_error& e) {
      std::string what = e.what();
      BOOST_TEST((e.code() == device_errc::unavailable));
      BOOST_TEST(what.find(spec) != std::string::npos, what);
      BOOST_TEST((what.find("no CUDA device is available") != std::string::npos ||
                  what.find("no CUDA support") != std::string::npos),
                 what);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace spec_test
