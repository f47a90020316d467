#include "crossing.hpp"

#include <cstring>
#include <stdexcept>

#include "strata/kernels/half.hpp"
#include "strata/kernels/on_stream.hpp"
#if STRATA_HAS_CUDA
#include "strata/kernels/cuda.hpp"
#endif

namespace strata::kvstore::internal {

std::optional<std::string> crossing_refusal(device_kind store, const std::string& store_name, device_kind tensor,
                                            const std::string& tensor_name) {
  if (tensor == store) return std::nullopt;
  const std::string on = " is on " + tensor_name + ", which a store on " + store_name + " cannot read; expected ";
  if (store == device_kind::sim) return on + "a sim tensor.";
  if (tensor == device_kind::sim) return on + "a cpu or cuda tensor (sim tensors hold no data).";
  return std::nullopt;  // cpu and cuda, any dtype a key holds: copied
}

crossing_plan plan_crossing(device_kind store, device_kind tensor, bool whole) {
  if (tensor == store) return {};
  return {.whole_copy = store == device_kind::cuda ? copier::store_stream : copier::tensor_stream, .bounce = !whole};
}

/// Enqueues on `s` a work item that copies `n` elements (of `dst`'s dtype, which is `src`'s) from
/// `src` (from element `src_offset`) to `dst` (from `dst_offset`), both on `s`'s device kind: a
/// kernel on cuda (which reads and writes device memory only: `s`'s GPU or its peers), a memcpy on
/// cpu. A failure of the cuda kernel goes to `status`, named by `label`.
void enqueue_slice_copy(stream& s, const tensor& dst, std::size_t dst_offset, const tensor& src, std::size_t src_offset,
                        std::size_t n, const std::shared_ptr<work_status>& status, const work_label& label) {
  const std::size_t element = size_of(dst.dtype());
  if (s.get_device().kind() == device_kind::cuda) {  // the item only enqueues: keep both until it has run
    dst.storage().record_stream(s);
    src.storage().record_stream(s);
  }
  kernels::on_stream(s,
                     {.name = "kvstore_copy_slice",
                      .kind = work_kind::copy,
                      .bytes = 2.0 * static_cast<double>(element * n)},
                     [dst, dst_offset, src, src_offset, n, element, status, label](auto target) {
                       if constexpr (kernels::is_cuda_target<decltype(target)>) {
                         run_guarded(*status, label, [&] {
                           if (kernels::is_half(dst.dtype()))  // a 16-bit key's slice
                             kernels::cuda::copy(target.context, n, static_cast<const std::uint16_t*>(src.raw_data()) + src_offset,
                                                 static_cast<std::uint16_t*>(dst.raw_data()) + dst_offset);
                           else
                             kernels::cuda::copy(target.context, n, src.device_data<float>() + src_offset,
                                                 dst.device_data<float>() + dst_offset);
                         });
                       } else if (n > 0) {
                         std::memcpy(static_cast<char*>(dst.raw_data()) + dst_offset * element,
                                     static_cast<const char*>(src.raw_data()) + src_offset * element, n * element);
                       }
                     });
}

void enqueue_crossing(const crossing_plan& plan, stream& store, stream& other, const slice_ref& foreign, const tensor& own,
                      std::size_t n, bool to_foreign, const std::shared_ptr<work_status>& status, const work_label& label) {
  const dtype type = own.dtype();  // the key's: float32, float16 or bfloat16 (checked against the key)
  if (foreign.t.dtype() != type) throw std::logic_error("a copy across device kinds mixes dtypes");
  const std::size_t bytes = n * size_of(type);
  if (own.bytes() != bytes) throw std::logic_error("a copy across device kinds reaches a slice of a store's tensor");
  const bool other_copies = plan.whole_copy == copier::tensor_stream;
  stream& copying = other_copies ? other : store;
  device where = foreign.t.get_device();
  if (!to_foreign) {
    tensor from = foreign.t;
    // A cuda tensor is read on its GPU's stream as soon as it is ready (the store's earlier writes
    // into it ran on that stream too); a cpu slice after the store's stream so far, which has
    // waited for it and may have written it.
    if (other_copies) other.wait(foreign.t.ready_event());
    else if (plan.bounce) other.wait(store.record());
    if (plan.bounce) {
      from = tensor::empty({static_cast<std::int64_t>(n)}, type, where, other);
      enqueue_slice_copy(other, from, 0, foreign.t, foreign.offset, n, status, label);
      if (!other_copies) store.wait(other.record());
    }
    copying.copy(own.storage(), from.storage(), bytes);
    if (other_copies) store.wait(other.record());
  } else {
    tensor to = plan.bounce ? tensor::empty({static_cast<std::int64_t>(n)}, type, where, other) : foreign.t;
    if (other_copies) other.wait(store.record());
    copying.copy(to.storage(), own.storage(), bytes);
    if (plan.bounce) {
      if (!other_copies) other.wait(store.record());
      enqueue_slice_copy(other, foreign.t, foreign.offset, to, 0, n, status, label);
    }
    if (plan.bounce || other_copies) store.wait(other.record());  // the store's value is read until then
  }
}

}  // namespace strata::kvstore::internal
