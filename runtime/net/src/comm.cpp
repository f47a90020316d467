// The communication thread: MPI's start and end around the progress loop (comm_loop.cpp), and
// what every rank agrees on as MPI starts (the job, clocks, host names).

#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "comm_loop.hpp"
#include "strata/trace.hpp"

namespace strata::net::detail {

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

namespace {

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

/// Every rank's host name (collective over `world`), for sentences about peers.
std::vector<std::string> host_names(MPI_Comm world, int size) {
  constexpr int width = 64;
  char mine[width] = {};
  if (::gethostname(mine, width - 1) != 0) std::snprintf(mine, width, "?");
  std::vector<char> all(static_cast<std::size_t>(width) * static_cast<std::size_t>(size));
  MPI_Allgather(mine, width, MPI_CHAR, all.data(), width, MPI_CHAR, world);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    const char* name = all.data() + static_cast<std::ptrdiff_t>(r) * width;
    hosts.emplace_back(name, strnlen(name, width));
  }
  return hosts;
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
    s.hosts = host_names(comm, s.size);
  }
  started({});
  // Messages without tensor data that find an actor spawned with handle_remote_inline idle run
  // its handlers here, as they arrive (receive.cpp turns this off around the others).
  strata::detail::host_inline_runs(true);
  {
    comm_loop loop(s, comm, split_comm);
    loop.run();
    loop.close();
    MPI_Comm_free(&split_comm);
    MPI_Comm_free(&comm);
    if (!already) MPI_Finalize();
    loop.fail_open_sums();
  }
}

}  // namespace strata::net::detail
