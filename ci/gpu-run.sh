#!/usr/bin/env bash
# Runs, from a pack (ci/pack.sh), the checks a GPU machine must pass (docs/gpu.md), cheapest
# first, each under its own time limit (the limits sum to 480 s): device info; the fast path's
# tests and the CUDA op tests; the device copy against the device reduction; the one-rank device
# grid (NCCL and MPI staging); bench model --path fast in bfloat16 on gpt2-medium and gpt-1.3b,
# with the PyTorch baseline (bench/torch_gpt.py) on the same models beside it; check --device
# cuda over every case family at N ranks. Logs and result files go to the output folder, and a
# table (step, exit status, seconds) ends the output. Only the pack, a CUDA driver and python3
# with matplotlib and h5py (and PyTorch for the baseline) are needed.
set -uo pipefail

usage() {
    cat <<'EOF'
usage: ci/gpu-run.sh --pack DIR --out DIR [--np N] [--steps LIST] [--help]

  --pack DIR    an unpacked parity pack (bin/parity inside)
  --out DIR     where logs and result files go (created)
  --np N        ranks for the multi-rank steps [default: 4]
  --steps LIST  comma-separated subset of: info,fast,ops,kernels,grid1,model,torch,checkN
                [default: all, in that order], and the optional steps (in no default):
                  model_more  bench model --path fast on gpt-2.7b in bfloat16 and on
                              gpt2-medium in float16 (40 s)
                  profile     Nsight Compute (ncu) over the fast attention, LayerNorm and
                              loss kernels at gpt-1.3b's shape, its sections per kernel (60 s)
                  dp          the fast path's data parallelism: bench model --path fast on 2
                              ranks (MPI through host memory where they share a GPU), and on
                              one rank with the gradients' sums not overlapped (40 s)
                  calibrate   bench calibrate --device cuda (products, ops, streams and
                              collectives on the GPU, issue 33's GPU calibration), then
                              parity plan reading the cluster file it wrote (60 s)
                  gridN       the device conformance grid and device training at N ranks
                              (MPI staging where they share a GPU; NCCL where it allows) (60 s)
                  benches     the benchmarks on device buffers at N ranks: collectives
                              all_to_all_v and all_reduce (native, pairwise, hierarchical),
                              all_to_all_v over NCCL at one rank, moe, pipeline, precision
                              and checkpoint in bfloat16, each to its own file (150 s)
                  runN        parity run --device cuda --np N --quick, its report too (240 s)
                  scaling     bench scaling --path fast on gpt2-medium at 2 ranks (strong,
                              weak, the gradients' sums overlapped and not) and at one rank
                              over NCCL, each file's report drawn (90 s)
EOF
}

pack= out= np=4 steps=info,fast,ops,kernels,grid1,model,torch,checkN
here=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd)
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

step info 15 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; "$0/parity" --version; python3 -c "import torch; print(\"torch\", torch.__version__, \"cudnn\", torch.backends.cudnn.version())"' "$bin"
step fast 20 "$bin/test_units" --gtest_filter='Fast*' --gtest_output="xml:$out/fast.xml"
step ops 20 "$bin/test_units" --gtest_filter='*Cuda*:Mirror.*:Placement.*:TensorPlacement.*:DeviceErrors.*:LossScalingKernels.*' --gtest_output="xml:$out/ops.xml"
step kernels 15 "$bin/parity" bench collectives --device cuda --coll all_reduce --algo native -e 1M -n 5 --out "$out/kernels.h5" --force -q
step grid1 20 "$bin/mpirun" -n 1 "$bin/test_collectives" --gtest_filter='DeviceTest.*'
step model 40 "$bin/parity" bench model --device cuda --path fast --dtype bfloat16 --models gpt2-medium,gpt-1.3b --batch 4 --warmup 2 --steps 5 --out "$out/model-fast.h5" --force
step model_more 40 bash -c '"$0/parity" bench model --device cuda --path fast --dtype bfloat16 --models gpt-2.7b --batch 4 --warmup 2 --steps 5 --out "$1/model-fast-2.7b.h5" --force && "$0/parity" bench model --device cuda --path fast --dtype float16 --models gpt2-medium --batch 4 --warmup 2 --steps 5 --out "$1/model-fast-f16.h5" --force' "$bin" "$out"
step profile 60 bash -c 'ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1); [ -n "$ncu" ] || { echo "no ncu"; exit 3; }
for k in "^forward_kernel|backward_kv_kernel|backward_q_kernel|delta_kernel:4" "^layernorm_forward:1" "^layernorm_backward:1" "cross_entropy:1"; do
  "$ncu" --clock-control none -k "regex:${k%:*}" --launch-count "${k##*:}" --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis "$0/parity" bench model --device cuda --path fast --dtype bfloat16 --models gpt-1.3b --batch 4 --warmup 0 --steps 1 --out "$1/profile.h5" --force -q || exit
done' "$bin" "$out"
step dp 40 bash -c '"$0/parity" bench model --np 2 --device cuda --path fast --dtype bfloat16 --models gpt2-medium --batch 2 --warmup 1 --steps 3 --out "$1/model-fast-dp2.h5" --force && "$0/parity" bench model --device cuda --path fast --dtype bfloat16 --models gpt2-medium --batch 4 --warmup 2 --steps 5 --overlap off --out "$1/model-fast-serial.h5" --force' "$bin" "$out"
step calibrate 60 bash -c '"$0/parity" bench calibrate --device cuda --out "$1/calibrate-cuda.h5" --cluster-out "$1/calibrate-cuda.cluster.json" --force && "$0/parity" plan --model gpt3-1.7b --cluster "$1/calibrate-cuda.cluster.json" --gpus 8 --global-batch 512 --top 3' "$bin" "$out"
step torch 170 bash -c 'for m in gpt2-medium gpt-1.3b; do python3 "$0/../bench/torch_gpt.py" --model $m --batch 4 --warmup 3 --steps 5 --json "$1/torch-$m.json" || exit; done' "$here" "$out"
step gridN 60 env NCCL_MULTI_RANK_GPU_ENABLE=1 "$bin/mpirun" -n "$np" "$bin/test_collectives" --gtest_filter='DeviceTest.*'
step benches 150 bash -c 'p=$0/parity o=$1 n=$2 failed=0
one() { local name=$1; shift; echo "--- $name: $*"; "$p" "$@" --out "$o/bench-$name.h5" --force -q || { echo "--- $name failed: exit $?"; failed=1; }; }
one coll-np$n bench collectives --device cuda --np "$n" --coll all_to_all_v,all_reduce --algo native,pairwise,hierarchical -e 4M -n 5
one coll-nccl-np1 bench collectives --device cuda --backend nccl --coll all_to_all_v --algo native,pairwise -e 4M -n 5
one moe-np$n bench moe --device cuda --np "$n" --steps 2
one pipeline-np$n bench pipeline --device cuda --np "$n" --steps 1
one precision-np2 bench precision --device cuda --np 2 --steps 10
one checkpoint-bf16 bench checkpoint --device cuda --dtype bfloat16 --layers 4 --steps 2
exit $failed' "$bin" "$out" "$np"
step scaling 90 bash -c 'p=$0/parity o=$1
"$p" bench scaling --device cuda --path fast --model gpt2-medium --np 2 --batch 8 --weak-batch 4 --warmup 1 --steps 3 --out "$o/scaling-fast-np2.h5" --force &&
"$p" bench scaling --device cuda --backend nccl --path fast --model gpt2-medium --batch 4 --weak-batch 4 --warmup 1 --steps 3 --out "$o/scaling-fast-nccl.h5" --force &&
"$p" report "$o/scaling-fast-np2.h5" --out "$o/scaling-report" && ls "$o/scaling-report"' "$bin" "$out"
step runN 240 "$bin/parity" run --device cuda --np "$np" --quick --out "$out/run-cuda-np$np.h5" --force
step checkN 180 "$bin/parity" check --device cuda --np "$np" --filter 'training/*:tensor/*:pipeline/*:context/*:moe/*:checkpoint/*:restore/*' --out "$out/check-cuda-np$np.h5" --force

echo "=== summary"
printf '%s\n' "${summary[@]}"
