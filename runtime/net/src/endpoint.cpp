#include "strata/net/endpoint.hpp"

#include <cmath>
#include <cstdlib>
#include <future>
#include <limits>
#include <string>
#include <utility>

#include "staging.hpp"
#include "state.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/trace.hpp"

namespace strata::net {

using strata::detail::envelope;
using strata::detail::message_kind;
using strata::detail::typed_envelope;

namespace detail {

// ---- addresses ----------------------------------------------------------------------------------

std::tuple<int, bool, std::uint64_t> endpoint_state::address_of(const actor_ref& ref) {
  if (!ref) return {-1, false, 0};
  if (ref.cell()->remote) {
    auto* p = static_cast<proxy_cell*>(ref.cell());
    return {p->rank, p->by_name, p->key};
  }
  std::lock_guard lock(mu);
  exported.try_emplace(ref.id(), ref);
  return {rank, false, ref.id()};
}

actor_ref endpoint_state::proxy_locked(int peer, bool by_name, std::uint64_t key) {
  auto k = std::make_tuple(peer, by_name, key);
  if (auto it = proxies.find(k); it != proxies.end()) return it->second;
  auto* cell = new proxy_cell(shared_from_this(), peer, by_name, key);
  actor_ref ref = actor_ref::adopt(cell);
  if (peer_gone[static_cast<std::size_t>(peer)]) cell->go_down(rank_down_error(peer));
  proxies.emplace(k, ref);
  return ref;
}

actor_ref endpoint_state::import(int from_rank, bool by_name, std::uint64_t key) {
  std::lock_guard lock(mu);
  if (from_rank == rank) {
    auto& table = by_name ? names : exported;
    auto it = table.find(key);
    return it == table.end() ? actor_ref{} : it->second;
  }
  if (from_rank >= size) return {};
  return proxy_locked(from_rank, by_name, key);
}

expected<void> endpoint_state::publish(const actor_ref& target, const std::string& name) {
  if (!target || target.cell()->remote)
    return error(errc::invalid_argument, "endpoint::publish needs a handle to a local actor (name '" + name + "')");
  const std::uint64_t key = name_key(name);
  {
    std::lock_guard lock(mu);
    if (!names.emplace(key, target).second)
      return error(errc::invalid_argument, "the name '" + name + "' is published already on rank " + std::to_string(rank));
    exported.try_emplace(target.id(), target);
    if (parked.contains(key)) handing_over[target.id()] = key;
  }
  // Frames that waited for the name run here, in the order they came. Their entry in `parked`
  // stays until it is empty: the communication thread queues the frames that arrive meanwhile
  // behind them (with_target) rather than delivering them first.
  for (;;) {
    std::vector<parked_frame> waiting;
    {
      std::lock_guard lock(mu);
      auto it = parked.find(key);
      if (it == parked.end() || it->second.empty()) {
        if (it != parked.end()) parked.erase(it);
        handing_over.erase(target.id());
        break;
      }
      waiting.swap(it->second);
    }
    for (auto& p : waiting) {
      bool first = false;
      {
        std::lock_guard lock(mu);
        first = resolved_sent.emplace(p.src, key).second;
      }
      if (first) {
        std::vector<std::byte> bytes;
        std::vector<tensor> none;
        writer w(bytes, none, this);
        w(frame::resolved, key, target.id());
        (void)push_frame(p.src, std::move(bytes));
      }
      p.run(target);
    }
  }
  return {};
}

std::atomic<bool> mpi_started_by_endpoint{false};

}  // namespace detail

// ---- endpoint -----------------------------------------------------------------------------------

namespace {
std::atomic<bool> endpoint_alive{false};

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return true;
  return false;
}

expected<int> env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1'000'000)
    return error(errc::invalid_argument, std::string(name) + "='" + v + "' is not a number of microseconds in [0, 1000000]");
  return static_cast<int>(x);
}

/// STRATA_NET_PEER_TIMEOUT_S: a positive number of seconds (a fraction allowed).
expected<double> env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !std::isfinite(x) || x <= 0)
    return error(errc::invalid_argument, std::string(name) + "='" + v + "' is not a positive number of seconds");
  return x;
}

/// The STRATA_NET_* settings of the environment (docs/distributed.md, "Environment variables").
struct environment_settings {
  int spin_us = 200;
  int hot_us = 20;
  int max_sleep_us = 1000;
  bool bells = true;
  bool watch = true;
  double peer_timeout_s = 30;
};

