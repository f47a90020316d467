#!/usr/bin/env bash
# ctest mpi_bundle: tools/mpi-bundle.sh makes an Open MPI that runs from its own folder, as the GPU
# bundle carries it to a machine with no MPI. The sample kvstore_dist (MXNet's dist_sync check)
# runs on 2 ranks with it, over shared memory and TCP on loopback, and
# 1. no shared object of the system's Open MPI, PMIx or hwloc is loaded by mpirun or a rank
#    (LD_DEBUG=files), while the bundle's btl components are;
# 2. where this process may make a mount namespace (unshare -m, root), the system's Open MPI
#    folders, PMIx and the system mpirun are hidden under empty mounts and the job still runs,
#    and a program that does not exist still gets mpirun's help text (the bundle's share/openmpi;
#    printed by mpirun itself: a rank's help text for a bad MCA choice races with the job's abort).
#   usage: mpi_bundle_test.sh <tools/mpi-bundle.sh> <kvstore_dist sample> <work-dir>
set -u
script=$1
sample=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

if ! bash "$script" "$work/ompi" >"$work/bundle.out" 2>&1; then
  cat "$work/bundle.out"
  echo "FAILED: tools/mpi-bundle.sh"
  exit 1
fi
cat "$work/bundle.out"
[ -x "$work/ompi/bin/mpirun" ] && [ -f "$work/ompi/lib/openmpi/mca_btl_vader.so" ] && [ -f "$work/ompi/lib/libmpi.so.40" ] &&
  ok "the bundle has mpirun, libmpi and the shared memory component" || fail "the bundle lacks mpirun, libmpi.so.40 or mca_btl_vader.so"
ls "$work/ompi/lib/openmpi" | grep -q 'openib\|ucx\|ofi' && fail "components for other networks were packed" ||
  ok "no InfiniBand, UCX or libfabric component"

# Open MPI's folders on this machine: what must not be read.
system_dirs=$(ompi_info --path all --parsable 2>/dev/null | sed -n 's/^path:\(libdir\|pkglibdir\):\(.*\)$/\2/p' | sort -u)
pmix_dir=$(dirname "$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix\.so\.2 / && !found {print $NF; found = 1}')")")")
[ -n "$system_dirs" ] || { echo "FAILED: ompi_info gives no libdir"; exit 1; }

expected_lines() {  # N ranks, 3 rounds: v = N(N+1)/2
  local n=$1 v=$(($1 * ($1 + 1) / 2)) r w
  for w in $(seq 0 $((n - 1))); do for r in 0 1 2; do echo "rank $w round $r: [[$v, $v, $v], [$v, $v, $v]]"; done; done
}

run_job() {  # run_job NAME BTL: the sample on 2 ranks with the bundle, output in $work/NAME.out
  (
    . "$work/ompi/env.sh"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
    mpirun -np 2 --oversubscribe --bind-to none --timeout 100 --mca btl "$2" "$sample"
  ) >"$work/$1.out" 2>&1
}
check_job() {  # check_job NAME RC
  if [ "$2" = 0 ] && diff <(grep '^rank ' "$work/$1.out" | sort) <(expected_lines 2 | sort) >/dev/null; then
    ok "$1: 6 lines of v = 3 from the 2 ranks"
  else
    fail "$1: exit $2, output:"; cat "$work/$1.out"
  fi
}

# 1. Which shared objects are loaded.
for btl in self,vader self,tcp; do
  name=loaded_${btl#self,}
  rm -f "$work"/ld.*
  LD_DEBUG=files LD_DEBUG_OUTPUT=$work/ld run_job "$name" "$btl"
  check_job "$name" $?
  loaded=$(cat "$work"/ld.* 2>/dev/null | grep -o 'file=/[^ ;]*' | sed 's/^file=//' | sort -u)
  [ -n "$loaded" ] || fail "$name: LD_DEBUG=files logged nothing"
  bad=""
  for d in $system_dirs "$pmix_dir" /usr/lib/x86_64-linux-gnu/hwloc; do
    bad="$bad$(echo "$loaded" | grep "^$d/" || true)"
  done
  bad="$bad$(echo "$loaded" | grep -E '/lib(mpi|open-pal|open-rte|pmix)\.so' | grep -v "^$work/" || true)"
  [ -z "$bad" ] && ok "$name: nothing of the system's Open MPI, PMIx or hwloc plugins loaded" ||
    fail "$name: loaded from the system: $(echo "$bad" | head -3 | paste -sd' ' -)"
  echo "$loaded" | grep -q "^$work/ompi/lib/openmpi/mca_btl_${btl#self,}.so$" && ok "$name: the bundle's mca_btl_${btl#self,} loaded" ||
    fail "$name: the bundle's mca_btl_${btl#self,}.so was not loaded"
done

# 2. With the system's Open MPI hidden.
if unshare -m true 2>/dev/null; then
  hide=""
  hidden=()
  for d in $system_dirs "$pmix_dir" /usr/share/openmpi /etc/openmpi /usr/lib/x86_64-linux-gnu/hwloc; do
    [ -d "$d" ] || continue
    inside=0
    for h in "${hidden[@]}"; do case "$d/" in "$h"/*) inside=1 ;; esac; done
    [ "$inside" = 1 ] && continue   # hidden with the folder above it
    hidden+=("$d")
    hide="$hide mount -t tmpfs none '$d' &&"
  done
  for f in /usr/bin/orterun /usr/bin/orted; do
    [ -e "$f" ] && hide="$hide mount --bind /dev/null '$f' &&"
  done
  cat >"$work/hidden.sh" <<EOF
set -u
$hide true || { echo "could not hide the system's Open MPI"; exit 3; }
[ -z "\$(ls -A '$(echo "$system_dirs" | head -1)')" ] || { echo "still visible"; exit 3; }
$(declare -f run_job)
work='$work'; sample='$sample'
run_job hidden_vader self,vader; echo "rc \$?" >>"$work/hidden_vader.out"
sample=\$work/no-such-program run_job hidden_bad self,vader; echo "rc \$?" >>"$work/hidden_bad.out"
EOF
  unshare -m bash "$work/hidden.sh" >"$work/hidden.out" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    fail "hiding the system's Open MPI (exit $rc): $(cat "$work/hidden.out")"
  else
    check_job hidden_vader "$(sed -n 's/^rc //p' "$work/hidden_vader.out")"
    if grep -q '^rc 0' "$work/hidden_bad.out"; then
      fail "a program that does not exist did not fail the job"
    elif grep -q 'mpirun was unable to launch the specified application' "$work/hidden_bad.out"; then
      ok "with the system's hidden, a program that does not exist gets mpirun's help text from the bundle"
    else
      fail "no help text for a program that does not exist: $(head -5 "$work/hidden_bad.out")"
    fi
  fi
else
  echo "not checked: this process may not make a mount namespace (unshare -m), so the system's Open MPI stays visible"
fi

echo "$failures failure(s)"
[ "$failures" = 0 ]
