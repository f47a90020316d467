#pragma once
/// \file
/// One stage's place in a pipeline (its device, streams, neighbours and plan actions), shared by
/// its owner and every instance of its actor.

#include <chrono>
#include <cstddef>
#include <mutex>
#include <vector>

#include "strata/actor_ref.hpp"
#include "strata/device/device.hpp"
#include "strata/device/stream.hpp"
#include "strata/pipeline/plan.hpp"

namespace strata::pipeline {

/// One stage's place in a pipeline, shared by the owner and every instance of the stage's actor:
/// its index, device, streams and neighbours.
///
/// A restarted instance (its supervisor is all-for-one) takes fresh streams, since a stream whose
/// work failed stays failed; the old ones are kept in `retired()` until the owner has drained
/// them (`take_retired`). Thread-safe.
class stage_context {
public:
  /// Creates the compute and copy streams on `dev`.
  stage_context(int index, device dev);

  int index() const noexcept { return index_; }
  const device& get_device() const noexcept { return dev_; }
  stream compute() const;
  stream copies() const;
  /// How many actor instances have run this stage (1 + restarts).
  std::size_t instances() const;
  /// Streams of earlier instances not yet taken (a restarted instance waits for them to finish
  /// their queued work before it reports to the driver).
  std::vector<stream> retired() const;
  /// Streams of earlier instances, handed to the caller (drain them before reusing the model).
  std::vector<stream> take_retired();

  /// Set by spawn_pipeline before the first step.
  struct links {
    actor_ref prev{}, next{}, driver{}, store{};
    std::vector<action> actions{};
    std::size_t chunks = 1;
    bool copy_always = false;
    std::chrono::milliseconds update_timeout{std::chrono::minutes(5)};
  };
  void set_links(links l);
  links get_links() const;
  /// Replaces the store (a rebuilt one); stages use it from their next step.
  void set_store(actor_ref store);

  /// Called by each new actor instance: the first keeps the streams, later ones renew them.
  /// Returns the instance's number (1 for the first).
  std::size_t claim_instance();

private:
  int index_;
  device dev_;
  mutable std::mutex mu_;
  stream compute_, copies_;
  std::vector<stream> retired_;
  std::size_t instances_ = 0;
  links links_;
};

}  // namespace strata::pipeline
