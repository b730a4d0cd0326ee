#!/usr/bin/env bash
# End-to-end use of the command line on 2 local ranks: check and bench write result files
# that h5py reads as the schema says (a row's time its ranks' taken as -a says, its bandwidths from
# it); report draws one and compares two; damaged or foreign
# files are refused with one line.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "end_to_end: $*" >&2; exit 1; }

"$parity" check --np 2 -q --filter 'all_reduce/*/float32/sum/*:all_gather/*/int32/*' --no-large --out check.h5
"$parity" check --np 2 -q --filter 'tensor/*' --out check-tensor.h5
"$parity" bench collectives --np 2 -q --coll all_reduce,all_gather --algo all -b 1K -e 64K -f 8 -n 3 -w 1 --out a.h5 > a.txt
"$parity" bench collectives --np 2 -q --coll all_reduce -b 1K -e 64K -f 8 -n 3 -w 1 -a 3 --out b.h5 > b.txt
for a in 0 2; do
  "$parity" bench collectives --np 2 -q --coll all_reduce --algo ring -b 1K -e 64K -f 8 -n 3 -w 1 -a $a --out a$a.h5 > /dev/null
done
grep -q "Avg bus bandwidth" a.txt || fail "no nccl-tests footer in the table"
grep -q "ring" a.txt || fail "ring rows missing"

/usr/bin/python3 - <<'PY'
import h5py, sys
with h5py.File("check.h5") as f:
    assert f.attrs["schema"] == "parity-results", f.attrs["schema"]
    assert int(f.attrs["schema_version"]) == 1
    assert int(f.attrs["world_size"]) == 2
    assert len(f.attrs["hosts"]) == 2
    t = f["/check/collectives"]
    cols = list(t.attrs["columns"])
    for c in ["case", "max_abs_error", "tolerance", "wrong", "passed"]:
        assert c in cols, c
    assert t["passed"][()].all(), "a conformance case failed"
    assert t.attrs["rows"] > 100
# A family's rows: `case` first, `passed` and `message` last (check_table), and the run's columns
# each in its place: world_size the ranks that ran it, steps the case's (tensor cases take 3).
with h5py.File("check-tensor.h5") as f:
    t = f["/check/tensor"]
    cols = [c.decode() if isinstance(c, bytes) else c for c in t.attrs["columns"]]
    assert cols[0] == "case" and cols[-2:] == ["passed", "message"], cols
    assert t.attrs["rows"] > 0 and t["passed"][()].all()
    assert (t["world_size"][()] == 2).all(), t["world_size"][()]
    assert (t["steps"][()] == 3).all(), t["steps"][()]
with h5py.File("a.h5") as f:
    t = f["/bench/collectives"]
    algos = set(t["algorithm"].asstr()[()])
    assert {"native", "ring", "naive", "recursive_doubling", "rabenseifner"} <= algos, algos
    assert (t["wrong"][()] == 0).all()
    assert (t["busbw_GBps"][()] > 0).all()
    assert f["/host/copy_bandwidth"]["bandwidth_GBps"][()].max() > 0
    assert f["/bench/point_to_point"].attrs["alpha_us"] > 0
    rt = f["/bench/collectives_rank_times"]
    assert rt.attrs["rows"] == 2 * t.attrs["rows"]
