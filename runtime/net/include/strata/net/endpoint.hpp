#pragma once
/// \file
/// `strata::net::endpoint`: this process's place in an MPI job; handles to actors on other ranks.

#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/actor_ref.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/device.hpp"
#include "strata/error.hpp"
#include "strata/net/serialize.hpp"

namespace strata::net {

/// Settings of an endpoint. Every field has a working default.
struct endpoint_config {
  /// The device that holds tensors received from other ranks: cpu (the bytes land in the
  /// tensor's buffer) or cuda (they land in pinned host memory and one copy takes them to the
  /// GPU; the tensor's ready event fires when that copy is done). Empty: a one-thread cpu device
  /// made at the first tensor that arrives. A sim device is refused by the constructor.
  device receive_device;
};

/// Counts since the endpoint started (this rank).
struct endpoint_stats {
  std::uint64_t frames_sent = 0;       ///< Control frames (messages, monitors, links, ...) sent.
  std::uint64_t frames_received = 0;
  std::uint64_t tensor_bytes_sent = 0;
  std::uint64_t tensor_bytes_received = 0;
  std::uint64_t refused = 0;           ///< Sends refused (no serialization, rank down, bad tensor).
  /// `flowing` frames received: the sender said the bytes of one of its tensors (64 KiB or more)
  /// are leaving, and the communication thread polls without sleeping until they are in.
  std::uint64_t flowing_frames_received = 0;
  /// Tensor receives marked flowing and not complete now (0 whenever no data is on its way).
  std::uint64_t flowing_receives = 0;
  /// Ranks on this machine whose doorbells this rank rings after each message it posts to them
  /// (docs/distributed.md, "Doorbells"); 0 in a world of one or without POSIX shared memory.
  std::uint64_t peers_with_bells = 0;
  /// Sleeps of this rank's communication thread that a peer's ring or the network watch ended
  /// (not its own threads').
  std::uint64_t woken_by_peers = 0;
  /// Control frames the communication thread posted to MPI as it made them, without the outbox:
  /// the answers of actors spawned with handle_remote_inline (docs/distributed.md, "Direct sends").
  std::uint64_t frames_posted_directly = 0;
  /// Other ranks on this machine (MPI_COMM_TYPE_SHARED); the rest run on other machines.
  std::uint64_t peers_on_this_machine = 0;
  /// Arrivals on a TCP socket of this process that the network watch rang this rank's bell for
  /// (docs/distributed.md, "Waking up for another machine"); 0 while no peer is on another
  /// machine or with STRATA_NET_WATCH=off.
  std::uint64_t network_wakes = 0;
};

/// Checks the `STRATA_NET_*` environment variables as the endpoint's constructor reads them
/// (docs/distributed.md, "Environment variables"), without starting anything: a program can
/// refuse a bad value before its own work, with the sentence the constructor would throw.
/// \returns invalid_argument naming the first bad variable and its value.
expected<void> check_environment();

/// One per process: starts MPI (`MPI_Init_thread`) and the communication thread, which is the
/// only MPI caller, and hands out handles to actors on other ranks. A handle from `remote` works
/// like a local one: `send`, `request` with timeout and `.then`, `monitor`, `link_to`, `stop`;
/// messages from one sender to one receiver arrive in order, across ranks too.
///
/// Without `mpirun` (no `OMPI_COMM_WORLD_SIZE`, `PMIX_RANK` or `PMI_SIZE` in the environment)
/// the program is a world of one: MPI is not started, `rank()` is 0, `size()` 1, and `remote(0,
/// name)` returns the local actor published under `name`.
///
/// A program that called `MPI_Init_thread` itself (with MPI_THREAD_SERIALIZED or more) keeps its
/// MPI: the endpoint then neither starts nor ends it, and the program must not call MPI while
/// the endpoint lives. Such a program may make one endpoint after another (each talks on a
/// communicator of its own); an endpoint that started MPI ends it, and MPI cannot start again.
///
/// Lifetime: construct after the `actor_system`, destroy (or `shutdown`) before it. `shutdown`
/// tells every other rank that this one leaves (their monitors of actors here get `down_msg`
/// with `errc::rank_down`), then waits until every other rank has left too and ends MPI: a rank
/// that leaves early waits in `shutdown` for the rest of the job.
///
/// Thread-safety: every member may be called from any thread.
///
/// \code
///   strata::actor_system sys({.worker_threads = 1});
///   strata::net::endpoint net(sys);
///   if (net.rank() == 1) net.publish(sys.spawn<pong_actor>(), "pong");
///   if (net.rank() == 0) {
///     auto pong = net.remote<pong_actor::protocol>(1, "pong").value();  // no round trip
///     sys.send(pong, ping{1});
///   }
/// \endcode
/// A group of ranks made by `endpoint::split`: its own MPI communicator, for collectives among
/// its members only (`endpoint::allreduce_sum(values, group)`). Copyable; valid while the endpoint
/// lives.
struct rank_group {
  int id = -1;               ///< the endpoint's handle of its communicator; -1: every rank
  int rank = 0;              ///< this rank's place in the group (0 .. size - 1)
  int size = 1;              ///< members
  std::vector<int> members;  ///< their ranks in the job, in group order (ascending)
};

class endpoint {
public:
  /// \throws error_exception (runtime_failure) if MPI cannot start, gives less than
  ///   MPI_THREAD_SERIALIZED, or another endpoint exists in this process; (invalid_argument) for
  ///   a receive_device that cannot hold received bytes.
  explicit endpoint(actor_system& sys, endpoint_config config = {});
  ~endpoint();
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  /// This process's rank in MPI_COMM_WORLD (0 in a world of one).
  int rank() const noexcept;
  /// Number of ranks (1 in a world of one).
  int size() const noexcept;

