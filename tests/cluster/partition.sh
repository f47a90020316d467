#!/bin/bash
# strata::net's silence deadline across two simulated hosts (ctest label cluster; docs/distributed.md,
# "Failure model"): with STRATA_NET_PEER_TIMEOUT_S=6, a 2 s cut of host2's cable is survived, and in
# a 12 s cut each rank ends with one sentence naming the silent rank, its host and its silence,
# within the deadline plus a few seconds (mpirun's own --timeout is 50 s). mpirun itself ends the
# job once it reaches host2's daemon again: Open MPI 4's launcher waits for its daemons.
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

echo "-- in a 12 s cut the ranks end within the deadline plus a few seconds, with one sentence"
# Each line of the job's output with the second it came (to time the sentence against the cut).
stamp_lines() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }
"$C" run --timeout 60 -- -np 2 --timeout 50 "$program" 60 2>&1 | stamp_lines >"$out/long" &
run=$!
wait_for_line "$out/long" "partition: talking" 30 "$run" || { cat "$out/long"; fail "the job did not start talking"; }
cut_at=$(date +%s.%N)
timeout 30 "$C" fault link-down 2 12
wait "$run"
cut -d' ' -f2- "$out/long"
line=$(grep -E "strata::net: rank 1 on host host2 has been silent for [0-9.]+ s, past STRATA_NET_PEER_TIMEOUT_S=6: rank 0 on host host1 ends the job\.$" "$out/long" | head -1)
[ -n "$line" ] || fail "no sentence naming the silent rank"
took=$(awk -v a="$cut_at" -v b="${line%% *}" 'BEGIN { printf "%.1f", b - a }')
echo "rank 0 ended ${took} s after the cut began"
awk -v t="$took" 'BEGIN { exit !(t <= 6 + 4) }' || fail "rank 0 ended ${took} s after the cut, later than 6 s + 4 s"
grep -q "Exit code: *3" "$out/long" || fail "the job did not end with the silent peer's status (3)"
echo "PASS"
