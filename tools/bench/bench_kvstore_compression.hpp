#pragma once
// strata-bench-kvstore --compression-only: a 2-bit (and 1-bit) compressed dist_sync push against
// an uncompressed one, bytes moved and time, under mpirun (bench_kvstore_compression.cpp).

/// Runs the figure on every rank of the job (2 or more ranks): `mib` MiB of float32 gradient per
/// worker and round, `rounds` timed rounds (median) after one warm-up. Rank 0 prints the table,
/// or one JSON line with `json`. Returns the exit code: 2 for a job of one rank, 1 for a failure.
int run_compression_bench(double mib, int rounds, bool json);
