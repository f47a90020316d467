#!/bin/sh
# lstm_lm under mpirun against one process (ctest lm_mpi_*; docs/lstm_lm.md, "Under mpirun").
#
#   lm_mpi_test.sh MODE MPIRUN BTL LSTM_LM CORPUS WORKDIR STRATA_TRACE_TOOL
#
# MODE matches: a 2-rank run (one stage per rank, cpu:1 each) logs the same per-step losses, bit
#   for bit, as one process with the same two stages (cpu:2); the summary says ranks 2, stages 2,
#   replicas 1 (one process: ranks 1). Its --trace is one file joined from both ranks (no
#   per-rank file left), which strata-trace reads with both ranks' actors and every message
#   between the ranks received.
# MODE crash: rank 1 kills itself (SIGKILL) after step 5 of 8; the job exits non-zero within
#   30 s (half of mpirun's --timeout, so a hang that mpirun ends still fails; measured 2-3 s)
#   and leaves no lstm_lm process behind; the same command relaunched resumes from the
#   checkpoint of step 4 and logs steps 5-8 with the losses of the uninterrupted one-process run.
# MODE replicas: 4 ranks, 2 stages x 2 replicas (each on half the batch's columns, gradients
#   summed over the replicas before the norm), log the one-process losses within 1e-6 relative:
#   a replica's gradient is a sum over half the columns, added to the other half's afterwards
#   instead of inside one GEMM, so float rounding differs (measured: under 1e-8 relative after 8
#   steps); a missing or doubled replica's gradient would change the loss by far more. Each
#   stage's replicas sum through a dist_sync_allreduce store of their own (replica_sum). Then
#   rank 3 is killed after step 5 and the relaunch continues on the uninterrupted curve.
# MODE auto: --partition auto on 2 ranks places the layers with rank 0's measured costs on both
#   ranks (each rank checks that every rank placed alike, else the run fails) and logs the same
#   per-step losses, bit for bit, as one process given the plan's layer ranges explicitly. Its
#   --link-latency-us 2000 and --link-gbps 0.5 are the link of the plan (a cut names rank 1 and
#   costs 2 ms) and of the summary, whose ideal step pays them on both crossings of the cut (at
#   least 4 ms). Without the flags the link is measured: positive and finite in the summary.
# Both ranks and the one process use one thread per device, so every kernel sums in one order.
set -u
mode=$1 mpirun=$2 btl=$3 exe=$4 corpus=$5 dir=$6 trace_tool=$7
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
common="--corpus $corpus --layers 4 --hidden 16 --embed 8 --batch 4 --seq 8 --val-tokens 400 --steps 8
        --cpu-threads 1 --schedule 1f1b --partition even"
launch="$mpirun --oversubscribe --bind-to none --timeout 60 --mca btl $btl --mca btl_tcp_if_include lo
        --mca oob_tcp_if_include lo"
fail() { echo "FAIL: $*"; exit 1; }
# The "step, epoch, loss" of each step line of a JSON-lines log, as printed (full precision).
losses() { grep -o '"step":[0-9]*,"epoch":[0-9]*,"loss":[^,]*' "$1"; }

"$exe" train $common --devices cpu:2 --log one.jsonl 2>one.err || { cat one.err; fail "the one-process run failed"; }
[ "$(losses one.jsonl | wc -l)" -eq 8 ] || fail "the one-process log has no 8 steps"
grep -q '"ranks":1,"stages":2,"replicas":1' one.jsonl || fail "the one-process summary lacks ranks 1, stages 2, replicas 1"

