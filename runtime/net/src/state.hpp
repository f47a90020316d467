#pragma once
// Private: the shared state of an endpoint, its proxies, and the wire frames.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "doorbell.hpp"
#include "strata/device/stream.hpp"
#include "strata/extension/transport.hpp"
#include "strata/net/endpoint.hpp"

namespace strata::net::detail {

/// First byte of every control frame (MPI tag 0).
enum class frame : std::uint8_t { message = 1, watch, unwatch, stop, resolved, goodbye, flowing, large, heartbeat };

/// Each rank keeps one receive of this many bytes posted for control frames (tag 0; comm.cpp). A
/// longer frame is announced by a `large` frame (its size and a data tag) and follows on that tag.
inline constexpr std::size_t posted_frame_bytes = std::size_t{64} << 10;

/// A tensor of at least this many bytes is preceded by a `flowing` frame when its chunks leave,
/// so that the receiving communication thread polls without sleeping while its bytes arrive.
inline constexpr std::size_t flowing_bytes = std::size_t{64} << 10;

/// Tensor payloads go in MPI messages of at most this many bytes (MPI counts are int).
inline constexpr std::size_t chunk_bytes = std::size_t{1} << 30;
inline std::size_t chunk_count(std::size_t bytes) noexcept { return (bytes + chunk_bytes - 1) / chunk_bytes; }

/// One item for the communication thread: a control frame, or one chunk of a tensor's data.
struct outgoing {
  int dst = 0;
  std::vector<std::byte> frame_bytes;  // a control frame when `data` is null
  tensor hold;                         // a data chunk: keeps its buffer alive until sent
  std::shared_ptr<std::byte> staged;   // or the pinned host memory a cuda tensor was staged in
  const std::byte* data = nullptr;
  std::size_t size = 0;
  int tag = 0;
};

/// A tensor being received: what to do once its last chunk has landed (fire its ready point,
/// or first copy it from pinned host memory to its cuda device).
struct landing {
  int chunks_left = 0;
  /// Fires the tensor's ready point: with `error` when the sender's producer failed.
  std::function<void(std::exception_ptr error)> done;
  /// A chunk arrived shorter than announced: the sender's tensor failed (docs/distributed.md,
  /// "Wire format"); the first chunk carries as much of its error text as fits.
  bool failed = false;
  std::string error_text;
};

/// A receive the communication thread posts for a tensor announced by a frame.
struct incoming_chunk {
  void* data = nullptr;
  std::size_t size = 0;
  int src = 0;
  int tag = 0;
  std::shared_ptr<landing> whole;  // shared by the chunks of one tensor
};

/// A tensor of a message on its way out: where its bytes leave from, and when.
struct outgoing_tensor {
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  tensor hold;                        // cpu: the tensor itself (zero copy)
  std::shared_ptr<std::byte> staged;  // cuda: the pinned host copy
  event ready;                        // the bytes at `data` are valid once it fires
};

struct endpoint_state;

/// The communication thread's own way out (comm.cpp): while it handles incoming frames, a frame
/// that thread pushes (the answer of a handler it runs inline) is posted to MPI at once instead
/// of going through the outbox, when nothing is queued before it. Null on every other thread.
struct direct_path {
  endpoint_state* owner = nullptr;
  void (*post)(direct_path& self, int dst, std::vector<std::byte>&& bytes) = nullptr;
};
inline thread_local direct_path* direct_here = nullptr;

/// The control block behind a handle to an actor on another rank.
struct proxy_cell final : strata::detail::remote_cell {
  proxy_cell(std::shared_ptr<endpoint_state> owner, int peer, bool named, std::uint64_t target_key);
  expected<void> forward(strata::detail::envelope* e) noexcept override;
  void watch(const actor_ref& watcher, bool link) override;
  void unwatch(const actor_ref& watcher, bool link) override;
  void stop(error reason) override;
  /// The rank left: watchers get down_msg, links exit_msg, later sends fail.
  void go_down(const error& reason);
  void forget_watcher(const actor_ref& watcher, bool link);

