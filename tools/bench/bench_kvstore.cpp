// strata-bench-kvstore: the KVStore's merge throughput against this machine's memory bandwidth
// (measured in the same run by a plain loop that reads four arrays and writes one), push+pull
// round-trip latency for many small keys, and the speedup of sharding a large key.
//
//   strata-bench-kvstore [--mib 64] [--pushers 4] [--keys 1000] [--key-bytes 1024] [--reps 7]
//                        [--latency-rounds 200] [--shards 1,2,4] [--threads 2] [--json]
//
// Merge GB/s counts the bytes the merge reads and writes: pushers x size read + size written
// (sum of the pushed arrays assigned to the stored value). The anchor counts the same for its loop
// (exactly the same traffic for 4 pushers; other counts run one pass per input and so understate it).
//
//   strata-bench-kvstore --chunk-scaling 25000,100000,500000 [--reps 3] [--json]
//
// instead times one push of a key split into that many chunks of 4 floats over 2 shards: the
// seconds per push and per chunk show whether a push grows linearly with its chunk count.
//
//   mpirun -np 2 strata-bench-kvstore --compression-only [--compression-mib 4] [--reps 7] [--json]
//
// instead compares 2bit and 1bit compressed dist_sync pushes with uncompressed ones: bytes each
// worker sends and time per round (bench_kvstore_compression.cpp; builds with strata::net).
//   mpirun -np 2 strata-bench-kvstore --split-only [--split-mib 64] [--reps 7] [--json]
// times a dist_sync pushpull of one big key split over the ranks against the same key whole
// (bench_kvstore_split.cpp).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "strata/kvstore/kvstore.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"
#include "strata/stats.hpp"

#ifdef STRATA_BENCH_HAVE_KVSTORE_DIST
#include "bench_kvstore_compression.hpp"
#endif

namespace {

using strata::median;
using strata::percentile;

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

template <class T>
T get(std::future<strata::expected<T>> f, const char* what) {
  auto r = f.get();
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message());
  return std::move(*r);
}

/// GB/s of out[i] = a[i] + b[i] + c[i] + d[i] (generalised to `inputs` arrays) on `threads`
/// threads, each on its own contiguous part; median of `reps`.
double anchor_bandwidth(std::size_t n, std::size_t inputs, unsigned threads, int reps) {
  std::vector<std::vector<float>> in(inputs, std::vector<float>(n, 1.0f));
  std::vector<float> out(n, 0.0f);
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = clock_type::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const std::size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        float* __restrict o = out.data();
        if (inputs == 4) {  // the loop the issue names: read four arrays, write one
          const float* __restrict a = in[0].data();
          const float* __restrict b = in[1].data();
          const float* __restrict c = in[2].data();
          const float* __restrict d = in[3].data();
          for (std::size_t i = lo; i < hi; ++i) o[i] = a[i] + b[i] + c[i] + d[i];
          return;
        }
        for (std::size_t i = lo; i < hi; ++i) o[i] = in[0][i];  // other counts: one pass per input
        for (std::size_t j = 1; j < inputs; ++j) {
          const float* __restrict x = in[j].data();
          for (std::size_t i = lo; i < hi; ++i) o[i] += x[i];
        }
      });
    for (auto& th : pool) th.join();
    const double s = seconds_since(t0);
    if (r > 0) rates.push_back(static_cast<double>((inputs + 1) * n * sizeof(float)) / s / 1e9);  // first: warm-up
  }
  return median(rates);
}

/// GB/s of pushes of `pushers` arrays of n floats into one key, merged on `devices` by a store with
/// `shards` shards (1 and one device: a plain device store); median of `reps`.
double merge_bandwidth(strata::actor_system& sys, std::vector<strata::device> devices, std::size_t shards,
                       std::size_t n, std::size_t pushers, int reps) {
  strata::kvstore::options opts;
  if (shards == 1 && devices.size() == 1) {
    opts.kind = strata::kvstore::kind::device;
    opts.merge_device = devices[0];
  } else {
    opts.shards = shards;
    opts.shard_devices = devices;
  }
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, opts));
  auto& dev = devices[0];
  auto s = dev.create_stream();
  std::vector<float> host(n, 0.5f);
  get(kv.init("w", strata::tensor::from_host<float>(std::span<const float>(host), dev, s)), "init");
  std::vector<strata::stream> streams;
  for (auto& d : devices) streams.push_back(d.create_stream());
  std::vector<strata::tensor> values;
  for (std::size_t p = 0; p < pushers; ++p) {
    auto& d = devices[p % devices.size()];
    values.push_back(strata::tensor::from_host<float>(std::span<const float>(host), d, streams[p % devices.size()]));
  }
  for (auto& st : streams) st.synchronize();
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = clock_type::now();
    get(kv.push("w", values), "push");
    const double sec = seconds_since(t0);
    if (r > 0) rates.push_back(static_cast<double>((pushers + 1) * n * sizeof(float)) / sec / 1e9);
  }
  return median(rates);
}

