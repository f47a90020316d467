#include "staging.hpp"

namespace strata::net::detail {

expected<staging> send_staging(device_kind kind, const std::string& device_name) {
  switch (kind) {
    case device_kind::cpu: return staging::direct;
    case device_kind::cuda:
#if STRATA_HAS_CUDA
      return staging::pinned_host;
#else
      return error(errc::invalid_argument, "a tensor on " + device_name +
                                               " cannot cross ranks: this build of strata has no CUDA support");
#endif
    case device_kind::sim: break;
  }
  return error(errc::invalid_argument, "a tensor on " + device_name +
                                           " cannot cross ranks: sim tensors hold no data (send a cpu or cuda tensor)");
}

expected<staging> receive_staging(device_kind kind, const std::string& device_name) {
  switch (kind) {
    case device_kind::cpu: return staging::direct;
    case device_kind::cuda:
#if STRATA_HAS_CUDA
      return staging::pinned_host;
#else
      return error(errc::invalid_argument, "endpoint_config::receive_device is " + device_name +
                                               ", but this build of strata has no CUDA support");
#endif
    case device_kind::sim: break;
  }
  return error(errc::invalid_argument, "endpoint_config::receive_device is " + device_name +
                                           ", a sim device, which holds no data: give a cpu or cuda device");
}

}  // namespace strata::net::detail
