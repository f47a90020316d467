#include "strata/device/device_manager.hpp"

#include <mutex>
#include <stdexcept>

#include "device/cpu_backend.hpp"
#include "device/impl.hpp"
#include "device/sim_backend.hpp"
#include "strata/device/error.hpp"
#if STRATA_HAS_CUDA
#include "device/cuda_backend.hpp"
#endif

namespace strata {

struct device_manager::state {
  device_options options;
  std::vector<std::string> profile_names;
  std::mutex mu;
  int next_index[3] = {0, 0, 0};
  std::shared_ptr<sim_backend::sim_clock> clock;
#if STRATA_HAS_CUDA
  std::shared_ptr<cuda_backend::context> cuda;
#endif
};

device_manager::device_manager(device_options options) : state_(std::make_unique<state>()) {
  if (!(options.sim_time_scale >= 0))
    throw std::invalid_argument("device_options::sim_time_scale must be >= 0 (0 = do not wait), got " +
                                std::to_string(options.sim_time_scale));
  if (options.cpu_threads_per_device < 0)
    throw std::invalid_argument("device_options::cpu_threads_per_device must be >= 0 (0 = automatic), got " +
                                std::to_string(options.cpu_threads_per_device));
  for (const auto& p : options.sim_profiles) {
    if (p.name.empty() || p.name.find(':') != std::string::npos)
      throw std::invalid_argument("device_options::sim_profiles: profile name \"" + p.name +
                                  "\" must be non-empty and contain no ':'");
    if (!(p.matmul_flops > 0 && p.vector_flops > 0 && p.memory_bandwidth > 0 && p.host_bandwidth > 0 &&
          p.peer_bandwidth > 0 && p.launch_latency >= 0))
      throw std::invalid_argument("device_options::sim_profiles: profile \"" + p.name +
                                  "\" needs positive rates and a latency >= 0");
    state_->profile_names.push_back(p.name);
  }
  state_->options = std::move(options);
}

device_manager::~device_manager() = default;

const device_options& device_manager::options() const noexcept { return state_->options; }

std::vector<device> device_manager::create(std::string_view spec) {
  return create(parse_device_spec(spec, state_->profile_names));
}

std::vector<device> device_manager::create(const device_spec& spec) {
  std::lock_guard lk(state_->mu);
  auto& next = state_->next_index[static_cast<int>(spec.kind)];
  std::vector<std::shared_ptr<detail::device_impl>> impls;
  switch (spec.kind) {
    case device_kind::cpu:
      impls = cpu_backend::make_devices(spec.count, next, state_->options.cpu_threads_per_device);
      break;
    case device_kind::sim: {
      std::optional<sim_profile> profile;
      for (const auto& p : state_->options.sim_profiles)
        if (p.name == spec.profile) profile = p;
      if (!profile) profile = find_builtin_sim_profile(spec.profile);
      if (!profile)
        throw std::invalid_argument("invalid device spec \"" + spec.text + "\": unknown sim profile \"" +
                                    spec.profile + "\"");
      if (!state_->clock)
        state_->clock = sim_backend::make_clock(state_->options.sim_time_scale, state_->options.sim_follow_host_clock);
      impls = sim_backend::make_devices(state_->clock, spec.count, next, *profile);
      break;
    }
    case device_kind::cuda:
#if STRATA_HAS_CUDA
      if (!state_->cuda) state_->cuda = cuda_backend::make_context();
      impls = cuda_backend::make_devices(state_->cuda, spec, next);
      break;
#else
      throw device_error(device_errc::unavailable,
                         "cannot create devices for \"" + (spec.text.empty() ? spec.to_string() : spec.text) +
                             "\": this build of strata has no CUDA support (configure with -DSTRATA_CUDA=ON "
                             "on a machine with the CUDA toolkit)");
#endif
  }
  next += static_cast<int>(impls.size());
  std::vector<device> out;
  out.reserve(impls.size());
  for (auto& d : impls) out.push_back(detail::handle_of(std::move(d)));
  return out;
}

std::vector<device> make_devices(std::string_view spec, device_options options) {
  device_manager m(std::move(options));
  return m.create(spec);
}

bool cuda_compiled() noexcept {
#if STRATA_HAS_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_gpu_count() noexcept {
#if STRATA_HAS_CUDA
  return cuda_backend::gpu_count();
#else
  return 0;
#endif
}

}  // namespace strata
