#!/usr/bin/env bash
# `parity bench calibrate` on 2 ranks: every rank's rows of the product grid and the ops, the
# cluster description holding the median over ranks of each, and `parity plan` reading it.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench calibrate --np 2 -q --out cal.h5
test -s cal.cluster.json
/usr/bin/python3 - <<'PY'
import json, statistics
import h5py
with h5py.File("cal.h5") as f:
    t = f["/bench/calibrate"]
    assert f["/bench/calibrate"].attrs["cluster_file"] == "cal.cluster.json"
    rank = t["rank"][()]; kind = t["kind"].asstr()[()]; op = t["op"].asstr()[()]
    sec = t["seconds"][()]; m, n, k, e = (t[c][()] for c in ("m", "n", "k", "elements"))
    assert sorted(set(rank.tolist())) == [0, 1]
    grid = sum(1 for i in range(len(rank)) if kind[i] == "gemm" and rank[i] == 0)
    ops = sum(1 for i in range(len(rank)) if kind[i] == "op" and rank[i] == 0)
    assert grid == 64 and ops == 52, (grid, ops)  # 13 ops at 4 lengths
    assert (sec > 0).all()
    for i in range(len(rank)):
        if kind[i] == "gemm":
            assert abs(t["GFLOPs"][i] - 2 * m[i] * n[i] * k[i] / sec[i] / 1e9) <= 1e-9 * t["GFLOPs"][i]
    links = f["/bench/calibrate_links"]
    assert (links["efficiency"][()] > 0).all() and (links["efficiency"][()] <= 1).all()
    c = json.load(open("cal.cluster.json"))
    # Each figure of the description is the median over the ranks of the table's rows.
    def median(pick):
        return statistics.median(sec[i] for i in range(len(rank)) if pick(i))
    assert len(c["gemm_rates"]) == 64 and len(c["op_rates"]) == 52
    for mm, nn, kk, s in c["gemm_rates"]:
        want = median(lambda i: kind[i] == "gemm" and (m[i], n[i], k[i]) == (mm, nn, kk))
        assert abs(s - want) <= 1e-5 * want, (mm, nn, kk, s, want)
    for name, elements, s in c["op_rates"]:
        want = median(lambda i: kind[i] == "op" and op[i] == name and e[i] == elements)
        assert abs(s - want) <= 1e-5 * want, (name, elements, s, want)
    best = max(2 * a * b * d / s for a, b, d, s in c["gemm_rates"]) / 1e12
    assert abs(c["peak_TFLOPs"] - best) <= 1e-5 * best, (c["peak_TFLOPs"], best)
    assert c["gpus_per_node"] == 2 and c["dtype"] == "float32"
    # Each collective's efficiency by size, as /bench/calibrate_links has it: its time against
    # its model on the ping-pong's alpha and beta, at every size of every collective.
    collectives = links["collective"].asstr()[()].tolist()
    assert sorted(set(collectives)) == ["all_gather", "all_reduce", "all_to_all", "reduce_scatter"], collectives
    assert sorted(c["collective_rates"]) == sorted(set(collectives))
    p2p = f["/bench/point_to_point"]
    alpha, beta = p2p.attrs["alpha_us"] * 1e-6, p2p.attrs["beta_us_per_byte"] * 1e-6
    for name, rows in c["collective_rates"].items():
        mine = [i for i, x in enumerate(collectives) if x == name]
        assert [r[0] for r in rows] == [int(links["size_bytes"][i]) for i in mine], (name, rows)
        for (size, eff), i in zip(rows, mine):
            want = links["efficiency"][i]
            assert abs(eff - want) <= 1e-5 * want, (name, size, eff, want)
            steps = 2 if name == "all_reduce" else 1
            model = steps * (2 - 1) * (alpha + beta * size / 2)
            assert abs(links["ring_model_s"][i] - model) <= 1e-6 * model, (name, size, links["ring_model_s"][i], model)
            assert abs(want - min(1.0, model / links["time_s"][i])) <= 1e-9, (name, size)
    assert c["collective_efficiency"] == c["collective_rates"]["all_reduce"][-1][1]
    # The levels: both ranks on this host, so the node link is rank 0's ping-pong with rank 1
    # and the network's figures are the node's (the note says so).
    levels = f["/bench/calibrate_levels"]
    assert levels["level"].asstr()[()].tolist() == ["node"] and levels["peer"][()].tolist() == [1]
    assert abs(c["node_latency_us"] - levels["alpha_us"][0]) <= 1e-5 * levels["alpha_us"][0]
    assert abs(c["node_GBps"] - levels["bandwidth_GBps"][0]) <= 1e-5 * levels["bandwidth_GBps"][0]
    assert (c["network_GBps"], c["network_latency_us"]) == (c["node_GBps"], c["node_latency_us"])
    assert "no rank on another host: the node's figures" in c["note"], c["note"]
print("bench calibrate: ok")
PY
# --resume takes the finished calibration back whole: the same times, not measured again.
cp cal.h5 first.h5
"$parity" bench calibrate --np 2 -q --resume cal.h5
/usr/bin/python3 - <<'PY'
import h5py
with h5py.File("first.h5") as a, h5py.File("cal.h5") as b:
    assert (a["/bench/calibrate/seconds"][()] == b["/bench/calibrate/seconds"][()]).all()
print("bench calibrate --resume: ok")
PY
# The planner takes it: a small GPT on the two calibrated ranks.
"$parity" plan --model layers=2,hidden=64,heads=4,vocab=256,sequence=64 --cluster cal.cluster.json --gpus 2 \
  --global-batch 16 --top 1 | grep -q "on 2 GPUs of cal.cluster.json (fp32, "
# Its products were measured in float32: another type is refused.
if "$parity" plan --model layers=2,hidden=64,heads=4,vocab=256,sequence=64 --cluster cal.cluster.json --gpus 2 \
    --global-batch 16 --precision bf16 2>err.txt; then echo "plan ran a float32 calibration at bf16" >&2; exit 1; fi
grep -q "its products were measured in fp32 (parity bench calibrate), not bf16" err.txt
echo "plan on the calibrated cluster: ok"
