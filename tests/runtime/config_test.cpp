// Contract tests of system_config::from_env / from_args: every setting of the table in
// docs/runtime.md, the command line over the environment, and one sentence per bad value.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdlib>
#include <future>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "strata/strata.hpp"
#include "support/await.hpp"

using namespace std::chrono_literals;

namespace config_test {

const std::vector<std::string> all_variables{
    "STRATA_SCHEDULER_THREADS", "STRATA_THROUGHPUT",     "STRATA_TRACE_FILE",       "STRATA_TRACE_EVENT_LIMIT",
    "STRATA_DRAIN_TIMEOUT_MS",  "STRATA_STASH_CAPACITY", "STRATA_MAILBOX_CAPACITY", "STRATA_MAILBOX_OVERFLOW"};

/// Sets environment variables for one test; every variable of the table is unset before and after.
class environment {
public:
  environment() { clear(); }
  explicit environment(std::initializer_list<std::pair<std::string, std::string>> values) {
    clear();
    for (const auto& [name, value] : values) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~environment() { clear(); }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;

private:
  static void clear() {
    for (const auto& name : all_variables) ::unsetenv(name.c_str());
  }
};

strata::expected<strata::system_config> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "program");
  return strata::system_config::from_args(static_cast<int>(args.size()), args.data());
}

struct hold {};
struct item {};

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(from_env_reads_every_variable_of_the_table) {
  environment env({{"STRATA_SCHEDULER_THREADS", "3"},
                   {"STRATA_THROUGHPUT", "17"},
                   {"STRATA_TRACE_FILE", "run/t.strace"},
                   {"STRATA_TRACE_EVENT_LIMIT", "123456"},
                   {"STRATA_DRAIN_TIMEOUT_MS", "250"},
                   {"STRATA_STASH_CAPACITY", "9"},
                   {"STRATA_MAILBOX_CAPACITY", "4096"},
                   {"STRATA_MAILBOX_OVERFLOW", "drop"}});
  auto cfg = strata::system_config::from_env();
  BOOST_REQUIRE_MESSAGE(cfg, cfg.error().message());
  BOOST_TEST(cfg->worker_threads == 3u);
  BOOST_TEST(cfg->throughput == 17u);
  BOOST_TEST(cfg->trace_file == "run/t.strace");
  BOOST_TEST(cfg->trace_event_limit == 123456u);
  BOOST_TEST(cfg->drain_timeout.count() == 250);
  BOOST_TEST(cfg->stash_capacity == 9u);
  BOOST_TEST(cfg->mailbox_capacity == 4096u);
  BOOST_TEST((cfg->mailbox_overflow == strata::overflow_policy::drop));
}

BOOST_AUTO_TEST_CASE(unset_or_empty_variables_keep_the_defaults) {
  environment env({{"STRATA_THROUGHPUT", ""}});
  auto cfg = strata::system_config::from_env();
  BOOST_REQUIRE(cfg);
  const strata::system_config defaults;
  BOOST_TEST(cfg->worker_threads == defaults.worker_threads);
  BOOST_TEST(cfg->throughput == defaults.throughput);
  BOOST_TEST(cfg->trace_file == defaults.trace_file);
  BOOST_TEST(cfg->stash_capacity == defaults.stash_capacity);
  BOOST_TEST(cfg->mailbox_capacity == defaults.mailbox_capacity);
}

BOOST_AUTO_TEST_CASE(flags_override_the_environment_and_other_arguments_are_left_alone) {
  environment env({{"STRATA_SCHEDULER_THREADS", "3"}, {"STRATA_THROUGHPUT", "64"}});
  auto cfg = parse({"--lr", "0.1", "--strata-threads", "2", "input.txt", "--strata-mailbox-overflow=drop",
                    "--strata-stash-capacity=5", "--strata-stash-capacity=6"});
  BOOST_REQUIRE_MESSAGE(cfg, cfg.error().message());
  BOOST_TEST(cfg->worker_threads == 2u);  // the flag wins
  BOOST_TEST(cfg->throughput == 64u);     // the environment where no flag says otherwise
  BOOST_TEST((cfg->mailbox_overflow == strata::overflow_policy::drop));
  BOOST_TEST(cfg->stash_capacity == 6u);  // the last of a repeated flag
}

BOOST_AUTO_TEST_CASE(every_bad_environment_value_is_refused_with_one_sentence_naming_the_variable) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"STRATA_SCHEDULER_THREADS", "four"}, {"STRATA_SCHEDULER_THREADS", "-1"},
      {"STRATA_SCHEDULER_THREADS", "1025"}, {"STRATA_SCHEDULER_THREADS", " 2"},
      {"STRATA_SCHEDULER_THREADS", "2x"},   {"STRATA_THROUGHPUT", "0"},
      {"STRATA_TRACE_EVENT_LIMIT", "99999999999"}, {"STRATA_DRAIN_TIMEOUT_MS", "1e3"},
      {"STRATA_STASH_CAPACITY", "0"},       {"STRATA_MAILBOX_CAPACITY", "-5"},
      {"STRATA_MAILBOX_OVERFLOW", "block"}};
  for (const auto& [name, value] : bad) {
    environment env({{name, value}});
    auto cfg = strata::system_config::from_env();
    BOOST_REQUIRE_MESSAGE(!cfg, name + "=" + value + " was accepted");
    BOOST_TEST(cfg.error().code() == strata::errc::invalid_argument);
    const std::string& text = cfg.error().message();
    BOOST_TEST(text.rfind(name + " is '" + value + "' but must be ", 0) == 0u, text);
    BOOST_TEST(text.find('\n') == std::string::npos);
  }
  environment env({{"STRATA_SCHEDULER_THREADS", "four"}});
  BOOST_TEST(strata::system_config::from_env().error().message() ==
             "STRATA_SCHEDULER_THREADS is 'four' but must be a whole number of scheduler threads from 0 to 1024 "
             "(0: one per hardware thread)");
}

