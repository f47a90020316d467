// strata-trace merge: joining per-rank traces (strata/trace_tools/trace_merge.hpp).
//
// Contract: inputs that are not the per-rank traces of one job are refused with one sentence; a
// message sent to another rank becomes one flow from the send to the handling there, on one
// clock, with actors named name@r<rank> and placed on their rank. The last case checks a real
// two-rank run (tests/trace_tools/merge_ranks.sh runs it explicitly; it is disabled otherwise).
#define BOOST_TEST_MODULE trace_merge
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "strata/trace_tools/trace_merge.hpp"
#include "strata/trace_tools/trace_model.hpp"
#include "trace_views.hpp"

namespace tt = strata::trace_tools;
using strata::trace::event_kind;

namespace {

std::uint64_t proxy(std::uint32_t rank, bool by_name, std::uint64_t key) {
  return (std::uint64_t{1} << 63) | (std::uint64_t{by_name} << 62) | (std::uint64_t{rank} << 46) | key;
}

strata::trace::record ev(std::uint64_t ts, event_kind k, std::uint64_t actor, std::uint64_t peer, std::uint64_t msg,
                         std::uint32_t arg = 0, std::uint16_t type = 1) {
  return {ts, actor, peer, msg, arg, type, static_cast<std::uint8_t>(k), 0};
}

/// A rank's trace: actor 1 named `name` spawned at 0, job 77 of 2 ranks.
tt::trace_file rank_trace(std::uint32_t rank, const std::string& name, std::uint64_t start_unix_ns,
                          std::int64_t offset) {
  tt::trace_file f;
  f.name = "run.strace.rank" + std::to_string(rank);
  f.version = 2;
  f.rank = rank;
  f.world_size = 2;
  f.job_id = 77;
  f.start_unix_ns = start_unix_ns;
  f.clock_offset_ns = offset;
  f.clock_uncertainty_ns = 40;
  f.strings = {"", name};
  f.types = {"", "ping"};
  f.events.push_back(ev(0, event_kind::spawn, 1, 0, 0, 1, 0));
  return f;
}

/// Rank 0's actor 1 sends message 100 to the actor published on rank 1 (by name); rank 1 receives
/// it as its message 200 and handles it. Rank 1's clock runs 1000 ns ahead of rank 0's and its
/// trace started 3000 ns (rank 0's clock) after rank 0's.
std::vector<tt::trace_file> one_message_between_two_ranks() {
  auto r0 = rank_trace(0, "pinger", 1'000'000, 0);
  r0.events.push_back(ev(500, event_kind::remote_send, 1, proxy(1, true, 12345), 100, 1));
  auto r1 = rank_trace(1, "ponger", 1'004'000, -1000);
  const auto from = proxy(0, false, 1);
  r1.events.push_back(ev(100, event_kind::remote_recv, 1, 100, 200, 0));
  r1.events.push_back(ev(110, event_kind::send, from, 1, 200));
  r1.events.push_back(ev(120, event_kind::enqueue, 1, from, 200, 1));
  r1.events.push_back(ev(130, event_kind::handler_begin, 1, from, 200));
  r1.events.push_back(ev(140, event_kind::handler_end, 1, 0, 200));
  return {r1, r0};  // any order
}

std::string merge_error(const std::vector<tt::trace_file>& in) { return tt::merge_traces(in).error; }

}  // namespace

BOOST_AUTO_TEST_SUITE(linking)

