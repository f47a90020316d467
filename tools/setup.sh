#!/usr/bin/env bash
# strata setup: installs the Debian packages the build needs (only those missing), then
# configures and builds in Release into ./build (override with STRATA_BUILD_DIR).
#
#   tools/setup.sh            build dependencies + build everything (libraries, samples, tools, tests, benchmarks)
#   tools/setup.sh lstm_lm    build dependencies + only the named targets and what they need (the
#                             README's first command: the main job, nothing else; the test-only
#                             packages are left for the whole build)
#   tools/setup.sh --bench    also the benchmark-only packages (CAF 0.17, PyTorch for the CPU anchor)
#
# Extra CMake arguments: STRATA_CMAKE_ARGS="-DSTRATA_CUDA=OFF ...". CI=true turns warnings into errors.
set -euo pipefail
cd "$(dirname "$0")/.."

# What every build needs (the libraries, samples and tools: the main job)...
packages=(build-essential cmake ninja-build libasio-dev libtbb-dev libopenblas-dev
          nlohmann-json3-dev libcli11-dev prometheus-cpp-dev fortunes libopenmpi-dev openmpi-bin)
# ...and what only the whole build needs: Boost.Test for the suites, CAF for the messaging
# benchmark's anchor, rsvg-convert for the trace timeline's PNG test.
test_packages=(libboost-test-dev libcaf-dev librsvg2-bin)
targets=()
for arg in "$@"; do
  if [[ "$arg" == "--bench" ]]; then
    packages+=(python3-torch)
  elif [[ "$arg" =~ ^[A-Za-z][A-Za-z0-9_.+-]*$ ]]; then
    targets+=("$arg")
  else
    echo "setup.sh: unknown argument '$arg' (expected --bench or a build target such as lstm_lm)" >&2
    exit 2
  fi
done

if ((${#targets[@]} == 0)); then packages+=("${test_packages[@]}"); fi
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${packages[@]}"; do
  if ! installed "$p"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then sudo_cmd=(sudo); else
      echo "setup.sh: these Debian packages are missing and I am not root: ${missing[*]}" >&2
      exit 1
    fi
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

build_dir="${STRATA_BUILD_DIR:-build}"
werror=OFF
if [[ "${CI:-}" == "true" ]]; then werror=ON; fi
# Ninja for a new build folder (an existing one keeps its generator): it starts a target's
# compiles while the libraries it links still build, which keeps every core busy.
if [[ -z "${CMAKE_GENERATOR:-}" && ! -f "$build_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  export CMAKE_GENERATOR=Ninja
fi
# The suites are configured where Boost.Test is installed: always for the whole build, and for
# named targets (the main job on a fresh machine) only when it is already there.
tests=ON
if ((${#targets[@]})) && ! installed libboost-test-dev; then tests=OFF; fi
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=$werror -DSTRATA_BUILD_TESTS=$tests \
  ${STRATA_CMAKE_ARGS:-} >/dev/null
if ((${#targets[@]})); then
  # The targets, as Make ("... NAME") or Ninja ("NAME: phony") lists them.
  known=$(cmake --build "$build_dir" --target help | sed -n -e 's/^\.\.\. \([^ ]*\).*/\1/p' -e 's/^\([^ /:]*\): phony$/\1/p')
  for t in "${targets[@]}"; do
    if ! grep -qxF "$t" <<<"$known"; then
      echo "setup.sh: '$t' is not a build target of strata (cmake --build $build_dir --target help lists them)" >&2
      exit 2
    fi
  done
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j"$(nproc)"
fi
