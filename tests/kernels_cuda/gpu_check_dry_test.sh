#!/usr/bin/env bash
# ctest gpu_check_dry: tools/gpu-check.sh's own logic without a GPU (STRATA_GPU_CHECK_DRY=1, fake
# steps): the global deadline cuts a slow step and skips what no longer fits, every row is in
# summary.txt as soon as its step ends, TERM prints the summary at once, the test verdicts map to
# rows, versions that do not fit stop the run with one sentence before any step, the 2-rank steps
# go through the launcher, $OUT holds two files, GPU_CHECK_STEPS runs the chosen steps only, and
# the LM rows show the run's summary line.
#   usage: gpu_check_dry_test.sh <tools/gpu-check.sh> <work-dir>
set -u
script=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
failures=0
expect() {  # expect DESCRIPTION FILE PATTERN
  if grep -qE -- "$3" "$2"; then echo "ok: $1"; else echo "FAILED: $1 (no /$3/ in $2)"; failures=$((failures + 1)); fi
}
expect_not() {
  if grep -qE -- "$3" "$2"; then echo "FAILED: $1 (/$3/ in $2)"; failures=$((failures + 1)); else echo "ok: $1"; fi
}

# 1. The deadline: the benchmark would sleep 60 s; with a 20 s deadline it is cut, and the steps
#    after it are reported as skipped for lack of time.
export STRATA_GPU_CHECK_DRY=1
t=$(date +%s)
OUT=$work/deadline GPU_CHECK_DEADLINE=20 STRATA_GPU_CHECK_DRY_SLEEP=60 bash "$script" >"$work/deadline.out" 2>&1
rc=$?
took=$(( $(date +%s) - t ))
log=$work/deadline.out
[ "$rc" != 0 ] && echo "ok: a run with failures exits non-zero ($rc)" || { echo "FAILED: exit 0 with failed rows"; failures=$((failures + 1)); }
[ "$took" -le 25 ] && echo "ok: the run kept its 20 s deadline (${took}s)" || { echo "FAILED: ${took}s for a 20 s deadline"; failures=$((failures + 1)); }
expect "versions are printed first" "$log" "^driver: CUDA 13.0 \(13000\); runtime: CUDA 13.0"
expect "a passing test program is ok" "$log" "^kernels_cuda +ok "
expect "exit 77 is a skipped row" "$log" "^device_cuda +skipped "
expect "a failing program is FAILED with its count" "$log" "^kvstore_cuda +FAILED +1/4 failed"
expect "a 2-rank test runs through the launcher" "$log" "^net_cuda_np2 +ok +no errors "
expect "nccl_cuda_np2 is left out on one GPU" "$log" "^nccl_cuda_np2 +n/a +needs 2 GPUs"
expect "the slow benchmark is cut at the time left" "$log" "^strata-bench-lm-gpu +timeout +cut at [0-9]+s"
expect "a step that no longer fits is skipped" "$log" "^memcheck kernels_cuda +skipped +the 20s deadline"
expect "the summary is printed" "$log" "^== summary"
rows=$work/deadline/summary.txt
expect "rows are written to \$OUT/summary.txt" "$rows" "^lm_cuda +ok "
expect "the cut step's row is in the file" "$rows" "^strata-bench-lm-gpu +timeout"
# The device tool brings back 8 files at most: $OUT holds the rows and one archive of the logs.
ls "$work/deadline" >"$work/deadline.files"
expect "\$OUT holds summary.txt and logs.tar.gz" "$work/deadline.files" "^logs\.tar\.gz\nsummary\.txt$|^logs.tar.gz$"
[ "$(wc -l <"$work/deadline.files")" = 2 ] && echo "ok: nothing else in \$OUT" || { echo "FAILED: \$OUT holds $(paste -sd' ' "$work/deadline.files")"; failures=$((failures + 1)); }
tar -tzf "$work/deadline/logs.tar.gz" >"$work/deadline.logs" 2>&1
expect "the archive has the cut step's log" "$work/deadline.logs" "strata-bench-lm-gpu\.log$"
expect "the archive has a 2-rank test's log" "$work/deadline.logs" "net_cuda_np2\.log$"

# 2. TERM while the benchmark runs: the summary comes at once, with the rows so far and the
#    stopped step; the row file already had the finished rows.
OUT=$work/term GPU_CHECK_DEADLINE=300 STRATA_GPU_CHECK_DRY_SLEEP=120 bash "$script" >"$work/term.out" 2>&1 &
pid=$!
for _ in $(seq 100); do
  grep -q '^lm_cuda' "$work/term/summary.txt" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
