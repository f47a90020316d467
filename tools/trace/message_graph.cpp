// Graphviz DOT message graph: who sends to whom, and how often.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "trace_views.hpp"

namespace strata::trace_tools {

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string message_graph_dot(const trace_model& m) {
  const trace_file& f = *m.file;
  // (sender, receiver) -> count per type
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::map<std::string, std::uint64_t>> edges;
  std::set<std::uint64_t> nodes;
  for (const auto& s : m.sends) {
    ++edges[{s.sender, s.receiver}][short_type_name(f.type_name(s.type))];
    nodes.insert(s.sender);
    nodes.insert(s.receiver);
  }
  std::uint64_t max_count = 1;
  for (const auto& [k, types] : edges) {
    std::uint64_t n = 0;
    for (const auto& [t, c] : types) n += c;
    max_count = std::max(max_count, n);
  }
  std::ostringstream out;
  out << "// strata-trace dot " << f.name << "\n";
  out << "digraph strata_messages {\n";
  out << "  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fa\", fontname=\"Helvetica\"];\n";
  out << "  edge [fontname=\"Helvetica\", fontsize=10];\n";
  for (auto id : nodes) {
    std::string label = id == 0 ? "external\n(outside actors)" : m.actor_name(id) + "\n#" + std::to_string(id);
    auto it = m.actors.find(id);
    if (it != m.actors.end() && it->second.pipeline_stage >= 0)
      label += "\nstage " + std::to_string(it->second.pipeline_stage);
    out << "  a" << id << " [label=" << quote(label) << (id == 0 ? ", shape=ellipse, fillcolor=\"#f4f4f4\"" : "")
        << "];\n";
  }
  for (const auto& [k, types] : edges) {
    std::uint64_t n = 0;
    for (const auto& [t, c] : types) n += c;
    std::string label = std::to_string(n);
    // Name the types on the edge (the three most frequent).
    std::vector<std::pair<std::uint64_t, std::string>> by_count;
    for (const auto& [t, c] : types) by_count.push_back({c, t});
    std::sort(by_count.rbegin(), by_count.rend());
    for (std::size_t i = 0; i < by_count.size() && i < 3; ++i)
      label += "\n" + by_count[i].second + " x" + std::to_string(by_count[i].first);
    if (by_count.size() > 3) label += "\n...";
    double pen = 1.0 + 4.0 * std::log1p(static_cast<double>(n)) / std::log1p(static_cast<double>(max_count));
    char pw[16];
    std::snprintf(pw, sizeof pw, "%.2f", pen);
    out << "  a" << k.first << " -> a" << k.second << " [label=" << quote(label) << ", weight=" << n
        << ", penwidth=" << pw << "];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace strata::trace_tools