struct latency {
  double median_us = 0, p99_us = 0;
};
/// Round trips of a push of every key followed at once by a pull of every key (a local store).
latency round_trips(strata::actor_system& sys, std::size_t keys, std::size_t key_bytes, int rounds) {
  auto devices = strata::make_devices("cpu:1");
  auto& dev = devices[0];
  auto s = dev.create_stream();
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  const std::size_t n = std::max<std::size_t>(1, key_bytes / sizeof(float));
  std::vector<float> host(n, 0.25f);
  std::vector<strata::kvstore::key> names;
  std::vector<strata::tensor> values, outs;
  for (std::size_t k = 0; k < keys; ++k) {
    names.emplace_back(static_cast<std::int64_t>(k));
    values.push_back(strata::tensor::from_host<float>(std::span<const float>(host), dev, s));
    outs.push_back(strata::tensor::from_host<float>(std::span<const float>(host), dev, s));
  }
  s.synchronize();
  get(kv.init(names, values), "init");
  std::vector<double> us;
  for (int r = 0; r < rounds + 5; ++r) {
    auto t0 = clock_type::now();
    auto pushed = kv.push(names, values);
    auto pulled = kv.pull(names, outs);
    get(std::move(pushed), "push");
    get(std::move(pulled), "pull");
    if (r >= 5) us.push_back(seconds_since(t0) * 1e6);  // the first rounds warm up
  }
  return {median(us), percentile(us, 0.99)};
}

/// Seconds of one push (median of `reps`) of a key split into `chunks` chunks of 16 bytes spread
/// over two shards.
double chunked_push_seconds(strata::actor_system& sys, std::size_t chunks, int reps) {
  auto devices = strata::make_devices("cpu:1");
  auto& dev = devices[0];
  auto s = dev.create_stream();
  const std::size_t n = chunks * 4;
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.shards = 2, .chunk_bytes = 16}),
                             std::chrono::minutes(30));
  std::vector<float> host(n, 0.5f);
  auto value = strata::tensor::from_host<float>(std::span<const float>(host), dev, s);
  s.synchronize();
  get(kv.init("w", value), "init");
  std::vector<double> sec;
  for (int r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
    get(kv.push("w", value), "push");
    sec.push_back(seconds_since(t0));
  }
  return median(sec);
}

