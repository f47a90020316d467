#pragma once
// Private: the communication thread's loop (comm_loop.cpp), what it keeps between its rounds, and
// the helpers that comm.cpp (start and end of MPI) and bells.cpp share with it.

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "network_watch.hpp"
#include "peer_watch.hpp"
#include "state.hpp"
#include "strata/trace.hpp"

namespace strata::net::detail {

using comm_clock = std::chrono::steady_clock;

/// Requests in flight and what to do when each completes (parallel arrays for MPI_Testsome).
struct in_flight_requests {
  std::vector<MPI_Request> requests;
  std::vector<std::function<void(const MPI_Status&)>> on_done;
  std::vector<int> indices;
  std::vector<MPI_Status> statuses;

  void add(MPI_Request r, std::function<void(const MPI_Status&)> done) {
    requests.push_back(r);
    on_done.push_back(std::move(done));
  }
  bool empty() const noexcept { return requests.empty(); }
  std::size_t size() const noexcept { return requests.size(); }
  /// Runs the completion of every finished request; returns how many finished.
  int poll();
};

/// Records one side of a transfer between ranks (docs/trace-format.md, kinds 16 and 17):
/// actor = this rank, peer = the other rank, msg = the MPI tag (the same on both ranks) or the
/// collective's sequence number, type = what moved, arg = its bytes (saturated at 2^32 - 1).
void trace_transfer(trace::event_kind kind, trace::transfer what, int rank, int peer, std::uint64_t key,
                    std::size_t bytes) noexcept;

std::string mpi_error_text(int code);

// ---- doorbells (bells.cpp) ---------------------------------------------------------------------

/// Maps the doorbells of this machine's ranks (collective over `world`); see bells.cpp.
void share_bells(MPI_Comm world, endpoint_state& s);
/// After the loop: this process's threads ring its own bell again; the maps go.
void drop_bells(endpoint_state& s);
/// Rings rank `peer`'s bell if it sleeps (no-op for a peer without a bell).
void ring_peer(endpoint_state& s, int peer);
void ring_every_peer(endpoint_state& s);

// ---- the loop ----------------------------------------------------------------------------------

/// The exit status of a rank that ends the job because a peer was silent past
/// STRATA_NET_PEER_TIMEOUT_S.
inline constexpr int peer_silent_exit_status = 3;

/// The communication thread's way out (its direct_path, state.hpp) and what posting a frame
/// needs of its state.
struct comm_path final : direct_path {
  MPI_Comm comm = MPI_COMM_NULL;
  in_flight_requests* active = nullptr;
  int* data_sends = nullptr;  // sends whose bytes move only while this thread polls
  peer_watch* peers = nullptr;
};

/// Posts a control frame to `dst` (a `large` frame and its bytes when it exceeds the posted
/// receive); its bytes are kept until MPI is done with them.
void post_frame(comm_path& p, int dst, std::vector<std::byte>&& bytes);

/// The progress loop of the communication thread, the only caller of MPI while it runs: each
/// round posts what other threads queued (frames, tensor chunks, collectives), handles the frames
/// that arrived, completes requests, and then either goes on (there was work) or backs off
/// (docs/distributed.md, "The communication thread"). Made by run_comm after MPI has started,
/// on the communicators it owns; `run` returns once this rank has left and every peer has too.
class comm_loop {
public:
  comm_loop(endpoint_state& s, MPI_Comm comm, MPI_Comm split_comm);
  comm_loop(const comm_loop&) = delete;
  comm_loop& operator=(const comm_loop&) = delete;

  /// Rounds until this rank may end MPI.
  void run();
  /// After `run`: cancels the posted receives, fails what can no longer complete and frees the
  /// groups' communicators. The futures of sums left open fail in `fail_open_sums`, once MPI
  /// has ended (so that nothing writes into their buffers after their callers learn it).
  void close();
  void fail_open_sums();

private:
  struct pending_split {
    endpoint_state::collective c;
    bool reached = false;  // every rank has posted the split's barrier
  };

  bool take_queued();
  bool post_collectives();
  void post_split(endpoint_state::collective& c);
  void post_sum(endpoint_state::collective& c);
  bool post_batch();
  void post_chunk(outgoing& o);
  bool receive_frames();
  bool receive_one_frame();
  void post_frame_receive();
  void post_data_receives();
  bool make_splits();
  bool may_end();
  void back_off();
  void sleep_on_network(std::chrono::microseconds step);
  void watch_peers(comm_clock::time_point now);

  endpoint_state& s_;
  MPI_Comm comm_;
  MPI_Comm split_comm_;
  in_flight_requests active_;
  int data_sends_ = 0;  // tensor chunks (and bytes of large frames) posted and not complete
  comm_path path_;
  // Control frames arrive in one receive kept posted (a poll is one MPI_Test: 0.2 us a round
  // trip less than MPI_Improbe + MPI_Mrecv here); it is posted again once its frame is handled.
  // A `large` frame's bytes come on their own tag into `large_buffer_`; until they are in and
  // handled, the frame receive stays unposted, so frames are handled in the order they came.
  std::vector<std::byte> frame_buffer_;
  MPI_Request frame_receive_ = MPI_REQUEST_NULL;
  std::vector<std::byte> large_buffer_;
  MPI_Request large_receive_ = MPI_REQUEST_NULL;
  int large_source_ = 0;

  std::uint64_t collectives_posted_ = 0;
  std::vector<MPI_Comm> groups_;  // made by endpoint::split, a rank_group's id is its index
  std::deque<std::shared_ptr<pending_split>> splits_;
  int collectives_running_ = 0;
  // The futures of the allreduces posted and not complete, by sequence number: failed when this
  // rank leaves with sums that a rank which left never joined.
  std::map<std::uint64_t, std::shared_ptr<std::promise<expected<void>>>> open_sums_;
  bool stuck_ = false;  // leaving with only such collectives left, since `stuck_since_`
  comm_clock::time_point stuck_since_;

  std::deque<outgoing> batch_;
  std::deque<endpoint_state::collective> collectives_;
  bool leaving_ = false;

  // Back-off (back_off).
  comm_clock::time_point idle_since_;
  std::uint64_t idle_polls_ = 0;  // since the last work
  std::uint64_t busy_rounds_ = 0;  // since the peers were last checked
  std::uint64_t inline_runs_ = 0;
  bool ran_inline_ = false;       // an actor's handler ran here since the last idle poll
  bool hot_ = false;
  bool every_peer_wakes_ = false;  // a message from any peer ends this thread's sleep

  comm_clock::time_point next_peer_check_{};
  network_watch network_;  // rings this rank's bell when bytes arrive from another machine
  bool waits_on_network_ = false;  // or this thread sleeps in its epoll set (no node-mates)
  peer_watch peers_;       // heartbeats and the silence deadline (STRATA_NET_PEER_TIMEOUT_S)
};

}  // namespace strata::net::detail
