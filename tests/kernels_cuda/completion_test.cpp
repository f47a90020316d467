// The cuda backend's completion ledger and fault watch, driven without a GPU: a fake probe stands
// for the GPU (healthy, then failed with a sticky error), and the completions are the ones the
// backend queues (event points fired, on_complete callbacks, staging copies). What must hold: a
// healthy GPU completes nothing early; a failed one completes every pending point and callback
// with one device_error naming the stream, so waits end; each completion runs exactly once even
// when CUDA runs host functions while the fault is being delivered.
#include "device/cuda_completions.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "device/cuda_support.hpp"
#include "device/impl.hpp"
#include "strata/device/error.hpp"

namespace cb = strata::cuda_backend;
using strata::device_errc;
using strata::device_error;
using strata::detail::event_point;
using namespace std::chrono_literals;

namespace completion_test {

/// Stands for one GPU: healthy until fail() is called; counts the probes.
struct fake_gpu {
  std::mutex mu;
  std::optional<std::string> error;
  std::atomic<int> probes{0};
  void fail(std::string e) {
    std::lock_guard lk(mu);
    error = std::move(e);
  }
  cb::fault_probe probe() {
    return [this]() -> std::optional<std::string> {
      ++probes;
      std::lock_guard lk(mu);
      return error;
    };
  }
};

const std::string illegal_address = "cudaErrorIllegalAddress (an illegal memory access was encountered)";

std::string message_of(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const device_error& d) {
    return std::string(d.what()) + (d.code() == device_errc::backend_failure ? " [backend_failure]" : " [other code]");
  } catch (const std::exception& x) {
    return std::string("not a device_error: ") + x.what();
  }
  return "";
}

/// What an on_complete callback saw.
struct callback_log {
  std::mutex mu;
  std::vector<std::exception_ptr> calls;
  cb::completion completion() {
    return [this](std::exception_ptr fault) {
      std::lock_guard lk(mu);
      calls.push_back(fault);
    };
  }
  std::size_t size() {
    std::lock_guard lk(mu);
    return calls.size();
  }
};

BOOST_AUTO_TEST_SUITE(cuda_completion_ledger)

BOOST_AUTO_TEST_CASE(completions_run_once_each_when_cuda_runs_their_host_functions) {
  cb::completion_ledger ledger("cuda:0 stream 1", [] { return std::nullopt; }, nullptr);
  std::vector<int> runs(3, 0);
  std::vector<std::uint64_t> tickets;
  for (int i = 0; i < 3; ++i)
    tickets.push_back(ledger.add([&runs, i](std::exception_ptr fault) { runs[i] += fault ? 100 : 1; }));
  BOOST_TEST(ledger.pending() == 3u);
  ledger.run(tickets[2]);
  ledger.run(tickets[0]);
  ledger.run(tickets[0]);  // a second run of the same host function does nothing
  ledger.run(tickets[1]);
  BOOST_TEST((runs == std::vector<int>{1, 1, 1}));
  BOOST_TEST(ledger.pending() == 0u);
  BOOST_TEST(!ledger.fault());
}