/// Milliseconds (medians of `reps`) of a push and a pull of `fraction` of the rows of a
/// `rows` x `dim` embedding under SGD (distinct rows drawn at random, sorted): row-sparse
/// (push_row_sparse + row_sparse_pull) and dense
/// (the same gradient as a full tensor, zeros elsewhere, and a full pull), on one store or on
/// `shards` shards (each on a one-thread cpu device of its own; the key split in 4 MiB chunks).
std::pair<double, double> row_sparse_vs_dense_ms(strata::actor_system& sys, std::int64_t rows, std::int64_t dim,
                                                 double fraction, int reps, std::size_t shards = 1) {
  auto devices = strata::make_devices("cpu:1");
  auto& dev = devices[0];
  auto s = dev.create_stream();
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys, {.shards = shards}), std::chrono::minutes(30));
  const auto n = static_cast<std::size_t>(rows * dim);
  const auto k = std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(rows) * fraction));
  auto full = [&](float v) {
    std::vector<float> host(n, v);
    return strata::tensor::from_host<float>(std::span<const float>(host), {rows, dim}, dev, s);
  };
  get(kv.init("emb", full(0.5f)), "init");
  get(kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.1}), "set_optimizer");
  std::vector<std::int64_t> ids;
  std::vector<float> grad_rows(static_cast<std::size_t>(k * dim), 0.01f);
  std::vector<float> dense_grad(n, 0.0f);
  {  // k distinct rows drawn at random, sorted as MXNet's row_sparse arrays keep their indices
    std::mt19937_64 rng(20261207);
    std::uniform_int_distribution<std::int64_t> row(0, rows - 1);
    std::vector<bool> taken(static_cast<std::size_t>(rows), false);
    while (static_cast<std::int64_t>(ids.size()) < k) {
      const auto id = row(rng);
      if (taken[static_cast<std::size_t>(id)]) continue;
      taken[static_cast<std::size_t>(id)] = true;
      ids.push_back(id);
      std::fill_n(dense_grad.begin() + id * dim, dim, 0.01f);
    }
    std::sort(ids.begin(), ids.end());
  }
  auto sparse_rows = strata::tensor::from_host<float>(std::span<const float>(grad_rows), {k, dim}, dev, s);
  auto sparse_out = strata::tensor::from_host<float>(std::span<const float>(grad_rows), {k, dim}, dev, s);
  auto dense = strata::tensor::from_host<float>(std::span<const float>(dense_grad), {rows, dim}, dev, s);
  auto dense_out = full(0.0f);
  s.synchronize();
  std::vector<double> sparse_ms, dense_ms;
  for (int r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
    get(kv.push("emb", {strata::kvstore::row_sparse{sparse_rows, ids, {rows, dim}}}), "row-sparse push");
    get(kv.row_sparse_pull("emb", sparse_out, ids), "row_sparse_pull");
    sparse_ms.push_back(seconds_since(t0) * 1e3);
    t0 = clock_type::now();
    get(kv.push("emb", dense), "push");
    get(kv.pull("emb", dense_out), "pull");
    dense_ms.push_back(seconds_since(t0) * 1e3);
  }
  return {median(sparse_ms), median(dense_ms)};
}

