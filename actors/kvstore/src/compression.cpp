#include "strata/kvstore/compression.hpp"

namespace strata::kvstore {

expected<compression_type> parse_compression_type(std::string_view type) {
  if (type == "2bit") return compression_type::two_bit;
  if (type == "1bit") return compression_type::one_bit;
  if (type == "none") return compression_type::none;
  return error(errc::invalid_argument, "kvstore set_gradient_compression: unknown type \"" + std::string(type) +
                                           "\"; the known types are \"2bit\", \"1bit\" and \"none\".");
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

}  // namespace strata::kvstore
