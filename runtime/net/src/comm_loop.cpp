// The communication thread's rounds (comm_loop.hpp): post what other threads queued, handle what
// arrived, complete requests, back off when idle.

#include "comm_loop.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <utility>

namespace strata::net::detail {

namespace {

/// The size and data tag a `large` frame announces; throws when they cannot be right.
std::pair<std::size_t, int> read_large_frame(endpoint_state& s, int src, const std::byte* data, std::size_t n) {
  std::uint64_t size = 0;
  std::int32_t tag = 0;
  reader r(data, n, &s, src);
  frame kind{};
  r(kind, size, tag);
  if (size <= posted_frame_bytes || size > static_cast<std::uint64_t>(std::numeric_limits<int>::max()) || tag < 1 ||
      tag >= s.tag_ub)
    throw error_exception(error(errc::invalid_argument,
                                "a large frame of " + std::to_string(size) + " bytes on tag " + std::to_string(tag)));
  return {static_cast<std::size_t>(size), tag};
}

void post_direct(direct_path& p, int dst, std::vector<std::byte>&& bytes) {
  post_frame(static_cast<comm_path&>(p), dst, std::move(bytes));
}

/// endpoint::split on the communication thread: the group of `c.color` (MPI_Comm_split, ranks
/// ordered by `rank`), its members' ranks gathered, kept in `groups` (its id is its index).
void split_group(MPI_Comm comm, endpoint_state& s, endpoint_state::collective& c, std::vector<MPI_Comm>& groups) {
  const int rank = s.rank;
  MPI_Comm g = MPI_COMM_NULL;
  if (int rc = MPI_Comm_split(comm, c.color, rank, &g); rc != MPI_SUCCESS) {
    c.made->set_value(error(errc::runtime_failure, "MPI_Comm_split failed: " + mpi_error_text(rc)));
    return;
  }
  rank_group made;
  MPI_Comm_rank(g, &made.rank);
  MPI_Comm_size(g, &made.size);
  made.members.resize(static_cast<std::size_t>(made.size));
  if (int rc = MPI_Allgather(&rank, 1, MPI_INT, made.members.data(), 1, MPI_INT, g); rc != MPI_SUCCESS) {
    MPI_Comm_free(&g);
    c.made->set_value(error(errc::runtime_failure, "MPI_Allgather of a new group failed: " + mpi_error_text(rc)));
    return;
  }
  made.id = static_cast<int>(groups.size());
  groups.push_back(g);
  s.groups_made.store(static_cast<int>(groups.size()));  // before the caller can use the group
  c.made->set_value(std::move(made));
}

}  // namespace

int in_flight_requests::poll() {
  if (requests.empty()) return 0;
  indices.resize(requests.size());
  statuses.resize(requests.size());
  int count = 0;
  MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &count, indices.data(), statuses.data());
  if (count == MPI_UNDEFINED || count == 0) return 0;
  for (int i = 0; i < count; ++i) {
    auto& fn = on_done[static_cast<std::size_t>(indices[static_cast<std::size_t>(i)])];
    fn(statuses[static_cast<std::size_t>(i)]);
    fn = nullptr;
  }
  std::size_t w = 0;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    if (requests[r] == MPI_REQUEST_NULL) continue;
    requests[w] = requests[r];
    on_done[w] = std::move(on_done[r]);
    ++w;
  }
  requests.resize(w);
  on_done.resize(w);
  return count;
}