# A row's time is its ranks' times taken as -a says (a.h5 the mean, the default; b.h5 -a 3, the
# largest; a2.h5 the smallest; a0.h5 rank 0's), and its bandwidths follow from it: algbw = bytes /
# time, busbw = algbw x the factor.
import numpy as np
for name, across in (("a.h5", np.mean), ("b.h5", np.max), ("a2.h5", np.min), ("a0.h5", None)):
    with h5py.File(name) as f:
        t, rt = f["/bench/collectives"], f["/bench/collectives_rank_times"]
        rows, times, ranks = rt["row"][()], rt["time_us"][()], rt["rank"][()]
        want = np.array([across(times[rows == i]) if across else times[(rows == i) & (ranks == 0)][0]
                         for i in range(int(t.attrs["rows"]))])
        assert np.allclose(t["time_us"][()], want, rtol=1e-9), (name, t["time_us"][()][:4], want[:4])
        algbw = t["size_bytes"][()] / (t["time_us"][()] * 1e3)
        assert np.allclose(t["algbw_GBps"][()], algbw, rtol=1e-6), name
        n = int(f.attrs["world_size"])
        factor = np.where(t["collective"].asstr()[()] == "all_reduce", 2 * (n - 1) / n, (n - 1) / n)
        assert np.allclose(t["busbw_GBps"][()], algbw * factor, rtol=1e-6), name
        # The fastest and slowest rank's times are those ranks' own; the predicted busbw is the
        # predicted time's, by the same factor (NaN where nothing was predicted).
        each = [times[rows == i] for i in range(int(t.attrs["rows"]))]
        assert np.allclose(t["time_min_rank_us"][()], [x.min() for x in each], rtol=1e-9), name
        assert np.allclose(t["time_max_rank_us"][()], [x.max() for x in each], rtol=1e-9), name
        predicted, predicted_busbw = t["predicted_time_us"][()], t["predicted_busbw_GBps"][()]
        known = np.isfinite(predicted) & (predicted > 0)
        assert known.sum() >= len(predicted) // 2, (name, "few rows predicted")
        assert np.allclose(predicted_busbw[known], (t["size_bytes"][()] / (predicted * 1e3) * factor)[known], rtol=1e-6), name
        assert np.isnan(predicted_busbw[~known]).all(), name
        # busbw_vs_native: a row's busbw over the native row's of the same collective, type,
        # reduction, size and placement (1 on the native rows themselves).
        key = lambda i: tuple(t[c].asstr()[i] for c in ("collective", "dtype", "redop")) + (
            int(t["size_bytes"][i]), int(t["in_place"][i]))
        algorithms, busbw = t["algorithm"].asstr()[()], t["busbw_GBps"][()]
        native = {key(i): busbw[i] for i in range(len(busbw)) if algorithms[i] == "native"}
        assert len(native) > 0, name
        want_ratio = np.array([busbw[i] / native[key(i)] for i in range(len(busbw))])
        assert np.allclose(t["busbw_vs_native"][()], want_ratio, rtol=1e-9), name
        assert (t["busbw_vs_native"][()][algorithms == "native"] == 1).all(), name
print("h5py reads the files as documented")
PY

# One timed iteration per row: a row's p50 and p95 are then that iteration's slowest rank, the
# largest of the ranks' own times (time_max_rank_us), exactly. The ping-pong measures every size
# from 8 B by factors of 4 up to the largest row's, 32 KiB = 8 x 4^6 included.
"$parity" bench collectives --np 2 -q --coll all_reduce,all_gather --algo all -b 8 -e 32K -f 4 -n 1 -w 1 --out one.h5 > /dev/null
/usr/bin/python3 - <<'PY'
import h5py
with h5py.File("one.h5") as f:
    t = f["/bench/collectives"]
    assert (t["iterations"][()] == 1).all()
    slowest = t["time_max_rank_us"][()]
    for column in ("time_p50_us", "time_p95_us"):
        bad = [(i, t[column][i], slowest[i]) for i in range(len(slowest)) if t[column][i] != slowest[i]]
        assert not bad, (column, "not the slowest rank's time", bad[:4])
    sizes = [int(s) for s in f["/bench/point_to_point"]["size_bytes"][()]]
    assert sizes == [8 * 4**k for k in range(7)], sizes
PY

"$parity" report check.h5 -q --out check-report
test -s check-report/index.html || fail "no report for check.h5"
"$parity" report a.h5 b.h5 -q --out compare
test -s compare/index.html || fail "no comparison report"
ls compare/*.png >/dev/null || fail "comparison has no plots"
"$parity" report a.h5 b.h5 -q --no-figures --out compare-text
grep -q "Drawn without figures" compare-text/index.html || fail "--no-figures: the page does not say so"
if ls compare-text/*.png >/dev/null 2>&1; then fail "--no-figures drew figures"; fi
cmp -s compare/summary.md compare-text/summary.md || fail "--no-figures changed summary.md"

# Existing report directory is refused without --force.
if "$parity" report a.h5 --out compare 2>err.txt; then fail "overwrote a report without --force"; fi
grep -q "already holds a report" err.txt || fail "unclear refusal: $(cat err.txt)"

# A truncated copy and a foreign HDF5 file are refused in one line, status 2.
head -c 2000 a.h5 > truncated.h5
/usr/bin/python3 -c "import h5py; f=h5py.File('foreign.h5','w'); f['x']=[1,2,3]; f.close()"
/usr/bin/python3 -c "
import h5py, shutil
shutil.copy('a.h5', 'future.h5')
with h5py.File('future.h5', 'a') as f: f.attrs['schema_version'] = 99
"
for bad in truncated.h5 foreign.h5 future.h5; do
  set +e; "$parity" report "$bad" --out "r-$bad" 2>err.txt; status=$?; set -e
  [ "$status" -eq 2 ] || fail "report $bad: status $status"
  [ "$(grep -c '' err.txt)" -eq 1 ] || fail "report $bad: not one line: $(cat err.txt)"
done
grep -q "schema version 99" err.txt || fail "future.h5: $(cat err.txt)"
echo "end to end: ok"
