#!/usr/bin/env bash
# `parity bench context` on 4 ranks: a row per (variant, cp, sequence), cp 1 once; the bytes
# each rank sent per layer and the activations a block keeps equal their formulas (recomputed
# here from the tiny GPT's sizes, not read from the file); the ring's serial run recorded and
# the hidden share derived from it; every time positive.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench context --np 4 -q --model tiny --layers 1 --cp 1,2,4 --sequences 32,64 --steps 2 --out context.h5
/usr/bin/python3 - <<'PY'
import math
import h5py

with h5py.File("context.h5") as f:
    g = f["/bench/context"]
    t = {k: (g[k].asstr()[()] if g[k].dtype.kind == "O" else g[k][()]) for k in g.keys()}
n = len(t["cp"])
runs = sorted((t["variant"][i], int(t["cp"][i]), int(t["sequence"][i])) for i in range(n))
want = sorted([("none", 1, s) for s in (32, 64)] +
              [(v, c, s) for v in ("ring", "allgather", "ulysses") for c in (2, 4) for s in (32, 64)])
assert runs == want, runs
h, heads, e = 64, 4, 4  # the tiny GPT in float32: hidden 64, 4 heads
for i in range(n):
    v, cp, s = t["variant"][i], int(t["cp"][i]), int(t["sequence"][i])
    assert t["dp"][i] * cp == 4 and t["world_size"][i] == 4 and t["rows"][i] == 1, i
    local = s // cp
    block = local * h * e  # one rank's keys (or values) of one sequence
    if v in ("ring", "none"):
        fwd, bwd = 2 * (cp - 1) * block, (2 * (cp - 1) + 2 * cp) * block
    elif v == "allgather":
        fwd, bwd = 2 * (cp - 1) * block, 4 * (cp - 1) * block
    else:
        kept = (cp - 1) / cp
        q = kv = kept * block
        stats = kept * heads * local * e
        fwd, bwd = 2 * q + 2 * kv + stats, 4 * q + 4 * kv + stats
    assert t["forward_bytes"][i] == fwd == t["formula_forward_bytes"][i], (v, cp, s, t["forward_bytes"][i], fwd)
    assert t["backward_bytes"][i] == bwd == t["formula_backward_bytes"][i], (v, cp, s, t["backward_bytes"][i], bwd)
    # A block keeps 16h values and a log-sum-exp per head per token, and 4 statistics per token.
    activation = local * (e * 16 * h + e * heads + 4 * 4)
    assert t["activation_bytes"][i] == activation == t["formula_activation_bytes"][i], (v, cp, s, t["activation_bytes"][i])
    for c in ("step_s", "attention_s", "tokens_per_s"):
        assert t[c][i] > 0, (c, i)
    # One step's figures (the slowest rank's median step): its attention inside it.
    assert 0 <= t["communication_s"][i] <= t["attention_s"][i] <= t["step_s"][i], i
    assert abs(t["tokens_per_s"][i] * t["step_s"][i] - 4 // cp * s) < 1e-6 * s, i
    if v == "ring":
        assert t["serial_communication_s"][i] > 0, i
        hidden = (t["serial_communication_s"][i] - t["communication_s"][i]) / t["serial_communication_s"][i]
        assert abs(t["hidden_fraction"][i] - hidden) < 1e-12, i
    else:
        assert math.isnan(t["hidden_fraction"][i]) and math.isnan(t["serial_attention_s"][i]), i
print("bench context: rows, bytes and activations as expected")
PY
