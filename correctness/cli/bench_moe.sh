#!/usr/bin/env bash
# `parity bench moe` on 2 ranks: each sweep holds the runs it names; the all-to-all bytes equal
# the formula on every rank (none at ep 1); every step's tokens are the batch's, the chosen rows
# are k per token, the admitted ones the chosen less the dropped; the tokens per expert of
# /bench/moe_load give the imbalance of /bench/moe_steps; expert choice is balanced by
# construction; at the first step (the same parameters in every run) a larger capacity factor
# never drops more, and a dropless one drops nothing.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench moe --np 2 -q --experts 4 --top-k 2 --batch 4 --steps 2 --warmup 1 \
  --capacity-factors 0.5,1,2,inf --out moe.h5
/usr/bin/python3 - <<'PY'
import math
import h5py

def table(f, name):
    g = f[name]
    return {k: (g[k].asstr()[()] if g[k].dtype.kind == "O" else g[k][()]) for k in g.keys()}

with h5py.File("moe.h5") as f:
    runs, steps, load = table(f, "/bench/moe"), table(f, "/bench/moe_steps"), table(f, "/bench/moe_load")
    sequence = 64  # the tiny preset
    n = len(runs["run"])
    assert sorted(int(runs["ep"][i]) for i in range(n) if runs["in_ep_sweep"][i]) == [1, 2], runs["ep"]
    assert sorted(runs["router"][i] for i in range(n) if runs["in_router_sweep"][i]) == \
        ["aux_free", "expert_choice", "top_k"]
    cf_runs = {float(runs["capacity_factor"][i]): i for i in range(n) if runs["in_cf_sweep"][i]}
    assert sorted(cf_runs) == [0.5, 1.0, 2.0, math.inf], cf_runs
    for i in range(n):
        # Data parallelism is what the expert groups leave of the world: ep x dp = 2 ranks.
        assert runs["world_size"][i] == 2 and runs["dp"][i] * runs["ep"][i] == 2, (i, runs["ep"][i], runs["dp"][i])
        assert runs["bytes_match"][i] == 1 and runs["all_to_all_bytes"][i] == runs["formula_all_to_all_bytes"][i], i
        assert (runs["all_to_all_bytes"][i] == 0) == (runs["ep"][i] == 1), (i, runs["all_to_all_bytes"][i])
        parts = runs["all_to_all_seconds"][i] + runs["gradient_reduction_seconds"][i] + runs["compute_seconds"][i]
        assert parts <= runs["step_seconds"][i] * (1 + 1e-9), i
        # The step predicted from this job's calibration: the exchanges only with ep > 1, inside
        # the step; the ratio compared only where every rank has a core.
        a2a, predicted = runs["predicted_all_to_all_seconds"][i], runs["predicted_step_seconds"][i]
        assert (a2a > 0) == (runs["ep"][i] > 1) and 0 <= a2a < predicted, (i, a2a, predicted)
        ratio = runs["predicted_over_measured"][i]
        if f.attrs["oversubscribed"]:
            assert ratio != ratio, ratio
        else:
            assert math.isclose(ratio, predicted / runs["step_seconds"][i], rel_tol=1e-12), (i, ratio)
    # Dropless routing sends more rows to the experts than cf 0.5: more predicted work.
    assert runs["predicted_step_seconds"][cf_runs[math.inf]] > runs["predicted_step_seconds"][cf_runs[0.5]]
    assert set(f["/bench/calibrate"]["dtype"].asstr()[()]) == {"float32"} and "bench/point_to_point" in f
    first_dropped = {}
    for j in range(len(steps["run"])):
        r, s, b = int(steps["run"][j]), int(steps["step"][j]), int(steps["block"][j])
        router, k = runs["router"][r], int(runs["top_k"][r])
        rows = [i for i in range(len(load["run"])) if load["run"][i] == r and load["step"][i] == s and load["block"][i] == b]
        chosen = [int(load["load"][i]) for i in rows]
        admitted = [int(load["admitted"][i]) for i in rows]
        assert len(rows) == 4, (r, s, b)
        tokens = int(steps["tokens"][j])
        assert tokens == 4 * sequence, (r, s, tokens)
        if router == "expert_choice":
            assert chosen == admitted and steps["admitted_imbalance"][j] == 1.0, (r, s, admitted)
        else:
            assert sum(chosen) == k * tokens, (r, s, sum(chosen))
            assert sum(admitted) == k * tokens - int(steps["dropped"][j]), (r, s)
            assert math.isclose(steps["dropped_fraction"][j], steps["dropped"][j] / (k * tokens)), (r, s)
        mean = sum(chosen) / len(chosen)
        assert math.isclose(steps["load_imbalance"][j], max(chosen) / mean, rel_tol=1e-12), (r, s)
        if s == 0:
            first_dropped[r] = int(steps["dropped"][j])
    # A run's means are over its timed steps' rows alone: the warm-up step is in none of them.
    assert any(steps["timed"][j] == 0 for j in range(len(steps["run"]))), "no warm-up rows"
    for r in range(n):
        timed = [j for j in range(len(steps["run"])) if steps["run"][j] == r and steps["timed"][j] == 1]
        assert timed and all(steps["step"][j] >= 1 for j in timed), (r, timed)
        for mean, column in (("mean_load_imbalance", "load_imbalance"), ("mean_dropped_fraction", "dropped_fraction")):
            want = sum(steps[column][j] for j in timed) / len(timed)
            assert math.isclose(runs[mean][r], want, rel_tol=1e-12), (r, mean, runs[mean][r], want)
    by_cf = [first_dropped[cf_runs[cf]] for cf in sorted(cf_runs)]
    assert by_cf == sorted(by_cf, reverse=True) and by_cf[-1] == 0 and by_cf[0] > 0, by_cf
print("bench moe: sweeps, bytes, loads and drops consistent")
PY
