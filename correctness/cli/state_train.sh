#!/usr/bin/env bash
# `parity state train` saving as it goes and going on elsewhere, on one host: ZeRO-1 on 3 ranks
# saves every 2 of 8 steps; its last two saves are taken away and the newest left made to look
# cut short (no index), as a job killed while saving leaves it; `--restart` on 2 ranks under tp 2
# goes on from the newest complete save, trains the rest and ends within the bound of one
# device; its rows are the steps after that save. A second run into the same --dir is refused;
# a run cut short keeps the rows of the steps it took. A step-N whose index was lost (never
# committed) is replaced when --restart reaches its step; one holding a file no save writes is
# refused before any step.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" state train --np 3 -q --layout zero1 --steps 8 --save-every 2 --dir run --out first.h5
ls run | tr '\n' ' ' | grep -q '^step-00000002 step-00000004 step-00000006 step-00000008 $'
rm -rf run/step-00000008
rm -f run/step-00000006/index.h5
mv run/step-00000006 run/step-00000006.partial
"$parity" state train --np 2 --layout tp2 --steps 8 --save-every 2 --dir run --restart --out second.h5 2> second.txt
grep -q "^\[state train\] restarted from run/step-00000004: step 4, saved by zero1" second.txt
grep -Eq "^\[state train\] 8 steps, restarted at step 4: parameters and state against one device .* \(bound .*\)$" second.txt
/usr/bin/python3 - <<'PY'
import h5py
with h5py.File("first.h5") as f:
    g = f["/state/train"]
    assert list(g["step"][()]) == list(range(8)) and list(g["saved"][()]) == [0, 1] * 4
    assert g.attrs["restarted_from"] == -1 and g.attrs["passed"] == 1 and g.attrs["error"] <= g.attrs["bound"]
with h5py.File("second.h5") as f:
    g = f["/state/train"]
    assert list(g["step"][()]) == [4, 5, 6, 7], g["step"][()]
    assert set(g["layout"].asstr()[()]) == {"tp2"} and set(g["world_size"][()]) == {2}
    assert g.attrs["restarted_from"] == 4 and g.attrs["passed"] == 1
print("state train: saved, cut, restarted elsewhere, within the bound")
PY
set +e
"$parity" state train --np 2 -q --steps 8 --dir run --out third.h5 2> third.txt; status=$?
set -e
[ $status = 2 ] && grep -q "holds a training state already" third.txt
# A run cut short keeps the steps it took (rows journaled as it goes), beside its saves.
set +e
"$parity" state train --np 2 -q --steps 8 --save-every 2 --dir cut --out cut.h5 --inject-interrupt state/train:3:INT 2> cut.txt
status=$?
set -e
[ $status = 5 ] && grep -q "^parity: partial results kept in cut.h5 (1 tables, [3-8] rows finished); continue with --restart (from the newest save under 'cut'. with none yet, again without it) and another --out or --force$" cut.txt ||
  { echo "a cut run: status $status, $(cat cut.txt)" >&2; exit 1; }
set +e
"$parity" state train --np 2 -q --steps 8 --dir cut --resume cut.h5 --out again.h5 2> again.txt; status=$?
set -e
[ $status = 2 ] && grep -q "^parity: state train goes on from its saves under --dir with --restart, not with --resume$" again.txt
/usr/bin/python3 -c "import h5py
with h5py.File('cut.h5') as f:
    steps = list(f['/state/train/step'][()])
    assert f.attrs['complete'] == 0 and steps == list(range(len(steps))) and len(steps) >= 3, steps"
# Bad saves and mismatched runs: one line on every rank's behalf, exit 2, nothing trained.
expect_refusal() {  # REGEX ARGS...
  local regex=$1; shift
  set +e
  "$parity" state train -q "$@" --out refused.h5 --force 2> refused.txt; local status=$?
  set -e
  [ $status = 2 ] || { echo "exit status $status for $*: $(cat refused.txt)" >&2; exit 1; }
  grep -Eq "^parity: $regex" refused.txt || { echo "no line /$regex/ for $*: $(cat refused.txt)" >&2; exit 1; }
  [ "$(grep -c '^parity: ' refused.txt)" = 1 ] || { echo "more than one line for $*: $(cat refused.txt)" >&2; exit 1; }
}
expect_refusal ".*(has no tensor|is \\[.*\\] in .* but \\[.*\\] in this model).*different model" --np 2 --model small --steps 8 --dir run --restart
expect_refusal ".* was saved as float32; this run holds it as float64 \(a restore keeps the precision\)" \
  --np 2 --precision float64 --steps 8 --dir run --restart
/usr/bin/python3 - <<'PY'
# Flip a byte of the first piece's data in rank 0's file of the newest save.
import h5py, numpy as np
path = "run/step-00000008/rank-00000.h5"
with h5py.File(path) as f:
    data = f["/pieces/0/data"][()].tobytes()
raw = bytearray(open(path, "rb").read())
at = raw.find(data)
assert at >= 0
raw[at + len(data) // 2] ^= 0x10
open(path, "wb").write(bytes(raw))
PY
expect_refusal ".*rank-00000.h5: piece 0 of .* fails its CRC-32 check: the file is corrupt" --np 2 --steps 8 --dir run --restart
echo "state train: bad saves refused"
# The index is a save's commit marker: a step-N without one (what a crash during the step-4 save
# leaves) was never committed. --restart goes on from step 2, the newest complete save, and its
# save of step 4 replaces that directory (a complete save is never overwritten: test_restore).
"$parity" state train -q --dir sd --steps 4 --save-every 2 --out st.h5 --force
rm sd/step-00000004/index.h5
set +e
"$parity" state train -q --dir sd --steps 6 --restart --out st3.h5 --force 2> st3.txt; status=$?
set -e
[ $status = 0 ] || { echo "restart over an uncommitted step-00000004: status $status, $(cat st3.txt)" >&2; exit 1; }
[ -f sd/step-00000004/index.h5 ] && [ -f sd/step-00000006/index.h5 ]
/usr/bin/python3 - <<'PY'
import h5py
with h5py.File("st3.h5") as f:
    g = f["/state/train"]
    assert list(g["step"][()]) == [2, 3, 4, 5] and list(g["saved"][()]) == [0, 1, 0, 1], g["step"][()]
    assert g.attrs["restarted_from"] == 2 and g.attrs["passed"] == 1
PY
# A step-N holding what no save writes is not removed: refused up front, in one line, no result.
rm sd/step-00000006/index.h5
touch sd/step-00000006/notes.txt
rm -f refused.h5
expect_refusal "sd/step-00000006, where the save of step 6 goes, holds 'notes.txt', which no save writes" \
  --np 2 --steps 8 --dir sd --restart
[ ! -e refused.h5 ] && [ -f sd/step-00000006/notes.txt ]
echo "state train: an uncommitted save replaced, a foreign one refused before training"
