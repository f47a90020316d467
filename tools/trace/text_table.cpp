#include "text_table.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace strata::trace_tools {

namespace {

std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

void text_table::print(std::ostream& out) const {
  std::vector<std::size_t> width;
  for (const auto& r : rows_)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], display_width(r[i]));
    }
  for (const auto& r : rows_) {
    out << "  ";
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::size_t pad = width[i] - display_width(r[i]);
      if (i == 0) out << r[i] << std::string(pad, ' ');
      else out << "  " << std::string(pad, ' ') << r[i];
    }
    out << '\n';
  }
}

std::string format_ns(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  double ns = v.get<double>();
  char buf[32];
  if (ns < 1e3) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (ns < 1e6) std::snprintf(buf, sizeof buf, "%.2f us", ns / 1e3);
  else if (ns < 1e9) std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.3f s", ns / 1e9);
  return buf;
}

std::string format_fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace strata::trace_tools
