// A model of your own on strata's pipeline: a small MLP (mlp_stage.hpp) split into stages, one per
// cpu device, trained with GPipe and 1F1B on data it makes itself, checked against the same
// training on one device. With `--store` the stages update through a parameter server, a
// strata::kvstore (mlp_store_stage.hpp), instead of each on its own. Under mpirun (built with
// strata::net) the stages are spread over the ranks, `--devices` per rank, and rank 0 prints the
// comparison. The tutorial: docs/pipeline.md.
//
//   ./custom_pipeline                                  two stages on cpu:2 in this process
//   ./custom_pipeline --store                          the same, SGD applied by a kvstore
//   mpirun -np 2 --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo ./custom_pipeline --devices cpu:1
//                                                      one stage per rank, every byte on loopback
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mlp_stage.hpp"
#include "mlp_store_stage.hpp"
#include "strata/device/all.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/pipeline/stage_actor.hpp"
#include "strata/strata.hpp"
#ifndef STRATA_HAS_NET
#define STRATA_HAS_NET 0
#endif
#if STRATA_HAS_NET
#include "strata/net/endpoint.hpp"
#include "strata/pipeline_net/spawn.hpp"
#endif

using namespace custom_pipeline;
namespace sp = strata::pipeline;

namespace {
/// Rank 0 -> another rank: the weights of your stages, in stage order.
struct weights_request {};
template <class A>
void serialize(A&, weights_request&) {}
}  // namespace
#if STRATA_HAS_NET
STRATA_NET_DECLARE(weights_request, std::vector<float>);
#endif

