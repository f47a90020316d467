#pragma once
// Values and outputs on another device kind than the store's (MXNet's 'local' store takes GPU
// values and copies them to its merge device): which tensors a store takes, and which copies
// bring one to the store's memory or back. Decided on device kinds alone, so that it is tested
// without a GPU; store_work.cpp enqueues the copies. Private to strata::kvstore.

#include <optional>
#include <string>

#include "strata/device/kind.hpp"
#include "strata/device/tensor.hpp"

namespace strata::kvstore::internal {

/// Why a store on `store` (named `store_name`) cannot take a tensor of dtype `type` on `tensor`
/// (named `tensor_name`), as the end of a sentence that starts with the tensor's role ("... the
/// value for key 3"); nullopt when it can. cpu and cuda stores take float32 tensors of either
/// kind; 16-bit tensors stay on the store's kind; sim stores and sim tensors do not mix with
/// others (sim tensors hold no data).
std::optional<std::string> crossing_refusal(device_kind store, const std::string& store_name, device_kind tensor,
                                            const std::string& tensor_name, dtype type);

/// The stream that copies whole buffers between a tensor on another kind and the store's memory:
/// it is always a cuda stream (a cpu stream cannot reach GPU memory).
enum class copier {
  none,           ///< the tensor is of the store's kind: no crossing
  tensor_stream,  ///< cpu store, cuda tensor: a stream of the tensor's GPU
  store_stream,   ///< cuda store, cpu tensor: the store's own stream
};

/// The copies that bring a tensor of `tensor` kind (the whole of it, or a slice: a sharded store's
/// router hands its shards slices of the caller's tensors) to a store of `store` kind, or back.
struct crossing_plan {
  copier whole_copy = copier::none;
  /// A slice is first copied into a whole temporary on its own device, on a stream of that device
  /// (device copies take whole buffers), or, for an output, from one.
  bool bounce = false;
  friend bool operator==(const crossing_plan&, const crossing_plan&) = default;
};

/// The plan for a tensor that `crossing_refusal` accepts; `whole`: the tensor is not a slice.
crossing_plan plan_crossing(device_kind store, device_kind tensor, bool whole);

}  // namespace strata::kvstore::internal
