// Keys split over several servers: the layout, and checkpoint entries joined and cut.

#include "split.hpp"

#include <algorithm>
#include <utility>

namespace strata::kvstore_dist::detail {

std::optional<split_layout> split_of(const std::vector<std::int64_t>& shape, std::int64_t bound, int world) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  if (n <= bound || world < 2 || n < 2) return std::nullopt;
  const std::int64_t parts = std::min<std::int64_t>(world, n);
  split_layout layout{shape, {0}};
  for (std::int64_t i = 0; i < parts; ++i) layout.offsets.push_back(layout.offsets.back() + n / parts + (i < n % parts ? 1 : 0));
  return layout;
}

kvstore::checkpoint_entry join_parts(std::vector<kvstore::checkpoint_entry> parts, const split_layout& layout) {
  kvstore::checkpoint_entry whole = std::move(parts.front());
  whole.shape = layout.shape;
  for (std::size_t p = 1; p < parts.size(); ++p) {
    auto& part = parts[p];
    whole.version = std::min(whole.version, part.version);
    for (std::size_t a = 0; a < whole.arrays.size() && a < part.arrays.size(); ++a)
      whole.arrays[a].insert(whole.arrays[a].end(), part.arrays[a].begin(), part.arrays[a].end());
    whole.master.insert(whole.master.end(), part.master.begin(), part.master.end());
  }
  return whole;
}

kvstore::checkpoint_entry cut_part(const kvstore::checkpoint_entry& whole, const split_layout& layout, int part) {
  auto slice = [&](const std::vector<float>& v) {
    if (v.empty()) return std::vector<float>{};
    return std::vector<float>(v.begin() + layout.offset(part), v.begin() + layout.offset(part + 1));
  };
  kvstore::checkpoint_entry e;
  e.key = whole.key;
  e.version = whole.version;
  e.step = whole.step;
  e.shape = {layout.size(part)};
  e.type = whole.type;
  for (const auto& a : whole.arrays) e.arrays.push_back(slice(a));
  e.master = slice(whole.master);
  return e;
}

}  // namespace strata::kvstore_dist::detail