  std::shared_ptr<endpoint_state> ep;
  const int rank;
  const bool by_name;
  const std::uint64_t key;  // the actor's id there, or the hash of its published name
  std::mutex mu;
  bool down = false;
  error down_reason;
  std::vector<actor_ref> watchers, links;
};

struct endpoint_state : std::enable_shared_from_this<endpoint_state> {
  actor_system* sys = nullptr;
  endpoint_config config;
  int rank = 0;
  int size = 1;
  bool mpi = false;
  int tag_ub = 32767;
  int spin_us = 200;
  int hot_us = 20;  // after an inline run: polled without yielding
  int max_sleep_us = 1000;
  double peer_timeout_s = 30;  // STRATA_NET_PEER_TIMEOUT_S

  // The outbox: any thread pushes, the communication thread drains.
  std::mutex out_mu;
  std::deque<outgoing> outbox;
  // The communication thread sleeps on `bell`: this process's own until run_comm moves it into
  // the memory the machine's ranks share; `peer_bells[r]` is rank r's there (null for a rank on
  // another machine, or when the machine keeps no bells). Communication thread only, but `bell`.
  doorbell own_bell;
  std::atomic<doorbell*> bell{&own_bell};
  // Set while the communication thread sleeps in the network watch's epoll set; `network_wake_fd`
  // (an eventfd in that set) then ends the sleep.
  std::atomic<bool> waits_on_network{false};
  int network_wake_fd = -1;
  std::vector<doorbell*> peer_bells;
  doorbell* shared_bell = nullptr;  // this rank's bell in shared memory, once mapped
  std::vector<char> on_this_machine;  // rank r shares this machine (communication thread only)
  std::vector<std::string> hosts;      // each rank's host name, gathered as MPI starts
  bool bells_wanted = true;  // STRATA_NET_BELLS (on, off); off on any rank of a machine: none there
  bool watch_wanted = true;  // STRATA_NET_WATCH (on, off): network_watch.hpp
  bool leaving = false;                 // guarded by out_mu
  // Set under out_mu whenever the outbox, the collectives or `leaving` change: the communication
  // thread takes the lock only when it is set.
  std::atomic<bool> queued{false};
  std::vector<char> goodbye_sent;       // guarded by out_mu
  std::atomic<std::int64_t> chunks_owed{0};  // announced tensor chunks not yet in the outbox
  /// Collectives in call order (guarded by out_mu): the communication thread posts them.
  struct collective {
    float* data = nullptr;
    std::size_t count = 0;
    std::shared_ptr<std::promise<expected<void>>> done;
    int group = -1;  // a rank_group's id; -1: every rank
    // A split instead of a sum: the group of this rank's color.
    int color = -1;
    std::shared_ptr<std::promise<expected<rank_group>>> made;
  };
  std::atomic<int> groups_made{0};  // rank_group ids handed out (the communication thread's count)
  std::deque<collective> collectives;
  std::unique_ptr<std::atomic<std::uint64_t>[]> next_tag;  // per destination rank

  // Names, exported local actors, proxies, requests in flight (guarded by mu).
  std::mutex mu;
  std::unordered_map<std::uint64_t, actor_ref> exported;  // local id -> actor
  std::unordered_map<std::uint64_t, actor_ref> names;     // name hash -> local actor
  struct parked_frame {
    int src;
    std::function<void(const actor_ref&)> run;
  };
  // Frames for a name not yet published, or still being handed over by publish() (in arrival order).
  std::unordered_map<std::uint64_t, std::vector<parked_frame>> parked;
  // Actor id -> name key, while publish() hands that name's parked frames over.
  std::unordered_map<std::uint64_t, std::uint64_t> handing_over;
  std::map<std::tuple<int, bool, std::uint64_t>, actor_ref> proxies;
  std::map<std::tuple<int, std::uint64_t, std::uint64_t>, actor_ref> in_flight;  // (rank, requester id, request id)
  std::set<std::pair<int, std::uint64_t>> resolved_sent;
  std::unique_ptr<std::atomic<bool>[]> peer_gone;  // written under mu; forward reads it without
  std::vector<std::pair<device, stream>> staging_streams;

  // Communication thread only.
  std::vector<incoming_chunk> receives;  // posted after each frame
  /// Chunk receives posted and not complete, by (source rank, tag): true once a `flowing` frame
  /// said their bytes are on their way. `flowing_receives` counts the true ones.
  std::map<std::pair<int, int>, bool> data_receives;
  std::atomic<int> flowing_receives{0};        // written by the communication thread only
  std::atomic<std::uint64_t> flowing_frames{0};
  int decode_tag = 0;                    // next data tag of the frame being decoded
  device recv_device;
  stream recv_stream;