BOOST_AUTO_TEST_CASE(every_bad_flag_value_is_refused_with_one_sentence_naming_the_flag) {
  environment env;
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--strata-threads", "many"},         {"--strata-throughput", "0"},
      {"--strata-trace-event-limit", "-1"},
      {"--strata-drain-timeout-ms", "86400001"}, {"--strata-stash-capacity", "0"},
      {"--strata-mailbox-capacity", "1k"},  {"--strata-mailbox-overflow", "Drop"}};
  for (const auto& [flag, value] : bad) {
    const std::string arg = flag + "=" + value;
    auto cfg = parse({arg.c_str()});
    BOOST_REQUIRE_MESSAGE(!cfg, arg + " was accepted");
    BOOST_TEST(cfg.error().code() == strata::errc::invalid_argument);
    BOOST_TEST(cfg.error().message().rfind(flag + " is '" + value + "' but must be ", 0) == 0u, cfg.error().message());
  }
  BOOST_TEST(parse({"--strata-mailbox-overflow", "block"}).error().message() ==
             "--strata-mailbox-overflow is 'block' but must be fail or drop");
  // An empty value is a missing one to the parser: still one sentence naming the flag.
  auto empty = parse({"--strata-trace-file="});
  BOOST_REQUIRE(!empty);
  BOOST_TEST(empty.error().message().find("--strata-trace-file") != std::string::npos, empty.error().message());
}

BOOST_AUTO_TEST_CASE(a_bad_environment_value_is_refused_by_from_args_too) {
  environment env({{"STRATA_STASH_CAPACITY", "none"}});
  auto cfg = parse({"--strata-threads", "2"});
  BOOST_REQUIRE(!cfg);
  BOOST_TEST(cfg.error().message().rfind("STRATA_STASH_CAPACITY is 'none'", 0) == 0u, cfg.error().message());
}

BOOST_AUTO_TEST_CASE(a_flag_without_its_value_is_refused_with_one_sentence) {
  environment env;
  auto cfg = parse({"--strata-threads"});
  BOOST_REQUIRE(!cfg);
  BOOST_TEST(cfg.error().code() == strata::errc::invalid_argument);
  const std::string& text = cfg.error().message();
  BOOST_TEST(text.rfind("cannot read the strata flags of the command line: ", 0) == 0u, text);
  BOOST_TEST(text.find("--strata-threads") != std::string::npos, text);
  BOOST_TEST(text.find('\n') == std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(a_system_built_from_the_command_line_uses_its_threads_and_mailbox_bound) {
  environment env;
  auto cfg = parse({"--strata-threads=3", "--strata-mailbox-capacity=2"});
  BOOST_REQUIRE(cfg);
  strata::actor_system sys(*cfg);
  BOOST_TEST(sys.worker_count() == 3u);
  // An actor held inside a handler cannot empty its mailbox: its bound is the system's default.
  auto entered = std::make_shared<std::promise<void>>();
  auto gate = std::make_shared<std::promise<void>>();
  auto opened = gate->get_future().share();
  auto make_holder = [entered, opened](strata::actor&) -> strata::behavior {
    return {[entered, opened](const hold&) {
              entered->set_value();
              opened.wait();
            },
            [](const item&) {}};
  };
  auto bounded = sys.spawn(make_holder);
  auto in_handler = entered->get_future();
  sys.send(bounded, hold{});
  strata::test::await(in_handler);
  BOOST_TEST(static_cast<bool>(sys.send(bounded, item{})));
  BOOST_TEST(static_cast<bool>(sys.send(bounded, item{})));
  auto refused = sys.send(bounded, item{});
  BOOST_REQUIRE(!refused);
  BOOST_TEST(refused.error().code() == strata::errc::mailbox_full);
  gate->set_value();
  BOOST_REQUIRE(sys.await_idle(20s));

  // strata::unbounded_mailbox opts out of the default.
  auto entered2 = std::make_shared<std::promise<void>>();
  auto gate2 = std::make_shared<std::promise<void>>();
  auto opened2 = gate2->get_future().share();
  auto unbounded = sys.spawn_fn_with(strata::spawn_options{.mailbox_capacity = strata::unbounded_mailbox},
                                     [entered2, opened2](strata::actor&) -> strata::behavior {
                                       return {[entered2, opened2](const hold&) {
                                                 entered2->set_value();
                                                 opened2.wait();
                                               },
                                               [](const item&) {}};
                                     });
  auto in_handler2 = entered2->get_future();
  sys.send(unbounded, hold{});
  strata::test::await(in_handler2);
  for (int i = 0; i < 10; ++i) BOOST_TEST(static_cast<bool>(sys.send(unbounded, item{})));
  gate2->set_value();
  BOOST_REQUIRE(sys.await_idle(20s));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace config_test
