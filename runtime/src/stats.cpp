#include "strata/stats.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t n = values.size();
  auto upper = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(values.begin(), upper, values.end());
  if (n % 2 == 1) return *upper;
  const double lower = *std::max_element(values.begin(), upper);  // the largest of the lower half
  return 0.5 * (lower + *upper);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  const double n = static_cast<double>(values.size());
  const auto rank = static_cast<std::size_t>(std::clamp(std::ceil(std::clamp(p, 0.0, 1.0) * n), 1.0, n));
  auto at = values.begin() + static_cast<std::ptrdiff_t>(rank - 1);
  std::nth_element(values.begin(), at, values.end());
  return *at;
}

}  // namespace strata
