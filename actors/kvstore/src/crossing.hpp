#pragma once
// Values and outputs on another device kind than the store's (MXNet's 'local' store takes GPU
// values and copies them to its merge device): which tensors a store takes, which copies bring
// one to the store's memory or back (decided on device kinds alone), and enqueuing them on given
// streams, so that both are tested without a GPU (the copies with two cpu streams standing in).
// Private to strata::kvstore.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "merge.hpp"
#include "strata/device/kind.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"

namespace strata::kvstore::internal {

/// Why a store on `store` (named `store_name`) cannot take a tensor on `tensor`
/// (named `tensor_name`), as the end of a sentence that starts with the tensor's role ("... the
/// value for key 3"); nullopt when it can. cpu and cuda stores take tensors of either kind, of
/// every dtype a key holds (float32, float16, bfloat16: that a tensor has the key's dtype is
/// checked apart); sim stores and sim tensors do not mix with others (sim tensors hold no data).
std::optional<std::string> crossing_refusal(device_kind store, const std::string& store_name, device_kind tensor,
                                            const std::string& tensor_name);

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

/// Enqueues the copies of `plan` that bring elements [offset, offset + n) of `foreign` (a tensor on
/// another device kind, of `own`'s dtype: float32, float16 or bfloat16) into `own` (a whole tensor
/// of the store, n elements, fresh: no work of the store uses it yet), or, when `to_foreign`,
/// `own` into them; a bounce's temporary has that dtype too. `store` is
/// the store's stream (it has waited for the tensors' ready events); `other` a stream of
/// `foreign`'s device, used when the plan bounces or copies on the tensor's stream. The copies
/// follow what they read (`store`'s work so far; a value read on `other`: its ready event) and
/// `store`'s next work follows them; no thread blocks. A failed slice kernel goes to `status`.
/// \throws std::logic_error when `own` is not n elements or the dtypes differ.
void enqueue_crossing(const crossing_plan& plan, stream& store, stream& other, const slice_ref& foreign, const tensor& own,
                      std::size_t n, bool to_foreign, const std::shared_ptr<work_status>& status, const work_label& label);

/// Enqueues on `s` a work item that copies `n` elements (of `dst`'s dtype, which is `src`'s) from
/// `src` (from element `src_offset`) to `dst` (from `dst_offset`), both on `s`'s device kind: a
/// kernel on cuda (device memory only: `s`'s GPU or its peers), a memcpy on cpu. A failure of the
/// cuda kernel goes to `status`, named by `label`.
void enqueue_slice_copy(stream& s, const tensor& dst, std::size_t dst_offset, const tensor& src, std::size_t src_offset,
                        std::size_t n, const std::shared_ptr<work_status>& status, const work_label& label);

}  // namespace strata::kvstore::internal
