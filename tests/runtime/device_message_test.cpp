// Contract tests: device work completion reaches actors as messages, never as blocked threads.

#include <boost/test/unit_test.hpp>

#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>

#include "strata/device/device_manager.hpp"
#include "strata/device/tensor.hpp"
#include "strata/device_messages.hpp"
#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;

namespace device_message_test {
struct work_done {
  int tag;
};

BOOST_AUTO_TEST_SUITE(device_messages)

BOOST_AUTO_TEST_CASE(an_actor_is_told_by_message_when_its_cpu_stream_finished) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto devices = strata::make_devices("cpu:1");
  auto stream = devices.at(0).create_stream();
  std::mt19937 rng(3);
  std::vector<float> data(100'000);
  for (auto& v : data) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  const double expected = std::accumulate(data.begin(), data.end(), 0.0);
  auto sum = std::make_shared<double>(0);
  strata::test::shared_promise<std::pair<int, double>> got;
  auto f = got.future();
  sys.spawn([&, sum, p = got.p](strata::actor& self) -> strata::behavior {
    stream.launch({.name = "sum", .bytes = 4.0 * data.size(), .cpu = [&data, sum] {
                     std::this_thread::sleep_for(20ms);  // slow device work; the actor does not wait
                     *sum = std::accumulate(data.begin(), data.end(), 0.0);
                   }});
    strata::send_on_complete(stream, self.self(), work_done{7});
    return {[&self, sum, p](const work_done& d) {
      p->set_value({d.tag, *sum});
      self.quit();
    }};
  });
  auto [tag, value] = await(f);
  BOOST_TEST(tag == 7);
  BOOST_TEST(value == expected, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(failed_device_work_arrives_as_a_device_failure_message) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto devices = strata::make_devices("cpu:1");
  auto stream = devices.at(0).create_stream();
  strata::test::shared_promise<std::string> got;
  auto f = got.future();
  sys.spawn([&, p = got.p](strata::actor& self) -> strata::behavior {
    stream.launch({.name = "broken", .cpu = [] { throw std::runtime_error("kernel exploded"); }});
    strata::send_on_complete(stream, self.self(), work_done{1});
    return {[p](const work_done&) { p->set_value("unexpected success"); },
            [&self, p](const strata::device_failure& d) {
              p->set_value(d.what);
              self.quit();
            }};
  });
  BOOST_TEST(await(f).find("kernel exploded") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace device_message_test