expected<environment_settings> read_environment() {
  environment_settings e;
  for (auto [name, to] : {std::pair{"STRATA_NET_SPIN_US", &e.spin_us}, std::pair{"STRATA_NET_HOT_US", &e.hot_us},
                          std::pair{"STRATA_NET_MAX_SLEEP_US", &e.max_sleep_us}}) {
    auto x = env_int(name, *to);
    if (!x) return x.error();
    *to = *x;
  }
  for (auto [name, to] : {std::pair{"STRATA_NET_BELLS", &e.bells}, std::pair{"STRATA_NET_WATCH", &e.watch}}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    const std::string b = v;
    if (b != "on" && b != "off") return error(errc::invalid_argument, std::string(name) + "='" + b + "' is neither on nor off");
    *to = b == "on";
  }
  auto timeout = env_seconds("STRATA_NET_PEER_TIMEOUT_S", e.peer_timeout_s);
  if (!timeout) return timeout.error();
  e.peer_timeout_s = *timeout;
  return e;
}
}  // namespace

expected<void> check_environment() {
  if (auto e = read_environment(); !e) return e.error();
  return {};
}

endpoint::endpoint(actor_system& sys, endpoint_config config) : state_(std::make_shared<detail::endpoint_state>()) {
  if (endpoint_alive.exchange(true))
    throw error_exception(error(errc::runtime_failure, "a strata::net::endpoint exists already in this process"));
  auto& s = *state_;
  s.sys = &sys;
  s.config = std::move(config);
  try {
    if (s.config.receive_device)
      if (auto path = detail::receive_staging(s.config.receive_device.kind(), s.config.receive_device.name()); !path)
        throw error_exception(path.error());
    auto env = read_environment();
    if (!env) throw error_exception(env.error());
    s.spin_us = env->spin_us;
    s.hot_us = env->hot_us;
    s.max_sleep_us = env->max_sleep_us;
    s.bells_wanted = env->bells;
    s.watch_wanted = env->watch;
    s.peer_timeout_s = env->peer_timeout_s;
    (void)declare<unit_t, error, down_msg, exit_msg, bool, std::int32_t, std::int64_t, std::uint32_t, std::uint64_t,
                  float, double, std::string, tensor, std::vector<float>, std::vector<std::int64_t>>();
    if (launched_by_mpi()) {
      s.mpi = true;
      auto started = std::make_shared<std::promise<expected<void>>>();
      auto ready = started->get_future();
      s.comm = std::thread([&s, started] {
        detail::run_comm(s, [started](expected<void> r) { started->set_value(std::move(r)); });
      });
      auto r = ready.get();
      if (!r) {
        s.comm.join();
        throw error_exception(r.error());
      }
    } else {
      s.size_tables();
    }
  } catch (...) {
    endpoint_alive.store(false);
    throw;
  }
}

endpoint::~endpoint() {
  shutdown();
  endpoint_alive.store(false);
}

int endpoint::rank() const noexcept { return state_->rank; }
int endpoint::size() const noexcept { return state_->size; }

expected<void> endpoint::publish(const actor_ref& target, const std::string& name) {
  return state_->publish(target, name);
}

expected<actor_ref> endpoint::remote(int rank, std::string_view name) {
  auto& s = *state_;
  if (rank < 0 || rank >= s.size)
    return error(errc::invalid_argument, "rank " + std::to_string(rank) + " does not exist (the job has " +
                                             std::to_string(s.size) + " rank" + (s.size == 1 ? ")" : "s)"));
  const std::uint64_t key = detail::name_key(name);
  if (rank == s.rank) {
    std::lock_guard lock(s.mu);
    if (auto it = s.names.find(key); it != s.names.end()) return it->second;
    return error(errc::invalid_argument, "no actor is published as '" + std::string(name) + "' on this rank (" +
                                             std::to_string(rank) + ")");
  }
  std::lock_guard lock(s.mu);
  return s.proxy_locked(rank, true, key);
}