if [ "$mode" = matches ]; then
  $launch -np 2 "$exe" train $common --devices cpu:1 --log two.jsonl --trace two.strace 2>two.err ||
    { cat two.err; fail "the 2-rank run failed"; }
  grep -q '"ranks":2,"stages":2,"replicas":1' two.jsonl || fail "the 2-rank summary lacks ranks 2, stages 2, replicas 1"
  [ "$(grep -c 'validation loss' two.err)" -eq 1 ] || fail "the validation line was not printed once (by rank 0 only)"
  # Rank 0's summary has each rank's stage times (a rank's own clocks, summed after the step).
  for key in stage_forward_ms stage_backward_ms; do
    times=$(sed -n "s/.*\"$key\":\[\([^]]*\)\].*/\1/p" two.jsonl | tail -1)
    echo "$times" | awk -F, '{ if (NF != 2) exit 1; for (i = 1; i <= NF; ++i) if ($i + 0 <= 0) exit 1 }' ||
      fail "the 2-rank summary's $key is not two positive times: [$times]"
  done
  losses one.jsonl >one.loss
  losses two.jsonl >two.loss
  diff one.loss two.loss || fail "the 2-rank losses differ from one process's"
  echo "2 ranks: the 8 losses equal one process's bit for bit"
  grep -q "lstm_lm: merged 2 ranks of a world of 2 into two.strace" two.err || { cat two.err; fail "no line says the ranks' traces were joined"; }
  [ -f two.strace ] || fail "no joined trace two.strace"
  ! ls two.strace.rank* >/dev/null 2>&1 || fail "per-rank trace files were left beside the joined one"
  "$trace_tool" summary two.strace >summary.txt 2>&1 || { cat summary.txt; fail "strata-trace cannot read the joined trace"; }
  grep -q "merged from the ranks of a world of 2" summary.txt || fail "the joined trace does not say it holds 2 ranks"
  grep -q "@r0 " summary.txt && grep -q "@r1 " summary.txt || fail "the joined trace lacks one rank's actors"
  counts=$(sed -n 's/^cross-rank messages: \([0-9]*\) sent, \([0-9]*\) received, \([0-9]*\) linked.*/\1 \2 \3/p' summary.txt)
  set -- $counts
  [ $# -eq 3 ] && [ "$1" -gt 0 ] && [ "$1" -eq "$2" ] && [ "$3" -gt 0 ] ||
    { cat summary.txt | head -5; fail "the joined trace's messages between ranks do not add up: '$counts'"; }
  echo "2 ranks: one joined trace, $1 messages between the ranks sent and received, $3 linked to their handling"
  exit 0
fi

if [ "$mode" = auto ]; then
  auto=$(echo $common | sed 's/--partition even/--partition auto/')
  $launch -np 2 "$exe" train $auto --devices cpu:1 --link-latency-us 2000 --link-gbps 0.5 --log auto.jsonl 2>auto.err ||
    { cat auto.err; fail "the 2-rank --partition auto run failed"; }
  grep -q "lstm_lm: link between ranks 2000.0 us per message, 0.500 GB/s, given by --link-latency-us and --link-gbps" auto.err ||
    { cat auto.err; fail "the plan does not show the given link"; }
  grep -q "^stage 0 (.*, rank 0): .*; to rank 1: .* per micro-batch, 2.0[0-9] ms$" auto.err ||
    { cat auto.err; fail "the plan's cut does not name rank 1 and the link's 2 ms"; }
  grep -q '"link_latency_us":2000.0,"link_gbps":0.5' auto.jsonl || fail "the summary lacks the given link"
  ideal=$(sed -n 's/.*"ideal_step_ms":\([^,]*\),.*/\1/p' auto.jsonl | tail -1)
  awk -v t="$ideal" 'BEGIN { exit !(t >= 4) }' || fail "the ideal step $ideal ms does not pay the 2 ms link both ways"
  ranges=$(sed -n 's/^stage [0-9]* (.*, rank [0-9]*): \(embedding + \)\{0,1\}lstm \([0-9-]*\).*/\2/p' auto.err | paste -sd, -)
  [ -n "$ranges" ] || { cat auto.err; fail "no layer ranges in the plan"; }
  fixed=$(echo $common | sed "s/--partition even/--partition $ranges/")
  "$exe" train $fixed --devices cpu:2 --log fixed.jsonl 2>fixed.err || { cat fixed.err; fail "the one-process run with --partition $ranges failed"; }
  losses fixed.jsonl >fixed.loss
  losses auto.jsonl >auto.loss
  [ "$(wc -l <auto.loss)" -eq 8 ] || fail "the 2-rank --partition auto log has no 8 steps"
  diff fixed.loss auto.loss || fail "the 2-rank --partition auto losses differ from one process's with --partition $ranges"
  echo "2 ranks, --partition auto: both placed $ranges; the 8 losses equal one process's with those ranges bit for bit"
  short=$(echo $auto | sed 's/--steps 8/--steps 2/')
  $launch -np 2 "$exe" train $short --devices cpu:1 --log measured.jsonl 2>measured.err ||
    { cat measured.err; fail "the 2-rank run that measures its link failed"; }
  grep -q "lstm_lm: link between ranks .*, measured between ranks 0 and 1" measured.err ||
    { cat measured.err; fail "no line says the link was measured"; }
  link=$(sed -n 's/.*"link_latency_us":\([^,]*\),"link_gbps":\([^,}]*\).*/\1 \2/p' measured.jsonl)
  echo "$link" | awk '{ exit !(NF == 2 && $1 > 0 && $1 < 1e7 && $2 > 0 && $2 < 1e6) }' ||
    fail "the measured link in the summary is not a positive latency and bandwidth: '$link'"
  echo "2 ranks: the link measured at the start, $link (us, GB/s)"
  exit 0
fi

if [ "$mode" = replicas ]; then
  $launch -np 4 "$exe" train $common --devices cpu:1 --replicas 2 --log four.jsonl 2>four.err ||
    { cat four.err; fail "the 2 x 2 run failed"; }
  grep -q '"ranks":4,"stages":2,"replicas":2,"replica_sum":"dist_sync_allreduce"' four.jsonl ||
    fail "the 2 x 2 summary lacks ranks 4, stages 2, replicas 2, replica_sum dist_sync_allreduce"
  losses one.jsonl | sed 's/.*"loss"://' >one.loss
  losses four.jsonl | sed 's/.*"loss"://' >four.loss
  [ "$(wc -l <four.loss)" -eq 8 ] || fail "the 2 x 2 log has no 8 steps"
  paste one.loss four.loss | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) { print "step " NR ": " $1 " vs " $2; bad = 1 } }
                                  END { exit bad }' || fail "the 2 x 2 losses left one process's by more than 1e-6"
  echo "2 stages x 2 replicas: the 8 losses equal one process's within 1e-6 relative"
  # Rank 3 (stage 1 of replica 1) killed after step 5; the relaunch resumes from step 4's
  # checkpoint and logs steps 5-8 equal to the uninterrupted 2 x 2 run's, bit for bit.
  $launch -np 4 "$exe" train $common --devices cpu:1 --replicas 2 --log resumed.jsonl --checkpoint "$dir/ck4" \
    --save-every 2 --crash-after-step 5 --crash-rank 3 >crash4.out 2>&1 && { cat crash4.out; fail "the 2 x 2 job whose rank 3 died exited 0"; }
  $launch -np 4 "$exe" train $common --devices cpu:1 --replicas 2 --log resumed.jsonl --checkpoint "$dir/ck4" \
    --save-every 2 2>resume4.err || { cat resume4.err; fail "the 2 x 2 relaunch failed"; }
  grep -q "resuming from $dir/ck4 at step 4" resume4.err || { cat resume4.err; fail "the 2 x 2 relaunch did not resume at step 4"; }
  losses four.jsonl | tail -4 >four.tail
  losses resumed.jsonl | tail -4 >resumed.tail
  diff four.tail resumed.tail || fail "the 2 x 2 relaunch's steps 5-8 differ from the uninterrupted run's"
  echo "2 stages x 2 replicas: rank 3 killed after step 5, the relaunch logs steps 5-8 bit for bit"
  exit 0
