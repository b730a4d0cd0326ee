#!/usr/bin/env bash
# Everything CI runs: install what is missing, build, and run every test (unit, conformance at
# world sizes 1, 2, 3, 4, 5 and 8 under mpirun, command line, reports, local multi-host cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
build=${PARITY_BUILD_DIR:-build}
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
