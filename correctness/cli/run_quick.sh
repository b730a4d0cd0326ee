#!/usr/bin/env bash
# `parity run --quick` on 2 ranks: one result file holding conformance, collective and model benchmark tables
# with provenance, and the report drawn from it.
set -euo pipefail
parity=$1; work=$2
rm -rf "$work"; mkdir -p "$work"; cd "$work"
"$parity" run --np 2 --quick -q --out run.h5 > run.txt
test -s run.report/index.html || { echo "no report"; exit 1; }
grep -q "conformance:" run.txt || { echo "no conformance summary"; exit 1; }
/usr/bin/python3 - <<'PY'
import h5py
with h5py.File("run.h5") as f:
    assert f.attrs["subcommand"] == "run"
    for g in ["/check/collectives", "/bench/collectives", "/host/copy_bandwidth", "/bench/point_to_point", "/bench/model"]:
        assert g in f, g
    assert f["/check/collectives"]["passed"][()].all()
    colls = set(f["/bench/collectives"]["collective"].asstr()[()])
    assert colls == {"all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v"}, colls
    for a in ["command_line", "start_time_utc", "end_time_utc", "mpi_library", "hdf5_version", "compiler", "cpu_model", "git_commit"]:
        assert str(f.attrs[a]), a
print("run: ok")
PY
