#!/usr/bin/env bash
# Packs what tools/gpu-check.sh runs on a lent GPU machine, whose image has CUDA, cuDNN and
# PyTorch but none of the Debian packages strata builds against (and nothing can be fetched
# there): the cuda test programs (with those of cuda tensors across ranks and NCCL),
# strata-bench-lm-gpu and lstm_lm, built here with CUDA, with the shared libraries they need beyond
# glibc, cuBLAS and cuDNN, this machine's Open MPI (mpi/, tools/mpi-bundle.sh) where the build
# has MPI, and a training corpus. The programs
# link the CUDA 13 sonames (libcudart.so.13, libcublas.so.13, libcublasLt.so.13): MANIFEST lists
# those the image must provide, and gpu-check.sh checks them, with the driver, before any step. The result,
# .gpu-bundle/strata-gpu.tar.xz, is ignored by git; a device call carries it:
#   run(command="tools/gpu-check.sh", carry=[".gpu-bundle"], timeout_s=...)
#
#   usage: tools/gpu-bundle.sh [build-dir]     (default build, as tools/setup.sh configures it)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=${JOBS:-2}
die() { echo "gpu-bundle: $*" >&2; exit 1; }

command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || die "no nvcc here: the bundle needs a CUDA build."
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON >/dev/null
fi
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
[ "$(cache STRATA_CUDA)" = ON ] || die "$build is configured with STRATA_CUDA=$(cache STRATA_CUDA); expected ON."
[ "$(cache CMAKE_BUILD_TYPE)" = Release ] || die "$build is a '$(cache CMAKE_BUILD_TYPE)' build; expected Release (timings)."
# The CUDA code generation flags, from Make's flags.make or Ninja's build.ninja.
arch=$(grep -ho -- '--generate-code=[^ ]*' "$build"/kernels/CMakeFiles/*/flags.make "$build"/build.ninja 2>/dev/null | sort -u | paste -sd' ' -)
case "$arch" in
  *sm_90*) ;;
  *) die "$build compiles CUDA as '${arch:-nothing}'; the H200 needs sm_90 (CMAKE_CUDA_ARCHITECTURES=90)." ;;
esac

programs=(tests/kernels_cuda/test_kernels_cuda tests/device/test_device_cuda tests/kvstore/test_kvstore_cuda
          tests/lm/test_lm_cuda tools/bench/strata-bench-lm-gpu samples/lstm_lm/lstm_lm)
# Where the build has MPI: cuda tensors between 2 ranks (net_cuda_np2), the NCCL smoke test
# (nccl_cuda alone; nccl_cuda_np2 needs 2 GPUs) where it has strata::nccl, and the allreduce store
# on cuda replicas (kvstore_dist_cuda, alone and on 2 ranks), with this machine's Open MPI
# (tools/mpi-bundle.sh: the image has no MPI) so that gpu-check.sh can start 2 ranks.
with_mpi=0
if grep -qs 'net_cuda_np2' "$build/tests/net_cuda/CTestTestfile.cmake"; then
  programs+=(tests/net_cuda/test_net_cuda)
  with_mpi=1
fi
if grep -qs 'nccl_cuda' "$build/tests/net_cuda/CTestTestfile.cmake"; then
  programs+=(tests/net_cuda/test_nccl_cuda)
fi
if grep -qs 'kvstore_dist_cuda' "$build/tests/net_cuda/CTestTestfile.cmake"; then
  programs+=(tests/net_cuda/test_kvstore_dist_cuda)
fi
targets=()
for p in "${programs[@]}"; do targets+=("$(basename "$p")"); done
nice cmake --build "$build" -j"$jobs" --target "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/lib-compat" "$stage/lib-cuda"
for p in "${programs[@]}"; do
  [ -x "$build/$p" ] || die "$build/$p was not built (is cuDNN there for strata-bench-lm-gpu?)."
  cp "$build/$p" "$stage/bin/"
done

# Shared libraries: glibc's and the driver's stay; cuBLAS and cuDNN are the image's (too large to
# carry, and PyTorch there ships them); libcudart goes along as a fallback; libstdc++ and libgcc_s
# go to lib-compat, used only where the image's are older than Debian 12's.
for f in "$stage"/bin/*; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libresolv.so.*|libcuda.so.*) ;;
    libcublas*|libcudnn*) ;;
    # libnccl.so.2 is ~210 MB (~180 MB compressed), past what a device call carries (64 MiB): the
    # image's comes from PyTorch's nvidia-nccl package, like cuBLAS (gpu-check.sh finds it there).
    libnccl*) ;;
    # Open MPI's own libraries go to mpi/lib with its components (below).
    libmpi.so.* | libopen-pal.so.* | libopen-rte.so.* | libpmix.so.*) [ "$with_mpi" = 1 ] || cp -L "$path" "$stage/lib/$name" ;;
    libcudart.so.*) cp -L "$path" "$stage/lib-cuda/$name" ;;
    libstdc++.so.*|libgcc_s.so.*) cp -L "$path" "$stage/lib-compat/$name" ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done

if [ "$with_mpi" = 1 ]; then
  tools/mpi-bundle.sh "$stage/mpi" >/dev/null   # gpu-check.sh sources mpi/env.sh
fi

# The corpus lstm_lm trains on by default here (the image has no fortunes package).
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat|*.u8) ;; *) [ -f "$f" ] && cat "$f" ;; esac
done >"$stage/corpus.txt"
[ -s "$stage/corpus.txt" ] || die "no /usr/share/games/fortunes here (apt-get install fortunes): the bundle's corpus comes from it."

{
  echo "strata $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!.gpu-bundle' || echo '+changes'), built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 || nvcc --version | tail -1)"
  echo "CUDA code: $arch"
  # What gpu-check.sh must find on the image (it prints what they resolve to and stops if they do not).
  echo "image libraries: $(for f in "$stage"/bin/*; do ldd "$f"; done | awk '$1 ~ /^lib(cublas|cublasLt|cudnn|nccl)/ {print $1}' | sort -u | paste -sd' ' -)"
  (cd "$stage" && find . -type f | sort | xargs ls -l | awk '{print $5, $9}')
} >"$stage/MANIFEST"

mkdir -p .gpu-bundle
XZ_OPT=${XZ_OPT:--6 -T0} tar -cJf .gpu-bundle/strata-gpu.tar.xz.tmp -C "$stage" .
mv .gpu-bundle/strata-gpu.tar.xz.tmp .gpu-bundle/strata-gpu.tar.xz
echo "gpu-bundle: .gpu-bundle/strata-gpu.tar.xz, $(du -h .gpu-bundle/strata-gpu.tar.xz | cut -f1) ($(head -1 "$stage/MANIFEST"))"
