// An actor system's settings from the environment and the command line (table in docs/runtime.md).

#include <CLI/CLI.hpp>

#include <array>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <system_error>

#include "strata/actor_system.hpp"

namespace strata {

namespace {

/// Parses a whole number in [lo, hi] (digits only: no sign, no spaces, no suffix).
bool whole_number(const std::string& text, std::uint64_t lo, std::uint64_t hi, std::uint64_t& out) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc{} && ptr == end && out >= lo && out <= hi;
}

/// One setting: its variable, its flag, what it accepts (for the error sentence) and how it is
/// stored; `store` returns false for a bad value.
struct setting {
  const char* variable;
  const char* flag;
  const char* accepted;
  bool (*store)(system_config& cfg, const std::string& text);
};

constexpr std::uint64_t max_count = 4'294'967'295ULL;

const std::array<setting, 8> settings{{
    {"STRATA_SCHEDULER_THREADS", "--strata-threads",
     "a whole number of scheduler threads from 0 to 1024 (0: one per hardware thread)",
     [](system_config& cfg, const std::string& text) {
       std::uint64_t v = 0;
       if (!whole_number(text, 0, 1024, v)) return false;
       cfg.worker_threads = v;
       return true;
     }},
    {"STRATA_THROUGHPUT", "--strata-throughput", "a whole number of messages per turn from 1 to 1000000",
     [](system_config& cfg, const std::string& text) {
       std::uint64_t v = 0;
       if (!whole_number(text, 1, 1'000'000, v)) return false;
       cfg.throughput = v;
       return true;
     }},
    {"STRATA_TRACE_FILE", "--strata-trace-file", "the path of the trace file to write, not empty",
     [](system_config& cfg, const std::string& text) {
       if (text.empty()) return false;
       cfg.trace_file = text;
       return true;
     }},
    {"STRATA_TRACE_EVENT_LIMIT", "--strata-trace-event-limit",
     "a whole number of events from 0 to 4294967295 (0: no limit)",
     [](system_config& cfg, const std::string& text) {
       std::uint64_t v = 0;
       if (!whole_number(text, 0, max_count, v)) return false;
       cfg.trace_event_limit = v;
       return true;
     }},
    {"STRATA_DRAIN_TIMEOUT_MS", "--strata-drain-timeout-ms", "a whole number of milliseconds from 0 to 86400000",
     [](system_config& cfg, const std::string& text) {
       std::uint64_t v = 0;
       if (!whole_number(text, 0, 86'400'000, v)) return false;
       cfg.drain_timeout = std::chrono::milliseconds(v);
       return true;
     }},
    {"STRATA_STASH_CAPACITY", "--strata-stash-capacity", "a whole number of messages from 1 to 4294967295",
     [](system_config& cfg, const std::string& text) {
       std::uint64_t v = 0;
       if (!whole_number(text, 1, max_count, v)) return false;
       cfg.stash_capacity = v;
       return true;
     }},
    {"STRATA_MAILBOX_CAPACITY", "--strata-mailbox-capacity",
     "a whole number of messages from 0 to 4294967295 (0: unbounded)",
     [](system_config& cfg, const std::string& text) {
       std::uint64_t v = 0;
       if (!whole_number(text, 0, max_count, v)) return false;
       cfg.mailbox_capacity = v;
       return true;
     }},
    {"STRATA_MAILBOX_OVERFLOW", "--strata-mailbox-overflow", "fail or drop",
     [](system_config& cfg, const std::string& text) {
       if (text == "fail") cfg.mailbox_overflow = overflow_policy::fail;
       else if (text == "drop") cfg.mailbox_overflow = overflow_policy::drop;
       else return false;
       return true;
     }},
}};

error bad_value(const char* source, const std::string& text, const char* accepted) {
  return error(errc::invalid_argument,
               std::string(source) + " is '" + text + "' but must be " + accepted);
}

}  // namespace

expected<system_config> system_config::from_env() {
  system_config cfg;
  for (const setting& s : settings) {
    const char* value = std::getenv(s.variable);
    if (value == nullptr || *value == '\0') continue;  // unset or empty: the default
    if (!s.store(cfg, value)) return bad_value(s.variable, value, s.accepted);
  }
  return cfg;
}

expected<system_config> system_config::from_args(int argc, const char* const* argv) {
  auto cfg = from_env();
  if (!cfg) return cfg;
  CLI::App app("strata runtime settings");
  app.allow_extras();     // the program's own arguments are its parser's business
  app.set_help_flag();    // --help is the program's too
  std::array<std::string, settings.size()> values;
  std::array<CLI::Option*, settings.size()> options{};
  for (std::size_t i = 0; i < settings.size(); ++i)
    options[i] = app.add_option(settings[i].flag, values[i])->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& ex) {
    return error(errc::invalid_argument, std::string("cannot read the strata flags of the command line: ") + ex.what());
  }
  for (std::size_t i = 0; i < settings.size(); ++i) {
    if (options[i]->count() == 0) continue;
    if (!settings[i].store(*cfg, values[i])) return bad_value(settings[i].flag, values[i], settings[i].accepted);
  }
  return cfg;
}

spawn_options actor_system::with_defaults(spawn_options options) const {
  if (options.mailbox_capacity == unbounded_mailbox) {
    options.mailbox_capacity = 0;  // explicitly unbounded (the runtime's own "0")
  } else if (options.mailbox_capacity == 0) {
    options.mailbox_capacity = config().mailbox_capacity;
    options.overflow = config().mailbox_overflow;
  }
  return options;
}

}  // namespace strata
