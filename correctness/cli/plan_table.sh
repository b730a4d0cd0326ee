#!/usr/bin/env bash
# `parity plan --out`: /plan/layouts says what was searched. --fix schedule=1f1b keeps every
# layout at v 1; --fix schedule=interleaved gives v > 1 (v 2 included) named interleaved;
# --explain's breakdown of the best layout is the first row's time columns, each in its place
# (a layout with experts and context parallelism, so the expert and ring-attention terms differ).
set -euo pipefail
parity=${1:?usage: plan_table.sh PARITY}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
plan() { "$parity" plan --cluster h100-sxm-dgx --global-batch 512 "$@"; }
plan --model gpt3-1.7b --gpus 64 --fix tp=2,pp=4,schedule=1f1b --top 400 --out plain.h5 > /dev/null
plan --model gpt3-1.7b --gpus 64 --fix tp=2,pp=4,schedule=interleaved --top 400 --out interleaved.h5 > /dev/null
plan --model mixtral-8x7b --gpus 64 --fix tp=2,pp=2,ep=4,cp=2,v=4,micro_batch=4,zero=2 --explain --top 1 --out explained.h5 > explain.txt
/usr/bin/python3 - <<'PY'
import re, h5py
with h5py.File("plain.h5") as f:
    t = f["/plan/layouts"]
    assert len(t["v"][()]) > 0
    assert set(t["v"][()].tolist()) == {1}, set(t["v"][()].tolist())
    assert set(t["schedule"].asstr()[()]) == {"1f1b"}, set(t["schedule"].asstr()[()])
with h5py.File("interleaved.h5") as f:
    t = f["/plan/layouts"]
    v = t["v"][()].tolist()
    assert min(v) == 2 and all(x > 1 for x in v), sorted(set(v))
    assert set(t["schedule"].asstr()[()]) == {"interleaved"}, set(t["schedule"].asstr()[()])
text = open("explain.txt").read()
m = re.search(r"step ([0-9.]+) s over (\d+) micro-batches: compute ([0-9.]+) \(recompute ([0-9.]+)\), tensor-parallel ([0-9.]+), "
              r"point-to-point ([0-9.]+), expert all-to-all ([0-9.]+), ring attention exposed ([0-9.]+), bubble ([0-9.]+), "
              r"data-parallel ([0-9.]+), optimizer ([0-9.]+)", text)
assert m, text
with h5py.File("explained.h5") as f:
    t = f["/plan/layouts"]
    columns = ["step_time_s", "micro_batches", "compute_s", "recompute_s", "tp_comm_s", "pp_comm_s", "ep_comm_s",
               "cp_comm_s", "bubble_s", "dp_comm_s", "optimizer_s"]
    for i, column in enumerate(columns):
        shown, stored = float(m.group(i + 1)), float(t[column][0])
        assert abs(shown - stored) <= 5e-5 * max(1.0, abs(stored)), (column, shown, stored)
    assert float(t["ep_comm_s"][0]) != float(t["cp_comm_s"][0])  # the two places differ in this layout
print("plan: the table's schedules and v, and --explain's breakdown, match")
PY
