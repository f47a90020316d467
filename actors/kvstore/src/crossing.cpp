#include "crossing.hpp"

#include "strata/kernels/half.hpp"

namespace strata::kvstore::internal {

std::optional<std::string> crossing_refusal(device_kind store, const std::string& store_name, device_kind tensor,
                                            const std::string& tensor_name, dtype type) {
  if (tensor == store) return std::nullopt;
  const std::string on = " is on " + tensor_name + ", which a store on " + store_name + " cannot read; expected ";
  if (store == device_kind::sim) return on + "a sim tensor.";
  if (tensor == device_kind::sim) return on + "a cpu or cuda tensor (sim tensors hold no data).";
  if (kernels::is_half(type))
    return " has dtype " + std::string(to_string(type)) + " and is on " + tensor_name + "; a store on " + store_name +
           " takes 16-bit tensors on its own device kind only (" + std::string(to_string(store)) + ").";
  return std::nullopt;  // float32 between cpu and cuda: copied
}

crossing_plan plan_crossing(device_kind store, device_kind tensor, bool whole) {
  if (tensor == store) return {};
  return {.whole_copy = store == device_kind::cuda ? copier::store_stream : copier::tensor_stream, .bounce = !whole};
}

}  // namespace strata::kvstore::internal
