#pragma once
/// \file
/// Rates that a simulated (`sim`) device models time with.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

/// The rates of a modelled device. A work item of `flops` and `bytes` takes
/// `max(flops / rate, bytes / memory_bandwidth) + launch_latency` seconds of modelled time, where
/// `rate` is `matmul_flops` for work_kind::matmul and `vector_flops` otherwise.
///
/// Built-in profiles (see docs/devices.md for sources):
/// - "h200": NVIDIA H200 SXM (NVIDIA H200 datasheet): FP32 67 TFLOP/s (pointwise), TF32 Tensor
///   Core 494 TFLOP/s dense (matmul; the datasheet's 989 is with sparsity), HBM3e 4.8 TB/s,
///   141 GB, NVLink 900 GB/s (peer copies), PCIe Gen5 128 GB/s (host copies; 64 GB/s each way).
/// - "cpu": a rough multi-core server socket; illustrative, not measured.
///
/// Users may define their own profile and pass it in device_options::sim_profiles.
struct sim_profile {
  std::string name{};                 ///< name used in specs, e.g. "h200" in "sim:4:h200"
  double matmul_flops = 0;            ///< FLOP/s for GEMM-like work (work_kind::matmul)
  double vector_flops = 0;            ///< FLOP/s for pointwise / reduction work
  double memory_bandwidth = 0;        ///< bytes/s between the device and its own memory
  double host_bandwidth = 0;          ///< bytes/s per direction between host and device
  double peer_bandwidth = 0;          ///< bytes/s per direction to another device
  double launch_latency = 0;          ///< seconds added to every work item and copy
  std::size_t memory_bytes = 0;       ///< capacity; allocations beyond it fail with out_of_memory
};

/// The built-in profiles ("h200", "cpu").
const std::vector<sim_profile>& builtin_sim_profiles();

/// The built-in profile named `name`, or nullopt.
std::optional<sim_profile> find_builtin_sim_profile(std::string_view name);

}  // namespace strata
