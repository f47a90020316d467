#pragma once
/// \file
/// Order statistics of repeated measurements (benchmarks, cost measurements).

#include <vector>

namespace strata {

/// The median of `values`: the middle one, or the mean of the two middle ones for an even
/// count; 0 for none. Takes its argument by value because it sorts it.
double median(std::vector<double> values);

/// The `p`-percentile of `values` (`p` in [0, 1], clamped) by the nearest-rank method: the
/// smallest value with at least a fraction `p` of the values at or below it; 0 for none.
/// `percentile(v, 0.99)` is the p99, `percentile(v, 1)` the maximum.
double percentile(std::vector<double> values, double p);

}  // namespace strata
