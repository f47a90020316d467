// A rank that leaves the job early (or dies): run under mpirun by tests/net/CMakeLists.txt.
//
//   rank_exit leave   the last rank leaves while rank 0 monitors one of its actors, waits for a
//                     request to it and links to another: rank 0 must see down_msg, exit_msg and
//                     a failed request, all with errc::rank_down, and later sends must fail too.
//   rank_exit crash   rank 1 dies without finalizing MPI: the whole job must end (non-zero).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "messages.hpp"
#include "strata/actor_system.hpp"
#include "strata/net/endpoint.hpp"

using namespace std::chrono_literals;
using namespace nettest;

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "rank_exit: %s\n", what.c_str());
  return 1;
}

int leave() {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::net::endpoint net(sys);
  const int last = net.size() - 1;
  if (net.rank() == last) {
    std::promise<void> told;
    auto go = told.get_future();
    (void)net.publish(sys.spawn([](strata::actor& self) -> strata::behavior {
                        auto kept = std::make_shared<std::vector<strata::response_promise<int>>>();
                        return {[&self, kept](const hold_on&) {
                          kept->push_back(self.make_response_promise<int>());
                          return 0;
                        }};
                      }),
                      "silent");
    (void)net.publish(sys.spawn([&told](strata::actor&) -> strata::behavior {
                        return {[&told](const die&) { told.set_value(); }};
                      }),
                      "leaver");
    go.wait();
    net.shutdown();  // leaves while its actors still run
    std::printf("rank %d left\n", net.rank());
    return 0;
  }
  if (net.rank() != 0) return 0;  // middle ranks: just leave at the end

  auto silent = net.remote(last, "silent").value();
  auto leaver = net.remote(last, "leaver").value();
  std::promise<std::string> report;
  auto result = report.get_future();
  auto t0 = std::chrono::steady_clock::now();
  sys.spawn([&](strata::actor& self) -> strata::behavior {
    self.monitor(silent);
    self.trap_exit(true);
    self.link_to(leaver);
    auto seen = std::make_shared<int>(0);
    auto text = std::make_shared<std::string>();
    auto note = [&self, &report, seen, text](const std::string& what) {
      *text += what + ";";
      if (++*seen == 3) {
        report.set_value(*text);
        self.quit();
      }
    };
    // The request waits far longer than the test: only the rank's departure can end it.
    self.request<int>(silent, 300s, hold_on{1}).then([note](int) { note("answered"); },
                                                     [note](const strata::error& e) {
                                                       note(std::string("request:") + strata::to_string(e.code()));
                                                     });
    self.send(leaver, die{false});  // tells the last rank to leave
    return {[note](const strata::down_msg& d) { note(std::string("down:") + strata::to_string(d.reason.code())); },
            [note](const strata::exit_msg& e) { note(std::string("exit:") + strata::to_string(e.reason.code())); }};
  });
  if (result.wait_for(30s) != std::future_status::ready) return fail("rank 0 saw no down message within 30 s");
  auto text = result.get();
  auto waited = std::chrono::steady_clock::now() - t0;
  for (const char* want : {"down:rank_down", "exit:rank_down", "request:rank_down"})
    if (text.find(want) == std::string::npos) return fail("expected " + std::string(want) + " in '" + text + "'");
  auto after = sys.send(silent, hold_on{2});
  if (after.has_value() || after.error().code() != strata::errc::rank_down)
    return fail("a send to a rank that left must fail with rank_down");
  std::printf("rank 0: %s after %.3f s; later send: %s\n", text.c_str(),
              std::chrono::duration<double>(waited).count(), after.error().message().c_str());
  return 0;
}

int crash() {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::net::endpoint net(sys);
  if (net.rank() == 1) {
    std::this_thread::sleep_for(200ms);  // the others are serving when it dies: the death is under test
    std::_Exit(7);  // dies without MPI_Finalize
  }
  // The others would serve forever: only the launcher ending the job stops them.
  std::this_thread::sleep_for(120s);  // serving until the launcher ends the job, which is under test
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "leave") == 0) return leave();
  if (argc >= 2 && std::strcmp(argv[1], "crash") == 0) return crash();  // argv[2]: a marker for ps
  std::fprintf(stderr, "usage: rank_exit leave|crash\n");
  return 2;
}
