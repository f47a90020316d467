#!/usr/bin/env bash
# strata setup: installs the Debian packages the build needs (only those missing), then
# configures and builds in Release into ./build (override with STRATA_BUILD_DIR).
#
#   tools/setup.sh            build dependencies + build everything (libraries, samples, tools, tests, benchmarks)
#   tools/setup.sh lstm_lm    build dependencies + only the named targets and what they need (the
#                             README's first command: the main job, nothing else)
#   tools/setup.sh --bench    also the benchmark-only packages (CAF 0.17, PyTorch for the CPU anchor)
#
# Extra CMake arguments: STRATA_CMAKE_ARGS="-DSTRATA_CUDA=OFF ...". CI=true turns warnings into errors.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake libasio-dev libtbb-dev libboost-test-dev libopenblas-dev
          nlohmann-json3-dev libcli11-dev prometheus-cpp-dev libcaf-dev fortunes librsvg2-bin
          libopenmpi-dev openmpi-bin)
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

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
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
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=$werror ${STRATA_CMAKE_ARGS:-} >/dev/null
if ((${#targets[@]})); then
  known=$(cmake --build "$build_dir" --target help)
  for t in "${targets[@]}"; do
    if ! grep -qE "^\.\.\. $t( |\$)" <<<"$known"; then
      echo "setup.sh: '$t' is not a build target of strata (cmake --build $build_dir --target help lists them)" >&2
      exit 2
    fi
  done
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j"$(nproc)"
fi