fi

start=$(date +%s)
$launch -np 2 "$exe" train $common --devices cpu:1 --log two.jsonl --checkpoint "$dir/ck" --save-every 2 \
  --crash-after-step 5 --crash-rank 1 >crash.out 2>&1
status=$?
took=$(( $(date +%s) - start ))
[ "$status" -ne 0 ] || { cat crash.out; fail "the job whose rank 1 died exited 0"; }
[ "$took" -le 30 ] || fail "the job whose rank 1 died took $took s to end (limit 30 s)"
sleep 1
if pgrep -f "$dir/ck" >/dev/null 2>&1 ; then
  fail "an lstm_lm process of the killed job is still running"
fi
echo "rank 1 killed after step 5: the job exited $status after $took s, no process left"
$launch -np 2 "$exe" train $common --devices cpu:1 --log two.jsonl --checkpoint "$dir/ck" --save-every 2 2>resume.err ||
  { cat resume.err; fail "the relaunch failed"; }
grep -q "resuming from .*ck at step 4" resume.err || { cat resume.err; fail "the relaunch did not resume at step 4"; }
losses one.jsonl | tail -n 4 >one.loss
losses two.jsonl | tail -n 4 >two.loss
diff one.loss two.loss || fail "the relaunched steps 5-8 left the one-process loss curve"
echo "relaunched from the checkpoint of step 4: steps 5-8 equal one process's bit for bit"
