// A model of your own on strata's pipeline: a small MLP (mlp_stage.hpp) split into stages, one per
// cpu device, trained with GPipe and 1F1B on data it makes itself, checked against the same
// training on one device. Under mpirun (built with strata::net) the stages are spread over the
// ranks, `--devices` per rank, and rank 0 prints the comparison. The tutorial: docs/pipeline.md.
//
//   ./custom_pipeline                                  two stages on cpu:2 in this process
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
#include "strata/device/all.hpp"
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

namespace {
/// Rank 0 -> another rank: the weights of your stages, in stage order.
struct weights_request {};
template <class A>
void serialize(A&, weights_request&) {}
}  // namespace
#if STRATA_HAS_NET
STRATA_NET_DECLARE(weights_request, std::vector<float>);
#endif

int main(int argc, char** argv) {
  namespace sp = strata::pipeline;
  CLI::App app{"A small MLP on strata's pipeline, checked against one device"};
  std::string devices_flag;
  app.add_option("--devices", devices_flag,
                 "cpu devices of this process, one stage each (default: cpu:2; under mpirun cpu:1 per rank)");
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
  const int rank = net.rank(), world = net.size();  // without mpirun: a world of one, MPI not started
#else
  const int rank = 0, world = 1;
#endif
  // Stage s runs on rank s / (devices per rank), on that rank's device s % (devices per rank).
  const std::size_t per_rank = devices.size(), num_stages = per_rank * static_cast<std::size_t>(world);
  const std::size_t layers = widths.size() - 1;
  if (num_stages > layers) {
    std::fprintf(stderr, "custom_pipeline: %zu stages (%d ranks x %zu devices) but the MLP has only %zu layers\n",
                 num_stages, world, per_rank, layers);
    return 2;
  }
  std::vector<int> ranks(num_stages);
  for (std::size_t s = 0; s < num_stages; ++s) ranks[s] = static_cast<int>(s / per_rank);

  // Data the program makes itself: targets are a fixed smooth function of the inputs.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(batch * widths.front()), t(batch * widths.back());
  for (auto& v : x) v = u(rng);
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t j = 0; j < widths.back(); ++j) t[r * widths.back() + j] = std::sin(x[r * widths.front() + j] * 2.0f);

  // One device: the whole MLP as one stage, its micro-batches forward and backward in order.
  std::vector<float> reference;
  if (rank == 0) {
    auto one = strata::make_devices("cpu:1");
    auto s = one[0].create_stream();
    mlp_stage whole(0, layers, one[0], s);
    whole.set_data(x, t);
    for (std::size_t step = 0; step < steps; ++step) {
      for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.forward(mb, 0, s);
      for (std::size_t mb = 0; mb < micro_batches; ++mb) whole.backward(mb, 0, s);
      whole.update({}, s);
    }
    s.synchronize();
    reference = whole.weights();
  }

  // The same training on the stages (layers split evenly), with each schedule.
  bool ok = true;
  for (auto schedule : {sp::schedule_kind::gpipe, sp::schedule_kind::one_f_one_b}) {
    auto plan = sp::make_plan(schedule, static_cast<int>(num_stages), static_cast<int>(micro_batches));
    std::vector<std::shared_ptr<sp::stage_context>> contexts(num_stages);
    std::vector<std::shared_ptr<mlp_stage>> stages(num_stages);
    for (std::size_t i = 0; i < num_stages; ++i) {
      if (ranks[i] != rank) continue;  // another rank builds it
      const auto& dev = devices[i % per_rank];
      contexts[i] = std::make_shared<sp::stage_context>(static_cast<int>(i), dev);
      auto compute = contexts[i]->compute();
      stages[i] = std::make_shared<mlp_stage>(i * layers / num_stages, (i + 1) * layers / num_stages, dev, compute);
      stages[i]->set_data(x, t);
    }
    sp::pipeline_options options;
    options.stage_name = std::string(sp::to_string(schedule)) + "-stage";  // names are unique per process
    options.driver_name = std::string(sp::to_string(schedule)) + "-driver";
    auto local_weights = [stages] {
      std::vector<float> all;
      for (const auto& m : stages)
        if (m) {
          const auto w = m->weights();
          all.insert(all.end(), w.begin(), w.end());
        }
      return all;
    };
    sp::pipeline_actors actors;
    strata::actor_ref probe;
#if STRATA_HAS_NET
    if (world > 1) {
      try {
        actors = strata::pipeline_net::spawn_pipeline(system, net, plan, ranks, contexts, stages, options);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "custom_pipeline: %s\n", e.what());
        return 2;
      }
      probe = system.spawn([local_weights](strata::actor&) -> strata::behavior {
        return {[local_weights](const weights_request&) { return local_weights(); }};
      });
      (void)net.publish(probe, std::string(sp::to_string(schedule)) + "-weights");
    }
#endif
    if (world == 1) actors = sp::spawn_pipeline(system, plan, contexts, stages, options);
    if (rank == 0) {
      for (std::size_t step = 0; step < steps; ++step) {
        auto r = system.request<sp::step_outcome>(actors.driver, std::chrono::minutes(1), sp::run_step{}).get();
        if (!r) {
          std::fprintf(stderr, "custom_pipeline: %s\n", r.error().message().c_str());
          return 1;
        }
        std::printf("%s step %zu: loss %.6f\n", sp::to_string(schedule), step + 1, r->reports.back().at(0));
      }
    }
    std::vector<float> split = local_weights();
#if STRATA_HAS_NET
    for (int other = 1; rank == 0 && other < world; ++other) {  // the other ranks' stages, in order
      auto theirs = system.request<std::vector<float>>(
          net.remote(other, std::string(sp::to_string(schedule)) + "-weights").value(), std::chrono::minutes(1),
          weights_request{}).get();
      if (!theirs) {
        std::fprintf(stderr, "custom_pipeline: %s\n", theirs.error().message().c_str());
        return 1;
      }
      split.insert(split.end(), theirs->begin(), theirs->end());
    }
    if (world > 1) {  // rank 0 stops the driver; the others serve until then
      if (auto done = strata::pipeline_net::stop_pipeline(system, net, actors, std::chrono::minutes(10)); !done) {
        std::fprintf(stderr, "custom_pipeline: rank %d: %s\n", rank, done.error().message().c_str());
        ok = false;
      }
    }
#endif
    if (world == 1) {
      system.stop(actors.driver);
      system.stop(actors.supervisor);
    }
    if (probe) system.stop(probe);
    for (const auto& c : contexts)  // the stages' queued work captures the models
      if (c) c->compute().synchronize();
    if (rank != 0) continue;
    double diff = 0;
    for (std::size_t i = 0; i < split.size() && i < reference.size(); ++i)
      diff = std::max(diff, std::abs(double(split[i]) - reference[i]));
    std::printf("%s: max |diff| vs one device %.3g\n", sp::to_string(schedule), diff);
    ok = ok && split.size() == reference.size() && diff <= 1e-5;
  }
  return ok ? 0 : 1;
}
