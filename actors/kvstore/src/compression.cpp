#include "strata/kvstore/compression.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata::kvstore {

expected<compression_type> parse_compression_type(std::string_view type) {
  if (type == "2bit") return compression_type::two_bit;
  if (type == "1bit") return compression_type::one_bit;
  if (type == "none") return compression_type::none;
  return error(errc::invalid_argument, "kvstore set_gradient_compression: unknown type \"" + std::string(type) +
                                           "\"; the known types are \"2bit\", \"1bit\" and \"none\".");
}

expected<compression_type> parse_compression(std::string_view type, float threshold) {
  auto parsed = parse_compression_type(type);
  if (!parsed) return parsed.error();
  if (!std::isfinite(threshold) || (*parsed == compression_type::two_bit && !(threshold > 0)))
    return error(errc::invalid_argument,
                 "kvstore set_gradient_compression: threshold " + std::to_string(threshold) + " is not " +
                     (*parsed == compression_type::two_bit ? "above 0 (2bit sends +threshold, 0 or -threshold)."
                                                           : "finite."));
  return *parsed;
}

void compress(compression_type type, float threshold, const float* grad, float* residual, float* sent,
              std::size_t n) noexcept {
  switch (type) {
    case compression_type::none:
      for (std::size_t i = 0; i < n; ++i) sent[i] = grad[i];
      return;
    case compression_type::two_bit:
      for (std::size_t i = 0; i < n; ++i) {
        float r = residual[i] + grad[i];
        float q = 0.0f;
        if (r >= threshold) q = threshold;
        else if (r <= -threshold) q = -threshold;
        residual[i] = r - q;
        sent[i] = q;
      }
      return;
    case compression_type::one_bit:
      for (std::size_t i = 0; i < n; ++i) {
        float r = residual[i] + grad[i];
        const float q = r > threshold ? 1.0f : -1.0f;
        residual[i] = r - q;
        sent[i] = q;
      }
      return;
  }
}

namespace {

/// Elements per 32-bit word of codes.
std::size_t per_word(compression_type type) noexcept {
  switch (type) {
    case compression_type::two_bit: return 16;
    case compression_type::one_bit: return 32;
    case compression_type::none: return 1;
  }
  return 1;
}

}  // namespace

std::size_t packed_words(compression_type type, std::size_t n) noexcept {
  const std::size_t per = per_word(type);
  return (n + per - 1) / per;
}

void compress_packed(compression_type type, float threshold, const float* grad, float* residual,
                     std::uint32_t* codes, std::size_t n) noexcept {
  if (type == compression_type::none) {
    std::memcpy(codes, grad, n * sizeof(float));
    return;
  }
  // Bytes, as MXNet packs them: the layout does not depend on the machine's word order.
  auto* bytes = reinterpret_cast<unsigned char*>(codes);
  std::fill(bytes, bytes + packed_words(type, n) * sizeof(std::uint32_t), static_cast<unsigned char>(0));
  // The rule itself is `compress`'s, a block at a time; the block's sent values become codes.
  float sent[32];
  for (std::size_t start = 0; start < n; start += 32) {
    const std::size_t m = std::min<std::size_t>(32, n - start);
    compress(type, threshold, grad + start, residual + start, sent, m);
    for (std::size_t i = 0; i < m; ++i) {
      const std::size_t e = start + i;
      if (type == compression_type::two_bit) {
        const unsigned shift = 6u - 2u * static_cast<unsigned>(e % 4);
        if (sent[i] == threshold) bytes[e / 4] |= static_cast<unsigned char>(3u << shift);
        else if (sent[i] == -threshold) bytes[e / 4] |= static_cast<unsigned char>(2u << shift);
      } else if (sent[i] == 1.0f) {
        bytes[e / 8] |= static_cast<unsigned char>(0x80u >> (e % 8));
      }
    }
  }
}

void decompress(compression_type type, float threshold, const std::uint32_t* codes, float* out,
                std::size_t n) noexcept {
  const auto* bytes = reinterpret_cast<const unsigned char*>(codes);
  switch (type) {
    case compression_type::none:
      std::memcpy(out, codes, n * sizeof(float));
      return;
    case compression_type::two_bit:
      for (std::size_t e = 0; e < n; ++e) {
        const unsigned code = (bytes[e / 4] >> (6u - 2u * static_cast<unsigned>(e % 4))) & 3u;
        out[e] = code == 3u ? threshold : code == 2u ? -threshold : 0.0f;
      }
      return;
    case compression_type::one_bit:
      for (std::size_t e = 0; e < n; ++e) out[e] = (bytes[e / 8] & (0x80u >> (e % 8))) != 0 ? 1.0f : -1.0f;
      return;
  }
}

}  // namespace strata::kvstore
