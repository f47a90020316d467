// The deadline within which a communication thread hears from every other rank
// (runtime/net/src/peer_watch.hpp), on injected times: heartbeats only on idle links, one
// sentence for a peer silent past the deadline, nothing for one that left. Without mpirun.
#define BOOST_TEST_MODULE strata_net_peer_watch
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "peer_watch.hpp"

using namespace std::chrono_literals;
using strata::net::detail::peer_watch;

namespace {
struct three_ranks {
  peer_watch watch;
  peer_watch::clock::time_point t0 = peer_watch::clock::now();
  three_ranks() { watch.start(0, {"host1", "host2", "host3"}, std::chrono::duration<double>(10.0), t0); }
};
}  // namespace

BOOST_FIXTURE_TEST_CASE(a_link_idle_for_a_quarter_of_the_deadline_gets_a_heartbeat, three_ranks) {
  BOOST_TEST(watch.heartbeats_due(t0 + 2s).empty());
  watch.sent_to(2, t0 + 2s);  // a message went to rank 2: its link is not idle
  BOOST_TEST(watch.heartbeats_due(t0 + 2600ms) == std::vector<int>{1});
  BOOST_TEST(watch.heartbeats_due(t0 + 4600ms) == (std::vector<int>{1, 2}));
}

BOOST_FIXTURE_TEST_CASE(a_peer_silent_past_the_deadline_is_named_with_its_host_and_silence, three_ranks) {
  watch.heard_from(1, t0 + 5s);
  BOOST_TEST(!watch.silent_peer(t0 + 10s).has_value());  // at the deadline, not past it
  const auto sentence = watch.silent_peer(t0 + 10500ms);
  BOOST_REQUIRE(sentence.has_value());
  BOOST_TEST(*sentence ==
             "strata::net: rank 2 on host host3 has been silent for 10.5 s, past STRATA_NET_PEER_TIMEOUT_S=10: rank 0 "
             "on host host1 ends the job.");
  watch.heard_from(2, t0 + 10500ms);
  const auto next = watch.silent_peer(t0 + 15100ms);
  BOOST_REQUIRE(next.has_value());
  BOOST_TEST(next->find("rank 1 on host host2 has been silent for 10.1 s") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(a_peer_that_left_is_neither_watched_nor_sent_heartbeats, three_ranks) {
  watch.peer_left(1);
  watch.heard_from(2, t0 + 30s);
  watch.sent_to(2, t0 + 30s);
  BOOST_TEST(!watch.silent_peer(t0 + 31s).has_value());
  BOOST_TEST(watch.heartbeats_due(t0 + 31s).empty());
}

BOOST_FIXTURE_TEST_CASE(after_its_goodbye_a_rank_still_watches_the_peer_but_sends_it_nothing, three_ranks) {
  watch.said_goodbye(1);
  watch.said_goodbye(2);
  BOOST_TEST(watch.heartbeats_due(t0 + 9s).empty());
  watch.heard_from(2, t0 + 9s);
  const auto sentence = watch.silent_peer(t0 + 11s);
  BOOST_REQUIRE(sentence.has_value());
  BOOST_TEST(sentence->find("rank 1 on host host2") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(checks_come_at_a_tenth_of_the_deadline_and_at_least_every_second) {
  peer_watch short_one, long_one;
  short_one.start(1, {"a", "b"}, std::chrono::duration<double>(2.0), peer_watch::clock::now());
  long_one.start(1, {"a", "b"}, std::chrono::duration<double>(300.0), peer_watch::clock::now());
  BOOST_TEST(std::chrono::duration<double>(short_one.check_every()).count() == 0.2, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(std::chrono::duration<double>(long_one.check_every()).count() == 1.0, boost::test_tools::tolerance(1e-9));
}
