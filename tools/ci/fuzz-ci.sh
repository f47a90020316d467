#!/usr/bin/env bash
# CI: fuzzes the trace reader (and the strata-trace views behind it) for a minute on the
# checked-in seed corpus (tools/trace/fuzz.sh; docs/trace-tools.md, "Tests and fuzzing").
#
#   tools/ci/fuzz-ci.sh
#
# Installs clang and libFuzzer (Debian 12: clang, libclang-rt-14-dev) when they are missing and
# it runs as root (as CI does); not root and missing: one line saying so, exit 0. Builds into
# build-fuzz (never the regular build directories), runs for STRATA_FUZZ_SECONDS (default 60).
# Exit status: 0 when the fuzzer found nothing; non-zero on a crash, a leak, a timeout or an
# out-of-memory input (the input is left as build-fuzz/crash-* etc. and listed) or when the
# fuzz target does not build.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${STRATA_FUZZ_SECONDS:-60}"
work=build-fuzz

have_clang() {
  command -v clang++ >/dev/null 2>&1 || return 1
  # libFuzzer's runtime (libclang-rt-14-dev on Debian 12) next to clang's other runtimes.
  local rt
  rt="$(clang++ -print-runtime-dir 2>/dev/null || true)"
  compgen -G "${rt:-/nonexistent}/libclang_rt.fuzzer*.a" >/dev/null 2>&1 ||
    compgen -G "$(clang++ -print-resource-dir 2>/dev/null || echo /nonexistent)/lib/*/libclang_rt.fuzzer-x86_64.a" >/dev/null 2>&1
}

if ! have_clang; then
  if [[ "$(id -u)" -ne 0 ]]; then
    echo "fuzz-ci: NOTICE: clang/libFuzzer missing and not root, fuzzing skipped (apt-get install -y clang libclang-rt-14-dev)"
    exit 0
  fi
  echo "fuzz-ci: installing clang and libclang-rt-14-dev"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq clang libclang-rt-14-dev >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
  fi
  if ! have_clang; then
    echo "fuzz-ci: clang++ with libFuzzer still not usable after installing clang libclang-rt-14-dev" >&2
    exit 2
  fi
fi

mkdir -p "$work"
marker="$work/.fuzz-ci-start"
touch "$marker"
start=$(date +%s)
status=0
tools/trace/fuzz.sh "$seconds" "$work" || status=$?
elapsed=$(($(date +%s) - start))

mapfile -t findings < <(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
                          -o -name 'oom-*' \) -newer "$marker" 2>/dev/null | sort)
if ((status != 0)) || ((${#findings[@]} > 0)); then
  echo "fuzz-ci: FAIL after ${elapsed}s (fuzz.sh exit status $status)" >&2
  for f in "${findings[@]}"; do
    echo "fuzz-ci: finding $f; reproduce with: $work/fuzz_trace_reader $f" >&2
  done
  ((status != 0)) || status=1
  exit "$status"
fi
echo "fuzz-ci: PASS: ${seconds}s of fuzzing the trace reader found nothing (${elapsed}s with the build)"
