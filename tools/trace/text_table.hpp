#pragma once
// Text output of strata-trace's summary: a plain-text table and the number formats of its cells.

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::trace_tools {

/// A plain-text table: columns sized to their widest cell (in UTF-8 code points), first column
/// left-aligned, the others right-aligned, each row indented by two spaces.
class text_table {
public:
  explicit text_table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const;

private:
  std::vector<std::vector<std::string>> rows_;
};

/// Nanoseconds for people: "850 ns", "1.25 us", "3.50 ms", "1.200 s"; "-" for null.
std::string format_ns(const nlohmann::json& v);

/// `v` with `digits` decimals.
std::string format_fixed(double v, int digits);

}  // namespace strata::trace_tools
