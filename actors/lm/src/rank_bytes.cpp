#include "rank_bytes.hpp"

namespace strata::lm::detail {

// The lengths and then the bytes travel as float sums in which every rank fills only its own slot.
expected<std::vector<std::string>> gather_bytes(rank_group& group, const std::string& bytes) {
  const auto world = static_cast<std::size_t>(group.size()), me = static_cast<std::size_t>(group.rank());
  constexpr std::size_t digits = 4;  // a length in base 2^16
  std::vector<float> lengths(world * digits, 0.0f);
  for (std::size_t d = 0, n = bytes.size(); d < digits; ++d, n >>= 16) lengths[me * digits + d] = static_cast<float>(n & 0xffff);
  if (auto r = group.sum(lengths); !r) return r.error();
  std::vector<std::size_t> size(world), offset(world + 1, 0);
  for (std::size_t r = 0; r < world; ++r) {
    for (std::size_t d = digits; d-- > 0;) size[r] = (size[r] << 16) | static_cast<std::size_t>(lengths[r * digits + d]);
    offset[r + 1] = offset[r] + (size[r] + 1) / 2;  // two bytes per float
  }
  std::vector<float> payload(offset[world], 0.0f);
  for (std::size_t i = 0; i < bytes.size(); i += 2) {
    unsigned v = static_cast<unsigned char>(bytes[i]);
    if (i + 1 < bytes.size()) v |= static_cast<unsigned>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    payload[offset[me] + i / 2] = static_cast<float>(v);
  }
  if (auto r = group.sum(payload); !r) return r.error();
  std::vector<std::string> out(world);
  for (std::size_t r = 0; r < world; ++r) {
    out[r].resize(size[r]);
    for (std::size_t i = 0; i < size[r]; ++i) {
      const auto v = static_cast<unsigned>(payload[offset[r] + i / 2]);
      out[r][i] = static_cast<char>(i % 2 == 0 ? v & 0xff : v >> 8);
    }
  }
  return out;
}

expected<std::string> rank0_bytes(rank_group& group, const std::string& bytes) {
  auto all = gather_bytes(group, group.rank() == 0 ? bytes : std::string());
  if (!all) return all.error();
  return std::move(all->front());
}

}  // namespace strata::lm::detail