/// Posts a control frame; its bytes are kept until MPI is done with them (most small frames
/// are: MPI copies them out in MPI_Isend, and the one MPI_Test says so). A frame longer than the
/// receiver's posted receive (posted_frame_bytes) goes as a `large` frame with its size and a
/// data tag, then its bytes on that tag.
void post_frame(comm_path& p, int dst, std::vector<std::byte>&& bytes) {
  endpoint_state& s = *p.owner;
  const auto send = [&](std::vector<std::byte>&& b, int tag, bool counted) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Isend(b.data(), static_cast<int>(b.size()), MPI_BYTE, dst, tag, p.comm, &r);
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (counted) ++*p.data_sends;
    p.active->add(r, [held = std::make_shared<std::vector<std::byte>>(std::move(b)), counted,
                      sends = p.data_sends](const MPI_Status&) { *sends -= counted ? 1 : 0; });
  };
  if (bytes.size() > posted_frame_bytes) {
    const int tag = s.allocate_tags(dst, 1);
    std::vector<std::byte> head;
    std::vector<tensor> none;
    writer w(head, none, &s);
    w(frame::large, static_cast<std::uint64_t>(bytes.size()), static_cast<std::int32_t>(tag));
    send(std::move(head), 0, false);
    send(std::move(bytes), tag, true);
  } else {
    send(std::move(bytes), 0, false);
  }
  if (p.peers->started()) p.peers->sent_to(dst, comm_clock::now());
  ring_peer(s, dst);
}

comm_loop::comm_loop(endpoint_state& s, MPI_Comm comm, MPI_Comm split_comm)
    : s_(s), comm_(comm), split_comm_(split_comm), frame_buffer_(posted_frame_bytes) {
  path_.owner = &s_;
  path_.post = post_direct;
  path_.comm = comm_;
  path_.active = &active_;
  path_.data_sends = &data_sends_;
  path_.peers = &peers_;
  post_frame_receive();
  inline_runs_ = strata::detail::inline_runs_here();
  idle_since_ = stuck_since_ = comm_clock::now();
  if (s_.size > 1) {
    peers_.start(s_.rank, s_.hosts, std::chrono::duration<double>(s_.peer_timeout_s), comm_clock::now());
    // Another machine's ranks have no bell here: the network watch rings ours for them.
    const auto node_mate = [this](int r) {
      return static_cast<std::size_t>(r) < s_.on_this_machine.size() && s_.on_this_machine[static_cast<std::size_t>(r)] != 0;
    };
    bool other_machines = false;
    for (int r = 0; r < s_.size; ++r) other_machines = other_machines || !node_mate(r);
    // No node-mate rings this rank's bell: the communication thread sleeps in the watch's epoll
    // set itself (one wake-up per message instead of two); else a thread of the watch rings.
    waits_on_network_ = other_machines && s_.watch_wanted && s_.peers_with_bells.load() == 0 && network_.start_inline();
    if (waits_on_network_) {
      std::lock_guard lock(s_.out_mu);
      s_.network_wake_fd = network_.wake_fd();
    }
    const bool watching =
        waits_on_network_ || (other_machines && s_.watch_wanted && network_.start(s_.bell, s_.network_wakes));
    every_peer_wakes_ = true;
    for (int r = 0; r < s_.size; ++r) {
      if (r == s_.rank || s_.peer_bells[static_cast<std::size_t>(r)] != nullptr) continue;
      if (node_mate(r) || !watching) every_peer_wakes_ = false;  // shared memory without a bell: polled
    }
  }
}

void comm_loop::post_frame_receive() {
  MPI_Irecv(frame_buffer_.data(), static_cast<int>(frame_buffer_.size()), MPI_BYTE, MPI_ANY_SOURCE, 0, comm_,
            &frame_receive_);
}

void comm_loop::run() {
  for (;;) {
    bool work = take_queued();
    if (post_collectives()) work = true;
    if (post_batch()) work = true;
    if (receive_frames()) work = true;
    if (const std::uint64_t runs = strata::detail::inline_runs_here(); runs != inline_runs_) {
      inline_runs_ = runs;
      ran_inline_ = true;
    }
    if (active_.poll() != 0) work = true;
    if (make_splits()) work = true;
    if (leaving_ && may_end()) break;
    if (work) {
      idle_polls_ = 0;
      // Busy for long: the peers are still checked now and then (back_off checks them when idle).
      if (++busy_rounds_ % 4096 == 0) watch_peers(comm_clock::now());
      continue;
    }
    back_off();
  }
  {
    std::lock_guard lock(s_.out_mu);  // wake_locked writes it under the lock
    s_.network_wake_fd = -1;
  }
  network_.stop();
}

