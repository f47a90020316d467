#!/bin/bash
# strata::net's suite (test_net: ping-pong, FIFO, requests, monitors, tensors up to 64 MiB, idle
# ranks under a quarter of a core) with its two ranks on two simulated hosts joined by a 100 us,
# 10 Gbit/s link: over TCP between machines, where no doorbell wakes a rank (ctest label cluster).
#   net_suite.sh CLUSTER_SCRIPT TEST_NET
set -u
. "$(dirname "$0")/cluster.sh"
cluster_up "$1" 2 --delay 100us --rate 10gbit
"$C" run --timeout 120 -- -np 2 --timeout 100 "$2" --report_level=short
