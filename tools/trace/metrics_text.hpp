#pragma once
/// \file
/// Reading the Prometheus text exposition format (what `metrics_server` serves): the sample
/// lines of a scrape, in order. Private to strata-top and its tests.

#include <string>
#include <string_view>
#include <vector>

namespace strata::trace_tools {

/// One sample line: `name{labels} value [timestamp]`.
struct metric_sample {
  std::string name;    ///< With its label set, as written: `strata_device_busy_seconds{device="cpu:0"}`.
  std::string base;    ///< Without labels.
  double value = 0;
};

/// What a scrape said: its samples and the `# TYPE` of each base name.
struct exposition {
  std::vector<metric_sample> samples;
  std::vector<std::pair<std::string, std::string>> types;  ///< base name, type
};

/// Parses exposition text; on a line that is not a comment, blank or sample, returns false and
/// sets `why` to one sentence naming the line.
bool parse_exposition(std::string_view text, exposition& out, std::string& why);

}  // namespace strata::trace_tools
