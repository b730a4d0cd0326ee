#!/usr/bin/env bash
# Everything CI runs: install what is missing, build, and run every test (unit, conformance at
# world sizes 1, 2, 3, 4, 5 and 8 under mpirun, command line, reports, local multi-host cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
build=${PARITY_BUILD_DIR:-build}
cd "$build"
# Open MPI's point-to-point layer: ob1 (shared memory, TCP between hosts), which it chooses here
# anyway, named so that no rank probes for Omni-Path or libfabric networks first (pml cm's PSM,
# PSM2 and OFI): 0.2 s of MPI_Init per rank and about a sixth of the suite's time on 2 cores.
# Every test runs on one host or on network namespaces of it. Set OMPI_MCA_pml to test another.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
ctest --output-on-failure -j "$(nproc)" "$@"