BOOST_AUTO_TEST_CASE(a_message_to_another_rank_becomes_one_flow_from_the_send_to_its_handling) {
  auto merged = tt::merge_traces(one_message_between_two_ranks());
  BOOST_TEST_REQUIRE(merged.ok(), merged.error);
  BOOST_TEST(merged.counts.linked == 1u);
  BOOST_TEST(merged.counts.unmatched_sends == 0u);
  BOOST_TEST(merged.counts.unmatched_receipts == 0u);
  // Written and read back by the strict reader.
  auto back = tt::parse_trace(tt::serialize_trace(merged.trace), "merged.strace");
  BOOST_TEST_REQUIRE(back.ok(), back.error);
  BOOST_TEST(back.trace.merged());
  BOOST_TEST(back.trace.world_size == 2u);
  BOOST_TEST(back.trace.start_unix_ns == 1'000'000u);
  const auto m = tt::build_model(back.trace);
  BOOST_TEST_REQUIRE(m.flows.size() == 1u);
  const auto& fl = m.flows.front();
  BOOST_TEST(m.actor_name(fl.sender) == "pinger@r0");
  BOOST_TEST(m.actor_name(fl.receiver) == "ponger@r1");
  BOOST_TEST(m.actors.at(fl.sender).rank == 0);
  BOOST_TEST(m.actors.at(fl.receiver).rank == 1);
  // Rank 1 started at 1'004'000 - 1000 = 1'003'000 on rank 0's clock: 3000 ns after rank 0.
  BOOST_TEST(fl.send_ts == 500u);
  BOOST_TEST(fl.enqueue_ts == 3120u);
  BOOST_TEST(fl.handle_ts == 3130u);
  // The receiving rank's own record of the delivery (a send from the proxy) is left out.
  std::size_t sends = 0;
  for (const auto& e : back.trace.events)
    if (e.kind == static_cast<std::uint8_t>(event_kind::send) || e.kind == static_cast<std::uint8_t>(event_kind::remote_send))
      ++sends;
  BOOST_TEST(sends == 1u);
  BOOST_TEST(m.actors.at(fl.sender).sent == 1u);
  const auto s = tt::summary_json(m);
  BOOST_TEST(s["cross_rank"]["linked"].get<int>() == 1);
}

BOOST_AUTO_TEST_CASE(a_send_whose_rank_is_missing_stays_unlinked_and_is_counted) {
  auto in = one_message_between_two_ranks();
  in.erase(in.begin());  // rank 1's trace
  auto merged = tt::merge_traces(in);
  BOOST_TEST_REQUIRE(merged.ok(), merged.error);
  BOOST_TEST(merged.counts.linked == 0u);
  BOOST_TEST(merged.counts.unmatched_sends == 1u);
  BOOST_TEST(tt::build_model(merged.trace).flows.empty());
}

BOOST_AUTO_TEST_CASE(the_export_shows_one_process_per_rank) {
  auto merged = tt::merge_traces(one_message_between_two_ranks());
  BOOST_TEST_REQUIRE(merged.ok());
  const auto m = tt::build_model(merged.trace);
  const auto j = tt::chrome_trace(m);
  std::set<std::string> processes;
  std::map<std::string, int> flow_pid;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "s" || e["ph"] == "f") flow_pid[e["ph"].get<std::string>()] = e["pid"].get<int>();
  }
  BOOST_TEST((processes == std::set<std::string>{"strata rank 0", "strata rank 1"}));
  BOOST_TEST(flow_pid["s"] == 1);
  BOOST_TEST(flow_pid["f"] == 2);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(bad_input)

BOOST_AUTO_TEST_CASE(a_trace_of_a_world_of_one_is_refused) {
  auto in = one_message_between_two_ranks();
  in[0].version = 1;
  in[0].rank = 0;
  in[0].world_size = 1;
  BOOST_TEST(merge_error(in) == "run.strace.rank1: has no rank (a format version 1 trace, written by a world of one); "
                                "merge takes the FILE.rank<r> traces the ranks of one mpirun job write");
}

BOOST_AUTO_TEST_CASE(an_already_merged_trace_is_refused) {
  auto merged = tt::merge_traces(one_message_between_two_ranks());
  BOOST_TEST_REQUIRE(merged.ok());
  merged.trace.name = "merged.strace";
  BOOST_TEST(merge_error({merged.trace}) ==
             "merged.strace: is already a merged trace; merge takes the per-rank traces (FILE.rank<r>)");
}

