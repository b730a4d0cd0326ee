#!/usr/bin/env bash
# Runs, from a pack (ci/pack.sh), what docs/gpu.md lists as the checks a GPU machine must pass:
# the CUDA op tests, the device conformance grid (MPI staging and NCCL), the training and
# tensor-parallel cases on the GPU, and the main job on ranks sharing the GPU. Each step has
# its own time limit, its log and result files go to the output folder, and a summary table
# (step, exit status, seconds) ends the output. Meant for a machine where nothing can be built
# or installed: only the pack, a CUDA driver and python3 with matplotlib and h5py are needed.
set -uo pipefail

usage() {
    cat <<'EOF'
usage: ci/gpu-run.sh --pack DIR --out DIR [--np N] [--steps LIST] [--help]

  --pack DIR    an unpacked parity pack (bin/parity inside)
  --out DIR     where logs and result files go (created)
  --np N        ranks for the multi-rank steps [default: 4]
  --steps LIST  comma-separated subset of: info,ops,grid1,gridN,check1,checkN,run [default: all]
EOF
}

pack= out= np=4 steps=info,ops,grid1,gridN,check1,checkN,run
while (($#)); do
    case $1 in
        --pack) pack=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --np) np=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "gpu-run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
[ -x "$pack/bin/parity" ] || { echo "gpu-run.sh: no bin/parity under --pack '$pack'" >&2; exit 2; }
[ -n "$out" ] || { echo "gpu-run.sh: --out is required" >&2; exit 2; }
mkdir -p -- "$out" || exit 2
pack=$(readlink -f -- "$pack")
out=$(readlink -f -- "$out")
bin=$pack/bin
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

summary=()
step() { # NAME LIMIT_S COMMAND...
    local name=$1 limit=$2 start rc
    shift 2
    [[ ",$steps," == *",$name,"* ]] || return 0
    echo "=== $name: $*" | tee -a "$out/$name.log"
    start=$EPOCHREALTIME
    timeout --signal=TERM --kill-after=10 "$limit" "$@" >>"$out/$name.log" 2>&1
    rc=$?
    summary+=("$(awk -v n="$name" -v rc="$rc" -v t0="$start" -v t1="$EPOCHREALTIME" 'BEGIN { printf "%-8s rc=%-3s %7.1f s", n, rc, t1 - t0 }')")
    tail -n 15 "$out/$name.log"
}

step info 60 bash -c 'nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; "$0/parity" --version' "$bin"
step ops 300 "$bin/test_units" --gtest_filter='*Cuda*:Mirror.*:Placement.*:TensorPlacement.*:DeviceErrors.*' --gtest_output="xml:$out/ops.xml"
step grid1 300 "$bin/mpirun" -n 1 "$bin/test_collectives" --gtest_filter='DeviceTest.*' --gtest_output="xml:$out/grid1.xml"
step gridN 400 "$bin/mpirun" -n "$np" --oversubscribe "$bin/test_collectives" --gtest_filter='DeviceTest.*'
step check1 300 "$bin/parity" check --device cuda --filter 'training/*:tensor/*:moe/*' --out "$out/check-cuda-np1.h5" --force
step checkN 400 "$bin/parity" check --device cuda --np "$np" --filter 'training/*:tensor/*:moe/*' --out "$out/check-cuda-np$np.h5" --force
step run 500 "$bin/parity" run --device cuda --np "$np" --out "$out/run-cuda-np$np.h5" --force --report-dir "$out/run-cuda-np$np.report"

echo "=== summary"
printf '%s\n' "${summary[@]}"
