#!/usr/bin/python3
"""Writes a sample parity result file for the report tests from recorded parity runs.

The runs are small runs of build/bin/parity recorded in reports/fixtures/ (its README.md gives
the commands). Every table is a recorded one: the formulas' values, the schedules, the routing
and the conformance grids are parity's own. What a test needs that one recording cannot hold is
made by transforming the recorded tables:

  noise      each row's measured times times 1 + 0.03 u (u uniform in [-1, 1] from --seed), its
             rates divided by the same factor, its per-rank and timeline rows alike; one factor
             for a whole table whose rows are derived from each other (scaling, overlap); the
             checkpointing time ratios times their own factor
  speed      a table's times divided by F (--model-speed F, ...), its rates multiplied
  hosts      ranks 0 to n/2 - 1 on node0, the rest on node1; the last rank slow in the collective
             benchmark (its times 5% to 30% longer, more at larger sizes); the pipeline run not
             oversubscribed (it was recorded on 2 cores) unless --pipeline-oversubscribed
  failures   --failures K failed collective cases; with --*-mismatch a count that differs from
             its formula and a conformance case that fails
  groups     the collective benchmark's groups of the sample (GROUPS), an empty or omitted table;
             --moe-run second: the routing of a second recording on the first one's times

    make_sample.py OUT.h5 [--seed N] [--bandwidth-scale F] [--failures K] [--empty-collectives]
                          [--omit GROUP]... [--world-size 4|1]
                          [--model [--model-speed F]] [--parallel [--parallel-speed F]]
                          [--tensor [--tensor-speed F] [--tensor-mismatch]]
                          [--pipeline [--pipeline-speed F] [--pipeline-oversubscribed]]
                          [--moe [--moe-run first|second|one-run] [--moe-speed F]
                                 [--moe-mismatch]]
                          [--checkpoint [--checkpoint-speed F] [--checkpoint-mismatch]]
                          [--precision] [--recording NAME]...

Without --model, --parallel, ... the file looks like one from before those tables existed:
the collective benchmark, its host and ping-pong tables and the collective conformance cases.
"""

import argparse
import math
import os
import sys
from collections import OrderedDict

import h5py
import numpy as np

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
STR = h5py.string_dtype("utf-8")
WORLD_SIZES = (4, 1)  # the recorded world sizes

# The collective benchmark's groups the sample keeps, (collective, dtype, redop, in_place,
# algorithms, the one size or None for every size but 0), from the four recorded sweeps.
GROUPS = [
    ("all_reduce", "float32", "sum", 0, ["native", "ring", "recursive_doubling", "rabenseifner",
                                         "naive"], None),
    ("all_reduce", "float32", "sum", 1, ["native", "ring"], None),
    ("all_reduce", "float64", "sum", 0, ["native", "ring", "recursive_doubling"], None),
    ("all_reduce", "int32", "max", 0, ["native", "ring"], 1 << 20),
    ("broadcast", "float32", "none", 0, ["native", "binomial_tree"], None),
    ("reduce", "float32", "sum", 0, ["native", "binomial_tree"], None),
    ("all_gather", "float32", "none", 0, ["native", "ring"], None),
    ("reduce_scatter", "float32", "sum", 0, ["native", "ring"], None),
    ("all_to_all", "float32", "none", 0, ["native", "pairwise"], None),
]
COLLECTIVE_SWEEPS = ["float32", "float64", "int32", "others"]