namespace {

/// This process's share of the job: where each stage runs and the data every stage trains on.
struct job {
  strata::actor_system& system;
#if STRATA_HAS_NET
  strata::net::endpoint& net;
#endif
  int rank = 0, world = 1;
  std::vector<strata::device> devices;  ///< This rank's, one stage each.
  std::vector<int> ranks;               ///< Per stage: the rank that runs it.
  std::vector<float> x, t;              ///< Inputs and targets of the whole batch.
};

/// The one-device reference: the whole MLP as one stage, its micro-batches forward and backward in
/// order, then the local update.
std::vector<float> train_on_one_device(const job& j) {
  auto one = strata::make_devices("cpu:1");
  auto s = one[0].create_stream();
  mlp_stage whole(0, widths.size() - 1, one[0], s);
  whole.set_data(j.x, j.t);
  for (std::size_t step = 0; step < steps; ++step) {
    for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.forward(mb, 0, s);
    for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.backward(mb, 0, s);
    whole.update({}, s);
  }
  s.synchronize();
  return whole.weights();
}

/// A kvstore that applies mlp_stage::update's rule, SGD with rate `lr`, to every key pushed: the
/// kernels' sgd_step computes w + (-lr) * g in float like `update`'s w - lr * g (no fused
/// multiply-add on either side), so both paths give the same weights bit for bit.
strata::actor_ref spawn_sgd_store(strata::actor_system& system, const std::string& name) {
  auto store = strata::kvstore::spawn(system, {.name = name});
  strata::kvstore::client kv(system, store);
  if (auto set = kv.set_optimizer(strata::kernels::sgd_options{.lr = lr}).get(); !set)
    throw std::runtime_error("the kvstore refused SGD: " + set.error().message());
  return store;
}

/// The reference again, with the update done by a kvstore (mlp_store_stage driven by hand instead
/// of by a stage actor). Its weights must equal the local update's bit for bit.
std::vector<float> train_on_one_device_through_a_store(const job& j) {
  auto one = strata::make_devices("cpu:1");
  auto s = one[0].create_stream();
  mlp_store_stage whole(0, widths.size() - 1, one[0], s);
  whole.set_data(j.x, j.t);
  const auto store = spawn_sgd_store(j.system, "one-device-store");
  strata::kvstore::client kv(j.system, store);
  auto fail = [&](const std::string& what) {
    j.system.stop(store);
    throw std::runtime_error(what);
  };
  auto initial = whole.initial_weights();
  if (auto init = kv.init(initial.keys, initial.values).get(); !init) fail(init.error().message());
  for (std::size_t step = 0; step < steps; ++step) {
    for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.forward(mb, 0, s);
    for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.backward(mb, 0, s);
    auto pulled = kv.send(whole.exchange({}, s)).get();
    if (!pulled) fail(pulled.error().message());
    whole.exchanged(*pulled, s);
  }
  s.synchronize();
  j.system.stop(store);
  return whole.weights();
}

/// What a schedule's training on the stages gave.
struct split_outcome {
  std::vector<float> weights;  ///< Every stage's, in stage order (on rank 0; elsewhere its own).
  int exit_now = 0;            ///< Non-zero: a failure was reported, the program exits with it.
  bool stopped = true;         ///< False: stopping the pipeline failed (reported).
};

/// This rank's stages (null where another rank builds one), each on its device with its context,
/// the layers split evenly.
template <class Model>
struct local_stages {
  std::vector<std::shared_ptr<sp::stage_context>> contexts;
  std::vector<std::shared_ptr<Model>> models;
};

template <class Model>
local_stages<Model> build_stages(const job& j) {
  const std::size_t num_stages = j.ranks.size(), per_rank = j.devices.size(), layers = widths.size() - 1;
  local_stages<Model> out{std::vector<std::shared_ptr<sp::stage_context>>(num_stages), std::vector<std::shared_ptr<Model>>(num_stages)};
  for (std::size_t i = 0; i < num_stages; ++i) {
    if (j.ranks[i] != j.rank) continue;  // another rank builds it
    const auto& dev = j.devices[i % per_rank];
    out.contexts[i] = std::make_shared<sp::stage_context>(static_cast<int>(i), dev);
    auto compute = out.contexts[i]->compute();
    out.models[i] = std::make_shared<Model>(i * layers / num_stages, (i + 1) * layers / num_stages, dev, compute);
    out.models[i]->set_data(j.x, j.t);
  }
  return out;
}

/// The weights of this rank's stages, in stage order.
template <class Model>
std::vector<float> weights_of(const std::vector<std::shared_ptr<Model>>& models) {
  std::vector<float> all;
  for (const auto& m : models)
    if (m) {
      const auto w = m->weights();
      all.insert(all.end(), w.begin(), w.end());
    }
  return all;
}

/// One store for the job's stages, holding their initial weights; null (reported) when the store
/// refuses them.
template <class Model>
strata::actor_ref spawn_store_for(job& j, const std::vector<std::shared_ptr<Model>>& models, const std::string& name) {
  auto store = spawn_sgd_store(j.system, name + "-store");
  strata::kvstore::client kv(j.system, store);
  for (const auto& m : models) {
    auto initial = m->initial_weights();
    if (auto init = kv.init(initial.keys, initial.values).get(); !init) {
      std::fprintf(stderr, "custom_pipeline: %s\n", init.error().message().c_str());
      j.system.stop(store);
      return {};
    }
  }
  return store;
}

/// The stage actors and the driver: in this process, or over the ranks with a probe that answers
/// rank 0's weights_request. Returns an exit status, 0 when spawned.
template <class Model>
int spawn_stages(job& j, const sp::plan& plan, const local_stages<Model>& local, const sp::pipeline_options& options,
                 const std::string& name, sp::pipeline_actors& actors, strata::actor_ref& probe) {
#if STRATA_HAS_NET
  if (j.world > 1) {
    try {
      actors = strata::pipeline_net::spawn_pipeline(j.system, j.net, plan, j.ranks, local.contexts, local.models, options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "custom_pipeline: %s\n", e.what());
      return 2;
    }
    probe = j.system.spawn([models = local.models](strata::actor&) -> strata::behavior {
      return {[models](const weights_request&) { return weights_of(models); }};
    });
    (void)j.net.publish(probe, name + "-weights");
  }
#else
  (void)name;
  (void)probe;
#endif
  if (j.world == 1) actors = sp::spawn_pipeline(j.system, plan, local.contexts, local.models, options);
  return 0;
}

/// Rank 0: the steps, each step's loss printed. False (reported) when a step fails.
bool run_steps(job& j, const sp::pipeline_actors& actors, const std::string& name) {
  for (std::size_t step = 0; step < steps; ++step) {
    auto r = j.system.request<sp::step_outcome>(actors.driver, std::chrono::minutes(1), sp::run_step{}).get();
    if (!r) {
      std::fprintf(stderr, "custom_pipeline: %s\n", r.error().message().c_str());
      return false;
    }
    std::printf("%s step %zu: loss %.6f\n", name.c_str(), step + 1, r->reports.back().at(0));
  }
  return true;
}

/// Rank 0: the other ranks' stages' weights after `weights`, in order, from their probes (once
/// rank 0 has run the steps). False (reported) when one does not answer.
bool gather_weights([[maybe_unused]] job& j, [[maybe_unused]] const std::string& name,
                    [[maybe_unused]] std::vector<float>& weights) {
#if STRATA_HAS_NET
  for (int other = 1; other < j.world; ++other) {
    auto theirs = j.system.request<std::vector<float>>(j.net.remote(other, name + "-weights").value(),
                                                       std::chrono::minutes(1), weights_request{}).get();
    if (!theirs) {
      std::fprintf(stderr, "custom_pipeline: %s\n", theirs.error().message().c_str());
      return false;
    }
    weights.insert(weights.end(), theirs->begin(), theirs->end());
  }
#endif
  return true;
}

/// Stops the pipeline (across ranks rank 0 stops the driver; the others serve until then), the
/// probe and the store, and waits for the stages' queued work. False (reported) when stopping
/// across ranks failed.
template <class Model>
bool stop_split(job& j, const sp::pipeline_actors& actors, const strata::actor_ref& probe, const strata::actor_ref& store,
                const local_stages<Model>& local) {
  bool stopped = true;
#if STRATA_HAS_NET
  if (j.world > 1) {
    if (auto done = strata::pipeline_net::stop_pipeline(j.system, j.net, actors, std::chrono::minutes(10)); !done) {
      std::fprintf(stderr, "custom_pipeline: rank %d: %s\n", j.rank, done.error().message().c_str());
      stopped = false;
    }
  }
#endif
  if (j.world == 1) {
    j.system.stop(actors.driver);
    j.system.stop(actors.supervisor);
  }
  if (probe) j.system.stop(probe);
  if (store) j.system.stop(store);
  for (const auto& c : local.contexts)  // the stages' queued work captures the models
    if (c) c->compute().synchronize();
  return stopped;
}

/// Trains the MLP split into one `Model` stage per device of the job with `schedule`, the layers
/// split evenly; rank 0 runs the steps and prints each step's loss.
template <class Model>
split_outcome train_split(job& j, sp::schedule_kind schedule) {
  const std::string name = sp::to_string(schedule);  // names are unique per process
  auto plan = sp::make_plan(schedule, static_cast<int>(j.ranks.size()), static_cast<int>(micro_batches));
  const local_stages<Model> local = build_stages<Model>(j);
  sp::pipeline_options options;
  options.stage_name = name + "-stage";
  options.driver_name = name + "-driver";
  strata::actor_ref store;
  if constexpr (requires(Model& m) { m.initial_weights(); }) {  // one store for the job's stages
    store = spawn_store_for(j, local.models, name);
    if (!store) return {.exit_now = 1};
    options.store = store;
  }
  split_outcome out;
  sp::pipeline_actors actors;
  strata::actor_ref probe;
  if (int status = spawn_stages(j, plan, local, options, name, actors, probe); status != 0) return {.exit_now = status};
  if (j.rank == 0) {
    if (!run_steps(j, actors, name)) return {.exit_now = 1};
    out.weights = weights_of(local.models);
    if (!gather_weights(j, name, out.weights)) return {.exit_now = 1};
  }
  out.stopped = stop_split(j, actors, probe, store, local);
  return out;
}

/// The devices of --devices (default: cpu:2, or cpu:1 under a launcher), which must be cpu
/// devices; nothing (reported) when they cannot be made.
std::optional<std::vector<strata::device>> cpu_devices(const std::string& flag) {
  // Started by a launcher (the variables strata::net looks for): one device per rank by default.
  const bool launched =
      STRATA_HAS_NET && (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE"));
  try {
    auto devices = strata::make_devices(flag.empty() ? (launched ? "cpu:1" : "cpu:2") : flag);
    for (const auto& d : devices)
      if (d.kind() != strata::device_kind::cpu)
        throw std::invalid_argument("--devices '" + flag + "' must name cpu devices (cpu:N)");
    return devices;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_pipeline: %s\n", e.what());
    return std::nullopt;
  }
}

/// Stage s runs on rank s / (devices per rank), on that rank's device s % (devices per rank).
/// Returns an exit status, 0 when the job can hold its stages.
int place_stages(job& j, bool store) {
  const std::size_t per_rank = j.devices.size(), num_stages = per_rank * static_cast<std::size_t>(j.world);
  const std::size_t layers = widths.size() - 1;
  if (num_stages > layers) {
    std::fprintf(stderr, "custom_pipeline: %zu stages (%d ranks x %zu devices) but the MLP has only %zu layers\n",
                 num_stages, j.world, per_rank, layers);
    return 2;
  }
  if (store && j.world > 1) {
    std::fprintf(stderr, "custom_pipeline: --store keeps every stage in one process with its kvstore, but this "
                 "job has %d ranks (run it without mpirun)\n", j.world);
    return 2;
  }
  j.ranks.resize(num_stages);
  for (std::size_t s = 0; s < num_stages; ++s) j.ranks[s] = static_cast<int>(s / per_rank);
  return 0;
}

/// Data the program makes itself: targets are a fixed smooth function of the inputs.
void make_data(job& j) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  j.x.resize(batch * widths.front());
  j.t.resize(batch * widths.back());
  for (auto& v : j.x) v = u(rng);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t c = 0; c < widths.back(); ++c) j.t[r * widths.back() + c] = std::sin(j.x[r * widths.front() + c] * 2.0f);
}

