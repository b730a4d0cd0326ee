#!/usr/bin/env bash
# `parity bench pipeline` on 3 ranks (p = 2 on the first two, then p = 3): every run's recorded
# step holds exactly the schedule's actions on each rank, in the schedule's order, one at a time;
# the simulated timeline too; busy, idle and bubble agree with the intervals; the activations
# held at once equal the closed form where there is one; the measured peak of activation bytes
# is near the in-flight formula (each forward's kept bytes summed over what a rank holds at
# once: the peak adds only transient tensors, such as a gradient in flight); and the file says
# whether ranks outnumbered cores.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" bench pipeline --np 3 -q --schedules gpipe,1f1b,interleaved,zb-h1,zb-v -m 2,4 --steps 2 --warmup 1 --out pipe.h5
for m in 2 4; do
  for s in gpipe 1f1b interleaved zb-h1 zb-v; do
    for p in 2 3; do
      "$parity" pipeline validate --name $s -p $p -m $m --write-csv "$s-p$p-m$m.csv" >/dev/null 2>&1 || true
    done
  done
done
/usr/bin/python3 - <<'PY'
import math, os
import h5py

def table(f, name):
    g = f[name]
    return {k: (g[k].asstr()[()] if g[k].dtype.kind == "O" else g[k][()]) for k in g.keys()}

with h5py.File("pipe.h5") as f:
    runs, ranks, tl = table(f, "/bench/pipeline"), table(f, "/bench/pipeline_ranks"), table(f, "/bench/pipeline_timeline")
    attrs = f["/bench/pipeline"].attrs
    assert int(attrs["oversubscribed"]) == (1 if int(attrs["ranks_per_host"]) > int(attrs["cores_per_host"]) else 0), dict(attrs)
    assert attrs["note"], "the note says what measured idle means here"
    seen = set()
    for run in range(len(runs["schedule"])):
        s, p, m = runs["schedule"][run], int(runs["stages"][run]), int(runs["micro_batches"][run])
        seen.add((s, p, m))
        # The makespan predicted from the job's calibration: positive, compared only where
        # every rank has a core.
        assert runs["predicted_makespan_seconds"][run] > 0, (s, p, m)
        ratio = runs["predicted_over_measured"][run]
        assert (ratio != ratio) if int(attrs["oversubscribed"]) else \
            abs(ratio - runs["predicted_makespan_seconds"][run] / runs["makespan_seconds"][run]) <= 1e-12 * ratio, (s, p, m)
        csv = f"{s}-p{p}-m{m}.csv"
        assert os.path.exists(csv), f"{s} p{p} m{m} ran but validate refuses it"
        schedule = [[a for a in line.strip().split(",") if a] for line in open(csv)]
        assert len(schedule) == p
        makespan = runs["makespan_seconds"][run]
        bubbles = []
        for r in range(p):
            def intervals(source, work=True):
                rows = [i for i in range(len(tl["run"])) if tl["run"][i] == run and tl["rank"][i] == r and tl["source"][i] == source]
                rows = [i for i in rows if (tl["work"][i] != "wait") == work]
                return sorted(rows, key=lambda i: tl["start_seconds"][i])
            for source in ("measured", "simulated"):
                got = [f'{tl["stage"][i]}{tl["work"][i]}{tl["micro_batch"][i]}' for i in intervals(source)]
                assert got == schedule[r], (s, p, m, r, source, got, schedule[r])
                ends = [(tl["start_seconds"][i], tl["end_seconds"][i]) for i in intervals(source)]
                for (a0, a1), (b0, b1) in zip(ends, ends[1:]):
                    assert a0 <= a1 <= b0 + 1e-9, (s, p, m, r, source, "overlapping actions")
            work = intervals("measured")
            busy = sum(tl["end_seconds"][i] - tl["start_seconds"][i] for i in work)
            row = [i for i in range(len(ranks["run"])) if ranks["run"][i] == run and ranks["rank"][i] == r]
            assert len(row) == 1, (s, p, m, r)
            k = row[0]
            assert math.isclose(ranks["busy_seconds"][k], busy, rel_tol=1e-9, abs_tol=1e-12)
            assert math.isclose(ranks["idle_seconds"][k], makespan - busy, rel_tol=1e-9, abs_tol=1e-12)
            assert math.isclose(ranks["measured_bubble"][k], (makespan - busy) / makespan, rel_tol=1e-9)
            assert max(tl["end_seconds"][i] for i in work) <= makespan + 1e-12
            bubbles.append(ranks["measured_bubble"][k])
            if ranks["formula_in_flight"][k] >= 0:
                assert ranks["in_flight"][k] == ranks["formula_in_flight"][k], (s, p, m, r)
            peak, formula = ranks["peak_activation_bytes"][k], ranks["formula_activation_bytes"][k]
            assert formula > 0 and 0.9 * formula <= peak <= 1.25 * formula, (s, p, m, r, peak, formula)
        assert math.isclose(runs["measured_bubble"][run], sum(bubbles) / p, rel_tol=1e-9)
        cf = runs["closed_form_bubble"][run]
        assert math.isnan(cf) == (s not in ("gpipe", "1f1b", "interleaved", "zb-h1") or (s == "zb-h1" and m < p)), (s, p, m, cf)
        if s in ("gpipe", "1f1b"):
            assert math.isclose(cf, (p - 1) / (m + p - 1), rel_tol=1e-12)
    # every (schedule, p, m) that can run did: interleaved needs m a multiple of p, m >= p
    for s in ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"):
        for p in (2, 3):
            for m in (2, 4):
                runs_it = not (s == "interleaved" and (m % p or m < p)) and not (s.startswith("zb") and m < 1)
                assert ((s, p, m) in seen) == runs_it, (s, p, m, seen)
PY