# Per table: (one factor per row, or one for the table), its measured times, its rates; and the
# tables whose rows belong to its rows, by (the column naming the row, their times).
ROW, TABLE = "row", "table"
TIMED = {
    "/bench/collectives": (ROW, ["time_us", "time_p50_us", "time_p95_us", "time_min_rank_us",
                                 "time_max_rank_us"], ["algbw_GBps", "busbw_GBps"]),
    "/bench/model": (ROW, ["step_time_s"], ["tokens_per_s", "achieved_GFLOPs", "mfu"]),
    "/bench/memory": (ROW, ["step_seconds"], []),
    "/bench/scaling": (TABLE, ["step_seconds", "exposed_comm_seconds"], []),
    "/bench/overlap": (TABLE, ["step_seconds", "compute_seconds", "exposed_comm_seconds",
                               "stream_seconds", "comm_seconds_alone"], []),
    "/bench/tensor": (ROW, ["step_seconds", "tp_comm_seconds", "compute_seconds"],
                      ["tokens_per_second"]),
    "/bench/pipeline": (ROW, ["step_seconds", "makespan_seconds", "simulated_makespan_seconds",
                              "forward_seconds", "backward_seconds", "input_grad_seconds",
                              "weight_grad_seconds"], []),
    "/bench/moe": (ROW, ["step_seconds", "all_to_all_seconds", "gradient_reduction_seconds",
                         "compute_seconds"], ["tokens_per_second"]),
    "/bench/checkpoint": (ROW, ["step_time_s", "baseline_step_time_s"], []),
}
CHILDREN = {
    "/bench/collectives": [("/bench/collectives_rank_times", "row", ["time_us"])],
    "/bench/pipeline": [("/bench/pipeline_ranks", "run", [
        "busy_seconds", "idle_seconds", "forward_seconds", "backward_seconds",
        "input_grad_seconds", "weight_grad_seconds"]),
        ("/bench/pipeline_timeline", "run", ["start_seconds", "end_seconds"])],
}
NOISE = 0.03
# Per benchmark option: the recordings it reads and the tables it takes from them (the ping-pong
# a recording measured for its own predictions stays out).
BENCHMARKS = {
    "model": (["model"], ["/bench/model"]),
    "parallel": (["memory", "scaling"], ["/bench/memory", "/bench/scaling", "/bench/overlap"]),
    "tensor": (["tensor"], ["/bench/tensor"]),
    "pipeline": (["pipeline"], ["/bench/pipeline", "/bench/pipeline_ranks",
                                "/bench/pipeline_timeline"]),
    "moe": (["moe"], ["/bench/moe", "/bench/moe_steps", "/bench/moe_load"]),
    "checkpoint": (["checkpoint"], ["/bench/checkpoint"]),
    "precision": (["precision"], ["/bench/precision"]),
}
MOE_RUNS = {"first": "moe", "second": "moe-second", "one-run": "moe-one-run"}
# The conformance tables that come with a benchmark (unless --omit check).
CHECKS = {"tensor": ["/check/training", "/check/tensor"], "moe": ["/check/moe"],
          "checkpoint": ["/check/checkpoint"]}

# The injected differences: (the row's key, the column, what is added), and the conformance
# case that fails with them, with the words its message opens with.
TENSOR_MISMATCH = ((2, 1), 4096.0)  # (tp, sequence_parallel): block bytes sent in excess
TENSOR_MISMATCH_CASE = ("tensor/tp2/sp/zero1/float32", "tp_bytes_sent", 96.0,
                        "tensor-parallel bytes differ from the formula")
MOE_MISMATCH_RUN = ((2, "top_k", 1.25), 4096.0)  # (ep, router, cf): all-to-all bytes in excess
MOE_MISMATCH_CASE = "moe/ep2/E4/k2/cf1.25/top_k/float64"
MOE_MISMATCH = (MOE_MISMATCH_CASE, "dispatch_bytes", 128.0,
                "dispatch bytes differ from the formula")
CHECKPOINT_MISMATCH_POLICY = ("every3", 4096)  # its peak bytes in excess
CHECKPOINT_MISMATCH_CASE = "checkpoint/alone/sqrt/float32"
CHECKPOINT_MISMATCH = (CHECKPOINT_MISMATCH_CASE, "differing", 7,
                       "differs from the run without recompute (first at "
                       "blocks.1.attention.qkv.weight)")
# Failed collective cases, taken in turn: (case prefix, the columns set, the message).
FAILURES = [
    ("all_reduce/ring/float32/sum/1021/", {"wrong": 3, "max_abs_error": 2.0},
     "rank 2 index 17: got 5 expected 7; rank 2 index 18: got 1 expected 3; rank 3 index 17: "
     "got 5 expected 7"),
    ("reduce_scatter/ring/float64/sum/1/", {"guard_ok": 0},
     "rank 1: guard region after the output buffer was overwritten"),
]
PROVENANCE = {
    "schema": "parity-results", "parity_version": "0.1.0-sample",
    "git_commit": "0123456789abcdef0123456789abcdef01234567", "subcommand": "run",
    "start_time_utc": "2026-11-21T10:00:00Z", "end_time_utc": "2026-11-21T10:07:31Z",
    "backend": "mpi", "device": "cpu", "mpi_library": "Open MPI v4.1.4, package: Debian OpenMPI",
    "hdf5_version": "1.10.8", "compiler": "GNU 12.2.0", "cpu_model": "Sample CPU @ 3.00GHz",
    "half_accumulate": "float32"}


