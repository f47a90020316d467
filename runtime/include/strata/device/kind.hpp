#pragma once
/// \file
/// The kinds of compute device strata knows (cpu, cuda, sim).

#include <string_view>

namespace strata {

/// Which backend implements a device.
enum class device_kind {
  cpu,   ///< a oneTBB task arena running host functions
  cuda,  ///< an NVIDIA GPU (or a share of one) driven through the CUDA runtime
  sim,   ///< a modelled device: no math, time from FLOPs and bytes at a profile's rates
};

/// The spec prefix of a kind: "cpu", "cuda" or "sim".
constexpr std::string_view to_string(device_kind kind) noexcept {
  switch (kind) {
    case device_kind::cpu: return "cpu";
    case device_kind::cuda: return "cuda";
    case device_kind::sim: return "sim";
  }
  return "unknown";
}

}  // namespace strata
