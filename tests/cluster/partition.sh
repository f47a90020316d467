#!/bin/bash
# strata::net's silence deadline across two simulated hosts (ctest label cluster; docs/distributed.md,
# "Failure model"): with STRATA_NET_PEER_TIMEOUT_S=6, a 2 s cut of host2's cable is survived, and a
# 14 s cut ends the job with one sentence naming rank 1, its host and its silence, within the
# deadline plus a few seconds (mpirun's own --timeout is 50 s).
#   partition.sh CLUSTER_SCRIPT PARTITION_PROGRAM
set -u
. "$(dirname "$0")/cluster.sh"
program=$2
cluster_up "$1" 2 --delay 100us --rate 10gbit
export STRATA_NET_PEER_TIMEOUT_S=6
out=$(mktemp -d)
trap 'rm -rf "$out"; timeout -k 5 60 "$C" down >/dev/null 2>&1' EXIT

echo "-- a 2 s cut, shorter than the 6 s deadline, is survived"
"$C" run --timeout 60 -- -np 2 --timeout 50 "$program" 8 >"$out/short" 2>&1 &
run=$!
wait_for_line "$out/short" "partition: talking" 30 "$run" || { cat "$out/short"; fail "the job did not start talking"; }
timeout 20 "$C" fault link-down 2 2
wait "$run"
rc=$?
cat "$out/short"
[ "$rc" = 0 ] || fail "a 2 s cut ended the job (exit $rc)"
grep -q "partition: [0-9]* echoes in" "$out/short" || fail "the job did not finish its conversation"

echo "-- a 14 s cut ends the job within the deadline plus a few seconds"
"$C" run --timeout 60 -- -np 2 --timeout 50 "$program" 60 >"$out/long" 2>&1 &
run=$!
wait_for_line "$out/long" "partition: talking" 30 "$run" || { cat "$out/long"; fail "the job did not start talking"; }
cut_at=$(date +%s.%N)
timeout 30 "$C" fault link-down 2 14 &
cut=$!
wait "$run"
rc=$?
ended=$(date +%s.%N)
wait "$cut"
cat "$out/long"
took=$(awk -v a="$cut_at" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
echo "the job ended ${took} s after the cut (exit $rc)"
[ "$rc" != 0 ] || fail "the job went on through a 14 s cut"
grep -Eq "strata::net: rank 1 on host host2 has been silent for [0-9.]+ s, past STRATA_NET_PEER_TIMEOUT_S=6: rank 0 on host host1 ends the job\." "$out/long" ||
  fail "no sentence naming the silent rank"
awk -v t="$took" 'BEGIN { exit !(t <= 6 + 6) }' || fail "the job ended ${took} s after the cut, later than 6 s + 6 s"
echo "PASS"
