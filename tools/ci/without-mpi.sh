#!/usr/bin/env bash
# CI: builds the library and the samples with STRATA_MPI=OFF (no strata::net, no MPI anywhere),
# warnings as errors, and runs the samples that differ without it: a program that does not use
# the optional target must build and run unchanged (docs/build.md). CUDA, tests and benchmarks
# stay off, and it builds unoptimised, to keep it short.
#
#   tools/ci/without-mpi.sh
#
# Builds into build-nompi (never the regular build directories). Exit status: 0 when the build
# holds no strata::net or MPI and the samples run; non-zero otherwise, with one line saying what.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=build-nompi
mkdir -p "$work"
# -O0: this pass checks that the build holds no MPI and that the samples run; the release pass
# already builds the same sources optimised with warnings as errors (-O0: about a third less compile time).
# STRATA_UNITY_BUILD=OFF: the other passes build in unity batches; this one compiles every library
# and sample file on its own, so a file that leans on a neighbour's includes is caught here.
generator=()
if [[ -z "${CMAKE_GENERATOR:-}" && ! -f "$work/CMakeCache.txt" ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake "${generator[@]}" -S . -B "$work" -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O0 -DSTRATA_MPI=OFF -DSTRATA_CUDA=OFF -DSTRATA_WERROR=ON \
      -DSTRATA_UNITY_BUILD=OFF \
      -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF -DSTRATA_BUILD_SAMPLES=ON >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "without-mpi: the configure step failed" >&2; exit 1; }
grep -q "strata::net (STRATA_MPI=OFF): OFF" "$work/configure.log" ||
  { echo "without-mpi: the configure step did not report strata::net off" >&2; exit 1; }
cmake --build "$work" -j"$(nproc)" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; echo "without-mpi: the build failed" >&2; exit 1; }
if find "$work" -name 'libstrata_net*' -o -name 'libmpi*' | grep -q .; then
  echo "without-mpi: a strata::net or MPI library was built with STRATA_MPI=OFF" >&2; exit 1
fi
if ldd "$work/samples/lstm_lm/lstm_lm" | grep -q 'libmpi'; then
  echo "without-mpi: lstm_lm links MPI although STRATA_MPI=OFF" >&2; exit 1
fi
# The main job, a few steps of a small model, and the pipeline sample on one process.
"$work/samples/lstm_lm/lstm_lm" train --layers 2 --hidden 32 --embed 16 --steps 3 --val-tokens 500 >"$work/lm.log" 2>&1 ||
  { cat "$work/lm.log"; echo "without-mpi: lstm_lm train failed" >&2; exit 1; }
"$work/samples/custom_pipeline" >"$work/pipeline.log" 2>&1 ||
  { cat "$work/pipeline.log"; echo "without-mpi: custom_pipeline failed" >&2; exit 1; }
echo "without-mpi: built with STRATA_MPI=OFF (no strata::net, no MPI linked); lstm_lm and custom_pipeline ran"
