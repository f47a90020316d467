// Contract tests: stream-ordered memory pools.
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "helpers.hpp"

namespace memory_test {

using namespace strata;

BOOST_AUTO_TEST_SUITE(memory_pools)

BOOST_AUTO_TEST_CASE(a_freed_block_is_reused_by_a_later_allocation_of_a_similar_size) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  void* first = nullptr;
  {
    buffer b = dev[0].allocate(1 << 20, s);
    first = b.data();
    BOOST_TEST(b.size() == std::size_t{1} << 20);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(first) % 256 == 0u);
    BOOST_TEST(b.host_accessible());
    BOOST_TEST(dev[0].memory().bytes_in_use >= std::size_t{1} << 20);
  }
  s.synchronize();  // the release is ordered on s
  auto before = dev[0].memory();
  BOOST_TEST(before.bytes_in_use == 0u);
  BOOST_TEST(before.bytes_cached >= std::size_t{1} << 20);
  buffer again = dev[0].allocate((1 << 20) - 100, s);
  BOOST_TEST(again.data() == first);
  auto after = dev[0].memory();
  BOOST_TEST(after.cache_hits == before.cache_hits + 1);
  BOOST_TEST(after.allocations == before.allocations + 1);
  BOOST_TEST(after.peak_bytes_in_use >= std::size_t{1} << 20);
}

BOOST_AUTO_TEST_CASE(a_big_host_block_is_whole_huge_pages_and_reused_as_such) {
  // Blocks of 4 MiB and more are 2 MiB aligned, in whole 2 MiB pages (transparent huge pages).
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  constexpr std::size_t mib = std::size_t{1} << 20;
  const std::size_t bytes = 5 * mib + 12345;  // random-ish: not a multiple of anything
  void* first = nullptr;
  {
    buffer b = dev[0].allocate(bytes, s);
    first = b.data();
    BOOST_TEST(b.size() == bytes);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(first) % (2 * mib) == 0u);
    BOOST_TEST(dev[0].memory().bytes_in_use == 6 * mib);
    std::memset(b.data(), 7, bytes);  // every byte asked for is there
  }
  s.synchronize();
  BOOST_TEST(dev[0].memory().bytes_cached >= 6 * mib);
  {
    buffer again = dev[0].allocate(6 * mib, s);  // fits the cached block exactly
    BOOST_TEST(again.data() == first);
    buffer small = dev[0].allocate(4 * mib - 256, s);  // below the threshold: 256-byte rounding only
    BOOST_TEST(dev[0].memory().bytes_in_use == 10 * mib - 256);
  }
  s.synchronize();
  dev[0].trim_memory();  // the blocks go back with the alignment each was made with (ASan checks)
  BOOST_TEST(dev[0].memory().bytes_cached == 0u);
}

BOOST_AUTO_TEST_CASE(a_released_block_is_not_reused_before_the_work_queued_before_its_release_completes) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  test::gate slow;
  void* first = nullptr;
  {
    buffer b = dev[0].allocate(4096, s);
    first = b.data();
    s.launch({.name = "uses b", .cpu = [&slow, p = b.data()] {
                (void)slow.pass();
                std::memset(p, 1, 4096);
              }});
  }  // dropped while the work is still queued
  buffer other = dev[0].allocate(4096, s);
  BOOST_TEST(other.data() != first);
  slow.open();
  s.synchronize();
  buffer reused = dev[0].allocate(4096, s);
  BOOST_TEST(reused.data() == first);
}

BOOST_AUTO_TEST_CASE(record_stream_delays_the_release_until_the_using_stream_is_done) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  auto user = dev[0].create_stream();
  test::gate slow;
  void* first = nullptr;
  {
    buffer b = dev[0].allocate(4096, s);
    first = b.data();
    b.record_stream(user);
    user.launch({.name = "uses b", .cpu = [&slow] { (void)slow.pass(); }});
  }
  s.synchronize();  // the allocation stream is idle, but `user` is not
  buffer other = dev[0].allocate(4096, s);
  BOOST_TEST(other.data() != first);
  slow.open();
  user.synchronize();
  s.synchronize();
  buffer reused = dev[0].allocate(4096, s);
  BOOST_TEST(reused.data() == first);
}

BOOST_AUTO_TEST_CASE(trim_returns_cached_blocks) {
  auto dev = make_devices("cpu:1");
  auto s = dev[0].create_stream();
  { buffer b = dev[0].allocate(1 << 16, s); }
  s.synchronize();
  BOOST_TEST(dev[0].memory().bytes_cached > 0u);
  dev[0].trim_memory();
  BOOST_TEST(dev[0].memory().bytes_cached == 0u);
}

BOOST_AUTO_TEST_CASE(allocating_on_another_device_stream_is_rejected) {
  auto dev = make_devices("cpu:2");
  auto s = dev[1].create_stream();
  BOOST_CHECK_THROW(dev[0].allocate(16, s), device_error);
}

BOOST_AUTO_TEST_CASE(device_copies_move_bytes_between_cpu_devices_in_stream_order) {
  auto dev = make_devices("cpu:2");
  auto s0 = dev[0].create_stream();
  auto s1 = dev[1].create_stream();
  buffer a = dev[0].allocate(1000, s0);
  buffer b = dev[1].allocate(1000, s1);
  std::vector<unsigned char> src(1000), dst(1000, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  s0.copy_from_host(a, src.data(), src.size());
  s1.wait(s0.record());
  dev[1].copy(b, a, s1);
  s1.copy_to_host(dst.data(), b, 1000);
  s1.synchronize();
  BOOST_TEST(dst == src);
  BOOST_CHECK_THROW(s1.copy(b, a, 2000), device_error);
}

BOOST_AUTO_TEST_CASE(sim_memory_counts_bytes_against_the_profile_capacity_and_holds_no_data) {
  auto dev = make_devices("sim:1:h200", test::deterministic_sim());
  auto s = dev[0].create_stream();
  {
    buffer big = dev[0].allocate(100'000'000'000ULL, s);
    BOOST_TEST(big.data() == nullptr);
    BOOST_TEST(big.size() == 100'000'000'000ULL);
    BOOST_TEST(dev[0].memory().bytes_in_use == 100'000'000'000ULL);
    try {
      dev[0].allocate(50'000'000'000ULL, s);
      BOOST_FAIL("expected out_of_memory");
    } catch (const device_error& e) {
      BOOST_TEST((e.code() == device_errc::out_of_memory));
    }
  }
  s.synchronize();
  BOOST_TEST(dev[0].memory().bytes_in_use == 0u);
  BOOST_TEST(dev[0].memory().peak_bytes_in_use == 100'000'000'000ULL);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace memory_test