class Table:
    """A table in memory: its columns in file order (numpy arrays, strings as objects), their
    units and its group's attributes."""

    def __init__(self, path, columns, units, attrs):
        self.path, self.columns, self.units, self.attrs = path, columns, units, attrs

    @property
    def rows(self):
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def copy(self):
        return Table(self.path, OrderedDict((c, v.copy()) for c, v in self.columns.items()),
                     dict(self.units), dict(self.attrs))

    def keep(self, mask):
        mask = np.asarray(mask, dtype=bool)
        for c in self.columns:
            self.columns[c] = self.columns[c][mask]
        return self

    def where(self, **match):
        """The indices of the rows whose columns equal match's values."""
        mask = np.ones(self.rows, dtype=bool)
        for c, v in match.items():
            mask &= self.columns[c] == v
        return np.flatnonzero(mask)

    def scale(self, factors, times, rates=()):
        """Times times factors (one per row, or one), rates divided by them."""
        for c in times:
            if c in self.columns:
                self.columns[c] = self.columns[c] * factors
        for c in rates:
            if c in self.columns:
                self.columns[c] = self.columns[c] / factors

    def write(self, f):
        g = f.require_group(self.path)
        for k, v in self.attrs.items():
            g.attrs[k] = v
        g.attrs.create("columns", np.array(list(self.columns), dtype=object), dtype=STR)
        g.attrs["rows"] = np.int64(self.rows)
        for c, values in self.columns.items():
            if values.dtype == object:
                ds = g.create_dataset(c, data=values, dtype=STR)
            else:
                ds = g.create_dataset(c, data=values)
            ds.attrs["unit"] = self.units[c]


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def read_recording(path):
    """({table path: Table} in file order, the root attributes) of a result file."""
    tables = OrderedDict()
    with h5py.File(path, "r") as f:
        def visit(name, g):
            if isinstance(g, h5py.Group) and g.attrs.get("kind") == "table":
                columns, units = OrderedDict(), {}
                for c in map(text, g.attrs["columns"]):
                    values = g[c][()]
                    if values.dtype.kind in "OS":
                        values = np.array([text(v) for v in values], dtype=object)
                    columns[c], units[c] = values, text(g[c].attrs.get("unit", ""))
                attrs = {k: v for k, v in g.attrs.items() if k not in ("columns", "rows")}
                tables["/" + name] = Table("/" + name, columns, units, attrs)
        f.visititems(visit)
        return tables, dict(f.attrs)


def write_recording(path, tables, attrs):
    """Writes the tables (Table) and the root attributes into a new result file."""
    with h5py.File(path, "w") as f:
        for k, v in attrs.items():
            if isinstance(v, np.ndarray) and v.dtype == object:
                f.attrs.create(k, np.array([text(x) for x in v], dtype=object), dtype=STR)
            else:
                f.attrs[k] = v
        for table in tables.values():
            table.write(f)


_recordings = {}


def read_tables(name, world_size):
    """{table path: Table} of the recording fixtures/<name>-np<world size>.h5 (a copy of it:
    each recording is read once per process)."""
    key = (name, world_size)
    if key not in _recordings:
        _recordings[key] = read_recording(os.path.join(FIXTURES, f"{name}-np{world_size}.h5"))[0]
    return OrderedDict((p, t.copy()) for p, t in _recordings[key].items())


def add_empty_table(path, group, world_size=4):
    """Writes group into the file at path with the recorded table's columns and no rows."""
    for name in [n for names, _ in BENCHMARKS.values() for n in names] + ["check"]:
        table = read_tables(name, world_size).get(group)
        if table:
            with h5py.File(path, "a") as f:
                table.keep(np.zeros(table.rows, dtype=bool)).write(f)
            return
    raise KeyError(f"no recording has {group}")