void endpoint_state::wake_network() noexcept {
  const std::uint64_t one = 1;
  if (network_wake_fd >= 0) (void)!::write(network_wake_fd, &one, sizeof one);
}

bool comm_loop::take_queued() {
  const bool took = s_.queued.load(std::memory_order_relaxed) && s_.queued.exchange(false, std::memory_order_acquire);
  if (!took) return false;
  std::lock_guard lock(s_.out_mu);
  batch_.swap(s_.outbox);
  collectives_.swap(s_.collectives);
  leaving_ = s_.leaving;
  return false;  // what was taken counts as work when it is posted
}

bool comm_loop::post_collectives() {
  // In call order: the same order on every rank (MPI requires it).
  const bool any = !collectives_.empty();
  for (auto& c : collectives_) {
    if (c.made) post_split(c);
    else post_sum(c);
  }
  collectives_.clear();
  return any;
}

void comm_loop::post_split(endpoint_state::collective& c) {
  // MPI_Comm_split blocks until every rank calls it. Called when the program asks, it would
  // hold this thread while a peer still needs it (to answer a message before that peer's
  // program reaches its split). So a split first posts a barrier; once every rank has
  // posted it, every rank's communication thread makes the split at once.
  auto waiting = std::make_shared<pending_split>(pending_split{std::move(c), false});
  MPI_Request r = MPI_REQUEST_NULL;
  if (int rc = MPI_Ibarrier(split_comm_, &r); rc != MPI_SUCCESS) {
    waiting->c.made->set_value(error(errc::runtime_failure, "MPI_Ibarrier failed: " + mpi_error_text(rc)));
    return;
  }
  ring_every_peer(s_);
  splits_.push_back(waiting);
  active_.add(r, [waiting](const MPI_Status&) { waiting->reached = true; });
}

void comm_loop::post_sum(endpoint_state::collective& c) {
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Comm on = c.group < 0 ? comm_ : groups_[static_cast<std::size_t>(c.group)];
  int rc = MPI_Iallreduce(MPI_IN_PLACE, c.data, static_cast<int>(c.count), MPI_FLOAT, MPI_SUM, on, &r);
  if (rc != MPI_SUCCESS) {
    c.done->set_value(error(errc::runtime_failure, "MPI_Iallreduce failed: " + mpi_error_text(rc)));
    return;
  }
  ring_every_peer(s_);  // a peer that sleeps may hold up the collective's first round
  const std::uint64_t seq = collectives_posted_++;
  ++collectives_running_;
  const std::size_t bytes = c.count * sizeof(float);
  trace_transfer(trace::event_kind::transfer_begin, trace::transfer::allreduce, s_.rank, 0, seq, bytes);
  open_sums_.emplace(seq, std::move(c.done));
  active_.add(r, [this, seq, bytes](const MPI_Status&) {
    --collectives_running_;
    trace_transfer(trace::event_kind::transfer_end, trace::transfer::allreduce, s_.rank, 0, seq, bytes);
    auto done = open_sums_.extract(seq);
    done.mapped()->set_value({});
  });
}

bool comm_loop::post_batch() {
  const bool any = !batch_.empty();
  for (auto& o : batch_) {
    if (o.data != nullptr) post_chunk(o);
    else post_frame(path_, o.dst, std::move(o.frame_bytes));
  }
  batch_.clear();
  return any;
}

void comm_loop::post_chunk(outgoing& o) {
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Isend(o.data, static_cast<int>(o.size), MPI_BYTE, o.dst, o.tag, comm_, &r);
  trace_transfer(trace::event_kind::transfer_begin, trace::transfer::send, s_.rank, o.dst,
                 static_cast<std::uint64_t>(o.tag), o.size);
  ++data_sends_;
  active_.add(r, [this, hold = std::move(o.hold), staged = std::move(o.staged), dst = o.dst, tag = o.tag,
                  size = o.size](const MPI_Status&) {
    trace_transfer(trace::event_kind::transfer_end, trace::transfer::send, s_.rank, dst,
                   static_cast<std::uint64_t>(tag), size);
    --data_sends_;
  });
  if (peers_.started()) peers_.sent_to(o.dst, comm_clock::now());
  ring_peer(s_, o.dst);
}

