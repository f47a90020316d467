// The doorbell a communication thread sleeps on (runtime/net/src/doorbell.hpp): a ring ends a
// sleep at once, from another thread or another process, and no ring is lost between reading
// the count and sleeping. Runs without mpirun, in every build with strata::net.
#define BOOST_TEST_MODULE strata_net_doorbell
#include <boost/test/unit_test.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <new>
#include <thread>

#include "doorbell.hpp"

using namespace std::chrono_literals;
using strata::net::detail::doorbell;

namespace {
// Long enough that a lost ring shows as a failure (the sleep reports no ring), never as a pass.
constexpr auto long_sleep = std::chrono::microseconds(20s);

void wait_until_asleep(const doorbell& bell) {
  while (bell.sleeping.load() == 0) std::this_thread::yield();
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_sleep_that_no_one_rings_ends_at_its_timeout_and_says_so) {
  doorbell bell;
  const auto t0 = std::chrono::steady_clock::now();
  BOOST_TEST(!bell.sleep(bell.seen(), 2ms));
  BOOST_TEST((std::chrono::steady_clock::now() - t0 >= 2ms));
  BOOST_TEST(bell.sleeping.load() == 0u);
}

BOOST_AUTO_TEST_CASE(a_ring_between_reading_the_count_and_sleeping_is_not_lost) {
  doorbell bell;
  const auto seen = bell.seen();
  bell.ring();  // nobody sleeps yet: only the count moves
  BOOST_TEST(bell.sleep(seen, long_sleep));
  // ring_if_asleep writes nothing when no one sleeps.
  const auto before = bell.seen();
  bell.ring_if_asleep();
  BOOST_TEST(bell.seen() == before);
}

BOOST_AUTO_TEST_CASE(a_ring_from_another_thread_ends_the_sleep) {
  doorbell bell;
  for (int round = 0; round < 50; ++round) {
    const auto seen = bell.seen();
    auto woke = std::async(std::launch::async, [&] { return bell.sleep(seen, long_sleep); });
    wait_until_asleep(bell);
    if (round % 2 == 0) bell.ring();
    else bell.ring_if_asleep();
    BOOST_REQUIRE(woke.wait_for(long_sleep / 2) == std::future_status::ready);
    BOOST_TEST(woke.get());
  }
}

BOOST_AUTO_TEST_CASE(a_ring_from_another_process_ends_the_sleep) {
  // The bells of ranks on one machine live in memory their processes share: a shared futex.
  void* at = ::mmap(nullptr, sizeof(doorbell), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  BOOST_REQUIRE(at != MAP_FAILED);
  auto* bell = new (at) doorbell{};
  const auto seen = bell->seen();
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {  // woken by the ring, not by the end of its sleep
    const auto t0 = std::chrono::steady_clock::now();
    const bool rung = bell->sleep(seen, long_sleep);
    _exit(rung && std::chrono::steady_clock::now() - t0 < long_sleep / 2 ? 0 : 1);
  }
  wait_until_asleep(*bell);
  bell->ring_if_asleep();
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  ::munmap(at, sizeof(doorbell));
}
