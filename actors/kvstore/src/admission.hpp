#pragma once
// The admission path of a store: every request kind becomes a ticket (priority, barrier, keys,
// sender) and waits in one ready queue, which hands requests to the store's stream in priority
// order without letting a sender's request overtake an earlier one of its own on a shared key.
// Private to strata::kvstore.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "shard_protocol.hpp"
#include "strata/error.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore::internal {

/// How a request enters the ready queue.
struct admission_ticket {
  const char* op = "";             // "push", ...: the request's name in error texts
  int priority = 0;                // higher first
  bool barrier = false;            // nothing overtakes it and it overtakes nothing
  std::vector<kvstore::key> keys;  // the keys it reads or writes
  std::vector<const void*> tensors;  // the caller's tensors it reads or writes (their allocations)
  std::optional<std::uint64_t> origin;  // the caller, when not the message's sender (router forwards)
};

/// The ticket of each request kind a store takes.
admission_ticket ticket_of(const kvstore::init& m);
admission_ticket ticket_of(const kvstore::push& m);
admission_ticket ticket_of(const kvstore::pull& m);
admission_ticket ticket_of(const kvstore::pushpull& m);
admission_ticket ticket_of(const kvstore::pushpull_in_place& m);
admission_ticket ticket_of(const kvstore::broadcast& m);
admission_ticket ticket_of(const kvstore::set_updater& m);
admission_ticket ticket_of(const kvstore::set_optimizer& m);
admission_ticket ticket_of(const kvstore::set_gradient_compression& m);
admission_ticket ticket_of(const kvstore::set_learning_rate& m);
admission_ticket ticket_of(const kvstore::version& m);
admission_ticket ticket_of(const kvstore::save& m);
admission_ticket ticket_of(const kvstore::load& m);
admission_ticket ticket_of(const kvstore::save_optimizer_states& m);
admission_ticket ticket_of(const kvstore::push_row_sparse& m);
admission_ticket ticket_of(const kvstore::row_sparse_pull& m);
admission_ticket ticket_of(const kvstore::load_optimizer_states& m);
admission_ticket ticket_of(const shard_load_optimizer_states& m);
admission_ticket ticket_of(const shard_init& m);
admission_ticket ticket_of(const shard_request& m);
admission_ticket ticket_of(const shard_row_sparse& m);
admission_ticket ticket_of(const shard_save& m);
admission_ticket ticket_of(const shard_load& m);

/// Runs a request (null) or fails it because the store stops (the reason).
using request_run = std::function<void(const error* stopped)>;

/// The identity of a tensor's memory, for ordering the requests that use it: tensors that share
/// an allocation (copies of one tensor handle, or tensors made on one buffer) share it.
const void* allocation_of(const tensor& t) noexcept;

/// The ready queue: requests wait here until the store hands them to its stream, at most
/// `max_in_flight` at a time. The request to serve next is the highest priority (earliest among
/// equals); if an earlier request must come before it (a barrier, one of any sender that uses one
/// of its tensors, as MXNet orders every operation on an array in issue order, or one of the same
/// sender naming one of its keys), that one instead: it inherits the priority. Used on the
/// store's thread only.
class admission_queue {
public:
  /// `started` runs after each request has been handed over (the store arranges to be told when
  /// the stream has finished its work, then calls finished_one()).
  admission_queue(std::size_t max_in_flight, std::function<void()> started)
      : max_in_flight_(max_in_flight), started_(std::move(started)) {}

  /// Queues a request from `sender` (an actor id, 0 for anonymous) and serves what may start.
  void admit(std::uint64_t sender, const admission_ticket& ticket, request_run run);
  /// The stream finished the work of one request: serves the next.
  void finished_one();
  /// Fails every queued request with `reason` (the store stops).
  void fail_all(const error& reason);

private:
  struct pending {
    int priority = 0;
    std::uint64_t seq = 0;     // arrival order
    std::uint64_t sender = 0;  // actor id of the caller (0: anonymous)
    bool barrier = false;
    std::vector<kvstore::key> keys;  // sorted, unique
    std::vector<const void*> tensors;  // sorted, unique
    request_run run;
  };
  static bool must_follow(const pending& earlier, const pending& later);
  std::size_t next_index() const;
  void pump();

  std::size_t max_in_flight_;
  std::function<void()> started_;
  std::vector<pending> queue_;  // in arrival order
  std::uint64_t next_seq_ = 0;
  std::size_t in_flight_ = 0;  // requests handed to the stream whose work has not completed
};

}  // namespace strata::kvstore::internal
