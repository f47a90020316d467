#pragma once
/// \file
/// `strata::nccl::communicator`: NCCL between the cuda devices of the ranks of a strata::net job.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "strata/device/device.hpp"
#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"
#include "strata/error.hpp"
#include "strata/net/endpoint.hpp"

namespace strata::nccl {

/// Settings of a communicator. Every field has a working default.
struct communicator_config {
  /// How long making the communicator, or one collective once its inputs are ready, may wait for
  /// the other ranks before the communicator is aborted (ncclCommAbort) and reports the failure.
  /// A rank that died never joins, and NCCL alone would wait forever. Zero: wait forever.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// One NCCL communicator: every rank of a `net::endpoint` (or a world of one) with one cuda
/// device each. NCCL puts one rank per GPU: two ranks on one GPU are refused by NCCL at creation.
///
/// - Creation is collective: rank 0 calls ncclGetUniqueId, the id reaches every rank through the
///   endpoint (`endpoint::allreduce_sum`, so the communication thread stays MPI's only caller),
///   and each rank calls ncclCommInitRankConfig (non-blocking) on its device. A rank that cannot
///   take part (no cuda device, NCCL failed) still joins the exchange, so that every rank gets
///   the same error instead of waiting.
/// - Collectives are stream-ordered: they wait for their tensors' ready events on the given
///   stream and set each tensor's ready event to their end.
/// - Failures: a NCCL error becomes a strata error naming the NCCL call and ncclGetErrorString's
///   text. A watch thread aborts the communicator (ncclCommAbort, which ends NCCL kernels waiting
///   for a peer) when a collective outlives `communicator_config::timeout` or NCCL reports an
///   asynchronous error; a program that learns of a dead rank sooner (`errc::rank_down` from the
///   endpoint) calls `abort`. After an abort every call returns the abort's error.
///
/// Thread-safety: every member may be called from any thread; collectives of one communicator
/// must be issued in the same order on every rank.
///
/// \code
///   auto comm = strata::nccl::communicator::create(net, gpu).value();   // every rank
///   std::vector<strata::tensor> grads = ...;                             // float32, on `gpu`
///   if (auto r = comm.allreduce_sum(grads, s); !r) log(r.error().message());
///   consumer.wait(grads[0].ready_event());
/// \endcode
class communicator {
public:
  /// Collective over every rank of `net`: each calls it with its cuda device.
  /// \returns invalid_argument for a device that is not cuda (on that rank; the others get
  ///   runtime_failure naming how many ranks could not take part), runtime_failure when NCCL
  ///   fails or creation outlives the timeout.
  static expected<communicator> create(net::endpoint& net, const device& cuda_device, communicator_config config = {});
  /// A world of one (rank 0 of 1): no MPI, no endpoint.
  static expected<communicator> create_single(const device& cuda_device, communicator_config config = {});

  communicator(communicator&&) noexcept;
  communicator& operator=(communicator&&) noexcept;
  /// Destroys the NCCL communicator (ncclCommDestroy; nothing if it was aborted). Collectives
  /// still running on the GPU keep their buffers (they are released in stream order).
  ~communicator();

  int rank() const noexcept;
  int size() const noexcept;
  const device& get_device() const noexcept;

  /// Sums every tensor of `cuda_tensors` element-wise over all ranks, in place: one NCCL group
  /// (ncclGroupStart, one ncclAllReduce per tensor in order, ncclGroupEnd) enqueued on `s` after
  /// the tensors' ready events; each tensor's ready event becomes the end of the group. Every
  /// rank passes tensors of the same sizes in the same order.
  /// \returns invalid_argument for a tensor that is empty, not float32, or not on this
  ///   communicator's GPU, or a stream of another device; runtime_failure after an abort. Errors
  ///   of NCCL calls made when the stream reaches the group become the stream's error (and so
  ///   the tensors' ready events carry it).
  expected<void> allreduce_sum(std::vector<tensor>& cuda_tensors, const stream& s);

  /// Aborts the communicator (ncclCommAbort): collectives waiting for other ranks end, later calls
  /// return runtime_failure with `reason`. Idempotent.
  void abort(const std::string& reason);
  /// The error that aborted the communicator (empty while it works).
  error failure() const;

  struct state;

private:
  explicit communicator(std::shared_ptr<state> s) noexcept;
  std::shared_ptr<state> state_;
};

}  // namespace strata::nccl
