#include "strata/kvstore/compression.hpp"

#include <algorithm>
#include <bit>
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
      // Masks, not branches (random gradients would mispredict every other element): q is
      // threshold when r >= threshold, else -threshold when r <= -threshold, else +0.
      for (std::size_t i = 0; i < n; ++i) {
        const float r = residual[i] + grad[i];
        const std::uint32_t up = 0u - static_cast<std::uint32_t>(r >= threshold);
        const std::uint32_t down = ~up & (0u - static_cast<std::uint32_t>(r <= -threshold));
        const float q = std::bit_cast<float>((std::bit_cast<std::uint32_t>(threshold) & up) |
                                             (std::bit_cast<std::uint32_t>(-threshold) & down));
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
  // The rule is `compress`'s, a block of whole words at a time; then each word's sent values
  // become codes, in bytes as MXNet packs them (the layout does not depend on the word order).
  const std::size_t per = per_word(type);
  constexpr std::size_t block = 1024;  // a multiple of 16 and 32
  float sent[block];
  auto* out = reinterpret_cast<unsigned char*>(codes);
  for (std::size_t start = 0; start < n; start += block) {
    const std::size_t m = std::min(block, n - start);
    compress(type, threshold, grad + start, residual + start, sent, m);
    std::fill(sent + m, sent + (m + per - 1) / per * per, 0.0f);  // past the end: codes 00 (2bit), 0 (1bit)
    unsigned char* bytes = out + start / per * sizeof(std::uint32_t);
    if (type == compression_type::two_bit) {
      for (std::size_t b = 0; b < (m + 3) / 4; ++b) {
        unsigned byte = 0;
        for (unsigned j = 0; j < 4; ++j) {
          const float v = sent[4 * b + j];
          byte |= (3u * static_cast<unsigned>(v == threshold) | 2u * static_cast<unsigned>(v == -threshold)) << (6u - 2u * j);
        }
        bytes[b] = static_cast<unsigned char>(byte);
      }
    } else {
      for (std::size_t b = 0; b < (m + 7) / 8; ++b) {
        unsigned byte = 0;
        for (unsigned j = 0; j < 8; ++j) byte |= static_cast<unsigned>(sent[8 * b + j] == 1.0f) << (7u - j);
        bytes[b] = static_cast<unsigned char>(byte);
      }
    }
    // The rest of the last word (whole bytes past the values) is 0.
    const std::size_t used = type == compression_type::two_bit ? (m + 3) / 4 : (m + 7) / 8;
    const std::size_t words = (m + per - 1) / per;
    std::fill(bytes + used, bytes + words * sizeof(std::uint32_t), static_cast<unsigned char>(0));
  }
}

void decompress(compression_type type, float threshold, const std::uint32_t* codes, float* out,
                std::size_t n) noexcept {
  const auto* bytes = reinterpret_cast<const unsigned char*>(codes);
  switch (type) {
    case compression_type::none:
      std::memcpy(out, codes, n * sizeof(float));
      return;
    case compression_type::two_bit: {
      const float value[4] = {0.0f, 0.0f, -threshold, threshold};  // by code: 00, (01), 10, 11
      for (std::size_t e = 0; e < n; ++e)
        out[e] = value[(bytes[e / 4] >> (6u - 2u * static_cast<unsigned>(e % 4))) & 3u];
      return;
    }
    case compression_type::one_bit: {
      const float value[2] = {-1.0f, 1.0f};
      for (std::size_t e = 0; e < n; ++e) out[e] = value[(bytes[e / 8] >> (7u - e % 8)) & 1u];
      return;
    }
  }
}

}  // namespace strata::kvstore
