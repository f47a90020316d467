// libFuzzer target: the reader and every view must survive any bytes (tools/trace/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string_view>

#include "strata/trace_tools/trace_model.hpp"
#include "strata/trace_tools/trace_reader.hpp"
#include "trace_views.hpp"

namespace tt = strata::trace_tools;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto r = tt::parse_trace(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.strace");
  if (!r.ok()) {
    // One sentence, naming the input.
    if (r.error.rfind("fuzz.strace: ", 0) != 0 || r.error.find('\n') != std::string::npos) __builtin_trap();
    return 0;
  }
  auto model = tt::build_model(r.trace);
  // The critical path is time-ordered, never overlaps, stays inside the trace and adds up.
  const auto path = tt::compute_critical_path(model);
  std::uint64_t prev = path.begin, sum = 0;
  for (const auto& seg : path.segments) {
    if (seg.begin >= seg.end || seg.begin < prev) __builtin_trap();
    prev = seg.end;
    sum += seg.duration();
  }
  if (!path.empty() && (sum != path.total() || path.end > model.end || path.begin < model.begin)) __builtin_trap();
  auto summary = tt::summary_json(model);
  std::ostringstream text;
  tt::print_summary(summary, text);
  (void)summary.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)tt::chrome_trace(model).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)tt::timeline_svg(model);
  (void)tt::message_graph_dot(model);
  return 0;
}