  std::atomic<std::uint64_t> frames_sent{0}, frames_received{0}, tensor_bytes_sent{0}, tensor_bytes_received{0},
      refused{0}, peers_with_bells{0}, woken_by_peers{0}, frames_posted_directly{0},
      peers_on_this_machine{0}, network_wakes{0};

  std::thread comm;
  bool shut_down = false;  // guarded by shutdown_mu
  std::mutex shutdown_mu;

  // ---- used by any thread -----------------------------------------------------------------
  expected<void> forward(proxy_cell& to, strata::detail::envelope* e) noexcept;
  /// Queues a control frame for `dst`; false (frame dropped) once this rank said goodbye to it.
  bool push_frame(int dst, std::vector<std::byte> bytes);
  /// Queues `t`'s chunks for `dst`; when `failed` (its producer's error) the chunks go short
  /// instead, the first with the error text, so the receiver's tensor fails too.
  void push_chunks(int dst, const outgoing_tensor& t, int first_tag, std::exception_ptr failed = nullptr);
  /// Where each tensor's bytes (`ranges[i]` of `tensors[i]`) will leave from; cuda tensors get
  /// their staging copy enqueued. Called before the frame is announced, so a failure here
  /// announces nothing.
  std::vector<outgoing_tensor> prepare_sends(const std::vector<tensor>& tensors,
                                             const std::vector<tensor_bytes>& ranges);
  /// The stream of `dev` that stages cuda tensors to host memory (one per device, made once).
  stream staging_stream(const device& dev);
  /// After a change to the outbox, the collectives or `leaving` (with out_mu held).
  void wake_locked() {
    queued.store(true, std::memory_order_seq_cst);
    bell.load(std::memory_order_acquire)->ring();
    // The communication thread may sleep in the network watch's epoll set instead (a rank
    // without node-mates: network_watch.hpp); it reads `queued` after it says so.
    if (waits_on_network.load(std::memory_order_seq_cst)) wake_network();
  }
  /// Ends the communication thread's wait in the network watch's epoll set (network_watch.cpp).
  void wake_network() noexcept;
  /// The wire address of `ref` (rank -1 for an empty handle); exports local actors.
  std::tuple<int, bool, std::uint64_t> address_of(const actor_ref& ref);
  actor_ref import(int from_rank, bool by_name, std::uint64_t key);
  actor_ref proxy_locked(int peer, bool by_name, std::uint64_t key);
  expected<void> publish(const actor_ref& target, const std::string& name);
  int allocate_tags(int dst, std::size_t n);
  /// The data tag `k` places after `tag` (tags 1..tag_ub - 1 wrap around).
  int tag_after(int tag, std::uint64_t k) const noexcept {
    return static_cast<int>(1 + (static_cast<std::uint64_t>(tag - 1) + k) % static_cast<std::uint64_t>(tag_ub - 1));
  }
  /// Sizes the per-rank tables once `size` is known.
  void size_tables();
  error rank_down_error(int peer) const;

  // ---- communication thread -----------------------------------------------------------------
  void handle_frame(int src, const std::byte* data, std::size_t size);
  void peer_left(int peer);
  /// Runs `fn` with the local actor `key` names (now, or when the name is published).
  template <class F>
  void with_target(int src, bool by_name, std::uint64_t key, F fn);  // receive.cpp
  tensor receive_tensor(int src, std::vector<std::int64_t> shape, dtype type);
  /// Ends the communication thread's loop: everything sent, every peer said goodbye.
  bool finished();
};

/// Answers request `request_id` of `requester` (if any) with `err`.
void send_error_reply(const actor_ref& requester, std::uint64_t request_id, error err);
/// Delivers down_msg (or, with `link`, exit_msg) from `source` to `to`.
void deliver_down(const actor_ref& to, const actor_ref& source, const error& reason, bool link);

/// FNV-1a of a published name.
std::uint64_t name_key(std::string_view name) noexcept;

/// The communication thread: MPI_Init_thread, the progress loop (comm_loop.hpp), MPI_Finalize.
void run_comm(endpoint_state& s, std::function<void(expected<void>)> started);
/// Set once an endpoint has started MPI itself (and so ends it): MPI cannot start again. A
/// program that started MPI keeps it, and may make one endpoint after another.
extern std::atomic<bool> mpi_started_by_endpoint;

}  // namespace strata::net::detail