void endpoint::shutdown() {
  auto& s = *state_;
  {
    std::lock_guard guard(s.shutdown_mu);
    if (s.shut_down) return;
    s.shut_down = true;
  }
  if (s.mpi) {
    {
      std::lock_guard lock(s.out_mu);
      for (int peer = 0; peer < s.size; ++peer) {
        if (peer == s.rank) continue;
        detail::outgoing o;
        o.dst = peer;
        o.frame_bytes.push_back(static_cast<std::byte>(detail::frame::goodbye));
        s.outbox.push_back(std::move(o));
        s.goodbye_sent[static_cast<std::size_t>(peer)] = 1;
      }
      s.leaving = true;
      s.wake_locked();
    }
    s.comm.join();
  }
  // Break the cycle proxies -> state -> proxies; frames for names never published are dropped
  // (their requesters' timeouts answer them).
  for (int peer = 0; peer < s.size; ++peer)
    if (peer != s.rank) s.peer_left(peer);  // local watchers of remote actors get down_msg
  std::unordered_map<std::uint64_t, std::vector<detail::endpoint_state::parked_frame>> parked;
  std::map<std::tuple<int, bool, std::uint64_t>, actor_ref> proxies;
  std::vector<std::pair<device, stream>> staging;
  {
    std::lock_guard lock(s.mu);
    parked.swap(s.parked);
    s.handing_over.clear();
    proxies.swap(s.proxies);
    s.exported.clear();
    s.names.clear();
    staging.swap(s.staging_streams);  // dropped here, on the caller's thread (not CUDA's)
  }
}

std::future<expected<void>> endpoint::allreduce_sum(std::span<float> values) { return allreduce_sum(values, rank_group{}); }

std::future<expected<void>> endpoint::allreduce_sum(std::span<float> values, const rank_group& group) {
  auto& s = *state_;
  auto done = std::make_shared<std::promise<expected<void>>>();
  auto future = done->get_future();
  if (!s.mpi || s.size == 1 || (group.id >= 0 && group.size == 1)) {
    done->set_value({});
    return future;
  }
  if (group.id >= s.groups_made.load()) {
    done->set_value(error(errc::invalid_argument, "allreduce_sum: group " + std::to_string(group.id) +
                                                      " was not made by this endpoint's split."));
    return future;
  }
  if (values.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    done->set_value(error(errc::invalid_argument, "allreduce_sum: " + std::to_string(values.size()) +
                                                      " values exceed MPI's int count; split them."));
    return future;
  }
  std::lock_guard lock(s.out_mu);
  if (s.leaving) {
    done->set_value(error(errc::rank_down, "allreduce_sum: rank " + std::to_string(s.rank) + " has left the job"));
    return future;
  }
  s.collectives.push_back(detail::endpoint_state::collective{values.data(), values.size(), std::move(done), group.id});
  s.wake_locked();
  return future;
}

expected<rank_group> endpoint::split(int color) {
  auto& s = *state_;
  if (color < 0)
    return error(errc::invalid_argument, "split: color " + std::to_string(color) + " is negative; expected 0 or more.");
  if (!s.mpi || s.size == 1) return rank_group{.id = -1, .rank = 0, .size = 1, .members = {s.rank}};
  auto made = std::make_shared<std::promise<expected<rank_group>>>();
  auto future = made->get_future();
  {
    std::lock_guard lock(s.out_mu);
    if (s.leaving) return error(errc::rank_down, "split: rank " + std::to_string(s.rank) + " has left the job");
    s.collectives.push_back(detail::endpoint_state::collective{.color = color, .made = std::move(made)});
    s.wake_locked();
  }
  return future.get();
}

endpoint_stats endpoint::stats() const {
  auto& s = *state_;
  return endpoint_stats{.frames_sent = s.frames_sent.load(),
                        .frames_received = s.frames_received.load(),
                        .tensor_bytes_sent = s.tensor_bytes_sent.load(),
                        .tensor_bytes_received = s.tensor_bytes_received.load(),
                        .refused = s.refused.load(),
                        .flowing_frames_received = s.flowing_frames.load(),
                        .flowing_receives = static_cast<std::uint64_t>(s.flowing_receives.load()),
                        .peers_with_bells = s.peers_with_bells.load(),
                        .woken_by_peers = s.woken_by_peers.load(),
                        .frames_posted_directly = s.frames_posted_directly.load(),
                        .peers_on_this_machine = s.peers_on_this_machine.load(),
                        .network_wakes = s.network_wakes.load()};
}

}  // namespace strata::net
