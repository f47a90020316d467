#pragma once
/// \file
/// How an activation or a gradient gets from the stage that produced it to the stage that reads
/// it: the tensor travels with its ready event, and the consumer's stream waits on that event
/// (copying first when the consumer cannot read the producer's memory).

#include <cstddef>
#include <map>

#include "strata/device/device.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"

namespace strata::pipeline {

/// The receiving end of the activations and gradients of one stage.
///
/// `receive` orders the stage's compute stream after the incoming tensor is ready and returns the
/// tensor that stream may read: the producer's own when the consumer can read it in place
/// (`device::can_read_in_place`), else a copy in a staging buffer of the consumer, made on the
/// stage's copy stream (a peer copy between GPUs, PCIe between host and GPU) so that it overlaps
/// the compute of earlier work. The returned tensor's ready_event() is the point its contents
/// are valid from.
///
/// Staging buffers are allocated on first use per `slot` (one per unit and direction, chosen by
/// the caller) and reused by later receives into the same slot; the caller must not receive into
/// a slot while the compute stream may still read its previous contents.
///
/// Thread-safety: one caller (the stage actor).
class transport {
public:
  transport() = default;
  /// `copy_always`: copy even what could be read in place (tests; measuring what copies cost).
  transport(device consumer, stream compute, stream copies, bool copy_always = false);

  /// The tensor `t` as the compute stream may read it after this call (see the class comment).
  /// An invalid tensor (sim devices hold no data) is returned as it is, its event waited on.
  tensor receive(const tensor& t, std::size_t slot);

private:
  device consumer_;
  stream compute_, copies_;
  bool copy_always_ = false;
  std::map<std::size_t, tensor> staging_;
};

}  // namespace strata::pipeline
