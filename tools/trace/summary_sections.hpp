#pragma once
// The sections of strata-trace's summary that have files of their own (the pipeline, the critical
// path), and what the summary's sections share: interval lengths and ratios. Private to
// strata_trace_views; summary.cpp assembles the summary.

#include <algorithm>
#include <cstdint>
#include <ostream>

#include <nlohmann/json.hpp>

#include "strata/trace_tools/trace_model.hpp"

namespace strata::trace_tools {

/// The pipeline section (docs/trace-tools.md, "Pipeline tags"): stage and device busy time and
/// the measured bubble; null without stage tags or stage device tracks (summary_pipeline.cpp).
nlohmann::json pipeline_json(const trace_model& m);
/// The pipeline section as text: one line of figures, the devices stages share, a row per stage.
void print_pipeline(const nlohmann::json& p, std::ostream& out);

/// The critical path section: its totals by kind, its segments (the last 1000 at most) and the
/// longest ones; null for an empty path (summary_critical_path.cpp).
nlohmann::json critical_path_json(const trace_model& m);
/// The critical path section as text: its totals and a table of the longest segments.
void print_critical_path(const nlohmann::json& cp, std::ostream& out);

/// a / b, or 0 when b is not positive.
inline double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/// Length of the union of [begin, end) intervals sorted by begin.
template <class Slices>
std::uint64_t union_length(const Slices& slices) {
  std::uint64_t total = 0, cur_begin = 0, cur_end = 0;
  bool open = false;
  for (const auto& s : slices) {
    if (!open || s.begin > cur_end) {
      if (open) total += cur_end - cur_begin;
      cur_begin = s.begin;
      cur_end = s.end;
      open = true;
    } else {
      cur_end = std::max(cur_end, s.end);
    }
  }
  if (open) total += cur_end - cur_begin;
  return total;
}

}  // namespace strata::trace_tools