BOOST_AUTO_TEST_CASE(a_gpu_fault_completes_pending_points_and_callbacks_with_an_error_naming_the_stream) {
  fake_gpu gpu;
  auto watch = std::make_shared<cb::fault_watch>(5ms);
  auto ledger = std::make_shared<cb::completion_ledger>("cuda:0#1 stream 7", gpu.probe(), watch);
  callback_log callback;
  ledger->add(callback.completion());
  std::atomic<int> staging_copies{0};
  ledger->add([&](std::exception_ptr fault) {
    if (!fault) ++staging_copies;  // a host-side copy: skipped after a fault
  });
  // Queued last: completions run in queue order, so when the point fires the others have run.
  auto point = std::make_shared<event_point>();
  std::exception_ptr earlier_error;  // the stream's sticky error when the record was issued: none
  ledger->add([point, earlier_error](std::exception_ptr fault) { point->fire(fault ? fault : earlier_error); });

  // A healthy GPU that is merely slow: the watch probes, nothing completes early.
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (gpu.probes.load() < 3 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(5ms);  // a poll's period: no event says the watch probed
  BOOST_TEST(gpu.probes.load() >= 3);
  BOOST_TEST(!point->done());
  BOOST_TEST(callback.size() == 0u);

  // A sticky error: CUDA will never run the queued host functions. The wait ends anyway.
  gpu.fail(illegal_address);
  BOOST_REQUIRE(point->wait_for(5000ms));
  const auto text = message_of(point->error());
  BOOST_TEST(text.find("cuda:0#1 stream 7") == 0u, text);
  BOOST_TEST(text.find(illegal_address) != std::string::npos, text);
  BOOST_TEST(text.find("STRATA_CUDA_SYNC=1") != std::string::npos, text);
  BOOST_TEST(text.find("[backend_failure]") != std::string::npos, text);
  BOOST_REQUIRE(callback.size() == 1u);
  BOOST_TEST(message_of(callback.calls[0]) == text);
  BOOST_TEST(staging_copies.load() == 0);
  BOOST_TEST(ledger->pending() == 0u);
  BOOST_TEST(message_of(ledger->fault()) == text);

  // After the fault nothing more is queued: the stream completes new work with the fault itself.
  cb::completion later = callback.completion();
  BOOST_TEST(ledger->add(std::move(later)) == 0u);
  BOOST_TEST(static_cast<bool>(later));  // left with the caller
}

BOOST_AUTO_TEST_CASE(the_points_error_is_the_streams_earlier_error_when_the_gpu_is_healthy) {
  cb::completion_ledger ledger("cuda:0 stream 2", [] { return std::nullopt; }, nullptr);
  auto point = std::make_shared<event_point>();
  auto launch_error = std::make_exception_ptr(device_error(device_errc::work_failed, "kernel \"k\" threw"));
  auto t = ledger.add([point, launch_error](std::exception_ptr fault) { point->fire(fault ? fault : launch_error); });
  ledger.run(t);
  BOOST_TEST(point->done());
  BOOST_TEST(message_of(point->error()).find("kernel \"k\" threw") == 0u);
}

BOOST_AUTO_TEST_CASE(every_completion_runs_exactly_once_when_cuda_and_the_fault_race) {
  for (int round = 0; round < 20; ++round) {
    cb::completion_ledger ledger("cuda:0 stream 3", [] { return std::nullopt; }, nullptr);
    constexpr int n = 200;
    std::vector<std::atomic<int>> calls(n);
    std::vector<std::uint64_t> tickets;
    for (int i = 0; i < n; ++i) tickets.push_back(ledger.add([&calls, i](std::exception_ptr) { ++calls[i]; }));
    // CUDA's callback thread runs the host functions in order while the watch delivers the fault.
    std::thread cuda_thread([&] {
      for (auto t : tickets) ledger.run(t);
    });
    ledger.fail(cb::stream_fault("cuda:0 stream 3", illegal_address));
    cuda_thread.join();
    for (int i = 0; i < n; ++i) BOOST_TEST_REQUIRE(calls[i].load() == 1, "completion " << i);
  }
}

BOOST_AUTO_TEST_CASE(the_watch_stops_probing_when_nothing_is_pending_and_resumes_with_new_work) {
  fake_gpu gpu;
  auto watch = std::make_shared<cb::fault_watch>(2ms);
  auto ledger = std::make_shared<cb::completion_ledger>("cuda:1 stream 4", gpu.probe(), watch);
  callback_log first;
  ledger->run(ledger->add(first.completion()));
  std::this_thread::sleep_for(30ms);  // the watch saw the ledger once at most, then dropped it
  const int settled = gpu.probes.load();
  std::this_thread::sleep_for(30ms);  // time for probes that must not come, under test
  BOOST_TEST(gpu.probes.load() == settled);  // idle: no probing

  auto point = std::make_shared<event_point>();
  ledger->add([point](std::exception_ptr fault) { point->fire(fault); });
  gpu.fail(illegal_address);
  BOOST_REQUIRE(point->wait_for(5000ms));
  BOOST_TEST(message_of(point->error()).find("cuda:1 stream 4") == 0u);
  BOOST_TEST(first.size() == 1u);
  BOOST_TEST(!first.calls[0]);  // the first callback ran normally, before the fault
}

BOOST_AUTO_TEST_CASE(a_fault_on_one_gpu_leaves_the_streams_of_another_gpu_waiting_for_cuda) {
  fake_gpu broken, healthy;
  auto watch = std::make_shared<cb::fault_watch>(2ms);
  auto a = std::make_shared<cb::completion_ledger>("cuda:0 stream 5", broken.probe(), watch);
  auto b = std::make_shared<cb::completion_ledger>("cuda:1 stream 6", healthy.probe(), watch);
  auto pa = std::make_shared<event_point>();
  auto pb = std::make_shared<event_point>();
  a->add([pa](std::exception_ptr f) { pa->fire(f); });
  auto tb = b->add([pb](std::exception_ptr f) { pb->fire(f); });
  broken.fail(illegal_address);
  BOOST_REQUIRE(pa->wait_for(5000ms));
  std::this_thread::sleep_for(20ms);  // time for a wrong completion of b to come, under test
  BOOST_TEST(!pb->done());
  b->run(tb);  // CUDA runs it on the healthy GPU
  BOOST_TEST(pb->done());
  BOOST_TEST(!pb->error());
}

BOOST_AUTO_TEST_CASE(a_watch_dropped_with_ledgers_pending_stops_without_waiting) {
  fake_gpu gpu;
  auto ledger = std::make_shared<cb::completion_ledger>("cuda:0 stream 8", gpu.probe(),
                                                        std::make_shared<cb::fault_watch>(1ms));
  ledger->add([](std::exception_ptr) {});
  ledger.reset();  // the ledger owned the watch: its destructor runs here and returns at once
  BOOST_TEST(true);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cuda_sync_mode)

BOOST_AUTO_TEST_CASE(strata_cuda_sync_accepts_1_and_0_and_names_any_other_value) {
  BOOST_TEST(cb::parse_cuda_sync("1"));
  BOOST_TEST(!cb::parse_cuda_sync("0"));
  BOOST_TEST(!cb::parse_cuda_sync(""));
  BOOST_TEST(!cb::parse_cuda_sync(nullptr));
  try {
    cb::parse_cuda_sync("yes");
    BOOST_ERROR("expected device_error");
  } catch (const device_error& e) {
    BOOST_TEST((e.code() == device_errc::invalid_argument));
    BOOST_TEST(std::string(e.what()) ==
               "STRATA_CUDA_SYNC is \"yes\"; expected 1 (synchronise after every work item) or 0");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace completion_test