bool comm_loop::receive_frames() {
  bool any = false;
  for (int k = 0; k < 64; ++k) {
    if (!receive_one_frame()) break;
    any = true;
    if (s_.queued.load(std::memory_order_relaxed)) break;  // a handler answered: post that first
  }
  return any;
}

/// Handles the frame that arrived, if one did; false when none has.
bool comm_loop::receive_one_frame() {
  int flag = 0;
  MPI_Status status;
  int source = 0;
  const std::byte* bytes = nullptr;
  int count = 0;
  const bool large = large_receive_ != MPI_REQUEST_NULL;
  if (large) {
    MPI_Test(&large_receive_, &flag, MPI_STATUS_IGNORE);
    if (!flag) return false;
    source = large_source_;
    bytes = large_buffer_.data();
    count = static_cast<int>(large_buffer_.size());
  } else {
    MPI_Test(&frame_receive_, &flag, &status);
    if (!flag) return false;
    source = status.MPI_SOURCE;
    bytes = frame_buffer_.data();
    MPI_Get_count(&status, MPI_BYTE, &count);
  }
  if (peers_.started()) peers_.heard_from(source, comm_clock::now());
  try {
    if (!large && count > 0 && frame_buffer_[0] == static_cast<std::byte>(frame::large)) {
      // Its bytes come next on their own tag: the frame receive waits until they are handled.
      const auto [size, tag] = read_large_frame(s_, source, bytes, static_cast<std::size_t>(count));
      large_buffer_.resize(size);
      large_source_ = source;
      MPI_Irecv(large_buffer_.data(), static_cast<int>(size), MPI_BYTE, source, tag, comm_, &large_receive_);
      return true;
    }
    direct_here = &path_;
    s_.handle_frame(source, bytes, static_cast<std::size_t>(count));
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "strata::net rank %d: dropped a frame from rank %d: %s\n", s_.rank, source, ex.what());
  }
  direct_here = nullptr;
  if (large) std::vector<std::byte>().swap(large_buffer_);  // (its request was freed by MPI_Test)
  post_frame_receive();
  post_data_receives();
  return true;
}

/// Posts the receives of the tensor chunks the frame just handled announced.
void comm_loop::post_data_receives() {
  for (auto& c : s_.receives) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Irecv(c.data, static_cast<int>(c.size), MPI_BYTE, c.src, c.tag, comm_, &r);
    trace_transfer(trace::event_kind::transfer_begin, trace::transfer::receive, s_.rank, c.src,
                   static_cast<std::uint64_t>(c.tag), c.size);
    s_.data_receives.emplace(std::make_pair(c.src, c.tag), false);
    active_.add(r, [this, whole = std::move(c.whole), data = c.data, size = c.size, src = c.src,
                    tag = c.tag](const MPI_Status& st) {
      endpoint_state& s = s_;
      ring_peer(s, src);  // the sender's MPI_Isend completes at its next poll
      if (peers_.started()) peers_.heard_from(src, comm_clock::now());
      if (auto it = s.data_receives.find({src, tag}); it != s.data_receives.end()) {
        if (it->second) --s.flowing_receives;
        s.data_receives.erase(it);
      }
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      trace_transfer(trace::event_kind::transfer_end, trace::transfer::receive, s.rank, src,
                     static_cast<std::uint64_t>(tag), static_cast<std::size_t>(got));
      if (static_cast<std::size_t>(got) < size) {  // the sender's tensor failed: its text, if any
        whole->failed = true;
        whole->error_text.append(static_cast<const char*>(data), static_cast<std::size_t>(got));
      }
      if (--whole->chunks_left > 0) return;
      if (!whole->failed) return whole->done(nullptr);
      whole->done(std::make_exception_ptr(error_exception(
          error(errc::runtime_failure, "a tensor from rank " + std::to_string(src) +
                                           " failed before it was sent: " + whole->error_text))));
    });
  }
  s_.receives.clear();
}

