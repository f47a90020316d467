#pragma once
/// \file
/// Creating devices from spec strings.

#include <memory>
#include <string_view>
#include <vector>

#include "strata/device/device.hpp"
#include "strata/device/sim_profile.hpp"
#include "strata/device/spec.hpp"

namespace strata {

/// Settings for the devices a device_manager creates.
struct device_options {
  /// cpu: threads of each device's task arena; 0 = max(1, hardware threads / cpu devices in the
  /// spec). The oneTBB worker pool is raised (global_control) so that all arenas can be busy.
  int cpu_threads_per_device = 0;
  /// sim: wall seconds per modelled second. 1 = real time; 0.001 = a thousand times faster;
  /// 0 = no waiting at all (completions fire as soon as the clock thread gets to them).
  double sim_time_scale = 1.0;
  /// sim: a work item cannot start (in modelled time) before the modelled "now" derived from the
  /// wall clock at submission, so host-side delays (actor overhead) show in modelled time. Off:
  /// modelled times depend only on costs and waits (deterministic; used by tests).
  bool sim_follow_host_clock = true;
  /// sim: extra profiles usable by name in specs; a name equal to a built-in one replaces it.
  std::vector<sim_profile> sim_profiles{};
};

/// Creates devices from specs and owns what they share: the sim clock thread (one Asio
/// io_context thread for all sim devices of this manager, so their modelled times are comparable),
/// the oneTBB worker-pool setting, CUDA per-GPU state (memory pool, peer access) and CUDA's
/// dispatcher thread. Devices keep what they need alive, so the manager may be destroyed first.
/// Thread-safe.
///
///     strata::device_manager devices({.sim_time_scale = 0.01});
///     auto stages = devices.create("sim:4:h200");   // sim:0 .. sim:3
class device_manager {
 public:
  explicit device_manager(device_options options = {});
  ~device_manager();
  device_manager(const device_manager&) = delete;
  device_manager& operator=(const device_manager&) = delete;

  /// Parses `spec` and creates its devices. Device indices and names count per kind within this
  /// manager ("cpu:0", "cpu:1", ...; a second create("cpu:1") gives "cpu:2").
  /// \throws std::invalid_argument for a bad spec (one sentence naming it and what was expected);
  ///   device_error (unavailable) if the backend or hardware is missing, e.g. a cuda spec without
  ///   a GPU ("... no CUDA device is available ...") or a build without CUDA.
  std::vector<device> create(std::string_view spec);
  /// Same for a parsed spec.
  std::vector<device> create(const device_spec& spec);

  const device_options& options() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// Convenience: a temporary device_manager's create(spec).
std::vector<device> make_devices(std::string_view spec, device_options options = {});

/// True if this build has the CUDA backend (STRATA_HAS_CUDA).
bool cuda_compiled() noexcept;

/// Number of CUDA GPUs visible (cudaGetDeviceCount); 0 without a GPU, a driver or CUDA support.
int cuda_gpu_count() noexcept;

}  // namespace strata
