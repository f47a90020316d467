#pragma once
/// \file
/// A tensor shape as text, the way every strata error message writes it.

#include <cstdint>
#include <span>
#include <string>

namespace strata {

/// The shape as `[2, 3, 4]` (`[]` for a scalar), for error messages and logs.
inline std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace strata
