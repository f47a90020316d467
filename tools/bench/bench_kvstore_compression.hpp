#pragma once
// strata-bench-kvstore's figures of the distributed store, under mpirun: --compression-only (a
// 2-bit and 1-bit compressed dist_sync push against an uncompressed one, bytes moved and time;
// bench_kvstore_compression.cpp) and --split-only (one big key split over the ranks against the
// same key whole; bench_kvstore_split.cpp).

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/error.hpp"
#include "strata/net/endpoint.hpp"

namespace bench_dist {
template <class T>
T value_or_throw(strata::expected<T> r, const std::string& what) {
  if (!r) throw std::runtime_error(what + ": " + r.error().message());
  return std::move(*r);
}
inline void ok_or_throw(strata::expected<void> r, const std::string& what) {
  if (!r) throw std::runtime_error(what + ": " + r.error().message());
}

/// Runs `figure(sys, net, cpu)` on every rank, each with one scheduler thread and one cpu device
/// thread, in a job of 2 or more ranks (`flag` names the figure in the refusal). Returns the exit
/// code: 2 for a job of one rank, 1 when the figure throws (its message printed), else 0.
template <class Figure>
int on_every_rank(const char* flag, Figure figure) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::device cpu = strata::make_devices("cpu:1").front();
  strata::net::endpoint net(sys, strata::net::endpoint_config{.receive_device = cpu});
  int code = 0;
  if (net.size() < 2) {
    std::fprintf(stderr, "strata-bench-kvstore: %s needs a job of 2 or more ranks (mpirun -np 2); this one has 1.\n", flag);
    code = 2;
  } else {
    try {
      figure(sys, net, cpu);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-bench-kvstore: rank %d: %s\n", net.rank(), e.what());
      code = 1;
    }
  }
  net.shutdown();
  sys.shutdown();
  return code;
}
}  // namespace bench_dist

/// Runs the figure on every rank of the job (2 or more ranks): `mib` MiB of float32 gradient per
/// worker and round, `rounds` timed rounds (median) after one warm-up. Rank 0 prints the table,
/// or one JSON line with `json`. Returns the exit code: 2 for a job of one rank, 1 for a failure.
int run_compression_bench(double mib, int rounds, bool json);

/// Runs the split figure on every rank (2 or more): one key of `mib` MiB of float32, pushed and
/// pulled by every worker (dist_sync, SGD) for `rounds` timed rounds (median) after one warm-up,
/// once split over the ranks (big_array_bound below its size) and once whole. Rank 0 prints the
/// table, or one JSON line with `json`. Returns the exit code: 2 for a job of one rank, 1 for a failure.
int run_split_bench(double mib, int rounds, bool json);
