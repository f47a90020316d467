// The communication thread: the only caller of MPI in the process.

#include <mpi.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "state.hpp"
#include "strata/trace.hpp"

namespace strata::net::detail {

namespace {

using clock = std::chrono::steady_clock;

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
  int poll() {
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
};

/// Records one side of a transfer between ranks (docs/trace-format.md, kinds 16 and 17):
/// actor = this rank, peer = the other rank, msg = the MPI tag (the same on both ranks) or the
/// collective's sequence number, type = what moved, arg = its bytes (saturated at 2^32 - 1).
void trace_transfer(trace::event_kind kind, trace::transfer what, int rank, int peer, std::uint64_t key,
                    std::size_t bytes) noexcept {
  const auto size = static_cast<std::uint32_t>(std::min<std::size_t>(bytes, std::numeric_limits<std::uint32_t>::max()));
  trace::emit(kind, static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(peer), key,
              static_cast<std::uint32_t>(what), size);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
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

/// This machine (host name and boot id): ranks on one machine read one wall clock.
std::int64_t machine_id() {
  std::string id(256, '\0');
  if (::gethostname(id.data(), id.size()) != 0) id.clear();
  id.resize(std::strlen(id.c_str()));
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (boot && std::getline(boot, boot_id)) id += "/" + boot_id;
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return static_cast<std::int64_t>(h);
}

/// The job every rank's trace records (docs/trace-format.md, version 2): MPI's rank and size,
/// rank 0's job id, and the offset of this rank's wall clock from rank 0's. On rank 0's machine
/// the clock is the same (offset 0, exact); on another machine it is measured by a few ping
/// exchanges (the one with the shortest round trip wins; half of it bounds the error).
/// Collective over `world`; runs whether tracing is on or not, so that every rank takes part.
trace::job_info agree_on_job(MPI_Comm world, int rank, int size) {
  trace::job_info job = trace::job();
  job.rank = static_cast<std::uint32_t>(rank);
  job.world_size = static_cast<std::uint32_t>(size);
  job.clock_offset_ns = 0;
  job.clock_uncertainty_ns = 0;
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_dup(world, &c);  // its own tags: frames may already flow on `world`
  constexpr int rounds_between_machines = 8;
  auto wall = [] {
    return static_cast<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  };
  const std::int64_t here = machine_id();
  if (rank == 0) {
    if (job.job_id == 0) job.job_id = (std::uint64_t{std::random_device{}()} << 32) ^ static_cast<std::uint64_t>(wall());
    for (int peer = 1; peer < size; ++peer) {
      for (int k = 0; k < rounds_between_machines; ++k) {
        std::int64_t machine = 0;
        MPI_Recv(&machine, 1, MPI_INT64_T, peer, 0, c, MPI_STATUS_IGNORE);
        std::int64_t reply[3] = {wall(), static_cast<std::int64_t>(job.job_id), here};
        MPI_Send(reply, 3, MPI_INT64_T, peer, 0, c);
        if (machine == here) break;  // one wall clock: nothing to measure
      }
    }
  } else {
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    for (int k = 0; k < rounds_between_machines; ++k) {
      std::int64_t reply[3] = {0, 0, 0};
      const std::int64_t t1 = wall();
      MPI_Send(&here, 1, MPI_INT64_T, 0, 0, c);
      MPI_Recv(reply, 3, MPI_INT64_T, 0, 0, c, MPI_STATUS_IGNORE);
      const std::int64_t t2 = wall();
      job.job_id = static_cast<std::uint64_t>(reply[1]);
      if (reply[2] == here) break;
      if (t2 - t1 >= 0 && t2 - t1 < best) {
        best = t2 - t1;
        job.clock_offset_ns = reply[0] - (t1 + (t2 - t1) / 2);
        job.clock_uncertainty_ns = static_cast<std::uint64_t>(best / 2 + 1);
      }
    }
  }
  MPI_Comm_free(&c);
  return job;
}

/// The doorbells of the ranks on this machine, each in a tiny POSIX shared memory object that
/// its owner makes and its node-mates map (named by the job id and the rank; unlinked once all
/// have mapped it, so nothing is left behind): `s.peer_bells[r]` is rank r's bell when r runs on
/// this machine. Collective over `world`. If any rank of a machine cannot make or map them, or
/// was told not to (STRATA_NET_BELLS=off), that machine's ranks keep no bells and poll their
/// peers as before. (Not an MPI window: a window
/// adds one-sided progress work to every MPI poll: 0.15 us a round trip here.)
void share_bells(MPI_Comm world, endpoint_state& s) {
  s.peer_bells.assign(static_cast<std::size_t>(s.size), nullptr);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  std::vector<int> mates(static_cast<std::size_t>(node_size));
  MPI_Allgather(&s.rank, 1, MPI_INT, mates.data(), 1, MPI_INT, node);
  const auto name_of = [job = trace::job().job_id](int r) {
    char name[64];
    std::snprintf(name, sizeof name, "/strata-bell-%016llx-%d", static_cast<unsigned long long>(job), r);
    return std::string(name);
  };
  const auto map = [](int fd) -> void* {
    void* at = ::mmap(nullptr, sizeof(doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    return at == MAP_FAILED ? nullptr : at;
  };
  // Each rank makes its own bell, then maps its node-mates' once every one exists.
  void* mine = nullptr;
  int fd = s.bells_wanted ? ::shm_open(name_of(s.rank).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600) : -1;
  if (fd >= 0 && ::ftruncate(fd, sizeof(doorbell)) == 0) mine = map(fd);
  else if (fd >= 0) ::close(fd);
  if (mine != nullptr) new (mine) doorbell{};
  int ok = mine != nullptr ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, node);
  std::vector<std::pair<int, void*>> mapped;
  if (ok != 0) {
    for (int r : mates) {
      if (r == s.rank) continue;
      void* at = nullptr;
      if (int f = ::shm_open(name_of(r).c_str(), O_RDWR, 0600); f >= 0) at = map(f);
      if (at == nullptr) ok = 0;
      else mapped.emplace_back(r, at);
    }
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, node);
  }
  if (fd >= 0) ::shm_unlink(name_of(s.rank).c_str());  // every node-mate has mapped it, or gave up
  if (ok == 0) {
    for (auto& [r, at] : mapped) ::munmap(at, sizeof(doorbell));
    if (mine != nullptr) ::munmap(mine, sizeof(doorbell));
  } else {
    for (auto& [r, at] : mapped) s.peer_bells[static_cast<std::size_t>(r)] = static_cast<doorbell*>(at);
    s.peers_with_bells.store(mapped.size());
    s.shared_bell = static_cast<doorbell*>(mine);
    s.bell.store(s.shared_bell, std::memory_order_release);
    s.bell.load()->ring();  // a thread that rang the old bell meanwhile is not missed (queued is read first)
  }
  MPI_Comm_free(&node);
}

/// After the loop: this process's threads ring its own bell again; the maps go.
void drop_bells(endpoint_state& s) {
  {
    std::lock_guard lock(s.out_mu);  // wake_locked rings under it: no thread holds the old bell
    s.bell.store(&s.own_bell, std::memory_order_release);
  }
  for (auto*& b : s.peer_bells)
    if (b != nullptr) ::munmap(std::exchange(b, nullptr), sizeof(doorbell));
  if (s.shared_bell != nullptr) ::munmap(std::exchange(s.shared_bell, nullptr), sizeof(doorbell));
}

void ring_peer(endpoint_state& s, int peer) {
  if (static_cast<std::size_t>(peer) < s.peer_bells.size())
    if (doorbell* b = s.peer_bells[static_cast<std::size_t>(peer)]) b->ring_if_asleep();
}

/// The communication thread's way out (its direct_path, state.hpp) and what posting a frame
/// needs of its state.
struct comm_path final : direct_path {
  MPI_Comm comm = MPI_COMM_NULL;
  in_flight_requests* active = nullptr;
  int* data_sends = nullptr;  // sends whose bytes move only while this thread polls
};

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
  ring_peer(s, dst);
}

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

void ring_every_peer(endpoint_state& s) {
  for (doorbell* b : s.peer_bells)
    if (b) b->ring_if_asleep();
}

}  // namespace

bool endpoint_state::finished() {
  std::lock_guard lock(mu);
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank && !peer_gone[static_cast<std::size_t>(peer)]) return false;
  return true;
}

