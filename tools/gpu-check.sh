#!/usr/bin/env bash
# One-shot check for a GPU machine lent for a few minutes: run the cuda tests, the GPU benchmark
# and README's main job for a few steps, print a short table last. Reads the card, changes
# nothing (no nvidia-smi settings, no clocks, no MIG, no resets).
#
#   usage: tools/gpu-check.sh [build-dir]      (JOBS=16 by default)
#
# Two ways to get the programs (docs/build.md, "GPU machines"):
# - bundle (used when .gpu-bundle/strata-gpu.tar.xz is there): the lent machines' image has CUDA,
#   cuDNN and PyTorch but not the Debian packages strata builds against, and nothing can be
#   fetched there, so tools/gpu-bundle.sh builds the programs on a build machine and packs them
#   with the shared libraries they need; the device call carries `.gpu-bundle`.
# - build (no bundle, or STRATA_GPU_BUILD=1): configure and build here with CUDA in build-dir
#   (default build-gpu), for a machine that has the build dependencies.
# Logs go to $OUT when it is set (the device tool brings that folder back), else to the build dir.
set -u
cd "$(dirname "$0")/.." || exit 1
src=$PWD
jobs=${JOBS:-16}
declare -a rows=()
row() { rows+=("$(printf '%-30s %-8s %s' "$1" "$2" "$3")"); }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }
summary() {
  printf '\n== summary\n%-30s %-8s %s\n' step result detail
  printf '%s\n' "${rows[@]}"
}

echo "== GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
else
  echo "nvidia-smi not found"
fi

bundle=.gpu-bundle/strata-gpu.tar.xz
if [ -f "$bundle" ] && [ "${STRATA_GPU_BUILD:-0}" != 1 ]; then
  mode=bundle
  root=${STRATA_GPU_ROOT:-/tmp/strata-gpu}
  logs=${OUT:-$root/logs}
  mkdir -p "$logs"
  t=$(date +%s)
  rm -rf "$root.unpack" && mkdir -p "$root.unpack"
  if ! tar -xJf "$bundle" -C "$root.unpack" 2>"$logs/unpack.log"; then
    # No xz on the image: Python's tarfile reads it.
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$root.unpack" \
      >>"$logs/unpack.log" 2>&1 || { row unpack FAILED "see $logs/unpack.log"; cat "$logs/unpack.log"; summary; exit 1; }
  fi
  rm -rf "$root" && mv "$root.unpack" "$root"
  row "unpack bundle" ok "$(head -1 "$root/MANIFEST") ($(elapsed "$t"))"
  bin=$root/bin
  # CUDA's libraries come from the image: the toolkit's folders, then the pip packages (cuBLAS,
  # cuDNN, the runtime) that PyTorch uses; the bundle's own libcudart is the last resort.
  cuda_dirs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
  done
  py_dirs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
seen = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))) + [os.path.join(r, "torch", "lib")]:
        if os.path.isdir(d) and d not in seen:
            seen.append(d)
print(":".join(seen))
PY
)
  [ -n "$py_dirs" ] && cuda_dirs="$cuda_dirs:$py_dirs"
  # PyTorch (the benchmark's anchor row) runs with the image's own library path, not the bundle's.
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec python3 "$@"\n' "'${LD_LIBRARY_PATH:-}'" >"$root/python3"
  chmod +x "$root/python3"
  export STRATA_PYTHON=${STRATA_PYTHON:-$root/python3}
  export LD_LIBRARY_PATH="$root/lib$cuda_dirs:$root/lib-cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The programs were linked against Debian 12's libstdc++ (GLIBCXX_3.4.30); an older system one
  # is replaced by the bundle's.
  if ldd "$bin/lstm_lm" 2>&1 | grep -q "GLIBCXX\|CXXABI\|GCC_"; then
    export LD_LIBRARY_PATH="$root/lib-compat:$LD_LIBRARY_PATH"
  fi
  missing=$(for f in "$bin"/*; do ldd "$f" 2>&1 | grep 'not found' | sed "s|^|$(basename "$f"): |"; done | sort -u)
  if [ -n "$missing" ]; then
    row "shared libraries" FAILED "$(echo "$missing" | head -3 | tr '\n' ';' | tr -s ' \t' ' ')"
    echo "$missing"
  else
    row "shared libraries" ok "cuBLAS $(ldd "$bin/test_kernels_cuda" | awk '/libcublas.so/ {print $3}')"
  fi
  cudnn_line=$(ldd "$bin/strata-bench-lm-gpu" 2>/dev/null | awk '/libcudnn.so/ {print $3}')
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "cuDNN: ${cudnn_line:-not found}"
  tests=("kernels_cuda:$bin/test_kernels_cuda" "device_cuda:$bin/test_device_cuda"
         "kvstore_cuda:$bin/test_kvstore_cuda" "lm_cuda:$bin/test_lm_cuda")
  bench=$bin/strata-bench-lm-gpu
  lm=$bin/lstm_lm
  corpus=(--corpus "$root/corpus.txt")
else
  mode=build
  build=${1:-build-gpu}
  logs=${OUT:-$build}
  mkdir -p "$logs"
  t=$(date +%s)
  if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON >"$logs/configure.log" 2>&1; then
    row configure ok "$(elapsed "$t")"
  else
    row configure FAILED "see $logs/configure.log (no bundle: run tools/gpu-bundle.sh on a build machine)"
    tail -30 "$logs/configure.log"; summary; exit 1
  fi
  t=$(date +%s)
  if cmake --build "$build" -j"$jobs" >"$logs/build.log" 2>&1; then
    row build ok "$(elapsed "$t")"
  else
    row build FAILED "see $logs/build.log"; grep -E 'error' "$logs/build.log" | head -30; summary; exit 1
  fi
  tests=(kernels_cuda:tests/kernels_cuda/test_kernels_cuda device_cuda:tests/device/test_device_cuda
         kvstore_cuda:tests/actors/test_kvstore_cuda lm_cuda:tests/lm/test_lm_cuda)
  for i in "${!tests[@]}"; do tests[$i]="${tests[$i]%%:*}:$build/${tests[$i]#*:}"; done
  bench=$build/tools/bench/strata-bench-lm-gpu
  lm=$build/samples/lstm_lm/lstm_lm
  corpus=()
fi
echo "== mode: $mode, logs in $logs"

# The cuda tests, one program each (what `ctest -R cuda` runs).
for entry in "${tests[@]}"; do
  name=${entry%%:*}
  prog=${entry#*:}
  echo "== $name"
  t=$(date +%s)
  if [ ! -x "$prog" ]; then
    row "$name" FAILED "$prog is missing"
    continue
  fi
  timeout 300 "$prog" --report_level=short >"$logs/$name.log" 2>&1
  rc=$?
  tail -15 "$logs/$name.log"
  line=$(grep -E 'test cases? out of' "$logs/$name.log" | sed -E 's/^ *([0-9]+) test cases? out of ([0-9]+) ([a-z]+).*/\1\/\2 \3/' | paste -sd, -)
  case $rc in 0) result=ok ;; 77) result=skipped ;; *) result=FAILED ;; esac  # 77: no GPU seen
  row "$name" "$result" "${line:-exit $rc} ($(elapsed "$t"))"
