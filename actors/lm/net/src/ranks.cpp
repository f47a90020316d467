#include "strata/lm_net/ranks.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore_dist/store.hpp"
#include "strata/lm_net/link_estimate.hpp"
#include "strata/lm/trainer.hpp"
#include "strata/net/endpoint.hpp"
#include "strata/pipeline_net/spawn.hpp"

// measure_link's messages: a ping's bytes there and back, and a tensor answered once it is here.
STRATA_NET_DECLARE(std::vector<std::uint8_t>, strata::tensor);

namespace strata::lm_net {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// The first of `names` set to a whole number.
std::optional<int> env_number(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end == '\0' && x >= 0 && x < 1'000'000) return static_cast<int>(x);
  }
  return std::nullopt;
}

class endpoint_group final : public lm::rank_group {
public:
  explicit endpoint_group(failure_handler on_failure) : on_failure_(std::move(on_failure)) {
    if (!launched()) return;
    const auto rank = env_number({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"});
    const auto size = env_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
    if (!rank || !size || *rank >= *size)
      throw std::runtime_error("this process was started by an MPI launcher, but its rank and size are not in the "
                               "environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or SLURM_PROCID/NTASKS)");
    rank_ = *rank;
    size_ = *size;
    // MPI starts only when train() attaches its system, after it has read the corpus (and before
    // the plan, which needs the link between ranks): a bad STRATA_NET_* variable is refused now.
    if (auto env = net::check_environment(); !env) throw lm::input_error(env.error().message());
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void attach(actor_system& system) override {
    system_ = &system;
    net_ = std::make_unique<net::endpoint>(system);
    if (net_->rank() != rank_ || net_->size() != size_)
      throw std::runtime_error("MPI says rank " + std::to_string(net_->rank()) + " of " + std::to_string(net_->size()) +
                               ", the launcher's environment rank " + std::to_string(rank_) + " of " +
                               std::to_string(size_));
  }

  void detach() override {
    replicas_.reset();  // a collective of the group's ranks' stores, before the endpoint goes
    if (net_) net_->shutdown();
    net_.reset();
  }

  [[noreturn]] void fail(const std::exception& e) override {
    if (on_failure_) on_failure_(e);
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }

  expected<void> sum(std::span<float> values) override { return endpoint().allreduce_sum(values).get(); }

  expected<pipeline::link_model> measure_link(std::size_t transfer_bytes, int round_trips) override {
    if (size_ < 2) return error(errc::invalid_argument, "a job of one rank has no link between ranks to measure");
    constexpr int warmup_trips = 20;  // connections and buffers set up before the timed round trips
    const char* echo_name = "lm-link-echo";
    const char* sink_name = "lm-link-sink";
    std::vector<actor_ref> served;  // rank 1's, stopped once rank 0 is done with them
    expected<pipeline::link_model> link = pipeline::link_model{};
    if (rank_ == 1) {
      served.push_back(system_->spawn([](actor& self) -> behavior {
        return {[&self](const std::vector<std::uint8_t>& ping) { self.send(self.current_sender(), ping); }};
      }));
      served.push_back(system_->spawn([](actor& self) -> behavior {
        return {[&self](const tensor& t) {  // answers once the tensor's bytes are here
          auto promise = self.make_response_promise<bool>();
          t.ready_event().then([promise](std::exception_ptr e) mutable { promise.deliver(!e); });
          return false;
        }};
      }));
      for (auto [ref, name] : {std::pair{served[0], echo_name}, {served[1], sink_name}})
        if (auto r = endpoint().publish(ref, name); !r) link = r.error();
    } else if (rank_ == 0) {
      link = time_link(echo_name, sink_name, transfer_bytes, warmup_trips, round_trips);
    }
    // Every rank waits here until rank 0 is done with rank 1's actors.
    float nothing = 0;
    auto met = endpoint().allreduce_sum(std::span<float>(&nothing, 1)).get();
    for (const auto& ref : served) system_->stop(ref);
    if (!met) return met.error();
    return link;
  }

  expected<bool> join_replicas(std::size_t stages) override {
    // The replicas of stage k (ranks k, P + k, ...) share a dist_sync_allreduce store of their own.
    auto group = endpoint().split(rank_ % static_cast<int>(stages));
    if (!group) return group.error();
    try {
      replicas_ = std::make_unique<kvstore_dist::store>(
          *system_, endpoint(),
          // A replica may wait a long time for its peers (rank 0 writing a checkpoint, its
          // validation): a rank that leaves fails the sum at once, and mpirun --timeout ends a
          // job that hangs, so the store's own timeout only has to be longer than any of those.
          kvstore_dist::store_options{
              .mode = kvstore_dist::mode::allreduce, .timeout = std::chrono::hours(24), .group = *group});
    } catch (const std::exception& e) {
      return error(errc::runtime_failure, e.what());
    }
    return true;
  }

  expected<void> sum_over_replicas(const std::vector<std::string>& names, const std::vector<tensor>& grads) override {
    if (!replicas_) return lm::rank_group::sum_over_replicas(names, grads);
    std::vector<kvstore::key> keys(names.begin(), names.end());
    if (!replicas_ready_) {  // the keys, once (rank 0 of the group's zeros; no optimizer: a
                             // key's value becomes each step's sum)
      device& dev = replica_device();
      for (std::size_t i = 0; i < keys.size(); ++i) {
        std::vector<float> zeros(static_cast<std::size_t>(grads[i].numel()), 0.0f);
        auto value = tensor::from_host<float>(std::span<const float>(zeros), grads[i].shape(), dev, replica_stream_);
        if (auto r = replicas_->init(keys[i], value); !r) return r;
      }
      replicas_ready_ = true;
    }
    auto summed = replicas_->pushpull(keys, grads);
    if (!summed) return summed.error();
    for (std::size_t i = 0; i < grads.size(); ++i) {  // cpu tensors: copied on the host
      const auto host = (*summed)[i].to_host<float>(replica_stream_);  // made by the init above
      std::copy(host.begin(), host.end(), grads[i].data<float>());
    }
    return {};
  }

  pipeline::pipeline_actors connect(actor_system& system, const pipeline::plan& plan, const std::vector<int>& ranks,
                                    const std::vector<std::shared_ptr<pipeline::stage_context>>& contexts,
                                    std::vector<actor_ref> local, actor_ref supervisor,
                                    const pipeline::pipeline_options& options, int driver_rank) override {
    std::vector<bool> built(plan.stages.size(), false);
    for (std::size_t s = 0; s < built.size(); ++s) built[s] = s < contexts.size() && contexts[s] && s < local.size() && local[s];
    pipeline_net::detail::check_local_stages(plan, ranks, endpoint(), contexts.size(), local.size(), built);
    return pipeline_net::detail::connect(system, endpoint(), plan, ranks, contexts, std::move(local), std::move(supervisor),
                                         options, driver_rank);
  }

  expected<void> stop(actor_system& system, const pipeline::pipeline_actors& actors,
                      std::chrono::milliseconds timeout, int driver_rank) override {
    return pipeline_net::stop_pipeline(system, endpoint(), actors, timeout, driver_rank);
  }

  ~endpoint_group() override { detach(); }

private:
  net::endpoint& endpoint() {
    if (!net_) throw std::logic_error("an lm_net rank group is used before attach()");
    return *net_;
  }

  /// Rank 0's half of measure_link: the round trips to rank 1's `echo`, each timed, then
  /// `transfers` timed transfers of `bytes` to its `sink` after one untimed one; estimate_link
  /// makes the link of them (median round trip, best transfer).
  expected<pipeline::link_model> time_link(const char* echo_name, const char* sink_name, std::size_t bytes, int warmup,
                                           int round_trips) {
    constexpr int transfers = 3;
    auto echo = endpoint().remote(1, echo_name);
    auto sink = endpoint().remote(1, sink_name);
    if (!echo) return echo.error();
    if (!sink) return sink.error();
    // Shared: the actor may outlive a timed-out wait.
    auto trips = std::make_shared<std::promise<std::vector<double>>>();
    auto round_trips_s = trips->get_future();
    system_->spawn([echo = *echo, warmup, round_trips, trips](actor& self) -> behavior {
      auto count = std::make_shared<int>(-warmup);
      auto times = std::make_shared<std::vector<double>>();
      auto t0 = std::make_shared<clock_type::time_point>(clock_type::now());
      self.send(echo, std::vector<std::uint8_t>(64, 1));
      return {[&self, echo, round_trips, count, times, t0, trips](std::vector<std::uint8_t>& ping) {
        if (++*count > 0) times->push_back(seconds_since(*t0));
        if (*count == round_trips) {
          trips->set_value(std::move(*times));
          self.quit();
          return;
        }
        *t0 = clock_type::now();
        self.send(echo, std::move(ping));
      }};
    });
    if (round_trips_s.wait_for(std::chrono::minutes(1)) != std::future_status::ready)
      return error(errc::request_timeout, "rank 1 did not answer the link's round trips within a minute");
    link_samples samples;
    samples.round_trip_s = round_trips_s.get();
    samples.bytes = bytes;
    device& dev = replica_device();
    const std::vector<std::uint8_t> host(bytes, 3);
    const tensor data =
        tensor::from_host<std::uint8_t>(std::span<const std::uint8_t>(host), {static_cast<std::int64_t>(bytes)}, dev, replica_stream_);
    data.ready_event().synchronize();
    for (int i = 0; i <= transfers; ++i) {  // the first sets up the path: untimed
      const auto t0 = clock_type::now();
      auto ok = system_->request<bool>(*sink, std::chrono::minutes(1), data).get();
      if (!ok) return error(errc::runtime_failure, "a transfer to rank 1 failed: " + ok.error().message());
      if (!*ok) return error(errc::runtime_failure, "a transfer to rank 1 arrived with an error");
      if (i > 0) samples.transfer_s.push_back(seconds_since(t0));
    }
    return estimate_link(samples);
  }

  device& replica_device() {
    if (!replica_device_.valid()) {
      replica_device_ = make_devices("cpu:1").front();
      replica_stream_ = replica_device_.create_stream();
    }
    return replica_device_;
  }

  failure_handler on_failure_;
  int rank_ = 0, size_ = 1;
  actor_system* system_ = nullptr;
  std::unique_ptr<net::endpoint> net_;
  std::unique_ptr<kvstore_dist::store> replicas_;  // the replicas of this rank's stage (join_replicas)
  bool replicas_ready_ = false;
  device replica_device_;
  stream replica_stream_;
};

}  // namespace

bool launched() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return true;
  return false;
}

std::shared_ptr<lm::rank_group> make_rank_group(failure_handler on_failure) {
  return std::make_shared<endpoint_group>(std::move(on_failure));
}

}  // namespace strata::lm_net
