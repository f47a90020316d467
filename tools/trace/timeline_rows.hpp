#pragma once
// What the SVG timeline shows: a row per actor and device stream with its slices, their colours
// and the legend (timeline_rows.cpp); timeline_svg.cpp draws them. Private to strata_trace_views.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "strata/trace_tools/trace_model.hpp"

namespace strata::trace_tools {

/// At most this many actor rows: the busiest ones when a trace has more.
inline constexpr std::size_t max_actor_rows = 64;

/// A slice in a row: a handler's run or a work item, its colour and its tooltip.
struct row_item {
  std::uint64_t begin, end;
  std::string colour;
  std::string tooltip;
};

/// A row of the timeline: an actor's handler slices or a device stream's work items.
struct row {
  std::string label;
  std::string detail;  // right-aligned in the label column (busy %)
  std::uint64_t life_begin = 0, life_end = 0;
  std::vector<row_item> items;
};

/// The timeline's content: the rows in drawing order (pipeline stages in stage order, each with
/// its stage device track below it, then the other actors by id, then the device streams), the
/// legend (colour, text) and how many actors were left out (beyond max_actor_rows).
struct timeline_content {
  std::vector<row> rows;
  std::vector<std::pair<std::string, std::string>> legend;
  std::size_t hidden = 0;
};

/// The rows, colours and legend of `m`'s timeline.
timeline_content timeline_rows(const trace_model& m);

/// A duration for a label: "0", "850 ns", "1.25 us", "3.5 ms", "1.2 s" (4 significant digits).
std::string duration_label(double ns);

}  // namespace strata::trace_tools
