#!/usr/bin/env bash
# One-shot check for a GPU machine lent for a few minutes: build with CUDA (Release), run the cuda
# tests, run whatever GPU benchmarks exist, print a short table. Reads the card, changes nothing
# (no nvidia-smi settings, no clocks, no MIG, no resets).
#   usage: tools/gpu-check.sh [build-dir]     (default build-gpu; JOBS=16 by default)
set -u
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
jobs=${JOBS:-16}
declare -a rows=()
row() { rows+=("$(printf '%-28s %-8s %s' "$1" "$2" "$3")"); }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

echo "== GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
else
  echo "nvidia-smi not found"
fi

t=$(date +%s)
if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON >"$build.configure.log" 2>&1; then
  row configure ok "$(elapsed "$t")"
else
  row configure FAILED "see $build.configure.log"; tail -30 "$build.configure.log"
  printf '\n== summary\n'; printf '%s\n' "${rows[@]}"; exit 1
fi

t=$(date +%s)
if cmake --build "$build" -j"$jobs" >"$build.build.log" 2>&1; then
  row build ok "$(elapsed "$t")"
else
  row build FAILED "see $build.build.log"; grep -E 'error' "$build.build.log" | head -30
  printf '\n== summary\n'; printf '%s\n' "${rows[@]}"; exit 1
fi

t=$(date +%s)
ctest --test-dir "$build" -R cuda --output-on-failure --timeout 300 2>&1 | tee "$build.ctest.log"
rc=${PIPESTATUS[0]}
line=$(grep -E 'tests passed|tests failed' "$build.ctest.log" | tail -1)
row "ctest -R cuda" "$( [ "$rc" = 0 ] && echo ok || echo FAILED )" "${line:-no tests} ($(elapsed "$t"))"

# Only GPU benchmarks run here (the CPU ones are measured on the build machines: docs/perf.md).
# The LM step on this GPU: cuDNN's LSTM step (fp32, TF32) against lm_pipeline on the whole GPU and
# 8 stage actors sharing it (docs/perf.md). Seed configuration, char vocabulary; ~1 minute.
echo "== strata-bench-lm-gpu"
lm_gpu="$build/tools/bench/strata-bench-lm-gpu"
if [ -x "$lm_gpu" ]; then
  t=$(date +%s)
  if timeout 180 "$lm_gpu" --vocab 96 --stages 8 --micro-batches 4 --warmup 3 --steps 10 \
      >"$build.strata-bench-lm-gpu.log" 2>&1; then
    row strata-bench-lm-gpu ok "$(elapsed "$t")"
  else
    rc=$?
    row strata-bench-lm-gpu FAILED "exit $rc after $(elapsed "$t"), see $build.strata-bench-lm-gpu.log"
  fi
  cat "$build.strata-bench-lm-gpu.log"
  line=$(grep '^summary:' "$build.strata-bench-lm-gpu.log" | tail -1)
  [ -n "$line" ] && row "  LM step ms (vs cuDNN fp32)" "" "${line#summary: }"
else
  row strata-bench-lm-gpu skipped "not built (needs STRATA_CUDA and cuDNN; see $build.configure.log)"
fi

# README's first command on this machine's default devices (cuda:0x2 on one GPU), briefly.
echo "== lstm_lm train (default devices, 20 steps)"
lm="$build/samples/lstm_lm/lstm_lm"
if [ -x "$lm" ]; then
  t=$(date +%s)
  if timeout 150 "$lm" train --steps 20 --val-tokens 2000 >"$build.lstm_lm.log" 2>&1; then
    row "lstm_lm train 20 steps" ok "$(tail -1 "$build.lstm_lm.log" | cut -c1-90) ($(elapsed "$t"))"
  else
    row "lstm_lm train 20 steps" FAILED "exit $? after $(elapsed "$t"), see $build.lstm_lm.log"
  fi
  tail -4 "$build.lstm_lm.log"
fi

printf '\n== summary\n%-28s %-8s %s\n' step result detail
printf '%s\n' "${rows[@]}"