std::vector<std::size_t> parse_list(const std::string& text, const char* option, std::size_t max) {
  std::vector<std::size_t> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    auto item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    std::size_t used = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v == 0 || v > max)
      throw std::invalid_argument(std::string(option) + " \"" + text +
                                  "\": expected a comma-separated list of counts from 1 to " + std::to_string(max) + ".");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("strata-bench-kvstore: KVStore merge throughput, round-trip latency and sharding speedup");
  double mib = 64;
  std::size_t pushers = 4, keys = 1000, key_bytes = 1024;
  int reps = 7, latency_rounds = 200;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::string shards_text = "1,2,4";
  std::string chunk_scaling_text;
  bool json = false;
  std::int64_t sparse_rows = 1'000'000, sparse_dim = 64;
  double sparse_fraction = 0.01;
  std::size_t sparse_shards = 2;
  app.add_option("--sparse-rows", sparse_rows, "rows of the row-sparse figure's embedding")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100'000'000}));
  app.add_option("--sparse-dim", sparse_dim, "floats per row of that embedding")->check(CLI::Range(std::int64_t{1}, std::int64_t{65536}));
  app.add_option("--sparse-fraction", sparse_fraction, "fraction of its rows pushed and pulled")->check(CLI::Range(1e-9, 1.0));
  app.add_option("--sparse-shards", sparse_shards, "shards of the sharded row-sparse figure (0: skip it)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{64}));
  app.add_option("--mib", mib, "MiB per pushed array (float32)")->check(CLI::Range(0.001, 4096.0));
  app.add_option("--pushers", pushers, "arrays pushed into the key per push")->check(CLI::Range(1, 64));
  app.add_option("--keys", keys, "keys per round trip (latency)")->check(CLI::Range(1, 1000000));
  app.add_option("--key-bytes", key_bytes, "bytes per key (latency)")->check(CLI::Range(4, 1 << 30));
  app.add_option("--reps", reps, "timed merges per figure (median)")->check(CLI::Range(1, 1000));
  app.add_option("--latency-rounds", latency_rounds, "timed round trips")->check(CLI::Range(1, 1000000));
  app.add_option("--threads", threads, "threads of the bandwidth loop and of the merge device")->check(CLI::Range(1, 1024));
  app.add_option("--shards", shards_text, "shard counts to compare, e.g. 1,2,4");
  app.add_option("--chunk-scaling", chunk_scaling_text,
                 "only time one push of a key split into these chunk counts, e.g. 25000,100000,500000");
  app.add_flag("--json", json, "one JSON line instead of the table");
  bool compression_only = false;
  double compression_mib = 4;
  app.add_flag("--compression-only", compression_only,
               "only compare compressed (2bit, 1bit) with uncompressed dist_sync pushes; run under mpirun -np 2");
  app.add_option("--compression-mib", compression_mib, "MiB of float32 gradient each worker pushes per round")
      ->check(CLI::Range(0.001, 4096.0));
  bool split_only = false;
  double split_mib = 64;
  app.add_flag("--split-only", split_only,
               "only compare one key split over the ranks with the same key whole (dist_sync pushpull); run under mpirun -np 2");
  app.add_option("--split-mib", split_mib, "MiB of float32 in the one key of --split-only")->check(CLI::Range(0.001, 4096.0));
  CLI11_PARSE(app, argc, argv);
  // The figures of the distributed store (under mpirun): --split-only and --compression-only.
  auto dist_figure = [&](const char* flag, double figure_mib, bool split) -> int {
    if (std::isnan(figure_mib)) {
      std::fprintf(stderr, "strata-bench-kvstore: --%s-mib must be a number from 0.001 to 4096, not nan.\n", flag);
      return 2;
    }
#ifdef STRATA_BENCH_HAVE_KVSTORE_DIST
    return split ? run_split_bench(figure_mib, reps, json) : run_compression_bench(figure_mib, reps, json);
#else
    (void)split;
    std::fprintf(stderr, "strata-bench-kvstore: --%s-only needs strata::kvstore_dist, which this build lacks "
                         "(configure with STRATA_MPI=ON).\n", flag);
    return 2;
#endif
  };
  if (split_only || std::isnan(split_mib)) return dist_figure("split", split_mib, true);
  if (compression_only || std::isnan(compression_mib)) return dist_figure("compression", compression_mib, false);
  if (std::isnan(sparse_fraction)) {
    std::fprintf(stderr, "strata-bench-kvstore: --sparse-fraction must be a number above 0 and at most 1, not nan.\n");
    return 2;
  }
  if (std::isnan(mib)) {  // CLI::Range lets NaN through: every comparison with it is false
    std::fprintf(stderr, "strata-bench-kvstore: --mib must be a number from 0.001 to 4096, not nan.\n");
    return 2;
  }
  std::vector<std::size_t> shard_counts, chunk_counts;
  try {
    shard_counts = parse_list(shards_text, "--shards", 64);
    if (!chunk_scaling_text.empty()) chunk_counts = parse_list(chunk_scaling_text, "--chunk-scaling", 10000000);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench-kvstore: %s\n", e.what());
    return 2;
  }

  const auto n = std::max<std::size_t>(1, static_cast<std::size_t>(mib * 1024 * 1024 / sizeof(float)));
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  if (!chunk_counts.empty()) {
    try {
      nlohmann::json rows = nlohmann::json::array();
      if (!json) std::printf("%-12s %14s %16s\n", "chunks", "s per push", "us per chunk");
      for (auto c : chunk_counts) {
        const double sec = chunked_push_seconds(sys, c, reps);
        const double per_chunk_us = sec / static_cast<double>(c) * 1e6;
        if (json) rows.push_back({{"chunks", c}, {"push_s", sec}, {"per_chunk_us", per_chunk_us}});
        else std::printf("%-12zu %14.3f %16.3f\n", c, sec, per_chunk_us);
      }
      if (json) std::printf("%s\n", nlohmann::json{{"chunk_scaling", rows}}.dump().c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-bench-kvstore: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  try {
    // (a) one store on one device with `threads` threads against the plain loop.
    const double anchor = anchor_bandwidth(n, pushers, threads, reps);
    auto merge_devs = strata::make_devices("cpu:1", strata::device_options{.cpu_threads_per_device = static_cast<int>(threads)});
    const double merge = merge_bandwidth(sys, merge_devs, 1, n, pushers, reps);
    // (b) round trips of many small keys.
    const latency lat = round_trips(sys, keys, key_bytes, latency_rounds);
    // (c) sharded: shard i on device i of make_devices("cpu:N") (the machine's threads shared out).
    std::vector<std::pair<std::size_t, double>> sharded;
    for (auto count : shard_counts) {
      auto devs = strata::make_devices("cpu:" + std::to_string(count));
      sharded.emplace_back(count, merge_bandwidth(sys, devs, count, n, pushers, reps));
    }
    const double base = sharded.empty() ? 0.0 : sharded.front().second;
    // (d) row-sparse push+pull of a fraction of an embedding's rows against the dense push+pull.
    const auto [sparse_ms, dense_ms] = row_sparse_vs_dense_ms(sys, sparse_rows, sparse_dim, sparse_fraction, reps);
    //     and on `sparse_shards` shards, rows routed to the shards holding them.
    const auto [sharded_sparse_ms, sharded_dense_ms] =
        sparse_shards > 0 ? row_sparse_vs_dense_ms(sys, sparse_rows, sparse_dim, sparse_fraction, reps, sparse_shards)
                          : std::pair<double, double>{0.0, 0.0};

    if (json) {
      nlohmann::json j;
      j["mib"] = mib;
      j["pushers"] = pushers;
      j["threads"] = threads;
      j["anchor_gbps"] = anchor;
      j["merge_gbps"] = merge;
      j["merge_over_anchor"] = merge / anchor;
      j["roundtrip_keys"] = keys;
      j["roundtrip_key_bytes"] = key_bytes;
      j["roundtrip_median_us"] = lat.median_us;
      j["roundtrip_p99_us"] = lat.p99_us;
      j["roundtrip_per_key_us"] = lat.median_us / static_cast<double>(keys);
      nlohmann::json s = nlohmann::json::array();
      for (auto [count, gbps] : sharded)
        s.push_back({{"shards", count}, {"merge_gbps", gbps}, {"speedup", base > 0 ? gbps / base : 0.0}});
      j["sharded"] = s;
      j["row_sparse"] = {{"rows", sparse_rows},
                         {"dim", sparse_dim},
                         {"fraction", sparse_fraction},
                         {"row_sparse_push_pull_ms", sparse_ms},
                         {"dense_push_pull_ms", dense_ms},
                         {"speedup", dense_ms / sparse_ms}};
      if (sparse_shards > 0)
        j["row_sparse_sharded"] = {{"shards", sparse_shards},
                                   {"rows", sparse_rows},
                                   {"dim", sparse_dim},
                                   {"fraction", sparse_fraction},
                                   {"row_sparse_push_pull_ms", sharded_sparse_ms},
                                   {"dense_push_pull_ms", sharded_dense_ms},
                                   {"speedup", sharded_dense_ms / sharded_sparse_ms}};
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("strata-bench-kvstore: %zu pushers x %.3g MiB float32 into one key, %u threads\n\n", pushers, mib,
                threads);
    std::printf("%-44s %12s %14s %8s\n", "figure", "strata", "anchor", "ratio");
    std::printf("%-44s %9.1f GB/s %9.1f GB/s %8.2f\n", "merge (sum + assign) vs read-4-write-1 loop", merge, anchor,
                merge / anchor);
    std::printf("%-44s %10.1f us %14s %8s\n",
                ("push+pull round trip, " + std::to_string(keys) + " x " + std::to_string(key_bytes) + " B: median")
                    .c_str(),
                lat.median_us, "-", "-");
    std::printf("%-44s %10.1f us %14s %8s\n", "  p99", lat.p99_us, "-", "-");
    std::printf("%-44s %10.3f us %14s %8s\n", "  per key (median / keys)", lat.median_us / static_cast<double>(keys),
                "-", "-");
    for (auto [count, gbps] : sharded)
      std::printf("%-44s %9.1f GB/s %9.1f GB/s %8.2f\n",
                  ("merge, " + std::to_string(count) + " shard(s) on cpu:" + std::to_string(count) + " (ratio: vs 1 shard)")
                      .c_str(),
                  gbps, anchor, base > 0 ? gbps / base : 0.0);
    std::printf("%-44s %10.2f ms %11.2f ms %8.1f\n",
                ("row-sparse push+pull, " + std::to_string(sparse_fraction * 100).substr(0, 4) + "% of " +
                 std::to_string(sparse_rows) + " x " + std::to_string(sparse_dim) + " (anchor: dense)")
                    .c_str(),
                sparse_ms, dense_ms, dense_ms / sparse_ms);
    if (sparse_shards > 0)
      std::printf("%-44s %10.2f ms %11.2f ms %8.1f\n",
                  ("  the same on " + std::to_string(sparse_shards) + " shards").c_str(), sharded_sparse_ms,
                  sharded_dense_ms, sharded_dense_ms / sharded_sparse_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench-kvstore: %s\n", e.what());
    return 1;
  }
  return 0;
}
