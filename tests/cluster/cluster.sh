# Shared by the cluster tests (sourced): skips with status 77 and a printed reason unless the
# simulated cluster can run here, brings one up, and takes it down again however the test ends.
#   cluster_up SCRIPT HOSTS [up options]   sets C to the cluster script
# The script is SCRIPT unless STRATA_CLUSTER_SCRIPT names another; NSC_PREFIX defaults to
# strata-ct, apart from a cluster someone brought up by hand (snc).

cluster_up() {
  C=${STRATA_CLUSTER_SCRIPT:-$1}
  local hosts=$2
  shift 2
  if [ "$(id -u)" != 0 ]; then
    echo "skipped: the simulated cluster needs root (network namespaces); this run is uid $(id -u)"
    exit 77
  fi
  if [ ! -x "$C" ]; then
    echo "skipped: no cluster script at $C (set STRATA_CLUSTER_SCRIPT)"
    exit 77
  fi
  export NSC_PREFIX=${NSC_PREFIX:-strata-ct}
  trap 'timeout -k 5 60 "$C" down >/dev/null 2>&1' EXIT
  timeout -k 5 60 "$C" up "$hosts" "$@" || { echo "FAIL: the cluster did not come up"; exit 1; }
}

# wait_for_line FILE TEXT SECONDS PID: until FILE holds TEXT (true), PID ends or SECONDS pass
# (false). A bounded poll of a file another process writes: the one rare poll of these tests.
wait_for_line() {
  local file=$1 text=$2 tries=$(($3 * 10)) pid=$4 i
  for ((i = 0; i < tries; ++i)); do
    grep -q -- "$text" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

fail() {
  echo "FAIL: $*"
  exit 1
}
