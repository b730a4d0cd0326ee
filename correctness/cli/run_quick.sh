#!/usr/bin/env bash
# `parity run --quick` on 2 ranks: one result file holding conformance, collective and model benchmark tables
# with provenance, and the report drawn from it.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" run --np 2 --quick -q --out run.h5 > run.txt
test -s run.report/index.html || { echo "no report"; exit 1; }
grep -q "conformance:" run.txt || { echo "no conformance summary"; exit 1; }
# Every collective `parity list` names (the registry's, not a list kept here).
collectives=$("$parity" list | sed -nE 's/^  ([a-z_0-9]+)  \(busbw factor .*/\1/p' | tr '\n' ' ')
export collectives
/usr/bin/python3 - <<'PY'
import os, h5py
with h5py.File("run.h5") as f:
    assert f.attrs["subcommand"] == "run"
    for g in ["/check/collectives", "/bench/collectives", "/host/copy_bandwidth", "/bench/point_to_point", "/bench/model"]:
        assert g in f, g
    assert f["/check/collectives"]["passed"][()].all()
    colls = set(f["/bench/collectives"]["collective"].asstr()[()])
    listed = set(os.environ["collectives"].split())
    assert "all_reduce" in listed and "all_to_all_v" in listed, listed
    assert colls == listed, (colls, listed)
    for a in ["command_line", "start_time_utc", "end_time_utc", "mpi_library", "hdf5_version", "compiler", "cpu_model", "git_commit"]:
        assert str(f.attrs[a]), a
print("run: ok")
PY
