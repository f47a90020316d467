#!/usr/bin/env bash
# One-shot check for a GPU machine lent for a few minutes: say which driver, CUDA runtime and
# cuBLAS the programs get (and stop if they do not fit), then run, most valuable first, the cuda
# tests, the 8-stage LM benchmark, the kernels' tests under compute-sanitizer memcheck and
# README's main job for a few steps. Reads the card, changes nothing (no nvidia-smi settings, no
# clocks, no MIG, no resets).
#
#   usage: tools/gpu-check.sh [build-dir]      (JOBS=16 by default)
#
# Time: one deadline for the whole run, GPU_CHECK_DEADLINE seconds (default 500) from the start;
# each step runs under `timeout` with the smaller of its own cap and the time left, and a step
# that no longer fits is reported as skipped. Each row of the summary is appended to
# $OUT/summary.txt (else the log folder's) as soon as its step ends, with the step logs packed into
# $OUT/logs.tar.gz, and the summary is printed when the script exits,
# also on TERM or INT (the device tool's limit): what ran is never lost.
#
# The cuda test programs run with STRATA_REQUIRE_GPU=1: a GPU case that is skipped fails them.
#
# Two ways to get the programs (docs/build.md, "GPU machines"):
# - bundle (used when .gpu-bundle/strata-gpu.tar.xz is there): the lent machines' image has CUDA,
#   cuDNN and PyTorch but not the Debian packages strata builds against, and nothing can be
#   fetched there, so tools/gpu-bundle.sh builds the programs on a build machine and packs them
#   with the shared libraries they need; the device call carries `.gpu-bundle`.
# - build (no bundle, or STRATA_GPU_BUILD=1): configure and build here with CUDA in build-dir
#   (default build-gpu), for a machine that has the build dependencies.
# Logs go to $OUT when it is set (the device tool brings that folder back), else to the build dir.
#
# GPU_CHECK_STEPS=kvstore_cuda,lm_cuda (names as in the summary; memcheck, lstm_lm, lstm_lm_np2 for
# the last three) runs only those steps after the preflight: the rerun after a fix.
#
# STRATA_GPU_CHECK_DRY=1 checks this script without a GPU (ctest gpu_check_dry): no bundle, no
# build, fake steps (kernels_cuda passes, device_cuda is skipped, kvstore_cuda fails, the
# benchmark sleeps STRATA_GPU_CHECK_DRY_SLEEP seconds) and the versions of
# STRATA_GPU_CHECK_DRY_VERSIONS ("<driver CUDA> <runtime CUDA> <cuBLAS major>", as the CUDA
# version integers, default "13000 13000 13").
set -u
cd "$(dirname "$0")/.." || exit 1
src=$PWD
jobs=${JOBS:-16}
start=$(date +%s)
deadline_s=${GPU_CHECK_DEADLINE:-500}
case $deadline_s in
  '' | *[!0-9]*) echo "gpu-check: GPU_CHECK_DEADLINE is '$deadline_s'; expected a whole number of seconds" >&2; exit 2 ;;
esac
deadline=$((start + deadline_s))
# GPU_CHECK_STEPS=a,b,...: run only these steps (a rerun after a fix); the preflight always runs.
all_steps="kernels_cuda device_cuda kvstore_cuda lm_cuda nccl_cuda kvstore_dist_cuda net_cuda_np2 kvstore_dist_cuda_np2
nccl_cuda_np2 strata-bench-lm-gpu memcheck lstm_lm lstm_lm_np2"
steps_wanted=${GPU_CHECK_STEPS:-}
for s in ${steps_wanted//,/ }; do
  case " $(echo $all_steps) " in
    *" $s "*) ;;
    *) echo "gpu-check: GPU_CHECK_STEPS names '$s', which is not a step; expected a comma-separated list of: $(echo $all_steps | tr ' ' ',')" >&2; exit 2 ;;
  esac