void run_comm(endpoint_state& s, std::function<void(expected<void>)> started) {
  // A program that started MPI itself keeps it (and ends it); it must not call MPI while the
  // endpoint lives, and must have asked for MPI_THREAD_SERIALIZED or more.
  int provided = 0;
  int already = 0;
  MPI_Initialized(&already);
  if (already) {
    MPI_Query_thread(&provided);
  } else if (mpi_started_by_endpoint.exchange(true)) {
    started(error(errc::runtime_failure, "MPI cannot start twice in one process: make one strata::net::endpoint for "
                                         "the whole program"));
    return;
  } else if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided); rc != MPI_SUCCESS) {
    started(error(errc::runtime_failure, "MPI_Init_thread failed: " + mpi_error_text(rc)));
    return;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    if (!already) MPI_Finalize();
    started(error(errc::runtime_failure, "MPI grants only thread level " + std::to_string(provided) +
                                             "; strata::net needs MPI_THREAD_SERIALIZED"));
    return;
  }
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  // endpoint::split's own communicator: its barriers and splits never interleave with the
  // collectives the program posts on `comm`.
  MPI_Comm split_comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &split_comm);
  MPI_Comm_rank(comm, &s.rank);
  MPI_Comm_size(comm, &s.size);
  int* ub = nullptr;
  int has_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub);
  if (has_ub && ub != nullptr) s.tag_ub = *ub;
  s.size_tables();  // before any frame can arrive
  if (s.size > 1) {
    trace::set_job(agree_on_job(comm, s.rank, s.size));
    share_bells(comm, s);
  }
  started({});
  // Messages without tensor data that find an actor spawned with handle_remote_inline idle run
  // its handlers here, as they arrive (receive.cpp turns this off around the others).
  strata::detail::host_inline_runs(true);

  in_flight_requests active;
  int data_sends = 0;  // tensor chunks (and bytes of large frames) posted and not complete
  comm_path path;
  path.owner = &s;
  path.post = post_direct;
  path.comm = comm;
  path.active = &active;
  path.data_sends = &data_sends;
  // Control frames arrive in one receive kept posted (a poll is one MPI_Test: 0.2 us a round
  // trip less than MPI_Improbe + MPI_Mrecv here); it is posted again once its frame is handled.
  // A `large` frame's bytes come on their own tag into `large_buffer`; until they are in and
  // handled, the frame receive stays unposted, so frames are handled in the order they came.
  std::vector<std::byte> frame_buffer(posted_frame_bytes);
  MPI_Request frame_receive = MPI_REQUEST_NULL;
  const auto post_frame_receive = [&] {
    MPI_Irecv(frame_buffer.data(), static_cast<int>(frame_buffer.size()), MPI_BYTE, MPI_ANY_SOURCE, 0, comm,
              &frame_receive);
  };
  std::vector<std::byte> large_buffer;
  MPI_Request large_receive = MPI_REQUEST_NULL;
  int large_source = 0;
  post_frame_receive();
  std::uint64_t collectives_posted = 0;
  std::vector<MPI_Comm> groups;  // made by endpoint::split, a rank_group's id is its index
  struct pending_split {
    endpoint_state::collective c;
    bool reached = false;  // every rank has posted the split's barrier
  };
  std::deque<std::shared_ptr<pending_split>> splits;
  int collectives_running = 0;
  // The futures of the allreduces posted and not complete, by sequence number: failed when this
  // rank leaves with sums that a rank which left never joined.
  std::map<std::uint64_t, std::shared_ptr<std::promise<expected<void>>>> open_sums;
  bool stuck = false;  // leaving with only such collectives left, since `stuck_since`
  auto stuck_since = clock::now();
  const bool every_peer_has_a_bell = s.size > 1 && s.peers_with_bells.load() == static_cast<std::uint64_t>(s.size - 1);
  std::deque<outgoing> batch;
  std::deque<endpoint_state::collective> collectives;
  auto idle_since = clock::now();
  std::uint64_t idle_polls = 0;  // since the last work
  std::uint64_t inline_runs = strata::detail::inline_runs_here();
  bool ran_inline = false;       // an actor's handler ran here since the last idle poll
  bool hot = false;
  bool leaving = false;
  for (;;) {
    bool work = false;
    const bool took = s.queued.load(std::memory_order_relaxed) && s.queued.exchange(false, std::memory_order_acquire);
    if (took) {
      std::lock_guard lock(s.out_mu);
      batch.swap(s.outbox);
      collectives.swap(s.collectives);
      leaving = s.leaving;
    }
    const auto post_batch = [&] {
      for (auto& o : batch) {
        work = true;
        if (o.data != nullptr) {
          MPI_Request r = MPI_REQUEST_NULL;
          MPI_Isend(o.data, static_cast<int>(o.size), MPI_BYTE, o.dst, o.tag, comm, &r);
          trace_transfer(trace::event_kind::transfer_begin, trace::transfer::send, s.rank, o.dst,
                         static_cast<std::uint64_t>(o.tag), o.size);
          ++data_sends;
          active.add(r, [hold = std::move(o.hold), staged = std::move(o.staged), rank = s.rank, dst = o.dst, tag = o.tag,
                         size = o.size, &data_sends](const MPI_Status&) {
            trace_transfer(trace::event_kind::transfer_end, trace::transfer::send, rank, dst,
                           static_cast<std::uint64_t>(tag), size);
            --data_sends;
          });
          ring_peer(s, o.dst);
        } else {
          post_frame(path, o.dst, std::move(o.frame_bytes));
        }
      }
      batch.clear();
    };
    // Collectives in call order: the same order on every rank (MPI requires it).
    for (auto& c : collectives) {
      work = true;
      if (c.made) {
        // MPI_Comm_split blocks until every rank calls it. Called when the program asks, it would
        // hold this thread while a peer still needs it (to answer a message before that peer's
        // program reaches its split). So a split first posts a barrier; once every rank has
        // posted it, every rank's communication thread makes the split at once.
        auto waiting = std::make_shared<pending_split>(pending_split{std::move(c), false});
        MPI_Request r = MPI_REQUEST_NULL;
        if (int rc = MPI_Ibarrier(split_comm, &r); rc != MPI_SUCCESS) {
          waiting->c.made->set_value(error(errc::runtime_failure, "MPI_Ibarrier failed: " + mpi_error_text(rc)));
          continue;
        }
        ring_every_peer(s);
        splits.push_back(waiting);
        active.add(r, [waiting](const MPI_Status&) { waiting->reached = true; });
        continue;
      }
      MPI_Request r = MPI_REQUEST_NULL;
      MPI_Comm on = c.group < 0 ? comm : groups[static_cast<std::size_t>(c.group)];
      int rc = MPI_Iallreduce(MPI_IN_PLACE, c.data, static_cast<int>(c.count), MPI_FLOAT, MPI_SUM, on, &r);
      if (rc != MPI_SUCCESS) {
        c.done->set_value(error(errc::runtime_failure, "MPI_Iallreduce failed: " + mpi_error_text(rc)));
        continue;
      }
      ring_every_peer(s);  // a peer that sleeps may hold up the collective's first round
      const std::uint64_t seq = collectives_posted++;
      ++collectives_running;
      const std::size_t bytes = c.count * sizeof(float);
      trace_transfer(trace::event_kind::transfer_begin, trace::transfer::allreduce, s.rank, 0, seq, bytes);
      open_sums.emplace(seq, std::move(c.done));
      active.add(r, [rank = s.rank, seq, bytes, &collectives_running, &open_sums](const MPI_Status&) {
        --collectives_running;
        trace_transfer(trace::event_kind::transfer_end, trace::transfer::allreduce, rank, 0, seq, bytes);
        auto done = open_sums.extract(seq);
        done.mapped()->set_value({});
      });
    }
    if (took) collectives.clear();
    post_batch();

    for (int k = 0; k < 64; ++k) {
      int flag = 0;
      MPI_Status status;
      int source = 0;
      const std::byte* bytes = nullptr;
      int count = 0;
      const bool large = large_receive != MPI_REQUEST_NULL;
      if (large) {
        MPI_Test(&large_receive, &flag, MPI_STATUS_IGNORE);
        if (!flag) break;
        source = large_source;
        bytes = large_buffer.data();
        count = static_cast<int>(large_buffer.size());
      } else {
        MPI_Test(&frame_receive, &flag, &status);
        if (!flag) break;
        source = status.MPI_SOURCE;
        bytes = frame_buffer.data();
        MPI_Get_count(&status, MPI_BYTE, &count);
      }
      work = true;
      try {
        if (!large && count > 0 && frame_buffer[0] == static_cast<std::byte>(frame::large)) {
          // Its bytes come next on their own tag: the frame receive waits until they are handled.
          const auto [size, tag] = read_large_frame(s, source, bytes, static_cast<std::size_t>(count));
          large_buffer.resize(size);
          large_source = source;
          MPI_Irecv(large_buffer.data(), static_cast<int>(size), MPI_BYTE, source, tag, comm, &large_receive);
          continue;
        }
        direct_here = &path;
        s.handle_frame(source, bytes, static_cast<std::size_t>(count));
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "strata::net rank %d: dropped a frame from rank %d: %s\n", s.rank, source, ex.what());
      }
      direct_here = nullptr;
      if (large) std::vector<std::byte>().swap(large_buffer);  // (its request was freed by MPI_Test)
      post_frame_receive();
      for (auto& c : s.receives) {
        MPI_Request r = MPI_REQUEST_NULL;
        MPI_Irecv(c.data, static_cast<int>(c.size), MPI_BYTE, c.src, c.tag, comm, &r);
        trace_transfer(trace::event_kind::transfer_begin, trace::transfer::receive, s.rank, c.src,
                       static_cast<std::uint64_t>(c.tag), c.size);
        s.data_receives.emplace(std::make_pair(c.src, c.tag), false);
        active.add(r, [whole = std::move(c.whole), data = c.data, size = c.size, src = c.src, rank = s.rank,
                       tag = c.tag, &s](const MPI_Status& st) {
          ring_peer(s, src);  // the sender's MPI_Isend completes at its next poll
          if (auto it = s.data_receives.find({src, tag}); it != s.data_receives.end()) {
            if (it->second) --s.flowing_receives;
            s.data_receives.erase(it);
          }
          int got = 0;
          MPI_Get_count(&st, MPI_BYTE, &got);
          trace_transfer(trace::event_kind::transfer_end, trace::transfer::receive, rank, src,
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
      s.receives.clear();
      if (s.queued.load(std::memory_order_relaxed)) break;  // a handler answered: post that first
    }
    if (const std::uint64_t runs = strata::detail::inline_runs_here(); runs != inline_runs) {
      inline_runs = runs;
      ran_inline = true;
    }

    if (active.poll() != 0) work = true;
    while (!splits.empty() && splits.front()->reached) {  // in call order on every rank
      split_group(split_comm, s, splits.front()->c, groups);
      splits.pop_front();
      work = true;
    }

    if (leaving && s.chunks_owed.load() == 0 && s.finished()) {
      std::unique_lock lock(s.out_mu);
      if (s.outbox.empty()) {
        if (active.empty()) break;
        // Every peer has said goodbye, and what is left are collectives (sums, the barriers of
        // splits): a peer that joined one stays until it completes, so after a grace they are
        // ones that a rank which left never joined. They are left posted (MPI cannot cancel a
        // collective; their buffers are their callers') and their futures fail.
        std::size_t waiting_splits = 0;
        for (const auto& p : splits) waiting_splits += p->reached ? 0 : 1;
        if (active.size() == static_cast<std::size_t>(collectives_running) + waiting_splits) {
          if (!stuck) stuck_since = clock::now();
          stuck = true;
          if (clock::now() - stuck_since > std::chrono::seconds(1)) break;
        } else {
          stuck = false;
        }
      }
    }
    if (work) {
      idle_polls = 0;
      continue;
    }
    // Back off: poll with yields for spin_us after the last work, then sleep in growing steps
    // (woken at once by the outbox; MPI traffic waits for the next poll). Bytes known to be
    // moving (a chunk this rank sends, or one whose sender said it is on its way) keep the
    // polling going without sleeps, since they move only while this thread calls MPI; other
    // transfers in flight (a receive still waiting for its sender's data) keep the steps short.
    // Right after an actor's handler ran here, its answer may come back within microseconds and
    // no scheduler thread of this rank needs the core for it: poll without yielding for hot_us.
    // (The clock is read at the first idle poll, then every 32nd while hot: a poll is shorter than
    // reading it.)
    if (idle_polls++ == 0) {
      idle_since = clock::now();
      hot = ran_inline && s.hot_us > 0;
      ran_inline = false;
    }
    if (hot) {  // (no pause instruction: it costs tens of nanoseconds of latency on recent cores)
      if (idle_polls % 32 != 0 ||
          std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - idle_since).count() < s.hot_us)
        continue;
      hot = false;
    }
    const auto idle = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - idle_since).count();
    if (idle < s.spin_us || data_sends > 0 || s.flowing_receives > 0 || large_receive != MPI_REQUEST_NULL) {
      std::this_thread::yield();
      continue;
    }
    // Requests in flight keep the steps short: a collective's later rounds, and any request to
    // a peer without a bell, move only at this thread's polls. (A request that waits for a peer
    // with a bell needs none: the peer rings when it posts its side.)
    const int cap = collectives_running > 0 || (!active.empty() && !every_peer_has_a_bell)
                        ? std::min(s.max_sleep_us, 50)
                        : s.max_sleep_us;
    const auto step = std::chrono::microseconds(std::clamp<long>(idle / 4, 10, cap));
    doorbell& bell = *s.bell.load(std::memory_order_relaxed);
    const std::uint32_t seen = bell.seen();
    if (s.queued.load(std::memory_order_acquire)) continue;  // read after `seen`: no ring is lost
    // A ring means traffic: the back-off starts over (messages that follow it are polled for).
    if (bell.sleep(seen, step)) {
      idle_polls = 0;
      // This process's threads queue before they ring: a ring with nothing queued is a peer's.
      if (!s.queued.load(std::memory_order_acquire)) s.woken_by_peers.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Every peer said goodbye, its last frame: the posted receive will not match.
  for (MPI_Request* r : {&frame_receive, &large_receive}) {
    if (*r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
  }
  drop_bells(s);
  {
    // Collectives asked for after this rank began to leave are never posted.
    std::lock_guard lock(s.out_mu);
    for (auto& c : s.collectives) {
      if (c.made) c.made->set_value(error(errc::rank_down, "split: rank " + std::to_string(s.rank) + " has left the job"));
      else c.done->set_value(error(errc::rank_down, "allreduce_sum: rank " + std::to_string(s.rank) + " has left the job"));
    }
    s.collectives.clear();
  }
  for (auto& p : splits)
    p->c.made->set_value(error(errc::rank_down, "split: rank " + std::to_string(s.rank) + " has left the job"));
  for (MPI_Comm& g : groups) MPI_Comm_free(&g);
  MPI_Comm_free(&split_comm);
  MPI_Comm_free(&comm);
  if (!already) MPI_Finalize();
  // After MPI has ended (a program that keeps MPI: after the communicators are freed), so that
  // nothing writes into those sums' buffers once their callers learn it.
  for (auto& [seq, done] : open_sums)
    done->set_value(error(errc::rank_down, "allreduce_sum: a rank of this sum left the job without joining it"));
}

}  // namespace strata::net::detail
