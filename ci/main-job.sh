#!/usr/bin/env bash
# parity's main job on this machine: install, build, then `parity run` on 4 local ranks
# (conformance suite plus default benchmarks), writing results/parity-run-<time>.h5 and its
# report next to it. Extra arguments go to `parity run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
mkdir -p results
cd results
exec ../"${PARITY_BUILD_DIR:-build}"/bin/parity run --np 4 "$@"
