// strata-bench-kvstore --split-only: one big key split over the servers against the same key whole.
//
//   mpirun -np 2 strata-bench-kvstore --split-only [--split-mib 64] [--reps 7] [--json]
//
// Every rank is a worker of a dist_sync store with SGD; a round is one pushpull of one key of
// `mib` MiB of random float32 by every worker, then a barrier. Two stores take the same rounds:
// big_array_bound below the key's size (split: part i on rank i, every rank serves a part) and
// never_split (the key whole on one rank, which serves every worker). Time is rank 0's median.

#include <chrono>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_kvstore_compression.hpp"
#include "strata/kvstore_dist/store.hpp"
#include "strata/stats.hpp"

namespace {

namespace kvd = strata::kvstore_dist;
using bench_dist::ok_or_throw;
using bench_dist::value_or_throw;

double time_pushpulls(strata::actor_system& sys, strata::net::endpoint& net, strata::device& cpu, bool split,
                      std::size_t floats, int rounds) {
  kvd::store kv(sys, net,
                kvd::store_options{.value_device = cpu,
                                   .big_array_bound = split ? std::int64_t{0} : kvd::store_options::never_split});
  ok_or_throw(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.01}), "set_optimizer");
  strata::stream s = cpu.create_stream();
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(floats)};
  std::mt19937 rng(static_cast<std::uint32_t>(1234 + kv.rank()));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(floats);
  for (auto& x : g) x = normal(rng);
  const strata::tensor grad = strata::tensor::from_host<float>(std::span<const float>(g), shape, cpu, s);
  ok_or_throw(kv.barrier(), "barrier");
  ok_or_throw(kv.init(0, strata::tensor::from_host<float>(std::span<const float>(std::vector<float>(floats, 0.0f)), shape, cpu, s)),
              "init");
  std::vector<double> ms;
  for (int r = 0; r <= rounds; ++r) {
    ok_or_throw(kv.barrier(), "barrier");
    const auto t0 = std::chrono::steady_clock::now();
    auto merged = value_or_throw(kv.pushpull(0, {grad}), "pushpull");
    merged.ready_event().synchronize();
    ok_or_throw(kv.barrier(), "barrier");
    if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return strata::median(ms);
}

}  // namespace

int run_split_bench(double mib, int rounds, bool json) {
  return bench_dist::on_every_rank("--split-only", [&](strata::actor_system& sys, strata::net::endpoint& net, strata::device& cpu) {
    const auto floats = std::max<std::size_t>(2, static_cast<std::size_t>(mib * 1024 * 1024 / sizeof(float)));
    const double whole = time_pushpulls(sys, net, cpu, false, floats, rounds);
    const double split = time_pushpulls(sys, net, cpu, true, floats, rounds);
    if (net.rank() == 0 && json) {
      std::printf("%s\n", nlohmann::json{{"split", {{"ranks", net.size()}, {"mib", mib}, {"rounds", rounds},
                                                    {"whole_ms", whole}, {"split_ms", split}, {"speedup", whole / split}}}}
                              .dump()
                              .c_str());
    } else if (net.rank() == 0) {
      std::printf("strata-bench-kvstore: dist_sync pushpull of one %.3g MiB float32 key per worker and round (SGD), "
                  "%d ranks, median of %d rounds\n\n",
                  mib, net.size(), rounds);
      std::printf("%-32s %12s %10s\n", "key", "ms/round", "speedup");
      std::printf("%-32s %12.2f %10.2f\n", "whole (on one rank)", whole, 1.0);
      std::printf("%-32s %12.2f %10.2f\n", ("split (" + std::to_string(net.size()) + " parts)").c_str(), split, whole / split);
    }
  });
}