def noise(rng, n):
    return 1 + NOISE * rng.uniform(-1, 1, n)


def time_transform(tables, rng, speed=1.0):
    """Noise and speed on every timed table of tables (TIMED), and on the rows of its
    children."""
    for path, (per, times, rates) in TIMED.items():
        table = tables.get(path)
        if table is None:
            continue
        factors = noise(rng, table.rows if per == ROW else 1) / speed
        table.scale(factors if per == ROW else factors[0], times, rates)
        for child, by, child_times in CHILDREN.get(path, []):
            if child in tables and per == ROW and table.rows:
                tables[child].scale(factors[tables[child].columns[by].astype(int)], child_times)
        if path == "/bench/checkpoint":
            table.scale(noise(rng, table.rows),
                        ["time_ratio", "time_ratio_rank_min", "time_ratio_rank_max"])


def collectives(world_size, rng, bandwidth_scale, empty):
    """The recorded sweeps' tables, their benchmark rows cut to GROUPS (rank times renumbered)
    and the last rank slowed."""
    sweeps = [read_tables(f"collectives-{s}", world_size) for s in COLLECTIVE_SWEEPS]
    tables = sweeps[0]
    bench, ranks = tables["/bench/collectives"], tables["/bench/collectives_rank_times"]
    kept, kept_ranks = [], []
    for sweep in sweeps:
        b, r = sweep["/bench/collectives"], sweep["/bench/collectives_rank_times"]
        for coll, dtype, redop, in_place, algos, size in GROUPS:
            for i in b.where(collective=coll, dtype=dtype, redop=redop, in_place=in_place):
                n = b.columns["size_bytes"][i]
                if b.columns["algorithm"][i] in algos and n > 0 and size in (None, n):
                    kept.append({c: v[i] for c, v in b.columns.items()})
                    for j in r.where(row=i):
                        kept_ranks.append({c: v[j] for c, v in r.columns.items()})
                        kept_ranks[-1]["row"] = len(kept) - 1
    for table, rows in ((bench, [] if empty else kept), (ranks, [] if empty else kept_ranks)):
        for c in table.columns:
            table.columns[c] = np.array([r[c] for r in rows], dtype=table.columns[c].dtype)
    time_transform(tables, rng, bandwidth_scale)
    # The slow rank: 5% at the smallest sizes to 30% from 4 MiB on.
    sizes = bench.columns["size_bytes"][ranks.columns["row"].astype(int)] if ranks.rows else []
    slow = ranks.columns["rank"] == world_size - 1
    ranks.columns["time_us"][slow] *= 1.05 + 0.25 * np.minimum(1.0, np.asarray(sizes)[slow]
                                                               / (1 << 22))
    for i in range(bench.rows):
        mine = ranks.columns["time_us"][ranks.columns["row"] == i]
        bench.columns["time_max_rank_us"][i] = max(mine, default=math.nan)
    return tables


def fail_case(table, case, column, extra, words):
    """The conformance case fails: column plus extra, passed 0, the message opening with
    words."""
    i, = table.where(case=case)
    table.columns[column][i] += extra
    table.columns["passed"][i] = 0
    table.columns["message"][i] = f"{words}; {table.columns['message'][i]}"


def fail_collectives(check, failures):
    """The first `failures` cases of FAILURES' prefixes, taken in turn, fail as it says."""
    taken = set()
    for k in range(failures):
        prefix, values, message = FAILURES[k % len(FAILURES)]
        i = next(i for i, c in enumerate(check.columns["case"])
                 if c.startswith(prefix) and i not in taken)
        taken.add(i)
        for c, v in values.items():
            check.columns[c][i] = v
        check.columns["passed"][i], check.columns["message"][i] = 0, message


