// strata-bench-kvstore --compression-only: what gradient compression saves a distributed store.
//
//   mpirun -np 2 strata-bench-kvstore --compression-only [--compression-mib 4] [--reps 7] [--json]
//
// Every rank is a worker of a dist_sync store (strata::kvstore_dist) whose keys are spread so
// that each rank owns one; a round pushes `mib` MiB of random float32 gradient per worker (split
// over the keys), then a barrier. Three stores take the same rounds: uncompressed, 2bit and 1bit
// (set_gradient_compression). Bytes are the push payload this worker sent per round
// (store::bytes_pushed); time is rank 0's median round, quantization on the worker included.

#include "bench_kvstore_compression.hpp"

#include <chrono>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/kvstore_dist/store.hpp"
#include "strata/stats.hpp"

namespace {

namespace kvd = strata::kvstore_dist;
using clock_type = std::chrono::steady_clock;

struct figure {
  std::string name;  // "none", "2bit", "1bit"
  double bytes_per_round = 0;
  double ms_per_round = 0;
};

/// One key owned by each rank (the first integer keys that land there), so every worker's
/// push crosses to every other rank.
std::vector<strata::kvstore::key> one_key_per_rank(const kvd::store& kv) {
  std::vector<std::int64_t> keys(static_cast<std::size_t>(kv.num_workers()), -1);
  std::size_t left = keys.size();
  for (std::int64_t k = 0; left > 0; ++k) {
    auto& slot = keys[static_cast<std::size_t>(kv.owner(strata::kvstore::key(k)))];
    if (slot >= 0) continue;
    slot = k;
    --left;
  }
  return {keys.begin(), keys.end()};
}

using bench_dist::ok_or_throw;
using bench_dist::value_or_throw;

/// `rounds` timed rounds (after one warm-up) of pushes into a fresh dist_sync store compressed
/// with `type` ("none": not compressed).
figure time_pushes(strata::actor_system& sys, strata::net::endpoint& net, strata::device& cpu, const std::string& type,
                   std::size_t floats, int rounds) {
  kvd::store kv(sys, net, kvd::store_options{.value_device = cpu});
  ok_or_throw(kv.set_gradient_compression(type, type == "1bit" ? 0.0f : 0.5f), "set_gradient_compression");
  strata::stream s = cpu.create_stream();
  const auto keys = one_key_per_rank(kv);
  const std::size_t per_key = std::max<std::size_t>(1, floats / keys.size());
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(per_key)};
  std::mt19937 rng(static_cast<std::uint32_t>(1234 + kv.rank()));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<strata::tensor> grads;  // two gradients per key, alternated over the rounds
  for (std::size_t i = 0; i < 2 * keys.size(); ++i) {
    std::vector<float> g(per_key);
    for (auto& x : g) x = normal(rng);
    grads.push_back(strata::tensor::from_host<float>(std::span<const float>(g), shape, cpu, s));
  }
  for (const auto& k : keys)
    ok_or_throw(kv.init(k, strata::tensor::from_host<float>(std::span<const float>(std::vector<float>(per_key, 0.0f)), shape,
                                                          cpu, s)),
                "init");
  std::vector<double> ms;
  std::uint64_t bytes = 0;
  for (int r = 0; r <= rounds; ++r) {
    ok_or_throw(kv.barrier(), "barrier");
    const std::uint64_t before = kv.bytes_pushed();
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < keys.size(); ++i)
      ok_or_throw(kv.push(keys[i], {grads[2 * i + static_cast<std::size_t>(r % 2)]}), "push");
    ok_or_throw(kv.barrier(), "barrier");
    if (r == 0) continue;  // warm-up
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    bytes += kv.bytes_pushed() - before;
  }
  // The last round's merges finish before the store goes: every worker pulls its keys.
  for (const auto& k : keys) value_or_throw(kv.pull(k), "pull");
  ok_or_throw(kv.barrier(), "barrier");
  return figure{type, static_cast<double>(bytes) / rounds, strata::median(ms)};
}

}  // namespace

int run_compression_bench(double mib, int rounds, bool json) {
  return bench_dist::on_every_rank("--compression-only", [&](strata::actor_system& sys, strata::net::endpoint& net, strata::device& cpu) {
    const auto floats = std::max<std::size_t>(1, static_cast<std::size_t>(mib * 1024 * 1024 / sizeof(float)));
    std::vector<figure> figures;
    for (const char* type : {"none", "2bit", "1bit"}) figures.push_back(time_pushes(sys, net, cpu, type, floats, rounds));
    const figure& plain = figures.front();
    if (net.rank() == 0 && json) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& f : figures)
        rows.push_back({{"type", f.name},
                        {"bytes_per_round", f.bytes_per_round},
                        {"ms_per_round", f.ms_per_round},
                        {"bytes_ratio", plain.bytes_per_round / f.bytes_per_round},
                        {"speedup", plain.ms_per_round / f.ms_per_round}});
      std::printf("%s\n", nlohmann::json{{"compression", {{"ranks", net.size()}, {"mib", mib}, {"rounds", rounds}, {"rows", rows}}}}
                              .dump()
                              .c_str());
    } else if (net.rank() == 0) {
      std::printf("strata-bench-kvstore: dist_sync push of %.3g MiB float32 per worker and round, %d ranks, "
                  "median of %d rounds\n\n",
                  mib, net.size(), rounds);
      std::printf("%-28s %16s %12s %12s %10s\n", "push", "bytes/worker", "ms/round", "bytes ratio", "speedup");
      for (const auto& f : figures)
        std::printf("%-28s %16.0f %12.2f %12.1f %10.2f\n",
                    (f.name == "none" ? std::string("uncompressed") : f.name + " compressed").c_str(), f.bytes_per_round,
                    f.ms_per_round, plain.bytes_per_round / f.bytes_per_round, plain.ms_per_round / f.ms_per_round);
    }
  });
}
