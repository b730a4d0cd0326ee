#!/usr/bin/env bash
# Configures and builds parity in build/ (Release; warnings are errors, as in CI). CUDA code
# is compiled when nvcc is found (/usr/local/cuda/bin/nvcc on these machines).
# The libraries are unity builds (PARITY_UNITY_BUILD: a build from nothing is faster so).
# Extra CMake arguments pass through, e.g. ci/build.sh -DPARITY_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PARITY_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPARITY_WERROR=ON -DPARITY_UNITY_BUILD=ON "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "ci/build.sh: built $build/bin/parity"