def mismatch(tables, kind):
    """The injected difference of a benchmark: a count beside its formula, its verdict 0."""
    if kind == "tensor":
        t = tables["/bench/tensor"]
        (tp, sp), extra = TENSOR_MISMATCH
        i, = t.where(tp=tp, sequence_parallel=sp)
        c = t.columns
        blocks = ((c["formula_bytes_total"][i] - c["formula_bytes_embedding"][i]
                   - c["formula_bytes_head"][i] - c["formula_bytes_loss"][i])
                  / c["formula_bytes_block"][i])
        c["bytes_block"][i] += extra
        c["bytes_total"][i] += extra * blocks
        c["bytes_match"][i] = 0
    elif kind == "moe":
        t = tables["/bench/moe"]
        (ep, router, cf), extra = MOE_MISMATCH_RUN
        i, = t.where(ep=ep, router=router, capacity_factor=cf)
        t.columns["all_to_all_bytes"][i] += extra
        t.columns["bytes_match"][i] = 0
    else:
        t = tables["/bench/checkpoint"]
        policy, extra = CHECKPOINT_MISMATCH_POLICY
        i, = t.where(policy=policy)
        t.columns["peak_bytes"][i] += extra
        t.columns["matches_formula"][i] = 0


def benchmark(kind, world_size, rng, speed=1.0, run="first", mismatched=False,
              oversubscribed=False, checks=True):
    """The tables of one benchmark option (and its conformance cases), transformed."""
    names, taken = BENCHMARKS[kind]
    recorded = {p: t for name in ([MOE_RUNS[run]] if kind == "moe" else names)
                for p, t in read_tables(name, world_size).items()}
    tables = OrderedDict((p, recorded[p]) for p in taken)
    if kind == "moe" and run == "second":
        # The second run's routing on the first run's times: two runs of a loaded host differ
        # in time far more than the speed a test sets.
        first = read_tables(MOE_RUNS["first"], world_size)["/bench/moe"].columns
        _, times, rates = TIMED["/bench/moe"]
        for c in times + rates + ["all_to_all_share"]:
            tables["/bench/moe"].columns[c] = first[c].copy()
    time_transform(tables, rng, speed)
    if kind == "pipeline":
        attrs = tables["/bench/pipeline"].attrs
        attrs["oversubscribed"] = np.int64(oversubscribed)
        attrs["cores_per_host"] = np.int64(1 if oversubscribed else 8)
        attrs["ranks_per_host"] = np.int64(max(1, world_size // 2))
        if not oversubscribed:
            attrs["note"] = ""
    if checks and kind in CHECKS:
        recorded = read_tables("check", world_size)
        tables.update((p, recorded[p]) for p in CHECKS[kind])
    if mismatched:
        mismatch(tables, kind)
        if checks:
            case, column, extra, words = {"tensor": TENSOR_MISMATCH_CASE, "moe": MOE_MISMATCH,
                                          "checkpoint": CHECKPOINT_MISMATCH}[kind]
            fail_case(tables["/check/" + kind], case, column, extra, words)
    return tables


def write_sample(path, seed=1, bandwidth_scale=1.0, failures=2, empty_collectives=False,
                 omit=(), world_size=4, model=False, model_speed=1.0, parallel=False,
                 parallel_speed=1.0, tensor=False, tensor_speed=1.0, tensor_mismatch=False,
                 pipeline=False, pipeline_speed=1.0, pipeline_oversubscribed=False, moe=False,
                 moe_run="first", moe_speed=1.0, moe_mismatch=False, checkpoint=False,
                 checkpoint_speed=1.0, checkpoint_mismatch=False, precision=False,
                 recordings=()):
    if world_size not in WORLD_SIZES:
        raise ValueError(f"recorded world sizes: {WORLD_SIZES}")
    p = world_size
    hosts = [f"node{r * 2 // p}" for r in range(p)]
    tables = collectives(p, np.random.default_rng(seed), bandwidth_scale, empty_collectives)
    groups = {"copy_bandwidth": ["/host/copy_bandwidth"],
              "point_to_point": ["/bench/point_to_point"],
              "harness": ["/bench/harness_overhead"],
              "collectives": ["/bench/collectives", "/bench/collectives_rank_times"]}
    for group in omit:
        for table in groups.get(group, []):
            tables.pop(table, None)
    if "check" not in omit:
        tables["/check/collectives"] = read_tables("check", p)["/check/collectives"]
        fail_collectives(tables["/check/collectives"], failures)
    # Each benchmark its own generator, so that adding one leaves the others' numbers alone.
    chosen = [("model", model, dict(speed=model_speed)),
              ("parallel", parallel, dict(speed=parallel_speed)),
              ("tensor", tensor, dict(speed=tensor_speed, mismatched=tensor_mismatch)),
              ("pipeline", pipeline, dict(speed=pipeline_speed,
                                          oversubscribed=pipeline_oversubscribed)),
              ("moe", moe, dict(speed=moe_speed, run=moe_run, mismatched=moe_mismatch)),
              ("checkpoint", checkpoint, dict(speed=checkpoint_speed,
                                              mismatched=checkpoint_mismatch)),
              ("precision", precision, {})]
    for k, (kind, wanted, options) in enumerate(chosen):
        if wanted:
            tables.update(benchmark(kind, p, np.random.default_rng(seed + 1000 * (k + 1)),
                                    checks="check" not in omit, **options))
    # Another recording's tables as they are (a new table's own, before an option has it).
    for name in recordings:
        tables.update((t, table) for t, table in read_tables(name, p).items()
                      if t not in ("/bench/point_to_point", "/host/copy_bandwidth"))
    for table in tables.values():
        if "host" in table.columns:
            table.columns["host"] = np.array([hosts[int(r)] for r in table.columns["rank"]],
                                             dtype=object)
    write_recording(path, tables, dict(
        PROVENANCE, command_line=f"mpirun -n {p} parity run --out {path}",
        schema_version=np.int64(1), world_size=np.int64(p), hosts=np.array(hosts, dtype=object)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="HDF5 file to write (overwritten)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the noise (default 1)")
    ap.add_argument("--bandwidth-scale", type=float, default=1.0,
                    help="divide the collective benchmark's times by F (default 1.0)")
    ap.add_argument("--failures", type=int, default=2, help="failed check cases (default 2)")
    ap.add_argument("--empty-collectives", action="store_true",
                    help="write /bench/collectives with 0 rows")
    ap.add_argument("--omit", action="append", default=[],
                    choices=["copy_bandwidth", "point_to_point", "harness", "collectives", "check"],
                    help="leave a group out (repeatable)")
    ap.add_argument("--world-size", type=int, default=4, choices=WORLD_SIZES,
                    help="ranks of the recorded runs (default 4; 1 gives busbw 0 throughout)")
    speeds = {"model": "/bench/model (three GPT presets on every rank)",
              "parallel": "/bench/memory, /bench/scaling and /bench/overlap (DP and ZeRO 1-3, "
                          "strong and weak scaling, bucketed overlap)",
              "tensor": "/bench/tensor and, with the conformance cases, /check/training and "
                        "/check/tensor",
              "pipeline": "/bench/pipeline, /bench/pipeline_ranks and /bench/pipeline_timeline",
              "moe": "/bench/moe, /bench/moe_steps, /bench/moe_load and, with the conformance "
                     "cases, /check/moe",
              "checkpoint": "/bench/checkpoint and, with the conformance cases, "
                            "/check/checkpoint"}
    for kind, what in speeds.items():
        ap.add_argument(f"--{kind}", action="store_true", help=f"also write {what}")
        ap.add_argument(f"--{kind}-speed", type=float, default=1.0,
                        help="divide those tables' times by F (default 1.0)")
    for kind, what in (("tensor", "one /bench/tensor row sends"),
                       ("moe", "one /bench/moe run sends"),
                       ("checkpoint", "one /bench/checkpoint policy peaks at")):
        ap.add_argument(f"--{kind}-mismatch", action="store_true",
                        help=f"{what} more than the formula, and one conformance case fails")
    ap.add_argument("--pipeline-oversubscribed", action="store_true",
                    help="mark the pipeline run oversubscribed (ranks outnumber cores)")
    ap.add_argument("--moe-run", default="first", choices=list(MOE_RUNS),
                    help="which recorded MoE run: first, second (one more timed step, so that "
                         "its last step routes otherwise; on the first run's times) or one-run "
                         "(ep 1, dropless, top_k alone)")
    ap.add_argument("--precision", action="store_true",
                    help="also write /bench/precision (every precision's loss per step)")
    ap.add_argument("--recording", action="append", default=[], dest="recordings",
                    metavar="NAME", help="also write the tables of fixtures/NAME-np<world "
                    "size>.h5 as they are (repeatable)")
    args = vars(ap.parse_args(argv))
    write_sample(args.pop("out"), **args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
