// Contract tests: trace recording into the binary format of docs/trace-format.md.

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;
using strata::test::await;
using strata::trace::event_kind;

namespace trace_test {

struct parsed_trace {
  std::uint32_t version = 0;
  std::uint64_t count = 0;
  std::uint64_t dropped = 0;
  std::vector<std::string> strings;
  std::vector<std::string> types;
  std::vector<strata::trace::record> events;
};

template <class T>
T take(const std::string& blob, std::size_t& pos) {
  BOOST_REQUIRE(pos + sizeof(T) <= blob.size());
  T v;
  std::memcpy(&v, blob.data() + pos, sizeof(T));
  pos += sizeof(T);
  return v;
}

[[maybe_unused]] parsed_trace read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BOOST_REQUIRE(in.good());
  std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  parsed_trace t;
  BOOST_REQUIRE(blob.size() >= 8);
  BOOST_REQUIRE(blob.compare(0, 8, "STRATATR") == 0);
  std::size_t pos = 8;
  t.version = take<std::uint32_t>(blob, pos);
  auto record_size = take<std::uint32_t>(blob, pos);
  BOOST_REQUIRE(record_size == sizeof(strata::trace::record));
  (void)take<std::uint64_t>(blob, pos);  // start time
  t.count = take<std::uint64_t>(blob, pos);
  t.dropped = take<std::uint64_t>(blob, pos);
  auto nstrings = take<std::uint32_t>(blob, pos);
  auto ntypes = take<std::uint32_t>(blob, pos);
  for (std::uint32_t i = 0; i < nstrings; ++i) {
    auto len = take<std::uint32_t>(blob, pos);
    t.strings.push_back(blob.substr(pos, len));
    pos += len;
  }
  t.types.push_back("");
  for (std::uint32_t i = 0; i < ntypes; ++i) {
    auto len = take<std::uint32_t>(blob, pos);
    t.types.push_back(blob.substr(pos, len));
    pos += len;
  }
  BOOST_REQUIRE(blob.size() - pos == t.count * sizeof(strata::trace::record));
  t.events.resize(t.count);
  std::memcpy(t.events.data(), blob.data() + pos, blob.size() - pos);
  return t;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".strace")).string();
}

struct token {
  int hops;
};

/// Captures what is written to file descriptor 2 (stderr) while it lives; `text()` ends the
/// capture and returns it.
class [[maybe_unused]] stderr_capture {
public:
  stderr_capture() {
    std::fflush(stderr);
    char name[] = "/tmp/strata-stderr-XXXXXX";
    file_ = ::mkstemp(name);
    BOOST_REQUIRE(file_ >= 0);
    ::unlink(name);
    saved_ = ::dup(2);
    BOOST_REQUIRE(saved_ >= 0);
    BOOST_REQUIRE(::dup2(file_, 2) == 2);
  }
  ~stderr_capture() { (void)text(); }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;

  std::string text() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
      std::string out;
      char buf[4096];
      for (off_t at = 0;;) {
        ssize_t n = ::pread(file_, buf, sizeof buf, at);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
        at += n;
      }
      ::close(file_);
      text_ = std::move(out);
    }
    return text_;
  }

private:
  int file_ = -1;
  int saved_ = -1;
  std::string text_;
};

/// Gives `sys` a few messages to handle (and to record).
[[maybe_unused]] void traced_run(strata::actor_system& sys) {
  auto sink = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  for (int i = 0; i < 10; ++i) sys.send(sink, i);
}

BOOST_AUTO_TEST_SUITE(tracing)

#ifndef STRATA_TRACE_COMPILED_OUT

BOOST_AUTO_TEST_CASE(a_traced_run_records_spawn_send_enqueue_handlers_and_exit_with_linked_ids) {
  const std::string path = temp_path("strata-trace-test");
  strata::shutdown_report report;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 2, .trace_file = path});
    strata::test::shared_promise<void> done;
    auto f = done.future();
    auto echo = sys.spawn_fn_with({.name = "echo"}, [](strata::actor&) -> strata::behavior {
      return {[](const token& t) { return t.hops; }};
    });
    sys.spawn_fn_with({.name = "driver"}, [echo, p = done.p](strata::actor& self) -> strata::behavior {
      auto left = std::make_shared<int>(50);
      auto step = std::make_shared<std::function<void()>>();
      *step = [&self, echo, p, left, step] {
        self.request<int>(echo, 5s, token{*left}).then([&self, p, left, step](int) {
          if (--*left == 0) {
            *step = nullptr;  // break the step -> lambda -> step cycle (LeakSanitizer)
            p->set_value();
            self.quit();
          } else {
            (*step)();
          }
        });
      };
      (*step)();
      return {[](int) {}};
    });
    await(f);
    report = sys.shutdown();
  }
  BOOST_TEST(report.trace_file == path);
  BOOST_TEST(report.trace_error.empty());
  auto t = read_trace(path);
  std::filesystem::remove(path);
  BOOST_TEST(t.version == 1u);
  BOOST_TEST(t.count == report.trace_events);
  BOOST_TEST(t.dropped == 0u);
  std::map<event_kind, int> kinds;
  std::set<std::uint64_t> sent, handled;
  std::set<std::string> names;
  for (const auto& e : t.events) {
    auto k = static_cast<event_kind>(e.kind);
    ++kinds[k];
    if (k == event_kind::send) sent.insert(e.msg);
    if (k == event_kind::handler_begin) handled.insert(e.msg);
    if (k == event_kind::spawn) names.insert(t.strings.at(e.arg32));
  }
  BOOST_TEST(kinds[event_kind::spawn] >= 2);
  BOOST_TEST(kinds[event_kind::exit] >= 2);
  BOOST_TEST(kinds[event_kind::send] >= 100);
  BOOST_TEST(kinds[event_kind::enqueue] >= 100);
  BOOST_TEST(kinds[event_kind::handler_begin] == kinds[event_kind::handler_end]);
  BOOST_TEST(names.count("echo") == 1u);
  BOOST_TEST(names.count("driver") == 1u);
  // Every handled message was sent (the message id links the two ends).
  for (auto id : handled) BOOST_TEST(sent.count(id) == 1u);
  // Timestamps never decrease in the file.
  for (std::size_t i = 1; i < t.events.size(); ++i) BOOST_REQUIRE(t.events[i - 1].ts_ns <= t.events[i].ts_ns);
  // The message type of the token is named in the type table.
  bool token_named = false;
  for (const auto& name : t.types) token_named |= name.find("token") != std::string::npos;
  BOOST_TEST(token_named);
}