expect "rows are in the file while the run goes on" "$work/term/summary.txt" "^kernels_cuda +ok "
t=$(date +%s)
kill -TERM "$pid"
wait "$pid"
rc=$?
took=$(( $(date +%s) - t ))
log=$work/term.out
[ "$rc" = 143 ] && echo "ok: TERM exits 143" || { echo "FAILED: TERM gave exit $rc"; failures=$((failures + 1)); }
[ "$took" -le 3 ] && echo "ok: TERM is handled at once (${took}s)" || { echo "FAILED: TERM took ${took}s"; failures=$((failures + 1)); }
expect "TERM prints the summary" "$log" "^== summary"
expect "TERM names the stopped step" "$log" "^strata-bench-lm-gpu +stopped +gpu-check received TERM"
expect "the summary after TERM keeps the finished rows" "$log" "^kvstore_cuda +FAILED"
expect_not "nothing after the stopped step ran" "$log" "^memcheck kernels_cuda"

# 3. Versions that do not fit stop the run before any step, with one sentence.
OUT=$work/old GPU_CHECK_DEADLINE=60 STRATA_GPU_CHECK_DRY_VERSIONS="12040 13000 13" bash "$script" >"$work/old.out" 2>&1
rc=$?
log=$work/old.out
[ "$rc" = 1 ] && echo "ok: an old driver exits 1" || { echo "FAILED: an old driver gave exit $rc"; failures=$((failures + 1)); }
expect "an old driver is named in one sentence" "$log" \
  "^gpu-check: stop: the driver supports CUDA 12.4 but the programs use the CUDA 13.0 runtime, which needs a driver for CUDA 13.0 or newer"
expect_not "no step runs after a version stop" "$log" "^kernels_cuda"
OUT=$work/blas GPU_CHECK_DEADLINE=60 STRATA_GPU_CHECK_DRY_VERSIONS="13000 13000 12" bash "$script" >"$work/blas.out" 2>&1
expect "a cuBLAS of another major version is named" "$work/blas.out" \
  "^gpu-check: stop: the resolved cuBLAS is major version 12 but the programs were linked against cuBLAS 13"
OUT=$work/nodriver GPU_CHECK_DEADLINE=60 STRATA_GPU_CHECK_DRY_VERSIONS="0 13000 13" bash "$script" >"$work/nodriver.out" 2>&1
expect "no driver is named" "$work/nodriver.out" "^gpu-check: stop: no NVIDIA driver answers here"

# 4. A bad deadline is one sentence and a non-zero exit.
GPU_CHECK_DEADLINE=5m bash "$script" >"$work/bad.out" 2>&1
rc=$?
[ "$rc" = 2 ] && echo "ok: a bad deadline exits 2" || { echo "FAILED: a bad deadline gave exit $rc"; failures=$((failures + 1)); }
expect "a bad deadline is named" "$work/bad.out" "GPU_CHECK_DEADLINE is '5m'; expected a whole number of seconds"

# 5. GPU_CHECK_STEPS: a rerun of chosen steps only; a name that is no step is one sentence, exit 2.
OUT=$work/steps GPU_CHECK_DEADLINE=60 GPU_CHECK_STEPS=lm_cuda,net_cuda_np2 bash "$script" >"$work/steps.out" 2>&1
rc=$?
log=$work/steps.out
[ "$rc" = 0 ] && echo "ok: the chosen steps pass, exit 0" || { echo "FAILED: chosen steps gave exit $rc"; failures=$((failures + 1)); }
expect "the chosen test ran" "$log" "^lm_cuda +ok "
expect "the chosen 2-rank test ran" "$log" "^net_cuda_np2 +ok "
expect_not "a test not chosen did not run" "$log" "^kvstore_cuda +"
expect_not "the benchmark did not run" "$log" "strata-bench-lm-gpu"
expect_not "memcheck did not run" "$log" "^memcheck"
# The LM rows show the run's summary line, not the generated sample printed after it.
OUT=$work/lm GPU_CHECK_DEADLINE=60 GPU_CHECK_STEPS=lstm_lm,lstm_lm_np2 bash "$script" >"$work/lm.out" 2>&1
expect "the LM row shows the summary line" "$work/lm.out" "^lstm_lm train 20 steps +ok +20 steps in 1.0 s; median step 50.0 ms"
expect "the 2-rank LM row shows the summary line" "$work/lm.out" "^lstm_lm 2 ranks 20 steps +ok +20 steps in 1.0 s"
expect_not "no row shows the sample" "$work/lm.out" "ok +fake sample"
GPU_CHECK_STEPS=lm_cuda,kvstore bash "$script" >"$work/badsteps.out" 2>&1
rc=$?
[ "$rc" = 2 ] && echo "ok: an unknown step exits 2" || { echo "FAILED: an unknown step gave exit $rc"; failures=$((failures + 1)); }
expect "an unknown step is named" "$work/badsteps.out" "GPU_CHECK_STEPS names 'kvstore', which is not a step; expected a comma-separated list of: kernels_cuda,"

echo "$failures failure(s)"
[ "$failures" = 0 ]