bool comm_loop::make_splits() {
  bool any = false;
  while (!splits_.empty() && splits_.front()->reached) {  // in call order on every rank
    split_group(split_comm_, s_, splits_.front()->c, groups_);
    splits_.pop_front();
    any = true;
  }
  return any;
}

/// Leaving: whether every peer has said goodbye and nothing is left to send or complete.
bool comm_loop::may_end() {
  if (s_.chunks_owed.load() != 0 || !s_.finished()) return false;
  std::unique_lock lock(s_.out_mu);
  if (!s_.outbox.empty()) return false;
  if (active_.empty()) return true;
  // Every peer has said goodbye, and what is left are collectives (sums, the barriers of
  // splits): a peer that joined one stays until it completes, so after a grace they are
  // ones that a rank which left never joined. They are left posted (MPI cannot cancel a
  // collective; their buffers are their callers') and their futures fail.
  std::size_t waiting_splits = 0;
  for (const auto& p : splits_) waiting_splits += p->reached ? 0 : 1;
  if (active_.size() != static_cast<std::size_t>(collectives_running_) + waiting_splits) {
    stuck_ = false;
    return false;
  }
  if (!stuck_) stuck_since_ = comm_clock::now();
  stuck_ = true;
  return comm_clock::now() - stuck_since_ > std::chrono::seconds(1);
}

/// Back off: poll with yields for spin_us after the last work, then sleep in growing steps,
/// woken at once by the outbox, a node-mate's ring or the network watch. Bytes known to be
/// moving (a chunk this rank sends, or one whose sender said it is on its way) keep the
/// polling going without sleeps, since they move only while this thread calls MPI; other
/// transfers in flight (a receive still waiting for its sender's data) keep the steps short
/// unless every peer can wake this thread.
/// Right after an actor's handler ran here, its answer may come back within microseconds and
/// no scheduler thread of this rank needs the core for it: poll without yielding for hot_us.
/// (The clock is read at the first idle poll, then every 32nd while hot: a poll is shorter than
/// reading it.)
void comm_loop::back_off() {
  if (idle_polls_++ == 0) {
    idle_since_ = comm_clock::now();
    hot_ = ran_inline_ && s_.hot_us > 0;
    ran_inline_ = false;
  }
  if (hot_) {  // (no pause instruction: it costs tens of nanoseconds of latency on recent cores)
    if (idle_polls_ % 32 != 0 ||
        std::chrono::duration_cast<std::chrono::microseconds>(comm_clock::now() - idle_since_).count() < s_.hot_us)
      return;
    hot_ = false;
  }
  const auto now = comm_clock::now();
  watch_peers(now);
  const auto idle = std::chrono::duration_cast<std::chrono::microseconds>(now - idle_since_).count();
  if (idle < s_.spin_us || data_sends_ > 0 || s_.flowing_receives > 0 || large_receive_ != MPI_REQUEST_NULL) {
    std::this_thread::yield();
    return;
  }
  // Requests in flight keep the steps short: a collective's later rounds, and any request to
  // a peer that cannot wake this thread, move only at its polls.
  const int cap = collectives_running_ > 0 || (!active_.empty() && !every_peer_wakes_) ? std::min(s_.max_sleep_us, 50)
                                                                                       : s_.max_sleep_us;
  const auto step = std::chrono::microseconds(std::clamp<long>(idle / 4, 10, cap));
  if (waits_on_network_) return sleep_on_network(step);
  doorbell& bell = *s_.bell.load(std::memory_order_relaxed);
  const std::uint32_t seen = bell.seen();
  if (s_.queued.load(std::memory_order_acquire)) return;  // read after `seen`: no ring is lost
  // A ring means traffic: the back-off starts over (messages that follow it are polled for).
  if (bell.sleep(seen, step)) {
    idle_polls_ = 0;
    // This process's threads queue before they ring: a ring with nothing queued is a peer's.
    if (!s_.queued.load(std::memory_order_acquire)) s_.woken_by_peers.fetch_add(1, std::memory_order_relaxed);
  }
}

