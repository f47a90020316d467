#!/usr/bin/env bash
# A traced two-rank ping-pong, merged: run by ctest trace_merge_links_a_ping_pong_across_two_ranks.
#   merge_ranks.sh MPIEXEC RANK_PING_PONG STRATA_TRACE TEST_TRACE_MERGE WORK_DIR ROUNDS
# Each rank writes WORK_DIR/pp.strace.rank<r>; strata-trace merges them; test_trace_merge checks
# the links; summary, export, timeline and dot must read the merged file.
set -euo pipefail
mpiexec=$1 program=$2 tool=$3 checker=$4 dir=$5 rounds=$6
rm -rf "$dir"
mkdir -p "$dir"
STRATA_TRACE="$dir/pp.strace" "$mpiexec" -np 2 --oversubscribe --bind-to none --timeout 60 --mca btl self,vader \
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$program" "$rounds"
for r in 0 1; do
  [[ -f "$dir/pp.strace.rank$r" ]] || { echo "FAIL: rank $r wrote no $dir/pp.strace.rank$r"; exit 1; }
done
[[ ! -e "$dir/pp.strace" ]] || { echo "FAIL: a rank wrote the unsuffixed $dir/pp.strace"; exit 1; }
"$tool" merge "$dir/merged.strace" "$dir/pp.strace.rank1" "$dir/pp.strace.rank0"
"$checker" --run_test=a_traced_two_rank_ping_pong_merges_into_linked_flows --report_level=short -- \
  "$dir/merged.strace" "$dir/pp.strace.rank0" "$dir/pp.strace.rank1" "$rounds"
"$tool" summary "$dir/merged.strace" | tee "$dir/summary.txt"
grep -q "pinger@r0" "$dir/summary.txt" && grep -q "ponger@r1" "$dir/summary.txt"
grep -q "cross-rank messages: $((2 * (rounds + 2))) sent, $((2 * (rounds + 2))) received, $((2 * (rounds + 2))) linked" \
  "$dir/summary.txt" || { echo "FAIL: the summary does not count every cross-rank message as linked"; exit 1; }
grep -q "send posted -> received: 6 linked (0 sends without their receive)" "$dir/summary.txt" ||
  { echo "FAIL: the summary does not join the 6 tensor transfers"; exit 1; }
"$tool" export "$dir/merged.strace" -o "$dir/merged.json"
"$tool" timeline "$dir/merged.strace" -o "$dir/merged.svg"
"$tool" dot "$dir/merged.strace" -o "$dir/merged.dot"
echo "PASS: $((2 * (rounds + 2))) messages and 6 tensor transfers between two ranks linked"