done
# wanted STEP: whether GPU_CHECK_STEPS (unset: every step) asks for STEP.
wanted() { [ -z "$steps_wanted" ] || case ",$steps_wanted," in *",$1,"*) true ;; *) false ;; esac; }
dry=${STRATA_GPU_CHECK_DRY:-0}
declare -a rows=()
declare -a tests_np2=() mpirun_cmd=()
see=${OUT:+\$OUT/logs.tar.gz: }   # where a row sends the reader for a step's log
rows_file=""
summary_done=0
current_pid=""
current_step=""

elapsed() { echo "$(( $(date +%s) - $1 ))s"; }
row() {
  local line
  line=$(printf '%-30s %-8s %s' "$1" "$2" "$3")
  rows+=("$line")
  [ -n "$rows_file" ] && printf '%s\n' "$line" >>"$rows_file"
  pack_logs
}
# With $OUT (the device tool brings back at most 8 files), the step logs stay in $logs and go to
# $OUT/logs.tar.gz, packed again after every row: $OUT holds summary.txt and logs.tar.gz only.
pack_logs() {
  [ -n "${OUT:-}" ] && [ -n "${logs:-}" ] && [ -d "$logs" ] || return 0
  tar -czf "$OUT/logs.tar.gz.tmp" -C "$logs" . 2>/dev/null && mv -f "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}
summary() {
  [ "$summary_done" = 1 ] && return
  summary_done=1
  printf '\n== summary (%s of %ss)\n%-30s %-8s %s\n' "$(elapsed "$start")" "$deadline_s" step result detail
  [ ${#rows[@]} -gt 0 ] && printf '%s\n' "${rows[@]}"
  [ -n "$rows_file" ] && echo "(rows also in $rows_file)"
  [ "$dry" = 1 ] && [ -n "${OUT:-}" ] && rm -rf "$logs"   # packed already
}
on_signal() {
  if [ -n "$current_pid" ]; then
    kill -TERM "$current_pid" 2>/dev/null
    row "$current_step" stopped "gpu-check received $1 after $(elapsed "$start")"
  fi
  summary
  exit 143
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap summary EXIT

# run_step NAME CAP LOG CMD...: runs CMD with a timeout of min(CAP, time left - 5 s), output to
# LOG; sets step_rc (124: timed out; 200: not run, no time left) and step_t (start time).
run_step() {
  local name=$1 cap=$2 log=$3
  shift 3
  local left=$((deadline - $(date +%s) - 5))
  step_t=$(date +%s)
  if [ "$left" -lt 10 ]; then
    step_rc=200
    return
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  step_cap=$cap
  current_step=$name
  # In the background so that TERM is handled at once (bash defers traps while a foreground
  # child runs).
  timeout "$cap" "$@" >"$log" 2>&1 &
  current_pid=$!
  wait "$current_pid"
  step_rc=$?
  current_pid=""
}
no_time() { row "$1" skipped "the ${deadline_s}s deadline leaves no time for it"; }

# test_step NAME CMD...: runs a Boost.Test program (or mpirun of one) as step NAME with a 150 s cap
# and writes its row: the cases passed out of run ("5/5 passed"; "no errors" from a rank that
# prints only that), else the exit status. 0 ok, 77 skipped (every case skipped), 124 timeout.
test_step() {
  local name=$1 line result
  shift
  run_step "$name" 150 "$logs/$name.log" "$@"
  [ "$step_rc" = 200 ] && { no_time "$name"; return; }
  tail -15 "$logs/$name.log"
  line=$(grep -E 'test cases? out of|No errors detected' "$logs/$name.log" |
    sed -E 's/^ *([0-9]+) test cases? out of ([0-9]+) ([a-z]+).*/\1\/\2 \3/; s/.*No errors detected.*/no errors/' | paste -sd, -)
  case $step_rc in 0) result=ok ;; 77) result=skipped ;; 124) result=timeout ;; *) result=FAILED ;; esac
  row "$name" "$result" "${line:-exit $step_rc} ($(elapsed "$step_t"))"
}

# lm_summary LOG: lstm_lm's closing line ("20 steps in ...; median step ..."), not the sample after it.
lm_summary() { grep -E '^lstm_lm: [0-9]+ steps in' "$1" | tail -1 | cut -c10-100; }

