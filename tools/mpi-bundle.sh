#!/usr/bin/env bash
# Copies this machine's Open MPI (Debian 12's 4.1) into a folder that runs from anywhere: the
# launcher (mpirun, orted), the libraries it and the MCA components need, the components a
# one-machine job uses (shared memory and TCP; those that need InfiniBand, UCX, libfabric or PSM
# stay behind), the help texts and Debian's MCA defaults. tools/gpu-bundle.sh puts it in
# the GPU bundle so that the tests that need `mpirun -np 2` run on a lent GPU machine, whose image
# has no MPI (libmunge goes along: libpmix links it; hwloc runs without its plugins). Programs
# linked against libmpi.so.40 use it after
#
#   . DEST/env.sh      (PATH, LD_LIBRARY_PATH, and OPAL_*/PMIX_* pointing into DEST)
#
# Open MPI finds its installation folders through those variables (its `env` installdirs
# component), so nothing under /usr/lib/x86_64-linux-gnu/openmpi is read; ctest mpi_bundle checks
# that with LD_DEBUG=files on a 2-rank job.
#
#   usage: tools/mpi-bundle.sh DEST
set -euo pipefail
die() { echo "mpi-bundle: $*" >&2; exit 1; }
trap 'echo "mpi-bundle: stopped at line $LINENO: $BASH_COMMAND" >&2' ERR
[ $# = 1 ] || die "usage: tools/mpi-bundle.sh DEST"
dest=$1
command -v ompi_info >/dev/null 2>&1 || die "no ompi_info here: install openmpi-bin (tools/setup.sh does)."
path_of() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1:\(.*\)$/\1/p"; }
pkglibdir=$(path_of pkglibdir)
pkgdatadir=$(path_of pkgdatadir)
sysconfdir=$(path_of sysconfdir)
bindir=$(path_of bindir)
version=$(ompi_info --parsable | sed -n 's/^ompi:version:full:\(.*\)$/\1/p')
[ -d "$pkglibdir" ] || die "Open MPI's component folder '$pkglibdir' (ompi_info --path pkglibdir) is not there."
[ -x "$bindir/orterun" ] || die "no $bindir/orterun: this script packs Open MPI 4 (ORTE); found Open MPI ${version:-of unknown version}."
# system_lib NAME: the path ldconfig knows for NAME (its first entry; awk reads all of its input,
# so ldconfig never gets SIGPIPE under pipefail).
system_lib() { ldconfig -p | awk -v name="$1" '$1 == name && !found {print $NF; found = 1}'; }
pmix_lib=$(system_lib libpmix.so.2)
[ -n "$pmix_lib" ] || die "no libpmix.so.2 here (Debian's libpmix2, which Open MPI 4.1 uses)."
mpi_lib=$(system_lib libmpi.so.40)
[ -n "$mpi_lib" ] || die "no libmpi.so.40 here (Debian's libopenmpi3, Open MPI 4.1)."
pmix_root=$(dirname "$(dirname "$(readlink -f "$pmix_lib")")")   # .../pmix2 (lib/libpmix.so.2.x)
[ -d "$pmix_root/lib/pmix" ] || die "no PMIx component folder $pmix_root/lib/pmix beside $(readlink -f "$pmix_lib")."

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib/hwloc" "$dest/lib/openmpi" "$dest/lib/pmix" "$dest/share/openmpi" "$dest/share/pmix" "$dest/etc"
cp -L "$bindir/orterun" "$dest/bin/orterun"
cp -L "$bindir/orted" "$dest/bin/orted"
ln -s orterun "$dest/bin/mpirun"
ln -s orterun "$dest/bin/mpiexec"

# Components: kept only where every library they need is in this list (the rest are for
# networks a one-machine job does not use, and their libraries are not on the GPU image).
allowed='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libevent_core-2\.1|libevent_pthreads-2\.1|libudev|libopen-pal|libopen-rte|libhwloc|libz|libmpi|libmca_common_ompio|libmca_common_sm|libmca_common_monitoring|libnuma|libpmix|libmunge|libuuid|libatomic|liblzma|libltdl|libcap|libgcc_s)\.so'
kept=0
left=()
for f in "$pkglibdir"/*.so "$pmix_root"/lib/pmix/*.so; do
  [ -f "$f" ] || continue
  deps=$(ldd "$f" | awk '$2 == "=>" {print $1}')
  if [ -n "$deps" ] && grep -Evq "$allowed" <<<"$deps"; then
    left+=("$(basename "$f" .so)")
    continue
  fi
  case "$f" in
    "$pmix_root"/*) cp -L "$f" "$dest/lib/pmix/" ;;
    *) cp -L "$f" "$dest/lib/openmpi/" ;;
  esac
  kept=$((kept + 1))
done

# Libraries: what the launcher, the components and libmpi need, glibc's excepted.
for f in "$dest"/bin/orterun "$dest"/bin/orted "$dest"/lib/openmpi/*.so "$dest"/lib/pmix/*.so \
         "$mpi_lib"; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux* | libresolv.so.*) ;;
    *) cp -L "$path" "$dest/lib/$name" ;;
  esac
done
cp -L "$mpi_lib" "$dest/lib/libmpi.so.40"

cp -r "$pkgdatadir"/. "$dest/share/openmpi/"
[ -d "$pmix_root/share/pmix" ] && cp -r "$pmix_root/share/pmix"/. "$dest/share/pmix/"
# Open MPI's defaults (Debian's leave out UCX, openib and libfabric); PMIx's only name its
# component folder, which env.sh sets.
[ -f "$sysconfdir/openmpi-mca-params.conf" ] && cp "$sysconfdir/openmpi-mca-params.conf" "$dest/etc/"

cat >"$dest/env.sh" <<'EOF'
# Source me (bash): this Open MPI, wherever the folder lies.
_strata_mpi=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$_strata_mpi/bin:$PATH"
export LD_LIBRARY_PATH="$_strata_mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$_strata_mpi" OPAL_EXEC_PREFIX="$_strata_mpi" OPAL_BINDIR="$_strata_mpi/bin"
export OPAL_LIBDIR="$_strata_mpi/lib" OPAL_PKGLIBDIR="$_strata_mpi/lib/openmpi"
export OPAL_DATAROOTDIR="$_strata_mpi/share" OPAL_DATADIR="$_strata_mpi/share" OPAL_PKGDATADIR="$_strata_mpi/share/openmpi"
export OPAL_SYSCONFDIR="$_strata_mpi/etc"
export PMIX_PREFIX="$_strata_mpi" PMIX_EXEC_PREFIX="$_strata_mpi" PMIX_LIBDIR="$_strata_mpi/lib"
export PMIX_PKGLIBDIR="$_strata_mpi/lib/pmix" PMIX_PKGDATADIR="$_strata_mpi/share/pmix" PMIX_SYSCONFDIR="$_strata_mpi/etc"
export HWLOC_PLUGINS_PATH="$_strata_mpi/lib/hwloc"   # none: the core topology needs no plugin
export OMPI_MCA_mca_base_component_path="$_strata_mpi/lib/openmpi"
export PMIX_MCA_mca_base_component_path="$_strata_mpi/lib/pmix"
unset _strata_mpi
EOF
echo "Open MPI ${version:-?} from $(dirname "$pkglibdir"): $kept components kept, ${#left[@]} left behind (${left[*]:-none})" >"$dest/README"
echo "mpi-bundle: $dest ($(du -sh "$dest" | cut -f1)): $(cat "$dest/README")"
