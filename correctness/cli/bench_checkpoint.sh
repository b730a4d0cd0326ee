#!/usr/bin/env bash
# `parity bench checkpoint` on 2 ranks, 4 blocks: the default policies are all there; every
# policy's losses equal those without recompute and its bytes and FLOPs equal the formulas (the
# bench says so in columns, checked here against each other); and, independently of the C++
# formulas, the closed forms that hold whatever the block's internals: without recompute nothing
# is recomputed, full recompute stores one block output per block (e b s h each) and adds one
# forward of every block, every k recomputes blocks 0, k, 2k, ..., a budget's peak fits it, no
# policy holds more than none, and (selective aside) storing less never costs fewer FLOPs. Then
# in bfloat16 (mixed precision), where the closed forms are Korthikanti et al.'s at 2 bytes:
# full recompute stores 2sbh per block, selective 32sbh and the float32 LayerNorm statistics
# (their 34sbh less the 2sbh of dropout masks, which parity regenerates instead of storing).
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench checkpoint --np 2 -q --layers 4 --batch 3 --steps 2 --warmup 1 --out ck.h5
"$parity" bench checkpoint --np 2 -q --layers 4 --batch 3 --steps 1 --warmup 1 --dtype bfloat16 \
  --policies full,selective --out ck16.h5
/usr/bin/python3 - <<'PY'
import math
import h5py

def table(f, name):
    g = f[name]
    return {k: (g[k].asstr()[()] if g[k].dtype.kind == "O" else g[k][()]) for k in g.keys()}

with h5py.File("ck.h5") as f:
    t = table(f, "/bench/checkpoint")
rows = {t["policy"][i]: {k: t[k][i] for k in t} for i in range(len(t["policy"]))}
L, b, s, h, e = 4, 3, 64, 64, 4  # --layers, --batch, the tiny preset's sequence and hidden, float32
budgets = sorted(p for p in rows if p.startswith("budget"))
assert set(rows) - set(budgets) == {"none", "full", "every2", "every3", "every4", "sqrt", "selective"}, sorted(rows)
assert len(budgets) == 3, budgets  # a quarter, a half and three quarters of the blocks kept
for name, r in rows.items():
    assert r["losses_equal"] == 1 and r["matches_formula"] == 1, name
    assert r["stored_bytes"] == r["formula_stored_bytes"] and r["peak_bytes"] == r["formula_peak_bytes"], name
    assert r["recompute_flops"] == r["formula_recompute_flops"], name
    assert r["recompute_flops"] == r["step_flops"] - r["baseline_step_flops"], name
    assert r["layers"] == L and r["batch"] == b and r["ranks"] == 2 and r["timed_pairs"] == 2, name
    assert r["time_ratio_rank_min"] <= r["time_ratio"] <= r["time_ratio_rank_max"], name
    assert r["step_time_s"] > 0 and r["baseline_step_time_s"] > 0, name
    assert len(r["layout"].split()) == L, (name, r["layout"])
    assert r["recomputed_forwards"] == r["recomputed_blocks"] * 3, name  # 3 steps: warm-up and 2 timed
    # every_k is the k of an every-k policy, 0 for the others (which recompute no fixed stride).
    assert r["every_k"] == (int(name[len("every"):]) if r["kind"] == "every" else 0), (name, r["every_k"])
none, full = rows["none"], rows["full"]
# The prediction from the job's calibration: more recompute, a longer predicted step; the
# ratio is each rank's predicted step over its predicted step without recompute.
assert none["predicted_time_ratio"] == 1.0, none["predicted_time_ratio"]
for name, r in rows.items():
    assert r["predicted_step_time_s"] >= none["predicted_step_time_s"], name
    assert r["predicted_time_ratio"] >= 1.0, name
assert full["predicted_step_time_s"] > rows["every2"]["predicted_step_time_s"] > none["predicted_step_time_s"]
assert rows["selective"]["predicted_step_time_s"] > none["predicted_step_time_s"]
assert none["recomputed_blocks"] == 0 and none["recompute_flops"] == 0 and none["layout"] == "- - - -", none
assert full["recomputed_blocks"] == L and full["stored_bytes"] == L * e * b * s * h, full
# Full recompute adds one forward of every block: what a step of the blocks costs, a third of
# the blocks' share of the step (forward + 2 x forward in backward).
assert full["recompute_flops"] > 0 and full["recompute_flops"] * 3 < full["baseline_step_flops"], full
for k in (2, 3, 4):
    r = rows[f"every{k}"]
    assert r["recomputed_blocks"] == math.ceil(L / k), (k, r["layout"])
    assert [c != "-" for c in r["layout"].split()] == [i % k == 0 for i in range(L)], (k, r["layout"])
    assert r["recompute_flops"] == full["recompute_flops"] // L * math.ceil(L / k), k
sel = rows["selective"]
assert sel["layout"] == "s s s s" and 0 < sel["recompute_flops"] < full["recompute_flops"], sel
assert sel["stored_bytes"] < none["stored_bytes"], sel
for p in budgets:
    r = rows[p]
    assert r["peak_bytes"] <= r["budget_bytes"] and r["budget_bytes"] == int(p[len("budget"):]), p
for p, r in rows.items():
    assert r["peak_bytes"] <= none["peak_bytes"] and r["stored_bytes"] <= none["stored_bytes"], p
ordered = sorted(rows.values(), key=lambda r: r["stored_bytes"])
for a, c in zip(ordered, ordered[1:]):
    if a["selective"] == 0 and c["selective"] == 0:
        assert a["recompute_flops"] >= c["recompute_flops"], (a["policy"], c["policy"])

with h5py.File("ck16.h5") as f:
    t = table(f, "/bench/checkpoint")
rows = {t["policy"][i]: {k: t[k][i] for k in t} for i in range(len(t["policy"]))}
assert set(rows) == {"none", "full", "selective"}, sorted(rows)
for name, r in rows.items():
    assert r["dtype"] == "bfloat16" and r["losses_equal"] == 1 and r["matches_formula"] == 1, name
    assert r["stored_bytes"] == r["formula_stored_bytes"] and r["peak_bytes"] == r["formula_peak_bytes"], name
assert rows["full"]["stored_bytes"] == L * 2 * s * b * h, rows["full"]
assert rows["selective"]["stored_bytes"] == L * (32 * s * b * h + 4 * 4 * s * b), rows["selective"]
print("bench checkpoint: every policy equal to no recompute, bytes and FLOPs on their formulas and closed forms")
PY
