#include "strata/pipeline/transport.hpp"

#include <utility>

namespace strata::pipeline {

transport::transport(device consumer, stream compute, stream copies, bool copy_always)
    : consumer_(std::move(consumer)), compute_(std::move(compute)), copies_(std::move(copies)),
      copy_always_(copy_always) {}

tensor transport::receive(const tensor& t, std::size_t slot) {
  if (!t.valid() || (!copy_always_ && consumer_.can_read_in_place(t.storage()))) {
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