# ---- programs -----------------------------------------------------------------------------------
if [ "$dry" = 1 ]; then
  mode=dry
  logs=${TMPDIR:-/tmp}/strata-gpu-check-dry.$$
  mkdir -p "$logs"
  fake() { printf '#!/bin/sh\necho "%s: fake step"\n%s\n' "$1" "$2" >"$logs/$1"; chmod +x "$logs/$1"; echo "$logs/$1"; }
  tests=("kernels_cuda:$(fake kernels_cuda 'exit 0')" "device_cuda:$(fake device_cuda 'exit 77')"
         "kvstore_cuda:$(fake kvstore_cuda 'echo "1 test case out of 4 failed"; exit 1')" "lm_cuda:$(fake lm_cuda 'exit 0')"
         "nccl_cuda:$(fake nccl_cuda 'exit 0')" "kvstore_dist_cuda:$(fake kvstore_dist_cuda 'exit 0')")
  # Two ranks: the fake launcher runs the program once.
  tests_np2=("net_cuda_np2:$(fake net_cuda 'echo "*** No errors detected"; exit 0')"
             "kvstore_dist_cuda_np2:$(fake kvstore_dist_cuda_2 'exit 0')" "nccl_cuda_np2:$(fake nccl_cuda_2 'exit 0')")
  mpirun_cmd=("$(fake mpirun 'while [ "${1#-}" != "$1" ]; do case $1 in -np|--timeout|--bind-to) shift 2 ;; --mca) shift 3 ;; *) shift ;; esac; done; exec "$@"')")
  bench=$(fake strata-bench-lm-gpu "sleep ${STRATA_GPU_CHECK_DRY_SLEEP:-0}; echo 'summary: fake'")
  lm=$(fake lstm_lm 'echo "lstm_lm: 20 steps in 1.0 s; median step 50.0 ms"; echo "lstm_lm: sample (temperature 0.80):"; echo "fake sample text"')
  sanitizer=$(fake compute-sanitizer 'echo "========= ERROR SUMMARY: 0 errors"')
  corpus=()
elif [ -f .gpu-bundle/strata-gpu.tar.xz ] && [ "${STRATA_GPU_BUILD:-0}" != 1 ]; then
  mode=bundle
  bundle=.gpu-bundle/strata-gpu.tar.xz
  root=${STRATA_GPU_ROOT:-/tmp/strata-gpu}
  logs=$root/logs
  mkdir -p "$logs"
  rm -rf "$root.unpack" && mkdir -p "$root.unpack"
  t=$(date +%s)
  if ! tar -xJf "$bundle" -C "$root.unpack" 2>"$root.unpack.log"; then
    # No xz on the image: Python's tarfile reads it.
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$root.unpack" \
      >>"$root.unpack.log" 2>&1 || { cp "$root.unpack.log" "$logs/unpack.log"; row unpack FAILED "see ${see:-$logs/}unpack.log"; cat "$logs/unpack.log"; exit 1; }
  fi
  rm -rf "$root" && mv "$root.unpack" "$root" && mkdir -p "$logs"   # the logs live under $root
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
  # The bundle's Open MPI (tools/mpi-bundle.sh): libmpi for every program, mpirun for 2 ranks.
  if [ -f "$root/mpi/env.sh" ]; then
    . "$root/mpi/env.sh"
    mpirun_cmd=("$root/mpi/bin/mpirun")
  fi
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
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  tests=("kernels_cuda:$bin/test_kernels_cuda" "device_cuda:$bin/test_device_cuda"
         "kvstore_cuda:$bin/test_kvstore_cuda" "lm_cuda:$bin/test_lm_cuda")
  [ -x "$bin/test_nccl_cuda" ] && tests+=("nccl_cuda:$bin/test_nccl_cuda")
  [ -x "$bin/test_kvstore_dist_cuda" ] && tests+=("kvstore_dist_cuda:$bin/test_kvstore_dist_cuda")
  [ -x "$bin/test_net_cuda" ] && tests_np2+=("net_cuda_np2:$bin/test_net_cuda")
  [ -x "$bin/test_kvstore_dist_cuda" ] && tests_np2+=("kvstore_dist_cuda_np2:$bin/test_kvstore_dist_cuda")
  [ -x "$bin/test_nccl_cuda" ] && tests_np2+=("nccl_cuda_np2:$bin/test_nccl_cuda")
  bench=$bin/strata-bench-lm-gpu
  lm=$bin/lstm_lm
  corpus=(--corpus "$root/corpus.txt")
else
  mode=build
  build=${1:-build-gpu}
  logs=$build/gpu-check-logs
  mkdir -p "$logs"
  run_step configure 300 "$logs/configure.log" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON
  if [ "$step_rc" != 0 ]; then
    row configure FAILED "exit $step_rc, see ${see:-$logs/}configure.log (no bundle: run tools/gpu-bundle.sh on a build machine)"
    tail -30 "$logs/configure.log"; exit 1
  fi
  row configure ok "$(elapsed "$step_t")"
  run_step build 400 "$logs/build.log" cmake --build "$build" -j"$jobs"
  if [ "$step_rc" != 0 ]; then
    row build FAILED "exit $step_rc, see ${see:-$logs/}build.log"; grep -E 'error' "$logs/build.log" | head -30; exit 1
  fi
  row build ok "$(elapsed "$step_t")"
  tests=(kernels_cuda:tests/kernels_cuda/test_kernels_cuda device_cuda:tests/device/test_device_cuda
         kvstore_cuda:tests/kvstore/test_kvstore_cuda lm_cuda:tests/lm/test_lm_cuda)
  [ -x "$build/tests/net_cuda/test_nccl_cuda" ] && tests+=(nccl_cuda:tests/net_cuda/test_nccl_cuda)
  [ -x "$build/tests/net_cuda/test_kvstore_dist_cuda" ] && tests+=(kvstore_dist_cuda:tests/net_cuda/test_kvstore_dist_cuda)
  for i in "${!tests[@]}"; do tests[$i]="${tests[$i]%%:*}:$build/${tests[$i]#*:}"; done
  [ -x "$build/tests/net_cuda/test_net_cuda" ] && tests_np2+=("net_cuda_np2:$build/tests/net_cuda/test_net_cuda")
  [ -x "$build/tests/net_cuda/test_kvstore_dist_cuda" ] && tests_np2+=("kvstore_dist_cuda_np2:$build/tests/net_cuda/test_kvstore_dist_cuda")
  [ -x "$build/tests/net_cuda/test_nccl_cuda" ] && tests_np2+=("nccl_cuda_np2:$build/tests/net_cuda/test_nccl_cuda")
  command -v mpirun >/dev/null 2>&1 && mpirun_cmd=(mpirun)
  bench=$build/tools/bench/strata-bench-lm-gpu
  lm=$build/samples/lstm_lm/lstm_lm
  corpus=()
fi
rows_file=${OUT:+$OUT/summary.txt}
rows_file=${rows_file:-$logs/summary.txt}
[ -n "${OUT:-}" ] && mkdir -p "$OUT"

: >"$rows_file"
for r in "${rows[@]}"; do printf '%s\n' "$r" >>"$rows_file"; done
echo "== mode: $mode, logs in $logs${OUT:+ (packed into \$OUT/logs.tar.gz)}, deadline ${deadline_s}s"

# ---- preflight: driver, CUDA runtime and cuBLAS ---------------------------------------------------
# fits DRIVER RUNTIME CUBLAS_MAJOR: the driver must support the runtime's major version (CUDA's
# minor-version compatibility) and cuBLAS must be the runtime's major version. Prints one sentence
# and fails when they do not fit.
cuda_text() { [ "$1" -gt 0 ] 2>/dev/null && echo "$(($1 / 1000)).$(($1 % 1000 / 10))" || echo none; }
fits() {
  local driver=$1 runtime=$2 cublas=$3
  if [ "$driver" -le 0 ] 2>/dev/null; then
    echo "gpu-check: stop: no NVIDIA driver answers here (cudaDriverGetVersion gives $driver); the programs need one that supports CUDA $(cuda_text "$runtime")."
    return 1
  fi
  if [ $((driver / 1000)) -lt $((runtime / 1000)) ]; then
    echo "gpu-check: stop: the driver supports CUDA $(cuda_text "$driver") but the programs use the CUDA $(cuda_text "$runtime") runtime, which needs a driver for CUDA $((runtime / 1000)).0 or newer (every CUDA call would fail with cudaErrorInsufficientDriver)."
    return 1
  fi
  if [ "$cublas" != $((runtime / 1000)) ]; then
    echo "gpu-check: stop: the resolved cuBLAS is major version ${cublas:-none} but the programs were linked against cuBLAS $((runtime / 1000)) (libcublas.so.$((runtime / 1000)))."
    return 1
  fi
}

echo "== GPU, driver, CUDA runtime, cuBLAS"
if [ "$mode" = dry ]; then
  read -r driver runtime cublas_major <<<"${STRATA_GPU_CHECK_DRY_VERSIONS:-13000 13000 13}"
  echo "dry run: versions from STRATA_GPU_CHECK_DRY_VERSIONS"
else
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
  else
    echo "nvidia-smi not found"
  fi
  kprog=${tests[0]#*:}
  # Which files the programs resolve; a library that does not resolve stops the run.
  # (nccl_cuda and kvstore_dist_cuda are left out: without the image's libnccl.so.2 only their
  # own rows fail, below.)
  missing=$(for e in "${tests[@]}" "x:$bench" "x:$lm"; do
    case "${e%%:*}" in nccl_cuda | kvstore_dist_cuda) continue ;; esac
    f=${e#*:}; [ -x "$f" ] && ldd "$f" 2>&1 | grep 'not found' | sed "s|^|$(basename "$f"): |"; done | sort -u)
  libs=$(ldd "$kprog" 2>/dev/null | awk '/libcudart|libcublas/ {print $1 " -> " $3}' | paste -sd';' -)
  [ "$mode" = bundle ] && sed -n 's/^image libraries: /the bundle needs from the image: /p' "$root/MANIFEST"
  echo "libraries: $libs"
  if [ -n "$missing" ]; then
    echo "$missing"
    row "driver/runtime/cuBLAS" FAILED "$(echo "$missing" | head -2 | tr '\n' ';' | tr -s ' \t' ' ')"
    echo "gpu-check: stop: $(echo "$missing" | head -1 | tr -s ' \t' ' ') (the bundle brings neither cuBLAS nor cuDNN: the image's must be CUDA 13's)."
    exit 1
  fi
  # A tiny probe of the same libraries the programs resolve (ctypes on this LD_LIBRARY_PATH).
  cudart=$(ldd "$kprog" | awk '/libcudart/ {print $3; exit}')
  cublas=$(ldd "$kprog" | awk '/libcublas\.so/ {print $3; exit}')
  read -r driver runtime cublas_major cublas_version <<<"$(python3 - "$cudart" "$cublas" <<'PY' 2>/dev/null || echo "0 0 none none"
import ctypes, sys
rt = ctypes.CDLL(sys.argv[1]); blas = ctypes.CDLL(sys.argv[2])
d, r = ctypes.c_int(0), ctypes.c_int(0)
rt.cudaDriverGetVersion(ctypes.byref(d)); rt.cudaRuntimeGetVersion(ctypes.byref(r))
v = []
for p in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
    x = ctypes.c_int(-1); blas.cublasGetProperty(p, ctypes.byref(x)); v.append(x.value)
print(d.value, r.value, v[0], ".".join(map(str, v)))
PY
)"
fi
echo "driver: CUDA $(cuda_text "$driver") ($driver); runtime: CUDA $(cuda_text "$runtime") ($runtime); cuBLAS: ${cublas_version:-$cublas_major}"
if ! fits "$driver" "$runtime" "$cublas_major"; then
  row "driver/runtime/cuBLAS" FAILED "driver $(cuda_text "$driver"), runtime $(cuda_text "$runtime"), cuBLAS ${cublas_major}"
  exit 1
fi
row "driver/runtime/cuBLAS" ok "driver CUDA $(cuda_text "$driver"), runtime $(cuda_text "$runtime"), cuBLAS ${cublas_version:-$cublas_major}"

# ---- 1. the cuda tests, one program each (what `ctest -R cuda` runs) ------------------------------
# nccl_cuda is the 1-rank NCCL smoke test and kvstore_dist_cuda the allreduce store on a cuda
# replica (worlds of one, no mpirun; their 2-rank runs follow).
export STRATA_REQUIRE_GPU=1
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
for entry in "${tests[@]}"; do
  name=${entry%%:*}
  prog=${entry#*:}
  wanted "$name" || continue
  echo "== $name"
  if [ ! -x "$prog" ]; then
    row "$name" FAILED "$prog is missing"
    continue
  fi
  if [ "$mode" != dry ] && unresolved=$(ldd "$prog" 2>&1 | grep 'not found'); then
    row "$name" FAILED "$(echo "$unresolved" | head -1 | tr -s ' \t' ' ') (NCCL comes from the image: PyTorch's nvidia-nccl)"
    continue
  fi
  test_step "$name" "$prog" --report_level=short
done

# ---- 1b. the cuda tests that need 2 ranks (what `ctest -R _np2 -L mpi` runs with CUDA) -----------
# net_cuda_np2: cuda tensors between ranks through pinned host staging; kvstore_dist_cuda_np2: the
# allreduce store's staged sum with both ranks on this GPU; nccl_cuda_np2 only with 2 GPUs or more
# (NCCL refuses two ranks on one device). Started by the bundle's Open MPI, kept on loopback.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
# The image's container may forbid process_vm_readv (vader's single copy: "Read -1, expected N,
# errno = 1", open-mpi/ompi #4948): copy through shared memory instead.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
gpus=1
[ "$mode" != dry ] && command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
for entry in "${tests_np2[@]}"; do
  name=${entry%%:*}
  prog=${entry#*:}
  wanted "$name" || continue
  echo "== $name"
  if [ ${#mpirun_cmd[@]} = 0 ]; then
    row "$name" skipped "no mpirun (a bundle made without MPI, or none on this machine)"
    continue
  fi
  if [ "$name" = nccl_cuda_np2 ] && [ "$gpus" -lt 2 ]; then
    row "$name" n/a "needs 2 GPUs, this machine has $gpus"
    continue
  fi
  test_step "$name" "${mpirun_cmd[@]}" -np 2 --oversubscribe --bind-to none --timeout 140 \
    --mca btl self,vader "$prog" --report_level=short
done

# ---- 2. the LM step on this GPU ---------------------------------------------------------------
# cuDNN's LSTM step (fp32, TF32), PyTorch's own step where python3 has CUDA, lm_pipeline on the
# whole GPU and 8 stage actors sharing it (docs/perf.md). Seed configuration, char vocabulary.
if ! wanted strata-bench-lm-gpu; then
  :
elif echo "== strata-bench-lm-gpu" && [ -x "$bench" ]; then
  STRATA_PYTHON=${STRATA_PYTHON:-python3} STRATA_SOURCE_DIR=$src \
    run_step strata-bench-lm-gpu 240 "$logs/strata-bench-lm-gpu.log" "$bench" --vocab 96 --stages 8 \
    --micro-batches 4 --warmup 3 --steps 10
  case $step_rc in
    200) no_time strata-bench-lm-gpu ;;
    0) row strata-bench-lm-gpu ok "$(elapsed "$step_t")" ;;
    124) row strata-bench-lm-gpu timeout "cut at ${step_cap}s, see ${see:-$logs/}strata-bench-lm-gpu.log" ;;
    *) row strata-bench-lm-gpu FAILED "exit $step_rc after $(elapsed "$step_t"), see ${see:-$logs/}strata-bench-lm-gpu.log" ;;
  esac
  if [ "$step_rc" != 200 ]; then
    cat "$logs/strata-bench-lm-gpu.log"
    line=$(grep '^summary:' "$logs/strata-bench-lm-gpu.log" | tail -1)
    [ -n "$line" ] && row "  LM step ms (vs cuDNN fp32)" "" "${line#summary: }"
  fi
else
  row strata-bench-lm-gpu skipped "not built (needs STRATA_CUDA and cuDNN)"
fi

# ---- 3. the kernels' tests under compute-sanitizer's memcheck ------------------------------------
# Out-of-bounds and misaligned accesses that results alone may not show. MEMCHECK=0 skips it.
if [ "${MEMCHECK:-1}" != 0 ] && wanted memcheck; then
  echo "== compute-sanitizer memcheck: kernels_cuda"
  [ "$mode" = dry ] || sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
  kprog=${tests[0]#*:}
  if [ -n "$sanitizer" ] && [ -x "$kprog" ]; then
    run_step "memcheck kernels_cuda" 240 "$logs/memcheck.log" "$sanitizer" --tool memcheck --error-exitcode 9 "$kprog" --report_level=short
    [ "$step_rc" = 200 ] || tail -8 "$logs/memcheck.log"
    case $step_rc in
      200) no_time "memcheck kernels_cuda" ;;
      0) row "memcheck kernels_cuda" ok "$(grep -m1 'ERROR SUMMARY' "$logs/memcheck.log") ($(elapsed "$step_t"))" ;;
      124) row "memcheck kernels_cuda" timeout "cut at ${step_cap}s, see ${see:-$logs/}memcheck.log" ;;
      *) row "memcheck kernels_cuda" FAILED "exit $step_rc: $(grep -m1 'ERROR SUMMARY' "$logs/memcheck.log") ($(elapsed "$step_t"))" ;;
    esac
  else
    row "memcheck kernels_cuda" skipped "${sanitizer:-compute-sanitizer not found}"
  fi
