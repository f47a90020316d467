// Worker pools: a router actor in front of supervised workers.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cell.hpp"
#include "strata/extension/transport.hpp"
#include "supervisor_msgs.hpp"
#include "system_impl.hpp"
#include "strata/actor_system.hpp"
#include "strata/pool.hpp"

namespace strata {

namespace detail {

namespace {
std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
constexpr std::size_t ring_points_per_worker = 64;
}  // namespace

/// The router: forwards every message its behavior does not handle (everything but
/// pool_resize / pool_size) to a worker, envelope and all (sender and request id kept).
class pool_router final : public actor {
public:
  pool_router(pool_options options, std::function<std::unique_ptr<actor>()> factory)
      : options_(std::move(options)), factory_(std::move(factory)) {}

  behavior make_behavior() override {
    set_forwarder(*this, &pool_router::route_hook);
    supervisor_ = system().spawn_supervisor(options_.restarts, spawn_options{.name = name() + "-supervisor"});
    link_to(supervisor_);  // the supervisor giving up takes the router with it
    grow(options_.size);
    return {
        [this](const pool_resize& r) -> expected<std::size_t> {
          if (r.workers == 0)
            return error(errc::invalid_argument, "pool '" + name() + "' cannot be resized to 0 workers (at least 1)");
          if (r.workers > workers_.size()) grow(r.workers);
          else shrink(r.workers);
          return workers_.size();
        },
        [this](const pool_size&) { return workers_.size(); },
    };
  }

  void on_exit(const error& reason) override {
    if (supervisor_) system().stop(supervisor_, error(errc::stopped, "its pool '" + name() + "' terminated (" + reason.to_string() + ")"));
  }

private:
  static bool route_hook(actor_cell* self, envelope* e) {
    return static_cast<pool_router*>(self->instance.get())->route(e);
  }

  bool route(envelope* e) {
    if (workers_.empty()) return false;
    switch (options_.strategy) {
      case routing::round_robin:
        (void)deliver(workers_[next_++ % workers_.size()].cell(), e);
        return true;
      case routing::broadcast: {
        for (std::size_t i = 0; i + 1 < workers_.size(); ++i) {
          envelope* copy = e->clone_payload();
          if (copy == nullptr) {
            reject(e, error(errc::invalid_argument, "pool '" + name() + "' cannot broadcast a " +
                                                        (e->type ? e->type->name : std::string("?")) +
                                                        ": the type cannot be copied"));
            return true;
          }
          copy->sender = e->sender;
          copy->request_id = e->request_id;
          copy->urgent = e->urgent;
          copy->msg_id = next_message_id();
          (void)deliver(workers_[i].cell(), copy);
        }
        (void)deliver(workers_.back().cell(), e);
        return true;
      }
      case routing::smallest_mailbox: {
        const std::size_t n = workers_.size();
        const std::size_t start = next_++ % n;
        std::size_t best = start;
        std::size_t best_queued = std::numeric_limits<std::size_t>::max();
        for (std::size_t k = 0; k < n; ++k) {
          const std::size_t i = (start + k) % n;
          const std::size_t q = as_cell(workers_[i].cell())->queued.load(std::memory_order_relaxed);
          if (q < best_queued) {
            best = i;
            best_queued = q;
          }
        }
        (void)deliver(workers_[best].cell(), e);
        return true;
      }
      case routing::consistent_hash: {
        std::optional<std::uint64_t> key;
        if (options_.key) key = options_.key(e->type, e->payload());
        if (!key) {
          (void)deliver(workers_[next_++ % workers_.size()].cell(), e);
          return true;
        }
        const std::uint64_t h = mix(*key);
        auto it = std::lower_bound(ring_.begin(), ring_.end(), std::pair<std::uint64_t, std::size_t>{h, 0});
        if (it == ring_.end()) it = ring_.begin();
        (void)deliver(workers_[it->second].cell(), e);
        return true;
      }
    }
    return false;
  }

  void grow(std::size_t n) {
    // A smallest-mailbox pool needs its workers' queue lengths: an unreachable bound turns the
    // runtime's counter of bounded mailboxes on without ever refusing a message.
    const std::size_t capacity =
        options_.strategy == routing::smallest_mailbox ? std::numeric_limits<std::size_t>::max() : 0;
    while (workers_.size() < n) {
      spawn_options o{.name = name() + "-worker-" + std::to_string(workers_.size()), .mailbox_capacity = capacity};
      workers_.push_back(system().spawn_instance(factory_(), std::move(o), supervisor_, factory_));
    }
    rebuild_ring();
  }

  void shrink(std::size_t n) {
    while (workers_.size() > n) {
      auto* e = new typed_envelope<retire_worker>();
      e->kind = message_kind::control;
      e->msg_id = next_message_id();
      e->sender = self();
      (void)deliver(workers_.back().cell(), e);  // after what the worker has queued
      workers_.pop_back();
    }
    rebuild_ring();
  }

  void rebuild_ring() {
    if (options_.strategy != routing::consistent_hash) return;
    ring_.clear();
    // Points depend on the worker's slot only, so a resize moves only the keys of the slots
    // added or removed.
    for (std::size_t w = 0; w < workers_.size(); ++w)
      for (std::size_t p = 0; p < ring_points_per_worker; ++p)
        ring_.emplace_back(mix((static_cast<std::uint64_t>(w) << 32) ^ p ^ 0x5bd1e995ULL), w);
    std::sort(ring_.begin(), ring_.end());
  }

  pool_options options_;
  std::function<std::unique_ptr<actor>()> factory_;
  actor_ref supervisor_;
  std::vector<actor_ref> workers_;
  std::vector<std::pair<std::uint64_t, std::size_t>> ring_;
  std::size_t next_ = 0;
};

}  // namespace detail

actor_ref actor_system::spawn_pool_from(pool_options options, std::function<std::unique_ptr<actor>()> factory) {
  if (options.size == 0)
    throw error_exception(error(errc::invalid_argument, "pool '" + options.name + "' needs at least 1 worker (size was 0)"));
  if (options.strategy == routing::consistent_hash && !options.key)
    throw error_exception(error(errc::invalid_argument, "pool '" + options.name +
                                                            "' routes by consistent hash but has no key function "
                                                            "(set pool_options::key, e.g. with strata::hash_key<T>)"));
  if (!factory) throw error_exception(error(errc::invalid_argument, "pool '" + options.name + "' has no worker factory"));
  std::string name = options.name;
  return spawn_instance(std::make_unique<detail::pool_router>(std::move(options), std::move(factory)),
                        spawn_options{.name = std::move(name)}, {}, {});
}

}  // namespace strata
