#!/usr/bin/env bash
# `parity bench state` on 2 ranks: every layout's rows, a row per rank and repeat; the bytes all
# ranks saved equal the formula (every value and AdamW moment once), each rank wrote half of
# them (replicas split what they share), the restore equal to the saved state; every time
# positive; the states removed with the temporary directory (and the states a gone run left
# there), and kept with --dir and --keep.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work/tmp"; cd "$work"
# A temporary directory of its own, with directories of states that earlier runs left: one of a
# process that is gone on this host (removed by the run), one of a live process (this script)
# and one of another host sharing TMPDIR (both kept).
export TMPDIR=$work/tmp
host=$(hostname)
sleep 0 & gone=$!; wait "$gone"
mkdir "$TMPDIR/parity-state-$host-$gone-aB3dE9" "$TMPDIR/parity-state-$host-$$-fG5hJ7" \
  "$TMPDIR/parity-state-elsewhere-$gone-kL2mN4"
touch "$TMPDIR/parity-state-$host-$gone-aB3dE9/zero1-0"
"$parity" bench state --np 2 -q --model tiny --layouts dp,zero1,zero3,tp2 --repeats 2 --out state.h5
[ ! -e "$TMPDIR/parity-state-$host-$gone-aB3dE9" ] || { echo "a gone run's states were not removed" >&2; exit 1; }
[ -d "$TMPDIR/parity-state-$host-$$-fG5hJ7" ] || { echo "a live process's states were removed" >&2; exit 1; }
[ -d "$TMPDIR/parity-state-elsewhere-$gone-kL2mN4" ] || { echo "another host's states were removed" >&2; exit 1; }
rm -r "$TMPDIR/parity-state-$host-$$-fG5hJ7" "$TMPDIR/parity-state-elsewhere-$gone-kL2mN4"
"$parity" bench state --np 2 -q --model tiny --layouts zero2 --precision bfloat16 --repeats 1 \
  --dir "$work/kept" --keep --out kept.h5
/usr/bin/python3 - <<'PY'
import glob, os
import h5py

def table(f, name):
    g = f[name]
    return {k: (g[k].asstr()[()] if g[k].dtype.kind == "O" else g[k][()]) for k in g.keys()}

for path, layouts, value, state in (("state.h5", ["dp", "zero1", "zero3", "tp2"], 4, 8),
                                    ("kept.h5", ["zero2"], 2, 12)):
    with h5py.File(path) as f:
        t = table(f, "/bench/state")
        n = len(t["rank"])
        repeats = 2 if path == "state.h5" else 1
        assert n == len(layouts) * repeats * 2, n
        assert sorted(set(t["layout"])) == sorted(layouts), t["layout"]
        # The tiny GPT: 2 blocks, hidden 64, vocabulary 256, sequence 64, tied.
        h, v, s, layers = 64, 256, 64, 2
        parameters = v * h + s * h + layers * (12 * h * h + 13 * h) + 2 * h
        for i in range(n):
            assert t["formula_bytes"][i] == parameters * (value + state), (path, t["formula_bytes"][i])
            assert t["total_bytes"][i] == t["formula_bytes"][i], (path, i)
            assert abs(t["bytes"][i] - t["total_bytes"][i] / 2) <= t["total_bytes"][i] * 0.01, (path, i, t["bytes"][i])
            assert t["file_bytes"][i] > t["bytes"][i], (path, i)
            assert t["restored_exactly"][i] == 1, (path, i)
            for c in ("save_s", "load_s", "fs_write_s", "fs_read_s", "step_s", "async_staged_s", "async_step_s",
                      "async_finish_s"):
                assert t[c][i] > 0, (path, c, i)
            assert t["load_bytes"][i] >= t["bytes"][i] * (0.5 if t["layout"][i] != "dp" else 1.9), (path, i)
# file_bytes is each rank's own file: the kept state's rank files (whose sizes differ, rank 0
# holding more) have exactly the sizes of the rows of their ranks.
with h5py.File("kept.h5") as f:
    t = table(f, "/bench/state")
    for i in range(len(t["rank"])):
        files = glob.glob("kept/zero2-0/step-*/rank-%05d.h5" % t["rank"][i])
        assert len(files) == 1 and t["file_bytes"][i] == os.path.getsize(files[0]), (i, files, t["file_bytes"][i])
print("bench state: rows, bytes and restores as expected")
PY
ls "$work/kept" | grep -q '^zero2-0$'
ls "$work/kept/zero2-0" | grep -q '^step-'
left=$(ls -A "$TMPDIR")
[ -z "$left" ] || { echo "left behind in TMPDIR: $left" >&2; exit 1; }