/// Rank 0's reference: the training on one device; with --store also through a kvstore, which
/// must give the same weights bit for bit. Returns an exit status, 0 when it holds.
int train_reference(job& j, bool store, std::vector<float>& reference) {
  reference = train_on_one_device(j);
  if (!store) return 0;
  std::vector<float> through_store;
  try {
    through_store = train_on_one_device_through_a_store(j);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_pipeline: one device through the kvstore: %s\n", e.what());
    return 1;
  }
  if (through_store != reference) {
    std::fprintf(stderr, "custom_pipeline: on one device the kvstore's SGD gave other weights than the local update\n");
    return 1;
  }
  return 0;
}

/// The same training on the stages with each schedule, compared on rank 0 with the reference.
/// Returns the exit status: 0 when every schedule matches.
int train_and_compare(job& j, bool store, const std::vector<float>& reference) {
  bool ok = true;
  for (auto schedule : {sp::schedule_kind::gpipe, sp::schedule_kind::one_f_one_b}) {
    auto split = store ? train_split<mlp_store_stage>(j, schedule) : train_split<mlp_stage>(j, schedule);
    if (split.exit_now) return split.exit_now;
    ok = ok && split.stopped;
    if (j.rank != 0) continue;
    double diff = 0;
    for (std::size_t i = 0; i < split.weights.size() && i < reference.size(); ++i)
      diff = std::max(diff, std::abs(double(split.weights[i]) - reference[i]));
    std::printf("%s: max |diff| vs one device %.3g\n", sp::to_string(schedule), diff);
    ok = ok && split.weights.size() == reference.size() && diff <= 1e-5;
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A small MLP on strata's pipeline, checked against one device"};
  std::string devices_flag;
  bool store = false;
  app.add_option("--devices", devices_flag,
                 "cpu devices of this process, one stage each (default: cpu:2; under mpirun cpu:1 per rank)");
  app.add_flag("--store", store, "update the weights through a kvstore (a parameter server) instead of on each stage");
  CLI11_PARSE(app, argc, argv);

  auto devices = cpu_devices(devices_flag);
  if (!devices) return 2;
  strata::actor_system system(strata::system_config{.worker_threads = 1});
#if STRATA_HAS_NET
  // Tensors from other ranks land on this rank's first device (no extra receive thread).
  strata::net::endpoint net(system, strata::net::endpoint_config{.receive_device = devices->front()});
  job j{.system = system, .net = net, .rank = net.rank(), .world = net.size()};  // without mpirun: a world of one
#else
  job j{.system = system};
#endif
  j.devices = *devices;
  if (int status = place_stages(j, store); status != 0) return status;
  make_data(j);
  std::vector<float> reference;
  if (j.rank == 0)
    if (int status = train_reference(j, store, reference); status != 0) return status;
  return train_and_compare(j, store, reference);
}