BOOST_AUTO_TEST_CASE(the_strata_trace_variable_turns_tracing_on_and_the_limit_bounds_it) {
  const std::string path = temp_path("strata-trace-env");
  ::setenv("STRATA_TRACE", path.c_str(), 1);
  strata::shutdown_report report;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 1, .trace_event_limit = 100});
    auto sink = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
    for (int i = 0; i < 1000; ++i) sys.send(sink, i);
    report = sys.shutdown();
  }
  ::unsetenv("STRATA_TRACE");
  auto t = read_trace(path);
  std::filesystem::remove(path);
  BOOST_TEST(t.count == 100u);
  BOOST_TEST(t.dropped > 1000u);
  BOOST_TEST(report.trace_events_dropped == t.dropped);
}

BOOST_AUTO_TEST_CASE(a_trace_in_a_missing_directory_is_reported_by_shutdown_with_the_reason) {
  const std::string path = "/nonexistent-strata-dir/run.strace";
  stderr_capture err;
  strata::shutdown_report report;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 1, .trace_file = path});
    traced_run(sys);
    report = sys.shutdown();
  }
  BOOST_TEST(report.trace_error.find("cannot write trace file '" + path + "'") == 0u, report.trace_error);
  BOOST_TEST(report.trace_error.find("No such file or directory") != std::string::npos, report.trace_error);
  BOOST_TEST(report.trace_error.find('\n') == std::string::npos);
  // The caller received the error: the runtime prints nothing.
  BOOST_TEST(err.text() == "");
}

BOOST_AUTO_TEST_CASE(a_trace_file_naming_a_directory_is_reported_and_the_directory_is_kept) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata-trace-dir-" + std::to_string(::getpid()));
  std::filesystem::create_directory(dir);
  std::ofstream(dir / "kept.txt") << "the user's file\n";
  strata::shutdown_report report;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 1, .trace_file = dir.string()});
    traced_run(sys);
    report = sys.shutdown();
  }
  BOOST_TEST(report.trace_error.find("cannot write trace file '" + dir.string() + "'") == 0u, report.trace_error);
  BOOST_TEST(report.trace_error.find("Is a directory") != std::string::npos, report.trace_error);
  BOOST_TEST(std::filesystem::is_directory(dir));
  BOOST_TEST(std::filesystem::exists(dir / "kept.txt"));
  // No temporary file is left beside it.
  std::size_t beside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.parent_path()))
    beside += e.path().filename().string().rfind(dir.filename().string() + ".tmp.", 0) == 0;
  BOOST_TEST(beside == 0u);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_system_destroyed_without_shutdown_prints_the_trace_error_once_on_stderr) {
  const std::string path = "/nonexistent-strata-dir/destroyed.strace";
  stderr_capture err;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 1, .trace_file = path});
    traced_run(sys);
  }  // the destructor shuts down; nobody else can receive the error
  const std::string text = err.text();
  BOOST_TEST(text.rfind("strata: cannot write trace file '" + path + "': ", 0) == 0u, text);
  BOOST_TEST(text.find("No such file or directory") != std::string::npos, text);
  BOOST_TEST(std::count(text.begin(), text.end(), '\n') == 1);
  BOOST_TEST(text.back() == '\n');
}

BOOST_AUTO_TEST_CASE(a_system_destroyed_without_shutdown_prints_nothing_when_the_trace_was_written) {
  const std::string path = temp_path("strata-trace-destroyed");
  stderr_capture err;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 1, .trace_file = path});
    traced_run(sys);
  }
  BOOST_TEST(err.text() == "");
  BOOST_TEST(std::filesystem::exists(path));
  std::filesystem::remove(path);
}

#else
BOOST_AUTO_TEST_CASE(with_tracing_compiled_out_no_trace_is_written) {
  const std::string path = temp_path("strata-trace-off");
  strata::actor_system sys(strata::system_config{.worker_threads = 1, .trace_file = path});
  auto sink = sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  sys.send(sink, 1);
  auto report = sys.shutdown();
  BOOST_TEST(report.trace_file.empty());
  BOOST_TEST(!std::filesystem::exists(path));
}
#endif

BOOST_AUTO_TEST_CASE(without_a_trace_file_nothing_is_recorded) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  BOOST_TEST(!strata::trace::enabled());
  auto report = sys.shutdown();
  BOOST_TEST(report.trace_file.empty());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace trace_test
