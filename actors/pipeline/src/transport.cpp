#include "strata/pipeline/transport.hpp"

#include <utility>

namespace strata::pipeline {

bool readable_in_place(const tensor& t, const device& consumer) {
  const auto kind = t.storage().kind();
  if (kind != consumer.kind()) return false;
  if (kind != device_kind::cuda) return true;  // host memory, or sim (no data)
  return t.get_device().properties().gpu_ordinal == consumer.properties().gpu_ordinal;
}

transport::transport(device consumer, stream compute, stream copies, bool copy_always)
    : consumer_(std::move(consumer)), compute_(std::move(compute)), copies_(std::move(copies)),
      copy_always_(copy_always) {}

tensor transport::receive(const tensor& t, std::size_t slot) {
  if (!t.valid() || (!copy_always_ && readable_in_place(t, consumer_))) {
    compute_.wait(t.ready_event());
    return t;
  }
  copies_.wait(t.ready_event());
  auto& own = staging_[slot];
  if (!own.valid() || own.shape() != t.shape() || own.dtype() != t.dtype())
    own = tensor::empty(t.shape(), t.dtype(), consumer_, copies_);  // allocated on the copy stream
  copies_.copy(own.storage(), t.storage(), t.bytes());
  own.set_ready_event(copies_.record());
  compute_.wait(own.ready_event());
  return own;
}

}  // namespace strata::pipeline
