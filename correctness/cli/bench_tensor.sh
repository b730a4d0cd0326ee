#!/usr/bin/env bash
# `parity bench tensor` with data parallelism beside tensor parallelism (--grid tp=1,dp=2 and
# tp=2,dp=1 on 2 ranks): a row's tokens per second are the whole job's (the global batch of every
# data-parallel replica over the step), its rank batch the global batch over dp, both rows'
# bytes equal their formulas part by part, and the step's split adds up.
set -euo pipefail
parity=${1:?usage: bench_tensor.sh PARITY}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$parity" bench tensor --np 2 -q --grid tp=1,dp=2 --steps 2 --out dp.h5 >/dev/null
"$parity" bench tensor --np 2 -q --grid tp=2,dp=1 --steps 2 --out tp.h5 >/dev/null
/usr/bin/python3 - <<'PY'
import math, re, h5py
for name, tp, dp in (("dp.h5", 1, 2), ("tp.h5", 2, 1)):
    with h5py.File(name) as f:
        t = f["/bench/tensor"]
        rows = len(t["tp"][()])
        assert rows >= 1 and all(t["tp"][()] == tp) and all(t["dp"][()] == dp), (name, t["tp"][()], t["dp"][()])
        for i in range(rows):
            sequence = int(re.search(r"\bs=(\d+)\b", t["config"].asstr()[i]).group(1))
            batch, rank_batch = int(t["batch"][i]), int(t["rank_batch"][i])
            assert rank_batch * dp == batch, (name, i, rank_batch, dp, batch)
            tokens = t["tokens_per_second"][i] * t["step_seconds"][i]
            assert math.isclose(tokens, batch * sequence, rel_tol=1e-9), (name, i, tokens, batch * sequence)
            assert t["bytes_match"][i] == 1 and t["bytes_total"][i] == t["formula_bytes_total"][i], (name, i)
            # Each part beside its own formula, and the total their sum over the config's L blocks.
            for part in ("embedding", "block", "head", "loss"):
                assert t["bytes_" + part][i] == t["formula_bytes_" + part][i], (name, i, part)
            layers = int(re.search(r"\bL=(\d+)\b", t["config"].asstr()[i]).group(1))
            parts = t["bytes_embedding"][i] + layers * t["bytes_block"][i] + t["bytes_head"][i] + t["bytes_loss"][i]
            assert t["bytes_total"][i] == parts, (name, i, t["bytes_total"][i], parts)
            # The step split: communication and compute add up to the step, the share is the first's.
            step, comm = t["step_seconds"][i], t["tp_comm_seconds"][i]
            assert 0 <= comm <= step and math.isclose(t["compute_seconds"][i], step - comm, rel_tol=1e-9, abs_tol=1e-12), (name, i)
            assert math.isclose(t["comm_share"][i], comm / step, rel_tol=1e-9), (name, i, t["comm_share"][i], comm, step)
            assert (comm == 0) == (tp == 1), (name, i, comm)
            assert (t["bytes_total"][i] == 0) == (tp == 1), (name, i, t["bytes_total"][i])
print("bench tensor: tokens per second are the job's at dp 2 and tp 2")
PY
