#!/usr/bin/env bash
# strata-top against a real program: starts the ping_pong sample with --metrics-port 0, reads
# the port it prints, runs `strata-top --once` against it and checks the table, then stops the
# sample. Exit 0 only when everything matched.
#   top_against_sample.sh PING_PONG STRATA_TOP WORK_DIR
set -u
ping_pong=$1 top=$2 work=$3
mkdir -p "$work"
out="$work/ping_pong.out"
: > "$out"
# Enough round trips to be busy while we scrape; lingering keeps the endpoint up afterwards.
timeout 60 "$ping_pong" --round-trips 3000000 --threads 2 --metrics-port 0 --linger-ms 30000 > "$out" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- ping_pong output:"; cat "$out"; exit 1; }

port=""
for _ in $(seq 1 100); do  # up to 10 s for the sample to print its port
  port=$(sed -n 's|^metrics: http://127\.0\.0\.1:\([0-9][0-9]*\)/metrics$|\1|p' "$out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || fail "ping_pong exited before printing its metrics port"
  sleep 0.1
done
[ -n "$port" ] || fail "ping_pong printed no 'metrics: http://127.0.0.1:PORT/metrics' line within 10 s"

table=$(timeout 20 "$top" --once --port "$port" 2>&1) || fail "strata-top --once --port $port failed: $table"
echo "$table"
for row in "actors live" "actors spawned" "messages handled" "messages per second" "undeliverable" \
           "unhandled" "mailbox dropped" "restarts"; do
  echo "$table" | grep -Eq "^  $row +[0-9]" || fail "the table has no '$row' row with a value"
done
echo "$table" | grep -Eq '^  actors live +[1-9]' || fail "'actors live' is not positive while ping_pong runs"

# Twice in a row (not a TTY: one plain table per refresh), the second with a per-second column.
two=$(timeout 20 "$top" --port "$port" --interval-ms 200 2>&1 & sleep 1; kill $! 2>/dev/null)
[ "$(echo "$two" | grep -c '^strata-top ')" -ge 2 ] || fail "strata-top printed fewer than two tables in 1 s: $two"
echo "$two" | grep -Eq '^  messages handled +[0-9]+ +[0-9]' || fail "no per-second figure for messages handled: $two"
echo "PASS: strata-top read ping_pong's metrics on port $port"