fi

# ---- 4. README's first command on this machine's default devices (cuda:0x2 on one GPU) ----------
if wanted lstm_lm && echo "== lstm_lm train (default devices, 20 steps)" && [ -x "$lm" ]; then
  run_step "lstm_lm train 20 steps" 120 "$logs/lstm_lm.log" "$lm" train "${corpus[@]}" --steps 20 --val-tokens 2000
  case $step_rc in
    200) no_time "lstm_lm train 20 steps" ;;
    0) row "lstm_lm train 20 steps" ok "$(lm_summary "$logs/lstm_lm.log") ($(elapsed "$step_t"))" ;;
    *) row "lstm_lm train 20 steps" FAILED "exit $step_rc after $(elapsed "$step_t"), see ${see:-$logs/}lstm_lm.log" ;;
  esac
  [ "$step_rc" = 200 ] || tail -4 "$logs/lstm_lm.log"
fi

# ---- 5. the same job on 2 ranks, one stage each, both on this GPU (docs/distributed.md) ------------
# Activations and gradients cross ranks as cuda tensors staged through pinned host memory.
if wanted lstm_lm_np2 && [ -x "$lm" ] && [ ${#mpirun_cmd[@]} -gt 0 ]; then
  echo "== lstm_lm train on 2 ranks (cuda:0 each, 20 steps)"
  run_step "lstm_lm 2 ranks 20 steps" 120 "$logs/lstm_lm_np2.log" "${mpirun_cmd[@]}" -np 2 --oversubscribe \
    --bind-to none --timeout 110 --mca btl self,vader "$lm" train "${corpus[@]}" --devices cuda:0 --steps 20 --val-tokens 2000
  case $step_rc in
    200) no_time "lstm_lm 2 ranks 20 steps" ;;
    0) row "lstm_lm 2 ranks 20 steps" ok "$(lm_summary "$logs/lstm_lm_np2.log") ($(elapsed "$step_t"))" ;;
    *) row "lstm_lm 2 ranks 20 steps" FAILED "exit $step_rc after $(elapsed "$step_t"), see ${see:-$logs/}lstm_lm_np2.log" ;;
  esac
  [ "$step_rc" = 200 ] || tail -4 "$logs/lstm_lm_np2.log"
fi

# The exit status says whether everything ran and passed.
for r in "${rows[@]}"; do
  case "$r" in *" FAILED "* | *" timeout "* | *" skipped "* | *" stopped "*) exit 1 ;; esac
done
exit 0