BOOST_AUTO_TEST_CASE(traces_of_different_jobs_are_refused) {
  auto in = one_message_between_two_ranks();
  in[0].job_id = 78;
  BOOST_TEST(merge_error(in).find("come from different jobs (job ") != std::string::npos, merge_error(in));
  in = one_message_between_two_ranks();
  in[0].world_size = 3;
  BOOST_TEST(merge_error(in).find("come from different jobs") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_same_rank_twice_is_refused) {
  auto in = one_message_between_two_ranks();
  in.push_back(in[1]);
  in.back().name = "copy.strace";
  BOOST_TEST(merge_error(in) == "run.strace.rank0 and copy.strace are both rank 0 (give each rank's trace once)");
}

BOOST_AUTO_TEST_CASE(nothing_to_merge_is_refused) { BOOST_TEST(merge_error({}) == "no trace files to merge"); }

BOOST_AUTO_TEST_SUITE_END()

// ---- a real run: merge_ranks.sh passes -- MERGED RANK0 RANK1 ROUNDS ---------------------------

namespace {

std::size_t count_kind(const tt::trace_file& f, event_kind k) {
  std::size_t n = 0;
  for (const auto& e : f.events) n += e.kind == static_cast<std::uint8_t>(k);
  return n;
}

tt::trace_file read_or_fail(const std::string& path) {
  auto r = tt::read_trace(path);
  BOOST_TEST_REQUIRE(r.ok(), r.error);
  return std::move(r.trace);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_traced_two_rank_ping_pong_merges_into_linked_flows, *boost::unit_test::disabled()) {
  const auto& suite = boost::unit_test::framework::master_test_suite();
  BOOST_TEST_REQUIRE(suite.argc == 5, "expected: -- MERGED RANK0 RANK1 ROUNDS");
  const std::size_t rounds = std::strtoul(suite.argv[4], nullptr, 10);
  const std::size_t per_rank = rounds + 2;  // pings (pongs), the tensors (echoed), the request (its response)
  const auto merged = read_or_fail(suite.argv[1]);
  const auto r0 = read_or_fail(suite.argv[2]);
  const auto r1 = read_or_fail(suite.argv[3]);

  // Each rank's own file: its rank, one job, and every message to the other rank recorded.
  BOOST_TEST(r0.version == 2u);
  BOOST_TEST(r0.rank == 0u);
  BOOST_TEST(r1.rank == 1u);
  BOOST_TEST(r0.world_size == 2u);
  BOOST_TEST(r0.job_id == r1.job_id);
  BOOST_TEST(r0.job_id != 0u);
  // One machine: the ranks read one wall clock, so the endpoint records no offset to measure.
  BOOST_TEST(r1.clock_offset_ns == 0);
  BOOST_TEST(r1.clock_uncertainty_ns == 0u);
  for (const auto* f : {&r0, &r1}) {
    BOOST_TEST(count_kind(*f, event_kind::remote_send) == per_rank, f->name);
    BOOST_TEST(count_kind(*f, event_kind::remote_recv) == per_rank, f->name);
  }

  // The merge: every send to the other rank is one flow to its handling there, in time order.
  BOOST_TEST(merged.merged());
  const auto m = tt::build_model(merged);
  std::map<std::int64_t, std::size_t> sent_by_rank;
  std::size_t remote = 0;
  for (const auto& s : m.sends) {
    if (!s.remote) continue;
    ++remote;
    BOOST_TEST_REQUIRE(m.actors.count(s.sender) == 1u);
    ++sent_by_rank[m.actors.at(s.sender).rank];
  }
  BOOST_TEST(remote == 2 * per_rank);
  BOOST_TEST(sent_by_rank[0] == per_rank);
  BOOST_TEST(sent_by_rank[1] == per_rank);
  std::size_t linked = 0;
  for (const auto& fl : m.flows) {
    const auto& snd = m.sends.at(m.send_by_msg.at(fl.msg));
    if (!snd.remote) continue;
    ++linked;
    const auto& from = m.actors.at(fl.sender);
    const auto& to = m.actors.at(fl.receiver);
    BOOST_TEST(from.rank != to.rank, "message " << fl.msg);
    BOOST_TEST(from.name == (from.rank == 0 ? "pinger@r0" : "ponger@r1"));
    BOOST_TEST(to.name == (to.rank == 0 ? "pinger@r0" : "ponger@r1"));
    BOOST_TEST(fl.send_ts <= fl.enqueue_ts, "message " << fl.msg);
    BOOST_TEST(fl.enqueue_ts <= fl.handle_ts, "message " << fl.msg);
  }
  BOOST_TEST(linked == 2 * per_rank);
  const auto s = tt::summary_json(m);
  BOOST_TEST(s["cross_rank"]["linked"].get<std::size_t>() == 2 * per_rank);
  const auto j = tt::chrome_trace(m);
  std::set<std::string> processes;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
  BOOST_TEST((processes == std::set<std::string>{"strata rank 0", "strata rank 1"}));

  // The tensor data: three tensors each way, each one chunk posted and seen complete by the
  // communication thread of both ranks, plus the allreduce of one float at the end.
  const std::vector<std::uint64_t> sizes = {4096, (1u << 20) + 3, 3u << 20};
  for (const auto* f : {&r0, &r1}) {
    BOOST_TEST(count_kind(*f, event_kind::transfer_begin) == 2 * sizes.size() + 1, f->name);
    BOOST_TEST(count_kind(*f, event_kind::transfer_end) == 2 * sizes.size() + 1, f->name);
  }
  std::map<std::pair<std::uint64_t, strata::trace::transfer>, std::multiset<std::uint64_t>> moved;  // (rank, what) -> bytes
  for (const auto& t : m.transfers) {
    BOOST_TEST(!t.unfinished);
    BOOST_TEST(t.begin <= t.end);
    moved[{t.rank, t.what}].insert(t.bytes);
    if (t.what == strata::trace::transfer::allreduce) BOOST_TEST(t.bytes == sizeof(float));
    else BOOST_TEST(t.peer == 1 - t.rank);
  }
  const std::multiset<std::uint64_t> each(sizes.begin(), sizes.end());
  for (std::uint64_t rank : {0u, 1u}) {
    const auto& sent = moved[std::make_pair(rank, strata::trace::transfer::send)];
    const auto& received = moved[std::make_pair(rank, strata::trace::transfer::receive)];
    const auto& reduced = moved[std::make_pair(rank, strata::trace::transfer::allreduce)];
    BOOST_TEST((sent == each), "rank " << rank);
    BOOST_TEST((received == each), "rank " << rank);
    BOOST_TEST(reduced.size() == 1u, "rank " << rank);
  }
  // Each send joins the receive of its tag on the other rank: posted before that receive ends.
  BOOST_TEST(s["transfers"]["linked"].get<std::size_t>() == 2 * sizes.size());
  BOOST_TEST(s["transfers"]["unmatched_sends"].get<std::size_t>() == 0u);
  std::size_t data_flows = 0;
  std::set<std::string> network_tracks;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "s" && e["cat"] == "network") ++data_flows;
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"].get<std::string>().rfind("network", 0) == 0)
      network_tracks.insert(std::to_string(e["pid"].get<int>()) + " " + e["args"]["name"].get<std::string>());
  }
  BOOST_TEST(data_flows == 2 * sizes.size());
  BOOST_TEST(network_tracks.count("1 network sends") == 1u);
  BOOST_TEST(network_tracks.count("2 network receives") == 1u);
  BOOST_TEST(network_tracks.count("2 network allreduces") == 1u);
}