/// back_off's sleep for a rank whose communication thread waits in the network watch's epoll
/// set: bytes from another machine or a frame queued by this process end it.
void comm_loop::sleep_on_network(std::chrono::microseconds step) {
  s_.waits_on_network.store(true, std::memory_order_seq_cst);
  if (s_.queued.load(std::memory_order_seq_cst)) {  // read after the flag: no wake is lost
    s_.waits_on_network.store(false, std::memory_order_relaxed);
    return;
  }
  const bool network = network_.wait(step);
  s_.waits_on_network.store(false, std::memory_order_relaxed);
  if (network) {
    s_.network_wakes.fetch_add(1, std::memory_order_relaxed);
    s_.woken_by_peers.fetch_add(1, std::memory_order_relaxed);
  }
  if (network || s_.queued.load(std::memory_order_acquire)) idle_polls_ = 0;  // traffic: the back-off starts over
}

/// Heartbeats on the links that carried nothing from this rank for a quarter of the deadline;
/// a peer silent past the deadline ends the job with one sentence (docs/distributed.md, "Failure
/// model"): its rank, its host and how long it was silent.
void comm_loop::watch_peers(comm_clock::time_point now) {
  if (!peers_.started() || now < next_peer_check_) return;
  next_peer_check_ = now + peers_.check_every();
  {
    std::lock_guard lock(s_.out_mu);
    for (int r = 0; r < s_.size; ++r)
      if (r != s_.rank && s_.goodbye_sent[static_cast<std::size_t>(r)]) peers_.said_goodbye(r);
  }
  for (int r = 0; r < s_.size; ++r)
    if (r != s_.rank && s_.peer_gone[static_cast<std::size_t>(r)].load(std::memory_order_acquire)) peers_.peer_left(r);
  for (int peer : peers_.heartbeats_due(now)) post_frame(path_, peer, {static_cast<std::byte>(frame::heartbeat)});
  if (auto sentence = peers_.silent_peer(now)) {
    // The job cannot go on, and MPI cannot tell it so across a partition (MPI_Abort waits for
    // the launcher, which may be the far side): this process ends, and mpirun ends the job as
    // for any rank that dies.
    std::fprintf(stderr, "%s\n", sentence->c_str());
    std::fflush(stderr);
    std::_Exit(peer_silent_exit_status);
  }
}

void comm_loop::close() {
  // Every peer said goodbye, its last frame: the posted receive will not match.
  for (MPI_Request* r : {&frame_receive_, &large_receive_}) {
    if (*r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
  }
  drop_bells(s_);
  {
    // Collectives asked for after this rank began to leave are never posted.
    std::lock_guard lock(s_.out_mu);
    for (auto& c : s_.collectives) {
      if (c.made)
        c.made->set_value(error(errc::rank_down, "split: rank " + std::to_string(s_.rank) + " has left the job"));
      else
        c.done->set_value(error(errc::rank_down, "allreduce_sum: rank " + std::to_string(s_.rank) + " has left the job"));
    }
    s_.collectives.clear();
  }
  for (auto& p : splits_)
    p->c.made->set_value(error(errc::rank_down, "split: rank " + std::to_string(s_.rank) + " has left the job"));
  for (MPI_Comm& g : groups_) MPI_Comm_free(&g);
}

void comm_loop::fail_open_sums() {
  for (auto& [seq, done] : open_sums_)
    done->set_value(error(errc::rank_down, "allreduce_sum: a rank of this sum left the job without joining it"));
  open_sums_.clear();
}

}  // namespace strata::net::detail