done

# The LM step on this GPU: cuDNN's LSTM step (fp32, TF32), PyTorch's own step where python3 has
# CUDA, lm_pipeline on the whole GPU and 8 stage actors sharing it (docs/perf.md). Seed
# configuration, char vocabulary; ~1-2 minutes.
echo "== strata-bench-lm-gpu"
if [ -x "$bench" ]; then
  t=$(date +%s)
  if STRATA_PYTHON=${STRATA_PYTHON:-python3} STRATA_SOURCE_DIR=$src timeout 300 "$bench" --vocab 96 --stages 8 \
      --micro-batches 4 --warmup 3 --steps 10 >"$logs/strata-bench-lm-gpu.log" 2>&1; then
    row strata-bench-lm-gpu ok "$(elapsed "$t")"
  else
    rc=$?
    row strata-bench-lm-gpu FAILED "exit $rc after $(elapsed "$t"), see $logs/strata-bench-lm-gpu.log"
  fi
  cat "$logs/strata-bench-lm-gpu.log"
  line=$(grep '^summary:' "$logs/strata-bench-lm-gpu.log" | tail -1)
  [ -n "$line" ] && row "  LM step ms (vs cuDNN fp32)" "" "${line#summary: }"
else
  row strata-bench-lm-gpu skipped "not built (needs STRATA_CUDA and cuDNN)"
fi

# README's first command on this machine's default devices (cuda:0x2 on one GPU), briefly.
echo "== lstm_lm train (default devices, 20 steps)"
if [ -x "$lm" ]; then
  t=$(date +%s)
  if timeout 150 "$lm" train "${corpus[@]}" --steps 20 --val-tokens 2000 >"$logs/lstm_lm.log" 2>&1; then
    row "lstm_lm train 20 steps" ok "$(tail -1 "$logs/lstm_lm.log" | cut -c1-90) ($(elapsed "$t"))"
  else
    row "lstm_lm train 20 steps" FAILED "exit $? after $(elapsed "$t"), see $logs/lstm_lm.log"
  fi
  tail -4 "$logs/lstm_lm.log"
fi

# Last, as it is the slowest: the kernels' tests under compute-sanitizer's memcheck (out-of-bounds
# and misaligned accesses that results alone may not show). MEMCHECK=0 skips it.
if [ "${MEMCHECK:-1}" != 0 ]; then
  echo "== compute-sanitizer memcheck: kernels_cuda"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
  kprog=${tests[0]#*:}
  if [ -n "$sanitizer" ] && [ -x "$kprog" ]; then
    t=$(date +%s)
    timeout 240 "$sanitizer" --tool memcheck --error-exitcode 9 "$kprog" --report_level=short >"$logs/memcheck.log" 2>&1
    rc=$?
    tail -8 "$logs/memcheck.log"
    case $rc in
      0) row "memcheck kernels_cuda" ok "$(grep -m1 'ERROR SUMMARY' "$logs/memcheck.log") ($(elapsed "$t"))" ;;
      124) row "memcheck kernels_cuda" timeout "240 s, see $logs/memcheck.log" ;;
      *) row "memcheck kernels_cuda" FAILED "exit $rc: $(grep -m1 'ERROR SUMMARY' "$logs/memcheck.log") ($(elapsed "$t"))" ;;
    esac
  else
    row "memcheck kernels_cuda" skipped "${sanitizer:-compute-sanitizer not found}"
  fi
fi

summary
