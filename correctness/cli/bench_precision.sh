#!/usr/bin/env bash
# `parity bench precision` on 2 ranks: every precision trains for every step; float64, float32
# and bfloat16 never scale nor skip; float16's recorded scale follows the dynamic rule step by
# step (from --loss-scale, halved after a skipped step, doubled after --growth-interval clean
# steps); float32 follows float64 closely, the 16-bit runs' losses fall.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench precision --np 2 -q --steps 30 --growth-interval 4 --loss-scale 65536 --out p.h5
/usr/bin/python3 - <<'PY'
import h5py

with h5py.File("p.h5") as f:
    g = f["/bench/precision"]
    t = {k: (g[k].asstr()[()] if g[k].dtype.kind == "O" else g[k][()]) for k in g.keys()}
    growth = int(g.attrs["growth_interval"])
assert growth == 4, growth
runs = {}
for i, p in enumerate(t["precision"]):
    runs.setdefault(p, []).append({k: t[k][i] for k in t})
assert sorted(runs) == ["bfloat16", "float16", "float32", "float64"], sorted(runs)
for p, rows in runs.items():
    assert [r["step"] for r in rows] == list(range(30)), p
    assert all(r["world_size"] == 2 for r in rows), p
    if p != "float16":
        assert all(r["loss_scale"] == 1 and r["skipped"] == 0 for r in rows), p
# float16: the rule, step by step.
rows = runs["float16"]
assert rows[0]["loss_scale"] == 65536, rows[0]
clean = 0
for a, b in zip(rows, rows[1:]):
    if a["skipped"]:
        want, clean = a["loss_scale"] / 2, 0
    else:
        clean += 1
        want = a["loss_scale"] * 2 if clean == growth else a["loss_scale"]
        if clean == growth:
            clean = 0
    assert b["loss_scale"] == want, (a, b, want)
assert any(r["skipped"] for r in rows), "growing every 4 steps from 2^16 must overflow float16 within 30 steps"
for a, b in zip(runs["float64"], runs["float32"]):
    assert abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), (a, b)
for p in ("bfloat16", "float16"):
    assert runs[p][-1]["loss"] < runs[p][0]["loss"], p
print("bench precision: four precisions, float16's loss scale follows the dynamic rule, float32 on float64")
PY
