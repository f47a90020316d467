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

/// Trains the MLP split into one `Model` stage per device of the job with `schedule`, the layers
/// split evenly; rank 0 runs the steps and prints each step's loss.
template <class Model>
split_outcome train_split(job& j, sp::schedule_kind schedule) {
  const std::string name = sp::to_string(schedule);  // names are unique per process
  const std::size_t num_stages = j.ranks.size(), per_rank = j.devices.size(), layers = widths.size() - 1;
  auto plan = sp::make_plan(schedule, static_cast<int>(num_stages), static_cast<int>(micro_batches));
  std::vector<std::shared_ptr<sp::stage_context>> contexts(num_stages);
  std::vector<std::shared_ptr<Model>> stages(num_stages);
  for (std::size_t i = 0; i < num_stages; ++i) {
    if (j.ranks[i] != j.rank) continue;  // another rank builds it
    const auto& dev = j.devices[i % per_rank];
    contexts[i] = std::make_shared<sp::stage_context>(static_cast<int>(i), dev);
    auto compute = contexts[i]->compute();
    stages[i] = std::make_shared<Model>(i * layers / num_stages, (i + 1) * layers / num_stages, dev, compute);
    stages[i]->set_data(j.x, j.t);
  }
  sp::pipeline_options options;
  options.stage_name = name + "-stage";
  options.driver_name = name + "-driver";
  strata::actor_ref store;
  if constexpr (requires(Model& m) { m.initial_weights(); }) {  // one store for the job's stages
    store = spawn_sgd_store(j.system, name + "-store");
    strata::kvstore::client kv(j.system, store);
    for (const auto& m : stages) {
      auto initial = m->initial_weights();
      if (auto init = kv.init(initial.keys, initial.values).get(); !init) {
        std::fprintf(stderr, "custom_pipeline: %s\n", init.error().message().c_str());
        j.system.stop(store);
        return {.exit_now = 1};
      }
    }
    options.store = store;
  }
  auto local_weights = [stages] {
    std::vector<float> all;
    for (const auto& m : stages)
      if (m) {
        const auto w = m->weights();
        all.insert(all.end(), w.begin(), w.end());
      }
    return all;
  };
  split_outcome out;
  sp::pipeline_actors actors;
  strata::actor_ref probe;
#if STRATA_HAS_NET
  if (j.world > 1) {
    try {
      actors = strata::pipeline_net::spawn_pipeline(j.system, j.net, plan, j.ranks, contexts, stages, options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "custom_pipeline: %s\n", e.what());
      return {.exit_now = 2};
    }
    probe = j.system.spawn([local_weights](strata::actor&) -> strata::behavior {
      return {[local_weights](const weights_request&) { return local_weights(); }};
    });
    (void)j.net.publish(probe, name + "-weights");
  }
#endif
  if (j.world == 1) actors = sp::spawn_pipeline(j.system, plan, contexts, stages, options);
  if (j.rank == 0) {
    for (std::size_t step = 0; step < steps; ++step) {
      auto r = j.system.request<sp::step_outcome>(actors.driver, std::chrono::minutes(1), sp::run_step{}).get();
      if (!r) {
        std::fprintf(stderr, "custom_pipeline: %s\n", r.error().message().c_str());
        return {.exit_now = 1};
      }
      std::printf("%s step %zu: loss %.6f\n", name.c_str(), step + 1, r->reports.back().at(0));
    }
  }
  if (j.rank == 0) out.weights = local_weights();  // the other ranks' weights: their probes, once rank 0 has run the steps
#if STRATA_HAS_NET
  for (int other = 1; j.rank == 0 && other < j.world; ++other) {  // the other ranks' stages, in order
    auto theirs = j.system.request<std::vector<float>>(j.net.remote(other, name + "-weights").value(),
                                                       std::chrono::minutes(1), weights_request{}).get();
    if (!theirs) {
      std::fprintf(stderr, "custom_pipeline: %s\n", theirs.error().message().c_str());
      return {.exit_now = 1};
    }
    out.weights.insert(out.weights.end(), theirs->begin(), theirs->end());
  }
  if (j.world > 1) {  // rank 0 stops the driver; the others serve until then
    if (auto done = strata::pipeline_net::stop_pipeline(j.system, j.net, actors, std::chrono::minutes(10)); !done) {
      std::fprintf(stderr, "custom_pipeline: rank %d: %s\n", j.rank, done.error().message().c_str());
      out.stopped = false;
    }
  }
#endif
  if (j.world == 1) {
    j.system.stop(actors.driver);
    j.system.stop(actors.supervisor);
  }
  if (probe) j.system.stop(probe);
  if (store) j.system.stop(store);
  for (const auto& c : contexts)  // the stages' queued work captures the models
    if (c) c->compute().synchronize();
  return out;
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

  // Started by a launcher (the variables strata::net looks for): one device per rank by default.
  const bool launched =
      STRATA_HAS_NET && (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE"));
  std::vector<strata::device> devices;
  try {
    devices = strata::make_devices(devices_flag.empty() ? (launched ? "cpu:1" : "cpu:2") : devices_flag);
    for (const auto& d : devices)
      if (d.kind() != strata::device_kind::cpu)
        throw std::invalid_argument("--devices '" + devices_flag + "' must name cpu devices (cpu:N)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_pipeline: %s\n", e.what());
    return 2;
  }
  strata::actor_system system(strata::system_config{.worker_threads = 1});
#if STRATA_HAS_NET
  // Tensors from other ranks land on this rank's first device (no extra receive thread).
  strata::net::endpoint net(system, strata::net::endpoint_config{.receive_device = devices.front()});
  job j{.system = system, .net = net, .rank = net.rank(), .world = net.size()};  // without mpirun: a world of one
#else
  job j{.system = system};
#endif
  j.devices = devices;
  // Stage s runs on rank s / (devices per rank), on that rank's device s % (devices per rank).
  const std::size_t per_rank = devices.size(), num_stages = per_rank * static_cast<std::size_t>(j.world);
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

  // Data the program makes itself: targets are a fixed smooth function of the inputs.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  j.x.resize(batch * widths.front());
  j.t.resize(batch * widths.back());
  for (auto& v : j.x) v = u(rng);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t c = 0; c < widths.back(); ++c) j.t[r * widths.back() + c] = std::sin(j.x[r * widths.front() + c] * 2.0f);

  std::vector<float> reference;
  if (j.rank == 0) {
    reference = train_on_one_device(j);
    if (store) {  // the store's update is the local one: bit for bit on one device
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
    }
  }

  // The same training on the stages (layers split evenly), with each schedule.
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
