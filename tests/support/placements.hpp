#pragma once
// Pipeline placements in tests of the partitioner: cpu device slots, and the layer ranges a
// placement gives its stages.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "strata/pipeline/partitioner.hpp"

namespace strata::test {

/// Slots "cpu:0" .. "cpu:<n-1>", each with `limit` bytes.
inline std::vector<pipeline::device_slot> cpus(int n, std::uint64_t limit = std::numeric_limits<std::uint64_t>::max()) {
  std::vector<pipeline::device_slot> out;
  for (int i = 0; i < n; ++i) out.push_back({"cpu:" + std::to_string(i), limit});
  return out;
}

/// The LSTM layers of each stage of `p`, in stage order.
inline std::vector<pipeline::layer_range> ranges_of(const pipeline::placement& p) {
  std::vector<pipeline::layer_range> out;
  for (const auto& s : p.stages) out.push_back(s.lstm);
  return out;
}

}  // namespace strata::test
