#include "peer_watch.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace strata::net::detail {

void peer_watch::start(int rank, std::vector<std::string> hosts, std::chrono::duration<double> deadline,
                       clock::time_point now) {
  rank_ = rank;
  hosts_ = std::move(hosts);
  deadline_ = deadline;
  const auto tenth = std::chrono::duration_cast<clock::duration>(deadline / 10);
  check_every_ = std::clamp<clock::duration>(tenth, std::chrono::milliseconds(1), std::chrono::seconds(1));
  last_heard_.assign(hosts_.size(), now);
  last_sent_.assign(hosts_.size(), now);
  unheard_.assign(hosts_.size(), 0);
  unsent_.assign(hosts_.size(), 0);
  unheard_[index(rank)] = unsent_[index(rank)] = 1;
}

std::vector<int> peer_watch::heartbeats_due(clock::time_point now) const {
  std::vector<int> due;
  const auto idle = std::chrono::duration_cast<clock::duration>(deadline_ / 4);
  for (std::size_t r = 0; r < hosts_.size(); ++r)
    if (!unsent_[r] && now - last_sent_[r] >= idle) due.push_back(static_cast<int>(r));
  return due;
}

std::optional<std::string> peer_watch::silent_peer(clock::time_point now) const {
  for (std::size_t r = 0; r < hosts_.size(); ++r) {
    if (unheard_[r]) continue;
    const std::chrono::duration<double> silent = now - last_heard_[r];
    if (silent > deadline_)
      return silent_peer_sentence(static_cast<int>(r), hosts_[r], silent.count(), deadline_.count(), rank_,
                                  hosts_[index(rank_)]);
  }
  return std::nullopt;
}

std::string silent_peer_sentence(int peer, const std::string& peer_host, double silent_s, double deadline_s, int rank,
                                 const std::string& host) {
  char text[512];
  std::snprintf(text, sizeof text,
                "strata::net: rank %d on host %s has been silent for %.1f s, past STRATA_NET_PEER_TIMEOUT_S=%g: "
                "rank %d on host %s ends the job.",
                peer, peer_host.c_str(), silent_s, deadline_s, rank, host.c_str());
  return text;
}

}  // namespace strata::net::detail
