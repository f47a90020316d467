#include "staging.hpp"

namespace strata::net::detail {

namespace {
/// The staging of memory of `kind`: cpu memory is read and written in place, cuda memory goes
/// through pinned host buffers (CUDA builds), sim memory holds no data. A refusal is
/// `refuse(no_cuda)` or `refuse(no_data)`, called only then (the hot path builds no text).
template <class Refuse>
expected<staging> staging_of(device_kind kind, Refuse refuse, [[maybe_unused]] const char* no_cuda,
                             const char* no_data) {
  switch (kind) {
    case device_kind::cpu: return staging::direct;
    case device_kind::cuda:
#if STRATA_HAS_CUDA
      return staging::pinned_host;
#else
      return error(errc::invalid_argument, refuse(no_cuda));
#endif
    case device_kind::sim: break;
  }
  return error(errc::invalid_argument, refuse(no_data));
}
}  // namespace

expected<staging> send_staging(device_kind kind, const std::string& device_name) {
  return staging_of(
      kind, [&](const char* why) { return "a tensor on " + device_name + " cannot cross ranks: " + why; },
      "this build of strata has no CUDA support", "sim tensors hold no data (send a cpu or cuda tensor)");
}

expected<staging> receive_staging(device_kind kind, const std::string& device_name) {
  return staging_of(
      kind, [&](const char* why) { return "endpoint_config::receive_device is " + device_name + why; },
      ", but this build of strata has no CUDA support", ", a sim device, which holds no data: give a cpu or cuda device");
}

}  // namespace strata::net::detail
