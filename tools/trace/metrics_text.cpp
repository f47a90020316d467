#include "metrics_text.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace strata::trace_tools {

namespace {

bool parse_number(std::string_view token, double& value) {
  if (token == "NaN") return value = std::numeric_limits<double>::quiet_NaN(), true;
  if (token == "+Inf" || token == "Inf") return value = std::numeric_limits<double>::infinity(), true;
  if (token == "-Inf") return value = -std::numeric_limits<double>::infinity(), true;
  std::string t(token);
  char* end = nullptr;
  errno = 0;
  value = std::strtod(t.c_str(), &end);
  return !t.empty() && end == t.c_str() + t.size() && errno != ERANGE;
}

}  // namespace

bool parse_exposition(std::string_view text, exposition& out, std::string& why) {
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# TYPE ", 0) == 0) {
        auto rest = line.substr(7);
        auto sp = rest.find(' ');
        if (sp != std::string_view::npos) out.types.emplace_back(std::string(rest.substr(0, sp)), std::string(rest.substr(sp + 1)));
      }
      continue;
    }
    // The name runs to the first space outside a quoted label value.
    std::size_t i = 0;
    bool in_labels = false, in_quotes = false;
    for (; i < line.size(); ++i) {
      const char c = line[i];
      if (in_quotes) {
        if (c == '\\') ++i;
        else if (c == '"') in_quotes = false;
      } else if (c == '"' && in_labels) {
        in_quotes = true;
      } else if (c == '{') {
        in_labels = true;
      } else if (c == '}') {
        in_labels = false;
      } else if ((c == ' ' || c == '\t') && !in_labels) {
        break;
      }
    }
    if (i == 0 || i >= line.size()) {
      why = "line " + std::to_string(line_no) + " is not 'name value': " + std::string(line.substr(0, 80));
      return false;
    }
    metric_sample s;
    s.name = std::string(line.substr(0, i));
    s.base = s.name.substr(0, s.name.find('{'));
    std::string_view rest = line.substr(i);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    const auto sp = rest.find_first_of(" \t");
    std::string_view value = rest.substr(0, sp);  // an optional timestamp may follow
    if (!parse_number(value, s.value)) {
      why = "line " + std::to_string(line_no) + " has no number as its value: " + std::string(line.substr(0, 80));
      return false;
    }
    out.samples.push_back(std::move(s));
  }
  return true;
}

}  // namespace strata::trace_tools
