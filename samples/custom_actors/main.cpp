// custom_actors: a tutorial for the strata actor API.
//
// Three actors of our own form a small pipeline:
//
//   parser  --(word)-->  counter  <--(request: top_words)--  main()
//     |
//     `-- supervised: a malformed line makes it throw; its supervisor restarts it
//
// Read this file top to bottom: each step introduces one part of the API.
//
//   custom_actors [--lines N] [--bad-every K]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "strata/strata.hpp"

using namespace std::chrono_literals;

// ---- 1. Messages are plain C++ structs. ------------------------------------------------------
struct line {
  std::string text;
};
struct word {
  std::string text;
};
struct top_words {
  std::size_t n;
};
struct word_count {
  std::string text;
  int count;
};

// ---- 2. A class-based actor: private state, handlers returned by make_behavior(). ------------
// `protocol` lists what it handles; handles to it are then typed, and sending it anything else
// does not compile. An entry written `R(T)` also says what answers T: a request through a typed
// handle then returns R without naming it, and `typed_behavior` checks the handlers against the
// protocol when this compiles (a missing handler or another reply type is an error).
class counter : public strata::actor {
public:
  using protocol = strata::protocol<word, std::vector<word_count>(top_words)>;

  strata::behavior make_behavior() override {
    return strata::typed_behavior<protocol>{
        // A handler that returns nothing: a one-way message.
        [this](const word& w) { ++counts_[w.text]; },
        // A handler that returns a value: it answers requests.
        [this](const top_words& q) {
          std::vector<word_count> all;
          for (const auto& [text, count] : counts_) all.push_back({text, count});
          std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
            return a.count != b.count ? a.count > b.count : a.text < b.text;
          });
          if (all.size() > q.n) all.resize(q.n);
          return all;
        },
    };
  }

private:
  std::map<std::string, int> counts_;
};

// ---- 3. An actor that fails: an exception escaping a handler fails the actor. ----------------
// Under a supervisor, a fresh instance replaces it behind the same handle; queued lines wait.
class parser : public strata::actor {
public:
  parser(strata::typed_actor<counter::protocol> sink, std::shared_ptr<std::atomic<int>> restarts)
      : sink_(std::move(sink)), starts_(std::move(restarts)) {
    starts_->fetch_add(1);
  }

  strata::behavior make_behavior() override {
    return {[this](const line& l) {
      if (l.text.find('\x7f') != std::string::npos) throw std::runtime_error("malformed line");
      std::istringstream words(l.text);
      for (std::string w; words >> w;) send(sink_, word{w});  // typed send: checked at compile time
    }};
  }

private:
  strata::typed_actor<counter::protocol> sink_;
  std::shared_ptr<std::atomic<int>> starts_;
};

int main(int argc, char** argv) {
  CLI::App app{"custom_actors: three user-defined strata actors in a supervised pipeline"};
  int lines = 10'000;
  int bad_every = 2'500;
  app.add_option("--lines", lines, "lines to parse")->check(CLI::Range(1, 100'000'000));
  app.add_option("--bad-every", bad_every, "every K-th line is malformed (0: none)")->check(CLI::Range(0, 100'000'000));
  CLI11_PARSE(app, argc, argv);

  // ---- 4. The actor system owns the threads (default: one per hardware thread). --------------
  strata::actor_system system;

  // ---- 5. Spawn: class-based actors with constructor arguments. ------------------------------
  auto words = system.spawn<counter>();

  // ---- 6. A one-for-one supervisor: restart a failing child at most 10 times per second. -----
  auto supervisor = system.spawn_supervisor(strata::restart_policy{.max_restarts = 10, .within = 1s});
  auto starts = std::make_shared<std::atomic<int>>(0);
  auto parse = system.spawn_child<parser>(supervisor, strata::spawn_options{.name = "parser"}, words, starts);

  // ---- 7. A function-based actor: a function returning the behavior; state in its captures. --
  // It monitors the supervisor and reports if the supervisor ever gives up.
  auto watchdog = system.spawn([supervisor](strata::actor& self) -> strata::behavior {
    self.monitor(supervisor);
    return {[](const strata::down_msg& d) {
      std::printf("supervisor terminated: %s\n", d.reason.to_string().c_str());
    }};
  });
  (void)watchdog;

  // ---- 8. Send from outside any actor. Order per sender-receiver pair is kept. ---------------
  std::mt19937 rng(7);
  const char* vocabulary[] = {"actor", "message", "device", "stream", "tensor", "pipeline", "kvstore"};
  std::uniform_int_distribution<int> pick(0, 6);
  int expected_words = 0;
  for (int i = 1; i <= lines; ++i) {
    std::string text;
    for (int w = 0; w < 5; ++w) text += std::string(vocabulary[pick(rng)]) + " ";
    if (bad_every > 0 && i % bad_every == 0) text += '\x7f';  // this line fails the parser
    else expected_words += 5;
    system.send(parse, line{text});
  }

  // ---- 9. Request/response with a timeout, from outside: a future of expected<T>. ------------
  // Wait until the parser drained its queue (a request is answered after the lines before it).
  auto drained = system.request<void>(parse, 10s, line{""});
  if (auto r = drained.get(); !r) {
    std::fprintf(stderr, "custom_actors: the parser did not answer: %s\n", r.error().to_string().c_str());
    return 1;
  }
  auto top = system.request(words, 10s, top_words{3}).get();
  if (!top) {
    std::fprintf(stderr, "custom_actors: the counter did not answer: %s\n", top.error().to_string().c_str());
    return 1;
  }
  int counted = 0;
  auto all = system.request(words, 10s, top_words{100}).get();
  for (const auto& wc : *all) counted += wc.count;
  std::printf("parsed %d lines; %d words counted (expected %d); parser started %d times\n", lines, counted,
              expected_words, starts->load());
  for (const auto& wc : *top) std::printf("  %-10s %d\n", wc.text.c_str(), wc.count);

  // ---- 10. Shutdown: drain what is queued, stop every actor, report. -------------------------
  // The report carries the trace's error (STRATA_TRACE naming a place that cannot be written):
  // call shutdown() yourself to handle it.
  auto report = system.shutdown(strata::shutdown_mode::drain);
  std::printf("shutdown: %zu actors stopped, %llu messages discarded, %llu restarts\n", report.actors_stopped,
              static_cast<unsigned long long>(report.messages_discarded),
              static_cast<unsigned long long>(report.stats.restarts));
  if (!report.trace_error.empty()) {
    std::fprintf(stderr, "custom_actors: %s\n", report.trace_error.c_str());
    return 1;
  }
  if (!report.trace_file.empty())
    std::printf("trace: %zu events written to %s\n", report.trace_events, report.trace_file.c_str());
  return counted == expected_words ? 0 : 1;
}
