#pragma once
/// \file
/// Device spec strings ("cpu:4", "cuda:0,1", "cuda:0x4", "sim:8:h200") and their parser.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/device/kind.hpp"

namespace strata {

/// One GPU named in a cuda spec and how many strata devices share it.
struct gpu_share {
  int ordinal = 0;  ///< CUDA device ordinal
  int devices = 1;  ///< strata devices created on it, each with its own streams
  friend bool operator==(const gpu_share&, const gpu_share&) = default;
};

/// A parsed device spec. Grammar (whitespace is not allowed):
///
///     spec     := cpu | sim | cuda
///     cpu      := "cpu" [ ":" N ]               N >= 1 devices (default 1)
///     sim      := "sim" [ ":" N [ ":" PROFILE ] ] N >= 1 devices, PROFILE default "h200"
///     cuda     := "cuda" [ ":" gpu { "," gpu } ] default "cuda:0"
///     gpu      := ORDINAL [ "x" K ]             K >= 1 devices sharing that GPU (default 1)
///
/// Examples: "cpu:2", "sim:4:h200", "cuda:0,1" (one device per GPU), "cuda:0x4" (four devices on
/// GPU 0), "cuda:0x2,1x2". A GPU may appear once.
struct device_spec {
  device_kind kind = device_kind::cpu;
  int count = 1;                  ///< cpu/sim: number of devices
  std::vector<gpu_share> gpus{};  ///< cuda: GPUs and their shares
  std::string profile{};          ///< sim: profile name
  std::string text{};             ///< the input this was parsed from

  /// Number of strata devices the spec creates.
  int device_count() const noexcept;
  /// Canonical text, e.g. "sim:2:h200" for input "sim:2".
  std::string to_string() const;
  friend bool operator==(const device_spec&, const device_spec&) = default;
};

/// Parses `text`; on failure returns nullopt and, if `error` is given, stores one sentence naming
/// the input and what was expected. `sim_profiles` lists profile names accepted besides the
/// built-ins. Never throws for bad input.
std::optional<device_spec> try_parse_device_spec(std::string_view text, std::string* error = nullptr,
                                                 std::span<const std::string> sim_profiles = {});

/// Throwing convenience for edges (flags, config files).
/// \throws std::invalid_argument with the same sentence as try_parse_device_spec, e.g.
///   `invalid device spec "cpu:0": expected "cpu:N" with N >= 1 devices`.
device_spec parse_device_spec(std::string_view text, std::span<const std::string> sim_profiles = {});

}  // namespace strata