  /// Makes `target` (a local actor) reachable as `name` from every rank. Messages that arrived
  /// for `name` before it was published are delivered now, in order.
  /// \returns invalid_argument for an empty handle, a remote handle or a name already published.
  expected<void> publish(const actor_ref& target, const std::string& name);
  template <class P>
  expected<void> publish(const typed_actor<P>& target, const std::string& name) {
    static_assert(detail::protocol_types<P>::all_wire,
                  "every message type of a published protocol must declare its serialization");
    (void)detail::protocol_types<P>::declare();
    return publish(target.ref(), name);
  }

  /// A handle to the actor published as `name` on `rank`. For another rank this needs no round
  /// trip: messages sent before the name is published there wait for it. For this rank, the
  /// actor must be published already.
  /// \returns invalid_argument for a rank outside [0, size()) or an unknown local name.
  expected<actor_ref> remote(int rank, std::string_view name);
  /// Typed: sending a type outside `P` does not compile, and neither does asking for a remote
  /// handle whose protocol has a type without serialization.
  template <class P>
  expected<typed_actor<P>> remote(int rank, std::string_view name) {
    static_assert(detail::protocol_types<P>::all_wire,
                  "every message type of a remote actor's protocol must declare its serialization");
    (void)detail::protocol_types<P>::declare();
    auto ref = remote(rank, name);
    if (!ref) return ref.error();
    return typed_actor<P>(std::move(*ref));
  }

  /// Collective: every rank calls it with buffers of the same sizes, in the same order. Sums
  /// `values` element-wise over all ranks, in place, with one `MPI_Iallreduce` (MPI_SUM on
  /// MPI_FLOAT) that the communication thread posts and completes; the future resolves when the
  /// sums are there. MPI chooses the order of the additions (the same algorithm on every rank of
  /// one job). In a world of one it resolves at once. The caller keeps `values` alive and
  /// untouched until then.
  /// \returns (in the future) runtime_failure if MPI fails, rank_down once this rank has left.
  std::future<expected<void>> allreduce_sum(std::span<float> values);

  /// Collective over every rank (MPI_Comm_split): the ranks that pass the same `color` (>= 0)
  /// form one group, ordered by their rank in the job. Every rank calls it, in the same order
  /// among its other splits; it blocks the caller until every rank has called it (the
  /// communication thread keeps serving meanwhile: it posts a barrier first and makes the split
  /// once every rank has reached it). In a world of one: a group of one.
  /// \returns invalid_argument for a negative color; runtime_failure if MPI fails; rank_down
  ///   once this rank has left.
  expected<rank_group> split(int color);

  /// `allreduce_sum` among the members of `group` only (a collective of the group: each member
  /// calls it with buffers of the same sizes, in the same order).
  /// \returns (in the future) invalid_argument for a group this endpoint did not make, else as
  ///   `allreduce_sum`.
  std::future<expected<void>> allreduce_sum(std::span<float> values, const rank_group& group);

  /// Leaves the job (see the class comment). Idempotent; the destructor calls it.
  void shutdown();

  endpoint_stats stats() const;

private:
  std::shared_ptr<detail::endpoint_state> state_;
};

}  // namespace strata::net
