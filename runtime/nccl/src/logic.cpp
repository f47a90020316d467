#include "logic.hpp"

#include <cmath>

namespace strata::nccl::detail {

std::vector<float> pack_id_exchange(bool ready, const unique_id* id) {
  std::vector<float> v(1 + unique_id_bytes, 0.0f);
  v[0] = ready ? 1.0f : 0.0f;
  if (id != nullptr)
    for (std::size_t i = 0; i < unique_id_bytes; ++i) v[1 + i] = static_cast<float>(std::to_integer<unsigned>((*id)[i]));
  return v;
}

expected<unique_id> unpack_id_exchange(std::span<const float> summed, int world_size) {
  if (summed.size() != 1 + unique_id_bytes)
    return error(errc::runtime_failure, "the NCCL id exchange has " + std::to_string(summed.size()) +
                                            " values; expected " + std::to_string(1 + unique_id_bytes));
  const float ready = summed[0];
  if (ready != static_cast<float>(world_size)) {
    const long ok = std::lround(ready);
    return error(errc::runtime_failure, std::to_string(world_size - ok) + " of " + std::to_string(world_size) +
                                            " ranks could not take part in making the NCCL communicator (no usable "
                                            "cuda device or NCCL failed there; see those ranks' errors)");
  }
  unique_id id{};
  for (std::size_t i = 0; i < unique_id_bytes; ++i) {
    const float b = summed[1 + i];
    if (!(b >= 0.0f && b <= 255.0f) || std::floor(b) != b)
      return error(errc::runtime_failure, "the NCCL unique id arrived corrupted (byte " + std::to_string(i) + " is " +
                                              std::to_string(b) +
                                              "): every rank must make its communicators in the same order");
    id[i] = static_cast<std::byte>(static_cast<unsigned>(b));
  }
  return id;
}

std::string failure_text(std::string_view call, std::string_view result_text, std::string_view last_error) {
  std::string s(call);
  s += " failed: ";
  s += result_text;
  if (!last_error.empty()) {
    s += " (";
    s += last_error;
    s += ")";
  }
  return s;
}

expected<void> check_device(const device& d) {
  if (!d.valid()) return error(errc::invalid_argument, "an NCCL communicator needs a cuda device; it was given none");
  if (d.kind() != device_kind::cuda)
    return error(errc::invalid_argument, "an NCCL communicator needs a cuda device; it was given " + d.name());
  return {};
}

expected<void> check_allreduce_inputs(const std::vector<tensor>& tensors, int gpu_ordinal, const stream& s) {
  const std::string gpu = "GPU " + std::to_string(gpu_ordinal);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const tensor& t = tensors[i];
    const std::string which = "allreduce_sum: tensor " + std::to_string(i);
    if (!t.valid()) return error(errc::invalid_argument, which + " is empty (no buffer)");
    if (t.dtype() != dtype::float32)
      return error(errc::invalid_argument, which + " is " + std::string(to_string(t.dtype())) + "; expected float32");
    const device d = t.get_device();
    if (d.kind() != device_kind::cuda || d.properties().gpu_ordinal != gpu_ordinal)
      return error(errc::invalid_argument, which + " is on " + d.name() + "; expected a cuda tensor on the " +
                                               "communicator's " + gpu);
  }
  if (!s.valid()) return error(errc::invalid_argument, "allreduce_sum: the stream is empty");
  const device sd = s.get_device();
  if (sd.kind() != device_kind::cuda || sd.properties().gpu_ordinal != gpu_ordinal)
    return error(errc::invalid_argument, "allreduce_sum: the stream is on " + sd.name() +
                                             "; expected a stream of a cuda device on the communicator's " + gpu);
  return {};
}

}  // namespace strata::nccl::detail
