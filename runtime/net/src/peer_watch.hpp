#pragma once
// Private: the deadline within which a communication thread hears from every other rank
// (STRATA_NET_PEER_TIMEOUT_S, docs/distributed.md "Failure model").

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace strata::net::detail {

/// When this rank last heard from and sent to each other rank, and what that means: a link that
/// carried nothing from this rank for a quarter of the deadline gets a heartbeat; a peer unheard
/// for longer than the deadline is silent. Pure bookkeeping on times the caller passes (the
/// communication thread's; tests inject their own), so that the rules are tested without MPI.
class peer_watch {
public:
  using clock = std::chrono::steady_clock;

  /// Watches every rank but `rank` of `hosts.size()` ranks (`hosts[r]`: rank r's host name),
  /// all heard from and sent to at `now`.
  void start(int rank, std::vector<std::string> hosts, std::chrono::duration<double> deadline, clock::time_point now);
  bool started() const noexcept { return !hosts_.empty(); }

  void heard_from(int peer, clock::time_point now) noexcept { last_heard_[index(peer)] = now; }
  void sent_to(int peer, clock::time_point now) noexcept { last_sent_[index(peer)] = now; }
  /// The peer left the job (its goodbye came): no longer watched, nor sent heartbeats.
  void peer_left(int peer) noexcept { unheard_[index(peer)] = unsent_[index(peer)] = 1; }
  /// This rank said goodbye to the peer: no heartbeats go to it any more (it is still watched
  /// until its own goodbye comes).
  void said_goodbye(int peer) noexcept { unsent_[index(peer)] = 1; }

  /// Peers to send a heartbeat now: nothing went to them for a quarter of the deadline.
  std::vector<int> heartbeats_due(clock::time_point now) const;
  /// The sentence for the first peer silent past the deadline at `now`, if any.
  std::optional<std::string> silent_peer(clock::time_point now) const;

  /// The interval between two checks (a tenth of the deadline, at most one second).
  clock::duration check_every() const noexcept { return check_every_; }
  std::chrono::duration<double> deadline() const noexcept { return deadline_; }

private:
  std::size_t index(int peer) const noexcept { return static_cast<std::size_t>(peer); }

  int rank_ = 0;
  std::vector<std::string> hosts_;
  std::chrono::duration<double> deadline_{30.0};
  clock::duration check_every_{};
  std::vector<clock::time_point> last_heard_, last_sent_;
  std::vector<char> unheard_, unsent_;  // not watched; sent no heartbeats
};

/// The sentence that ends a job for a silent peer (peer_watch::silent_peer), e.g. "strata::net:
/// rank 1 on host host2 has been silent for 31.0 s, past STRATA_NET_PEER_TIMEOUT_S=30: rank 0 on
/// host1 ends the job."
std::string silent_peer_sentence(int peer, const std::string& peer_host, double silent_s, double deadline_s, int rank,
                                 const std::string& host);

}  // namespace strata::net::detail
