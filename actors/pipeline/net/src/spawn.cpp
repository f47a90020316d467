#include "strata/pipeline_net/spawn.hpp"

#include <future>
#include <stdexcept>
#include <utility>

#include "strata/net/serialize.hpp"

// Every message between stages and the driver crosses ranks (their serialize() templates are in
// stage_actor.hpp). Declared here, in the object every spawn_pipeline links, so that every rank
// knows them before main.
STRATA_NET_DECLARE(strata::pipeline::begin_step, strata::pipeline::stage_activation, strata::pipeline::stage_gradient,
                   strata::pipeline::stage_computed, strata::pipeline::stage_update, strata::pipeline::stage_updated,
                   strata::pipeline::stage_failed, strata::pipeline::stage_started, strata::pipeline::restart_stage);

namespace strata::pipeline_net {

namespace {
std::string rank_range(int world_size) {
  return world_size == 1 ? "rank 0" : "ranks 0-" + std::to_string(world_size - 1);
}
}  // namespace

std::vector<int> one_stage_per_rank(int stages, int world_size) {
  if (stages < 1) throw std::invalid_argument("a pipeline needs at least 1 stage, got " + std::to_string(stages));
  if (stages > world_size)
    throw std::invalid_argument("one stage per rank needs " + std::to_string(stages) + " ranks for " +
                                std::to_string(stages) + " stages, but the job has " + std::to_string(world_size) +
                                " (start more ranks, or give a placement that puts several stages on one rank)");
  std::vector<int> ranks(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) ranks[static_cast<std::size_t>(s)] = s;
  return ranks;
}

void check_placement(const pipeline::plan& p, const std::vector<int>& ranks, int world_size) {
  if (ranks.size() != p.stages.size())
    throw std::invalid_argument("a pipeline placement needs one rank per plan stage: got " +
                                std::to_string(ranks.size()) + " ranks for " + std::to_string(p.stages.size()) +
                                " stages");
  for (std::size_t s = 0; s < ranks.size(); ++s)
    if (ranks[s] < 0 || ranks[s] >= world_size)
      throw std::invalid_argument("the pipeline placement puts stage " + std::to_string(s) + " on rank " +
                                  std::to_string(ranks[s]) + ", but the job has " + std::to_string(world_size) +
                                  (world_size == 1 ? " rank (" : " ranks (") + rank_range(world_size) + ")");
}

std::string stage_address(const pipeline::pipeline_options& options, int s) {
  return options.stage_name + "/" + std::to_string(s);
}

void detail::check_local_stages(const pipeline::plan& p, const std::vector<int>& ranks, const net::endpoint& net,
                                std::size_t contexts, std::size_t models, const std::vector<bool>& built) {
  check_placement(p, ranks, net.size());
  if (contexts != p.stages.size() || models != p.stages.size())
    throw std::invalid_argument("a pipeline of " + std::to_string(p.stages.size()) +
                                " plan stages needs one context and one model entry per stage (empty for stages on "
                                "other ranks); got " +
                                std::to_string(contexts) + " and " + std::to_string(models));
  for (std::size_t s = 0; s < ranks.size(); ++s)
    if (ranks[s] == net.rank() && !built[s])
      throw std::invalid_argument("pipeline stage " + std::to_string(s) + " is placed on this rank (" +
                                  std::to_string(net.rank()) + ") but has no context or no model");
}

pipeline::pipeline_actors detail::connect(actor_system& system, net::endpoint& net, const pipeline::plan& p,
                                          const std::vector<int>& ranks,
                                          const std::vector<std::shared_ptr<pipeline::stage_context>>& contexts,
                                          std::vector<actor_ref> local_stages, actor_ref supervisor,
                                          const pipeline::pipeline_options& options, int driver_rank) {
  const auto n = p.stages.size();
  auto must = [](expected<void> r) {
    if (!r) throw std::invalid_argument(r.error().message());
  };
  pipeline::pipeline_actors out;
  out.supervisor = std::move(supervisor);
  out.stages.resize(n);
  for (std::size_t s = 0; s < n; ++s) {
    if (ranks[s] == net.rank()) {
      out.stages[s] = local_stages[s];
      continue;
    }
    auto handle = net.remote(ranks[s], stage_address(options, static_cast<int>(s)));
    if (!handle) throw std::invalid_argument(handle.error().message());
    out.stages[s] = std::move(*handle);
  }
  if (net.rank() == driver_rank) {
    out.driver = system.spawn_with<pipeline::step_driver>(spawn_options{.name = options.driver_name}, out.stages,
                                                           out.supervisor, options.rule, ranks);
    must(net.publish(out.driver, options.driver_name));
  } else {
    auto handle = net.remote(driver_rank, options.driver_name);
    if (!handle) throw std::invalid_argument(handle.error().message());
    out.driver = std::move(*handle);
  }
  // Links first, then publication: a begin_step can reach a stage only once it is published.
  for (std::size_t s = 0; s < n; ++s)
    if (ranks[s] == net.rank()) contexts[s]->set_links(pipeline::stage_links(p, out, s, options));
  for (std::size_t s = 0; s < n; ++s)
    if (ranks[s] == net.rank()) must(net.publish(out.stages[s], stage_address(options, static_cast<int>(s))));
  return out;
}

expected<void> wait_for_driver_exit(actor_system& system, const actor_ref& driver, std::chrono::milliseconds timeout) {
  if (!driver) return error(errc::invalid_argument, "wait_for_driver_exit needs a driver handle, got an empty one");
  auto gone = std::make_shared<std::promise<error>>();
  auto reason = gone->get_future();
  auto watcher = system.spawn([driver, gone](actor& self) -> behavior {
    self.monitor(driver);
    return {[&self, gone](const down_msg& d) {
      gone->set_value(d.reason);
      self.quit();
    }};
  });
  if (reason.wait_for(timeout) != std::future_status::ready) {
    system.stop(watcher);
    return error(errc::request_timeout, "the pipeline driver still ran after " + std::to_string(timeout.count()) + " ms");
  }
  error e = reason.get();
  if (!e || e.code() == errc::normal_exit || e.code() == errc::stopped) return {};
  return e;
}

expected<void> stop_pipeline(actor_system& system, const net::endpoint& net, const pipeline::pipeline_actors& actors,
                             std::chrono::milliseconds timeout, int driver_rank) {
  if (net.rank() == driver_rank && actors.driver) system.stop(actors.driver);
  auto done = wait_for_driver_exit(system, actors.driver, timeout);
  if (actors.supervisor) system.stop(actors.supervisor);
  return done;
}

}  // namespace strata::pipeline_net
