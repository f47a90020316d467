#pragma once
/// \file
/// The views strata-trace offers over a trace model: a summary (text or JSON), Chrome Trace
/// Event JSON for Perfetto / chrome://tracing, an SVG timeline and a Graphviz message graph.
/// Each returns the whole output as a value; the command line writes it out.

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "strata/trace_tools/trace_model.hpp"

namespace strata::trace_tools {

/// Per actor, per message type, per device stream, drops and pipeline bubble, as JSON
/// (the layout is documented in docs/trace-tools.md).
nlohmann::json summary_json(const trace_model& m);
/// The same summary as tables for people.
void print_summary(const nlohmann::json& summary, std::ostream& out);

/// Chrome Trace Event JSON: {"traceEvents": [...], "displayTimeUnit": "ns"}.
nlohmann::json chrome_trace(const trace_model& m);

/// Options of the SVG timeline.
struct timeline_options {
  int width = 1600;  ///< Pixels, labels included.
};
/// An SVG picture: a row per actor and device stream, a rect per handler slice / work item.
std::string timeline_svg(const trace_model& m, const timeline_options& opts = {});

/// Graphviz DOT: actors as nodes, edges weighted by message counts.
std::string message_graph_dot(const trace_model& m);

/// A message type name shortened for labels: namespaces and template arguments dropped
/// ("strata::detail::foo<int>" -> "foo<...>").
std::string short_type_name(const std::string& type);

}  // namespace strata::trace_tools
