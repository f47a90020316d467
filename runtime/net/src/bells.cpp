// The doorbells of one machine's ranks: POSIX shared memory that each rank's communication
// thread sleeps on and its node-mates ring (docs/distributed.md, "Doorbells").

#include <mpi.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "comm_loop.hpp"
#include "strata/trace.hpp"

namespace strata::net::detail {

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
  s.on_this_machine.assign(static_cast<std::size_t>(s.size), 0);
  for (int r : mates) s.on_this_machine[static_cast<std::size_t>(r)] = 1;
  s.peers_on_this_machine.store(mates.size() - 1);
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

void ring_every_peer(endpoint_state& s) {
  for (doorbell* b : s.peer_bells)
    if (b) b->ring_if_asleep();
}

}  // namespace strata::net::detail
