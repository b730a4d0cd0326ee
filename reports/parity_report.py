#!/usr/bin/python3
"""Draws an HTML report (with PNG plots and a markdown summary) from parity result files.

One file gives a report of that run; two files give a comparison of run B against run A.
The input format is docs/results-schema.md (schema version 1). Exit status: 0 when the report
was written, 2 for bad input or usage (one line on stderr starting with "parity report: "),
1 for an unexpected failure while drawing.
"""

import argparse
import html
import math
import os
import re
import sys
import traceback
from collections import OrderedDict, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PREFIX = "parity report: "

COLLECTIVE_ORDER = ["all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
                    "all_to_all"]
ALGORITHM_ORDER = ["native", "ring", "naive", "recursive_doubling", "rabenseifner",
                   "binomial_tree", "pairwise"]
DTYPE_ORDER = ["float64", "float32", "float16", "bfloat16", "int32", "int64"]
REDOP_ORDER = ["sum", "prod", "max", "min", "avg", "none"]
PROVENANCE_ORDER = ["schema", "schema_version", "parity_version", "git_commit", "command_line",
                    "subcommand", "start_time_utc", "end_time_utc", "world_size", "hosts",
                    "backend", "device", "gpu", "ranks_per_gpu", "rank_devices", "cuda_version",
                    "nccl_version", "mpi_cuda_aware", "mpi_library", "hdf5_version", "compiler",
                    "cpu_model", "half_accumulate"]
ESSENTIALS = ["parity_version", "git_commit", "subcommand", "start_time_utc", "world_size",
              "hosts", "backend", "device", "gpu", "ranks_per_gpu", "nccl_version", "mpi_library",
              "cpu_model"]

BENCH_REQUIRED = ["collective", "algorithm", "size_bytes", "busbw_GBps", "time_us"]
BENCH_OPTIONAL = {"dtype": "", "redop": "", "in_place": 0, "root": -1, "world_size": -1,
                  "count": -1, "iterations": -1, "time_p50_us": math.nan,
                  "time_p95_us": math.nan, "time_min_rank_us": math.nan,
                  "time_max_rank_us": math.nan, "algbw_GBps": math.nan, "wrong": -1,
                  "predicted_time_us": math.nan, "predicted_busbw_GBps": math.nan}

# Memory categories of /bench/model in the order they are stacked. communication is drawn only
# when some model has any: a replica training on its own rank allocates none, and an always-empty
# legend entry would only add noise. The others are always in the legend so that a category
# that stays at 0 (parameters exist before the steps start) is visibly 0, not forgotten.
MEMORY_CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations",
                     "communication", "workspace"]
MEMORY_OPTIONAL = {"communication"}
MODEL_OPTIONAL = {"host": "", "layers": -1, "hidden": -1, "megatron_step_flops": math.nan,
                  "step_time_s": math.nan, "achieved_GFLOPs": math.nan}

# /bench/memory, /bench/scaling and /bench/overlap (docs/results-schema.md). ZeRO's model states
# are the first three memory categories; the others are drawn apart, as not model state.
STRATEGY_ORDER = ["dp", "zero1", "zero2", "zero3"]
PRECISION_ORDER = ["mixed", "float32", "float64"]
SCALING_MODE_ORDER = ["strong", "weak"]
MODEL_STATE_CATEGORIES = ["parameters", "gradients", "optimizer_state"]
MEMORY_BENCH_OPTIONAL = {"precision": "", "model": "", "config": "", "parameters": -1,
                         "padded_parameters": -1, "paper_model_state_bytes": math.nan,
                         "matches_formula": None, "bytes_sent": None,
                         "formula_bytes_sent": math.nan, "step_seconds": math.nan}
SCALING_OPTIONAL = {"model": "", "config": "", "global_batch": -1, "rank_batch": -1,
                    "amdahl_serial_fraction": math.nan, "amdahl_speedup": math.nan,
                    "exposed_comm_seconds": math.nan, "predicted_comm_seconds": math.nan,
                    "bytes_sent": -1}
OVERLAP_OPTIONAL = {"world_size": -1, "model": "", "buckets": -1, "step_seconds": math.nan,
                    "compute_seconds": math.nan, "stream_seconds": math.nan,
                    "comm_seconds_alone": math.nan, "hidden_fraction": math.nan}


class UsageError(Exception):
    """Bad command line or unusable output directory (exit status 2)."""


# --------------------------------------------------------------------------------------------
# Formatting helpers

def esc(value):
    return html.escape(str(value), quote=True)


def finite(x):
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt_size(n):
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_num(x, digits=2):
    """Fixed decimals for values >= 1, three significant digits below; '–' for missing."""
    if not finite(x):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 1:
        return f"{x:.{digits}f}"
    return f"{x:.3g}"


def fmt_time(us):
    if not finite(us):
        return "–"
    return f"{us:.2f}" if abs(us) < 1e4 else f"{us:.0f}"


def fmt_ratio(x):
    return f"{x:.3f}" if finite(x) else "–"


def fmt_int(x):
    try:
        return str(int(x))
    except (TypeError, ValueError):
        return "–"


def fmt_wrong(x):
    try:
        x = int(x)
    except (TypeError, ValueError):
        return "–"
    return "n/c" if x < 0 else str(x)


def fmt_known(x):
    """An integer column whose -1 stands for absent (an optional column the file lacks)."""
    return fmt_int(x) if finite(x) and x >= 0 else "–"


def fmt_count(x):
    """Integer with thousands separators (parameter counts)."""
    try:
        return f"{int(x):,}"
    except (TypeError, ValueError):
        return "–"


def fmt_flops(x):
    """FLOP with an SI prefix and three significant digits: 6.04 GFLOP."""
    if not finite(x):
        return "–"
    x = float(x)
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}FLOP"
    return f"{x:.0f} FLOP"


def fmt_mfu(x):
    return f"{x:.3f}" if finite(x) else "–"


def fmt_tokens(x):
    return fmt_num(x, 0)


def capitalized(text):
    return text[:1].upper() + text[1:]


def fmt_spread(spread, fmt):
    """'mean (min–max)', or just the mean when the ranks agree or there is one rank."""
    mean, lo, hi, n = spread
    if n <= 1 or not (finite(lo) and finite(hi)) or fmt(lo) == fmt(hi):
        return fmt(mean)
    return f"{fmt(mean)} ({fmt(lo)}–{fmt(hi)})"


def spread(values):
    """(mean, min, max, count) over the finite values; NaNs when there are none."""
    vals = [float(v) for v in values if finite(v)]
    if not vals:
        return (math.nan, math.nan, math.nan, 0)
    return (sum(vals) / len(vals), min(vals), max(vals), len(vals))


def ratio_of(b, a):
    return b / a if finite(a) and finite(b) and a > 0 else math.nan


def amdahl_speedup(serial_fraction, n):
    """Amdahl's law: 1 / (s + (1 - s) / N) (theory::amdahl_speedup)."""
    return 1 / (serial_fraction + (1 - serial_fraction) / n)


def median(values):
    vals = sorted(v for v in values if finite(v))
    if not vals:
        return math.nan
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else 0.5 * (vals[mid - 1] + vals[mid])


def order_key(value, order):
    return (order.index(value) if value in order else len(order), str(value))


def compress_ranks(ranks):
    ranks = sorted(ranks)
    parts, start, prev = [], None, None
    for r in ranks:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def hosts_summary(hosts):
    """['a','a','b'] -> [('a', '0-1'), ('b', '2')] in order of first appearance."""
    by_host = OrderedDict()
    for rank, h in enumerate(hosts):
        by_host.setdefault(h, []).append(rank)
    return [(h, compress_ranks(r)) for h, r in by_host.items()]


def hosts_text(hosts):
    return "; ".join(f"{h}: ranks {r}" for h, r in hosts_summary(hosts))


def attr_text(name, value):
    if name == "hosts":
        hosts = [value] if isinstance(value, str) else list(value or [])
        return hosts_text(hosts) if hosts else "–"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80]


def placement(in_place):
    return "in place" if int(in_place) == 1 else "out of place"


# --------------------------------------------------------------------------------------------
# Data preparation

def table_rows(table, defaults):
    """List of dict rows; missing optional columns filled from defaults."""
    n = len(table)
    cols = {c: table[c].tolist() for c in table.columns}
    rows = []
    for i in range(n):
        row = {c: cols[c][i] for c in cols}
        for c, d in defaults.items():
            row.setdefault(c, d)
        row["_row"] = i
        rows.append(row)
    return rows


class Bench:
    """Collective benchmark rows, grouped for plotting."""

    def __init__(self, rf):
        self.table = rf.table("/bench/collectives")
        self.present = self.table is not None
        self.missing = self.table.missing(BENCH_REQUIRED) if self.present else []
        self.rows = []
        if self.present and not self.missing:
            self.rows = table_rows(self.table, BENCH_OPTIONAL)
        self.usable = bool(self.rows)
        self.file_world = rf.world_size
        groups = defaultdict(list)
        for r in self.rows:
            groups[self.key(r)].append(r)
        self.groups = OrderedDict(sorted(groups.items(), key=lambda kv: self.sort_key(kv[0])))
        self.native = {}
        for key, rows in self.groups.items():
            for r in rows:
                if r["algorithm"] == "native":
                    self.native.setdefault((key, r["size_bytes"]), r)

    @staticmethod
    def key(r):
        return (r["collective"], r["dtype"], r["redop"], int(r["in_place"]), int(r["root"]),
                int(r["world_size"]))

    @staticmethod
    def sort_key(key):
        coll, dtype, redop, in_place, root, ws = key
        return (order_key(coll, COLLECTIVE_ORDER), order_key(dtype, DTYPE_ORDER),
                order_key(redop, REDOP_ORDER), in_place, root, ws)

    def title(self, key):
        coll, dtype, redop, in_place, root, ws = key
        parts = [coll, dtype]
        if redop and redop != "none":
            parts.append(redop)
        parts.append(placement(in_place))
        if root >= 0:
            parts.append(f"root {root}")
        if ws > 0 and ws != self.file_world:
            parts.append(f"{ws} ranks")
        return " · ".join(p for p in parts if p)

    def native_ratio(self, key, r):
        nat = self.native.get((key, r["size_bytes"]))
        if nat is None or not finite(nat["busbw_GBps"]) or nat["busbw_GBps"] <= 0:
            return math.nan
        return r["busbw_GBps"] / nat["busbw_GBps"]

    def best_at_largest(self):
        """Per (collective, algorithm): the row with the highest busbw at that pair's largest
        size, with its ratio to native busbw at the same (dtype, redop, placement, size)."""
        by_pair = defaultdict(list)
        for key, rows in self.groups.items():
            for r in rows:
                by_pair[(r["collective"], r["algorithm"])].append((key, r))
        out = []
        for pair in sorted(by_pair, key=lambda p: (order_key(p[0], COLLECTIVE_ORDER),
                                                  order_key(p[1], ALGORITHM_ORDER))):
            items = by_pair[pair]
            largest = max(r["size_bytes"] for _, r in items)
            at = [(k, r) for k, r in items
                  if r["size_bytes"] == largest and finite(r["busbw_GBps"])]
            if not at:
                continue
            key, best = max(at, key=lambda kr: kr[1]["busbw_GBps"])
            out.append((pair, key, best, self.native_ratio(key, best)))
        return out


def host_copy_bw(rf):
    t = rf.table("/host/copy_bandwidth")
    if t is None or not t.has("bandwidth_GBps") or len(t) == 0:
        return None
    vals = [float(v) for v in t["bandwidth_GBps"].tolist() if finite(v)]
    return max(vals) if vals else None


class Check:
    """Conformance cases summarised per collective x algorithm."""

    def __init__(self, rf):
        self.table = rf.table("/check/collectives")
        self.present = self.table is not None
        self.missing = self.table.missing(["passed"]) if self.present else []
        self.rows = []
        if self.present and not self.missing:
            self.rows = table_rows(self.table, {"case": "", "collective": "", "algorithm": "",
                                                "dtype": "", "redop": "", "count": -1,
                                                "in_place": 0, "input": "", "wrong": -1,
                                                "guard_ok": 1, "max_abs_error": math.nan,
                                                "tolerance": math.nan, "message": ""})
        self.total = len(self.rows)
        self.failures = [r for r in self.rows if int(r["passed"]) != 1]
        self.failed = len(self.failures)
        self.passed = self.total - self.failed
        cells = defaultdict(lambda: [0, 0, 0])
        for r in self.rows:
            c = cells[(r["collective"], r["algorithm"])]
            c[0] += 1
            c[1 if int(r["passed"]) == 1 else 2] += 1
        self.cells = OrderedDict(sorted(cells.items(), key=lambda kv: (
            order_key(kv[0][0], COLLECTIVE_ORDER), order_key(kv[0][1], ALGORITHM_ORDER))))

    @property
    def usable(self):
        return self.present and not self.missing

    def words(self):
        if not self.present:
            return "no conformance results in this file"
        if self.missing:
            return "conformance table unusable (missing column 'passed')"
        if self.total == 0:
            return "0 conformance cases"
        if self.failed == 0:
            return f"{self.total} cases, all passed"
        return f"{self.total} cases, {self.failed} failed ({self.passed} passed)"


class P2P:
    def __init__(self, rf):
        self.table = rf.table("/bench/point_to_point")
        self.present = self.table is not None
        attrs = rf.group_attrs.get("/bench/point_to_point", {})
        self.alpha = attrs.get("alpha_us")
        self.beta = attrs.get("beta_us_per_byte")
        self.alpha = float(self.alpha) if finite(self.alpha) else None
        self.beta = float(self.beta) if finite(self.beta) else None
        self.points = []
        if self.present and self.table.has("size_bytes", "time_us"):
            self.points = sorted(zip(self.table["size_bytes"].tolist(),
                                     self.table["time_us"].tolist()))

    @property
    def bandwidth_GBps(self):
        if self.beta is None or self.beta <= 0:
            return None
        return 1e-3 / self.beta  # 1 B/us = 1e-3 GB/s

    def text(self):
        parts = []
        parts.append(f"alpha = {self.alpha:.3g} us" if self.alpha is not None else "alpha = –")
        if self.beta is not None:
            bw = self.bandwidth_GBps
            parts.append(f"beta = {self.beta:.4g} us/B" + (f" ({bw:.3g} GB/s)" if bw else ""))
        else:
            parts.append("beta = –")
        return ", ".join(parts)


class SlowRanks:
    """Per-rank times of the rows at each group's largest size."""

    def __init__(self, rf, bench):
        self.table = rf.table("/bench/collectives_rank_times")
        self.present = self.table is not None
        self.missing = (self.table.missing(["row", "rank", "time_us"]) if self.present else [])
        self.entries = []  # (key, bench row, {rank: time}, {rank: host})
        self.bad_refs = 0
        if not (self.present and not self.missing and bench.usable):
            return
        by_row = defaultdict(dict)
        hosts_by_row = defaultdict(dict)
        host_col = self.table.get("host")
        rows_col = self.table["row"].tolist()
        rank_col = self.table["rank"].tolist()
        time_col = self.table["time_us"].tolist()
        hosts = rf.hosts
        n = len(bench.rows)
        for i, (row, rank, t) in enumerate(zip(rows_col, rank_col, time_col)):
            if not (0 <= row < n):
                self.bad_refs += 1
                continue
            by_row[row][rank] = t
            if host_col is not None:
                hosts_by_row[row][rank] = host_col[i]
            elif 0 <= rank < len(hosts):
                hosts_by_row[row][rank] = hosts[rank]
        for key, rows in bench.groups.items():
            largest = max(r["size_bytes"] for r in rows)
            for r in sorted((r for r in rows if r["size_bytes"] == largest),
                            key=lambda r: order_key(r["algorithm"], ALGORITHM_ORDER)):
                times = {k: v for k, v in by_row.get(r["_row"], {}).items() if finite(v)}
                if times:
                    self.entries.append((key, r, times, hosts_by_row.get(r["_row"], {})))

    def rank_hosts(self):
        out = {}
        for _, _, _, hosts in self.entries:
            out.update(hosts)
        return out

    def relative(self):
        """Mean over entries of rank time / median rank time of that row; and slowest counts."""
        sums, counts, slowest = defaultdict(float), defaultdict(int), defaultdict(int)
        for _, _, times, _ in self.entries:
            med = median(times.values())
            if not med > 0:
                continue
            for rank, t in times.items():
                sums[rank] += t / med
                counts[rank] += 1
            slowest[max(times, key=times.get)] += 1
        rel = {rank: sums[rank] / counts[rank] for rank in sums}
        return rel, slowest


class ModelBench:
    """/bench/model: one row per (model, rank), summarised per (model, config) over ranks."""

    def __init__(self, rf):
        self.table = rf.table("/bench/model")
        self.present = self.table is not None
        self.attrs = rf.group_attrs.get("/bench/model", {})
        # The reader refuses a /bench/model without its required columns, so only the optional
        # ones need defaults. A peak column that is absent stays None, unlike a measured 0.
        defaults = dict(MODEL_OPTIONAL)
        defaults.update({f"peak_{c}_bytes": None for c in MEMORY_CATEGORIES})
        self.rows = table_rows(self.table, defaults) if self.present else []
        groups = OrderedDict()  # file order: the order the models were asked for
        for r in self.rows:
            groups.setdefault((r["model"], r["config"]), []).append(r)
        names = defaultdict(int)
        for model, _ in groups:
            names[model] += 1
        self.models = []
        for (model, config), rows in groups.items():
            first = rows[0]
            peaks = {}
            for c in MEMORY_CATEGORIES:
                vals = [r[f"peak_{c}_bytes"] for r in rows if r[f"peak_{c}_bytes"] is not None]
                if vals:
                    # The largest rank: what has to fit on every device.
                    peaks[c] = max(int(v) for v in vals)
            self.models.append({
                "model": model, "config": config, "rows": rows,
                # A preset name run twice with different configs (another --dtype, say) needs
                # its config to tell the bars apart.
                "label": model if names[model] == 1 else f"{model}\n{config}",
                "ranks": len({r["rank"] for r in rows}),
                "parameters": first["parameters"], "batch": first["batch"],
                "sequence": first["sequence"], "step_flops": first["step_flops"],
                "megatron_step_flops": first["megatron_step_flops"],
                "tokens": spread(r["tokens_per_s"] for r in rows),
                "mfu": spread(r["mfu"] for r in rows),
                "matmul": spread(r["matmul_GFLOPs"] for r in rows),
                "step_time": spread(r["step_time_s"] for r in rows),
                "peaks": peaks,
            })

    @property
    def usable(self):
        return bool(self.models)

    def by_key(self):
        return OrderedDict(((m["model"], m["config"]), m) for m in self.models)

    def memory_categories(self):
        present = {c for m in self.models for c in m["peaks"]}
        return [c for c in MEMORY_CATEGORIES if c in present and (
            c not in MEMORY_OPTIONAL or any(m["peaks"].get(c) for m in self.models))]

    def denominator(self):
        d = self.attrs.get("mfu_denominator")
        return str(d) if d not in (None, "") else None

    def words(self):
        """'tiny 24201 tokens/s, MFU 0.209; small ...' (means over ranks)."""
        return "; ".join(f"{m['model']} {fmt_tokens(m['tokens'][0])} tokens/s, MFU "
                         f"{fmt_mfu(m['mfu'][0])}" for m in self.models)


def row_matches_formula(r):
    """A /bench/memory row's own verdict (matches_formula), or, in a file without that column,
    measured model-state bytes == formula rounded to whole bytes (what parity checks)."""
    if r["matches_formula"] is not None:
        return int(r["matches_formula"]) == 1
    return finite(r["formula_model_state_bytes"]) and \
        int(r["model_state_bytes"]) == round(r["formula_model_state_bytes"])


def max_of(rows, column):
    vals = [r[column] for r in rows if r[column] is not None and finite(r[column])]
    return max(vals) if vals else None


class MemoryBench:
    """/bench/memory: one row per (strategy, precision, world size, rank), summarised per
    (strategy, precision, world size) over ranks."""

    def __init__(self, rf):
        self.table = rf.table("/bench/memory")
        self.present = self.table is not None
        self.attrs = rf.group_attrs.get("/bench/memory", {})
        # The reader refuses the table without strategy, world_size, rank, model_state_bytes or
        # formula_model_state_bytes; a column absent among the others stays None (or NaN),
        # unlike a measured 0.
        defaults = dict(MEMORY_BENCH_OPTIONAL)
        defaults.update({f"{c}_bytes": None for c in MEMORY_CATEGORIES})
        defaults.update({f"formula_{c}_bytes": math.nan for c in MODEL_STATE_CATEGORIES})
        self.rows = table_rows(self.table, defaults) if self.present else []
        groups = defaultdict(list)
        for r in self.rows:
            groups[(r["strategy"], r["precision"], int(r["world_size"]))].append(r)
        self.points = []
        for (strategy, precision, n), rows in sorted(groups.items(), key=lambda kv: (
                order_key(kv[0][1], PRECISION_ORDER), order_key(kv[0][0], STRATEGY_ORDER),
                kv[0][2])):
            first = rows[0]
            categories = {}
            for c in MEMORY_CATEGORIES:
                peak = max_of(rows, f"{c}_bytes")
                if peak is not None:
                    # The largest rank: what has to fit on every device.
                    categories[c] = int(peak)
            self.points.append({
                "strategy": strategy, "precision": precision, "world_size": n, "rows": rows,
                "ranks": len({r["rank"] for r in rows}), "model": first["model"],
                "config": first["config"], "parameters": first["parameters"],
                "padded": first["padded_parameters"],
                "model_state": max(int(r["model_state_bytes"]) for r in rows),
                # The formulas are the same on every rank; the largest is kept all the same.
                "formula": max_of(rows, "formula_model_state_bytes"),
                "paper": max_of(rows, "paper_model_state_bytes"),
                "categories": categories,
                "mismatched": sorted(r["rank"] for r in rows if not row_matches_formula(r)),
                # Bytes sent: the mean over ranks, which is what the formula gives (ring blocks
                # of an unpadded bucket differ by an element between ranks).
                "bytes_sent": spread(r["bytes_sent"] for r in rows
                                     if r["bytes_sent"] is not None)[0],
                "formula_bytes_sent": spread(r["formula_bytes_sent"] for r in rows)[0],
            })
        self.precisions = sorted({p["precision"] for p in self.points},
                                 key=lambda p: order_key(p, PRECISION_ORDER))
        self.mismatched_rows = sum(len(p["mismatched"]) for p in self.points)

    @property
    def usable(self):
        return bool(self.points)

    def by_key(self):
        return OrderedDict(((p["strategy"], p["precision"], p["world_size"]), p)
                           for p in self.points)

    def panels(self, precision):
        """[(strategy, points by world size)] of one precision, strategies in ZeRO order."""
        out = OrderedDict()
        for p in self.points:
            if p["precision"] == precision:
                out.setdefault(p["strategy"], []).append(p)
        return list(out.items())

    def categories(self):
        present = {c for p in self.points for c in p["categories"]}
        return [c for c in MEMORY_CATEGORIES if c in present and (
            c not in MEMORY_OPTIONAL or any(p["categories"].get(c) for p in self.points))]

    def has_bytes_sent(self):
        return any(finite(p["bytes_sent"]) for p in self.points)

    def workloads(self):
        """The distinct (model, config) pairs, in file order."""
        return list(OrderedDict.fromkeys((p["model"], p["config"]) for p in self.points))

    def match_words(self):
        """'all 80 rows match the model-state formula', or which do not."""
        total = len(self.rows)
        if self.mismatched_rows == 0:
            return f"all {total} rows match the model-state formula"
        where = "; ".join(
            f"{p['strategy']} {p['precision']} at {p['world_size']} ranks (rank"
            f"{'s' if len(p['mismatched']) > 1 else ''} {compress_ranks(p['mismatched'])})"
            for p in self.points if p["mismatched"])
        return (f"{self.mismatched_rows} of {total} rows differ from the model-state formula: "
                f"{where}")

    def at_largest(self, precision, key):
        """'dp 193 KiB, zero1 ...' at the largest world size of a precision, and that size."""
        points = [p for p in self.points if p["precision"] == precision]
        n = max(p["world_size"] for p in points)
        return n, ", ".join(f"{p['strategy']} {key(p)}" for p in points if p["world_size"] == n)


class ScalingBench:
    """/bench/scaling: one row per (mode, world size)."""

    def __init__(self, rf):
        self.table = rf.table("/bench/scaling")
        self.present = self.table is not None
        self.attrs = rf.group_attrs.get("/bench/scaling", {})
        self.rows = table_rows(self.table, SCALING_OPTIONAL) if self.present else []
        modes = defaultdict(list)
        for r in self.rows:
            modes[r["mode"]].append(r)
        self.modes = OrderedDict(
            (m, sorted(modes[m], key=lambda r: r["world_size"]))
            for m in sorted(modes, key=lambda m: order_key(m, SCALING_MODE_ORDER)))
        self.alpha = float(self.attrs["alpha_s"]) if finite(self.attrs.get("alpha_s")) else None
        self.beta = (float(self.attrs["beta_s_per_byte"])
                     if finite(self.attrs.get("beta_s_per_byte")) else None)

    @property
    def usable(self):
        return bool(self.rows)

    def by_key(self):
        return OrderedDict(((r["mode"], int(r["world_size"])), r)
                           for rows in self.modes.values() for r in rows)

    def serial_fraction(self, mode):
        vals = [r["amdahl_serial_fraction"] for r in self.modes[mode]
                if finite(r["amdahl_serial_fraction"])]
        return vals[0] if vals else None

    def amdahl_curve(self, mode):
        """(xs, ys) of the Amdahl fit to draw: 1/(s + (1-s)/N) over the measured range when the
        file's amdahl_speedup is that curve (or absent); else the file's own predictions at the
        measured N, joined. None without a serial fraction."""
        s = self.serial_fraction(mode)
        if s is None:
            return None
        rows = self.modes[mode]
        given = [(r["world_size"], r["amdahl_speedup"]) for r in rows
                 if finite(r["amdahl_speedup"])]
        if any(abs(amdahl_speedup(s, n) - y) > 1e-6 * max(1.0, abs(y)) for n, y in given):
            return [n for n, _ in given], [y for _, y in given]
        lo, hi = rows[0]["world_size"], rows[-1]["world_size"]
        xs = [lo + (hi - lo) * i / 60 for i in range(61)]
        return xs, [amdahl_speedup(s, n) for n in xs]

    def has_comm(self):
        return any(finite(r["exposed_comm_seconds"]) or finite(r["predicted_comm_seconds"])
                   for r in self.rows)

    def alpha_beta_text(self):
        source = self.attrs.get("alpha_beta_source")
        if self.alpha is None and self.beta is None:
            return f"alpha and beta not known ({source})" if source else None
        parts = [f"alpha = {self.alpha * 1e6:.3g} us" if self.alpha is not None else "alpha = –"]
        if self.beta is not None and self.beta > 0:
            parts.append(f"beta = {self.beta:.4g} s/B ({1e-9 / self.beta:.3g} GB/s)")
        else:
            parts.append("beta = –")
        return ", ".join(parts) + (f"; source: {source}" if source else "")

    def words(self, mode):
        """'strong scaling to 4 ranks: speedup 2.69 (efficiency 0.671), Amdahl serial fraction
        0.168'."""
        last = self.modes[mode][-1]
        s = self.serial_fraction(mode)
        what = "scaled speedup" if mode == "weak" else "speedup"
        return (f"{mode} scaling to {fmt_int(last['world_size'])} ranks: {what} "
                f"{fmt_num(last['speedup'])} (efficiency {fmt_ratio(last['efficiency'])})"
                + (f", Amdahl serial fraction {s:.3g}" if s is not None else ""))


class OverlapBench:
    """/bench/overlap: one row per (bucket size, overlap on or off)."""

    def __init__(self, rf):
        self.table = rf.table("/bench/overlap")
        self.present = self.table is not None
        self.rows = table_rows(self.table, OVERLAP_OPTIONAL) if self.present else []
        self.buckets = OrderedDict()
        for r in sorted(self.rows, key=lambda r: (r["bucket_bytes"], r["overlap"])):
            self.buckets.setdefault(r["bucket_bytes"], {}).setdefault(int(r["overlap"]), r)

    @property
    def usable(self):
        return bool(self.rows)

    def by_key(self):
        return OrderedDict(((b, o), r) for b, pair in self.buckets.items()
                           for o, r in pair.items())

    def alone(self, bucket):
        """Exposed communication without overlap at this bucket size."""
        pair = self.buckets[bucket]
        for r in pair.values():
            if finite(r["comm_seconds_alone"]):
                return r["comm_seconds_alone"]
        return pair[0]["exposed_comm_seconds"] if 0 in pair else math.nan

    def hidden(self, r):
        """The file's hidden fraction, or 1 - exposed / alone where it has none."""
        if finite(r["hidden_fraction"]):
            return r["hidden_fraction"]
        if int(r["overlap"]) != 1:
            return 0.0
        alone = self.alone(r["bucket_bytes"])
        return 1 - r["exposed_comm_seconds"] / alone if finite(alone) and alone > 0 else math.nan

    def best(self):
        overlapped = [r for r in self.rows if int(r["overlap"]) == 1 and finite(self.hidden(r))]
        return max(overlapped, key=self.hidden) if overlapped else None

    def words(self):
        best = self.best()
        if best is None:
            return "no overlapped row with a hidden fraction"
        b = best["bucket_bytes"]
        return (f"best hidden fraction {fmt_ratio(self.hidden(best))} with {fmt_size(b)} buckets "
                f"(exposed communication {fmt_num(best['exposed_comm_seconds'] * 1e3)} ms "
                f"overlapped, {fmt_num(self.alone(b) * 1e3)} ms without)")


# --------------------------------------------------------------------------------------------
# Plotting

class Plotter:
    """Writes PNG figures into the output directory; everything matplotlib lives here."""

    def __init__(self, outdir):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        self.plt, self.Line2D, self.Patch = plt, Line2D, Patch
        self.outdir = outdir
        self.count = 0
        self.colors = {}
        palette = plt.get_cmap("tab10").colors
        self.palette = [palette[i] for i in (0, 1, 2, 3, 4, 6, 8, 9, 5, 7)]
        for i, a in enumerate(ALGORITHM_ORDER[1:]):
            self.colors[a] = self.palette[i]
        # Fixed per category (not handed out in order of appearance) so that a category has the
        # same colour in every figure and every report. Set2 keeps them apart from the
        # algorithm colours of the collective figures.
        set2 = plt.get_cmap("Set2").colors
        self.memory_colors = {c: set2[i] for i, c in enumerate(MEMORY_CATEGORIES)}
        self.run_colors = [palette[0], palette[1]]  # run A, run B
        plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10,
                             "legend.fontsize": 9, "axes.grid": True, "grid.alpha": 0.3,
                             "grid.linestyle": "-"})

    def color(self, algorithm):
        if algorithm == "native":
            return "black"
        if algorithm not in self.colors:
            self.colors[algorithm] = self.palette[len(self.colors) % len(self.palette)]
        return self.colors[algorithm]

    def style(self, algorithm):
        if algorithm == "native":
            return dict(color="black", linewidth=2.8, zorder=4)
        return dict(color=self.color(algorithm), linewidth=1.6, zorder=3)

    def save(self, fig, name, legend_rows=1, suptitle=True):
        height = fig.get_size_inches()[1]
        bottom = min(0.35, (0.12 + 0.24 * legend_rows) / height) if legend_rows else 0
        top = 1 - 0.4 / height if suptitle else 1
        fig.tight_layout(rect=[0, bottom, 1, top])
        fname = f"fig{self.count:03d}_{slug(name)}.png"
        self.count += 1
        fig.savefig(os.path.join(self.outdir, fname), dpi=100)
        self.plt.close(fig)
        return fname

    @staticmethod
    def size_axis(ax, sizes):
        sizes = [s for s in sizes if s > 0]
        ax.set_xscale("log", base=2)
        if not sizes:
            return
        k0 = math.floor(math.log2(min(sizes)))
        k1 = math.ceil(math.log2(max(sizes)))
        step = max(1, math.ceil((k1 - k0) / 8))
        ticks = [2.0 ** k for k in range(k0, k1 + 1, step)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_size(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlim(2.0 ** k0 / 1.3, 2.0 ** k1 * 1.3)

    @staticmethod
    def positive(xs, ys):
        pts = [(x, y) for x, y in zip(xs, ys) if finite(x) and finite(y) and x > 0 and y > 0]
        return [p[0] for p in pts], [p[1] for p in pts]

    def legend(self, fig, handles, most=5):
        ncol = max(1, min(len(handles), most))
        fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False,
                   bbox_to_anchor=(0.5, 0.0))
        return math.ceil(len(handles) / ncol) if handles else 0

    def collective_group(self, title, by_algo, host_bw):
        """by_algo: [(algorithm, rows sorted by size)]. Two panels: busbw and latency."""
        plt = self.plt
        fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(12, 5.0))
        handles, has_pred, has_band = [], False, False
        all_sizes = []
        for algo, rows in by_algo:
            st = self.style(algo)
            sizes = [r["size_bytes"] for r in rows]
            all_sizes += sizes
            x, y = self.positive(sizes, [r["busbw_GBps"] for r in rows])
            ax_bw.plot(x, y, marker="o", markersize=3, label=algo, **st)
            x, y = self.positive(sizes, [r["predicted_busbw_GBps"] for r in rows])
            if len(x) > 1:
                ax_bw.plot(x, y, linestyle=":", linewidth=1.0, color=st["color"], zorder=2)
                has_pred = True
            x, y = self.positive(sizes, [r["time_us"] for r in rows])
            ax_t.plot(x, y, marker="o", markersize=3, **st)
            band = [(r["size_bytes"], r["time_p50_us"], r["time_p95_us"]) for r in rows
                    if r["size_bytes"] > 0 and finite(r["time_p50_us"]) and finite(r["time_p95_us"])
                    and r["time_p50_us"] > 0 and r["time_p95_us"] > 0]
            if len(band) > 1:
                ax_t.fill_between([b[0] for b in band], [b[1] for b in band],
                                  [b[2] for b in band], color=st["color"], alpha=0.15,
                                  linewidth=0, zorder=1)
                has_band = True
            x, y = self.positive(sizes, [r["predicted_time_us"] for r in rows])
            if len(x) > 1:
                ax_t.plot(x, y, linestyle=":", linewidth=1.0, color=st["color"], zorder=2)
            handles.append(self.Line2D([], [], marker="o", markersize=3, label=algo, **st))
        if host_bw:
            ax_bw.axhline(host_bw, color="0.45", linestyle="--", linewidth=1.2, zorder=1)
            handles.append(self.Line2D([], [], color="0.45", linestyle="--",
                                       label=f"host memcpy {host_bw:.3g} GB/s"))
        if has_pred:
            handles.append(self.Line2D([], [], color="0.3", linestyle=":",
                                       label="alpha-beta prediction"))
        if has_band:
            handles.append(self.Patch(color="0.3", alpha=0.2, label="p50–p95 time"))
        for ax in (ax_bw, ax_t):
            self.size_axis(ax, all_sizes)
            ax.set_yscale("log")
            ax.set_xlabel("size (bytes)")
        ax_bw.set_ylabel("busbw (GB/s)")
        ax_bw.set_title("bus bandwidth (higher is better)")
        ax_t.set_ylabel("time (us)")
        ax_t.set_title("time per operation (lower is better)")
        fig.suptitle(title, fontsize=12, fontweight="bold")
        rows = self.legend(fig, handles)
        return self.save(fig, "coll_" + title, rows)

    def comparison_group(self, title, by_algo, labels, host_bws):
        """by_algo: [(algorithm, rows_a, rows_b)] rows sorted by size. busbw + ratio panels."""
        plt = self.plt
        fig, (ax_bw, ax_r) = plt.subplots(1, 2, figsize=(12, 5.0))
        handles, all_sizes, ratio_vals = [], [], []
        for algo, rows_a, rows_b in by_algo:
            st = self.style(algo)
            for rows, ls in ((rows_a, "-"), (rows_b, "--")):
                sizes = [r["size_bytes"] for r in rows]
                all_sizes += sizes
                x, y = self.positive(sizes, [r["busbw_GBps"] for r in rows])
                if x:
                    ax_bw.plot(x, y, marker="o", markersize=3, linestyle=ls, **st)
            bmap = {r["size_bytes"]: r["busbw_GBps"] for r in rows_b}
            pts = [(r["size_bytes"], bmap[r["size_bytes"]] / r["busbw_GBps"]) for r in rows_a
                   if r["size_bytes"] in bmap and finite(r["busbw_GBps"]) and r["busbw_GBps"] > 0
                   and finite(bmap[r["size_bytes"]]) and r["size_bytes"] > 0]
            if pts:
                ax_r.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                          **st)
                ratio_vals += [p[1] for p in pts]
            handles.append(self.Line2D([], [], label=algo, **st))
        styles = [("-", "solid"), ("--", "dashed")]
        for (ls, word), label, hb in zip(styles, labels, host_bws):
            handles.append(self.Line2D([], [], color="0.3", linestyle=ls,
                                       label=f"{label} ({word})"))
            if hb:
                ax_bw.axhline(hb, color="0.6", linestyle=ls, linewidth=1.0, zorder=1)
        if any(host_bws):
            handles.append(self.Line2D([], [], color="0.6", linewidth=1.0,
                                       label="host memcpy (grey)"))
        for ax in (ax_bw, ax_r):
            self.size_axis(ax, all_sizes)
            ax.set_xlabel("size (bytes)")
        ax_bw.set_yscale("log")
        ax_bw.set_ylabel("busbw (GB/s)")
        ax_bw.set_title("bus bandwidth")
        ax_r.axhline(1.0, color="0.3", linewidth=1.0, zorder=1)
        good = [v for v in ratio_vals if finite(v) and v > 0]
        if good and (max(good) / min(good) > 20):
            ax_r.set_yscale("log")
        ax_r.set_ylabel(f"busbw ratio {labels[1]} / {labels[0]}")
        ax_r.set_title("B / A (above 1: B faster)")
        fig.suptitle(title, fontsize=12, fontweight="bold")
        rows = self.legend(fig, handles)
        return self.save(fig, "cmp_" + title, rows)

    def slow_rank_summary(self, rel, slowest, rank_hosts, n_rows):
        plt = self.plt
        ranks = sorted(rel)
        fig, ax = plt.subplots(figsize=(max(6, min(14, 0.35 * len(ranks) + 3)), 4.2))
        host_list = list(OrderedDict.fromkeys(rank_hosts.get(r, "?") for r in ranks))
        hcolor = {h: self.palette[i % len(self.palette)] for i, h in enumerate(host_list)}
        worst = max(ranks, key=lambda r: rel[r])
        bars = ax.bar(range(len(ranks)), [rel[r] for r in ranks],
                      color=[hcolor[rank_hosts.get(r, "?")] for r in ranks],
                      edgecolor=["red" if r == worst else "none" for r in ranks], linewidth=2)
        del bars
        ax.axhline(1.0, color="0.3", linewidth=1.0)
        lo = min(rel.values())
        ax.set_ylim(min(0.9, lo - 0.02), max(rel.values()) * 1.05)
        step = max(1, math.ceil(len(ranks) / 32))
        shown = list(range(0, len(ranks), step))
        ax.set_xticks(shown)
        if len(ranks) <= 16:
            ax.set_xticklabels([f"{ranks[i]}\n{rank_hosts.get(ranks[i], '')}" for i in shown])
        else:
            ax.set_xticklabels([str(ranks[i]) for i in shown])
        ax.set_xlabel("rank")
        ax.set_ylabel("rank time / median rank time")
        ax.set_title(f"Rank time relative to the median rank, at each group's largest size\n"
                     f"(mean over {n_rows} rows; red edge: slowest rank, {worst})")
        handles = [self.Patch(color=hcolor[h], label=h) for h in host_list[:10]]
        rows = self.legend(fig, handles) if len(host_list) > 1 else 0
        return self.save(fig, "slow_ranks", rows, suptitle=False)

    def slow_rank_detail(self, panels, rank_hosts):
        """panels: [(title, [(algorithm, {rank: time})])] one subplot each. Each rank's time is
        shown relative to the median rank of the same row, as a deviation from 1."""
        plt = self.plt
        n = len(panels)
        ncols = 2 if n > 1 else 1
        nrows = math.ceil(n / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(12, 3.4 * nrows + 0.8), squeeze=False)
        algos_seen = []
        for ax, (title, series) in zip(axes.flat, panels):
            ranks = sorted({r for _, times in series for r in times})
            width = 0.8 / max(1, len(series))
            for j, (algo, times) in enumerate(series):
                if algo not in algos_seen:
                    algos_seen.append(algo)
                med = median(list(times.values()))
                rel = [times[r] / med if r in times and med > 0 else math.nan for r in ranks]
                color = self.color(algo) if algo != "native" else "0.15"
                if len(ranks) <= 16:
                    xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(ranks))]
                    ax.bar(xs, [v - 1 for v in rel], bottom=1.0, width=width, color=color)
                else:
                    ax.plot(range(len(ranks)), rel, marker="o", markersize=2.5, linewidth=1.0,
                            color=color)
            ax.axhline(1.0, color="0.3", linewidth=0.8)
            step = max(1, math.ceil(len(ranks) / 16))
            shown = list(range(0, len(ranks), step))
            ax.set_xticks(shown)
            if len(ranks) <= 16:
                ax.set_xticklabels([f"{ranks[i]}\n{rank_hosts.get(ranks[i], '')}" for i in shown],
                                   fontsize=8)
            else:
                ax.set_xticklabels([str(ranks[i]) for i in shown], fontsize=8)
                ax.set_xlabel("rank", fontsize=9)
            ax.set_ylabel("time / median rank")
            ax.set_title(title, fontsize=10)
            ax.grid(axis="x", visible=False)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        handles = [self.Patch(color=self.color(a) if a != "native" else "0.15", label=a)
                   for a in algos_seen]
        fig.suptitle("Per-rank time at the largest size, relative to the median rank "
                     "(above 1: slower)", fontsize=12, fontweight="bold")
        rows = self.legend(fig, handles)
        return self.save(fig, "slow_rank_detail", rows)

    def point_to_point(self, runs):
        """runs: [(label, P2P, linestyle)]."""
        plt = self.plt
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        handles = []
        for i, (label, p2p, ls) in enumerate(runs):
            color = self.palette[i]
            x, y = self.positive([p[0] for p in p2p.points], [p[1] for p in p2p.points])
            if x:
                ax.plot(x, y, marker="o", markersize=4, linestyle="none", color=color)
            if p2p.alpha is not None and p2p.beta is not None and x:
                xs = [2.0 ** (k / 4) for k in range(int(4 * math.log2(min(x))),
                                                    int(4 * math.log2(max(x))) + 1)]
                fit = [p2p.alpha + p2p.beta * s for s in xs]
                fx, fy = self.positive(xs, fit)
                ax.plot(fx, fy, linestyle=ls, color=color, linewidth=1.3)
            handles.append(self.Line2D([], [], marker="o", markersize=4, linestyle=ls,
                                       color=color, label=f"{label}: {p2p.text()}"))
        self.size_axis(ax, [p[0] for _, p2p, _ in runs for p in p2p.points])
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("half round-trip time (us)")
        ax.set_title("Ping-pong rank 0 <-> rank 1 (points) and alpha + beta·size fit (line)")
        fig.legend(handles=handles, loc="lower center", ncol=1, frameon=False)
        return self.save(fig, "point_to_point", len(handles) + 0.3, suptitle=False)

    @staticmethod
    def model_figsize(n_bars):
        return (max(6.5, min(14, 1.1 * n_bars + 3)), 4.8)

    @staticmethod
    def log_if_wide(ax, values):
        """Log scale when positive values span more than 20x (a tiny and a large model)."""
        good = [v for v in values if finite(v) and v > 0]
        if good and max(good) / min(good) > 20:
            ax.set_yscale("log")
            return True
        return False

    def whiskers(self, ax, xs, spreads):
        """Min-max whiskers over ranks; returns whether any was drawn."""
        pts = [(x, s) for x, s in zip(xs, spreads)
               if s[3] > 1 and finite(s[0]) and finite(s[1]) and finite(s[2])]
        if not pts:
            return False
        ax.errorbar([x for x, _ in pts], [s[0] for _, s in pts],
                    yerr=[[s[0] - s[1] for _, s in pts], [s[2] - s[0] for _, s in pts]],
                    fmt="none", ecolor="black", elinewidth=1.2, capsize=5, zorder=4)
        return True

    def model_bars(self, name, labels, spreads, ylabel, title, fmt, reference=None):
        """One bar per model at the mean over ranks, whiskers to the min and max rank.
        reference: (y, label) for a horizontal line that the axis keeps in view."""
        plt = self.plt
        fig, ax = plt.subplots(figsize=self.model_figsize(len(labels)))
        xs = list(range(len(labels)))
        means = [s[0] if finite(s[0]) else 0.0 for s in spreads]
        ax.bar(xs, means, width=0.6, color=self.run_colors[0], zorder=3)
        handles = [self.Patch(color=self.run_colors[0], label="mean over ranks")]
        if self.whiskers(ax, xs, spreads):
            handles.append(self.Line2D([], [], color="black", marker="_", markersize=10,
                                       label="min–max over ranks"))
        tops = [s[2] if finite(s[2]) else s[0] for s in spreads]
        log = self.log_if_wide(ax, tops)
        if reference is not None:
            y, text = reference
            ax.axhline(y, color="0.3", linestyle="--", linewidth=1.2, zorder=2)
            handles.append(self.Line2D([], [], color="0.3", linestyle="--", label=text))
            tops.append(y)
        top = max([t for t in tops if finite(t)] or [1.0])
        if not log:
            ax.set_ylim(0, top * 1.15)
        for x, s in zip(xs, spreads):
            if finite(s[0]):
                # Above the whisker, so the label never sits on it.
                y = s[2] if s[3] > 1 and finite(s[2]) else s[0]
                ax.annotate(fmt(s[0]), (x, y), xytext=(0, 3), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8, zorder=5)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels)
        ax.grid(axis="x", visible=False)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        rows = self.legend(fig, handles, most=3)
        return self.save(fig, name, rows, suptitle=False)

    def model_memory(self, labels, peaks, categories):
        """Stacked bars of peak bytes per category, one bar per model."""
        plt = self.plt
        fig, ax = plt.subplots(figsize=self.model_figsize(len(labels)))
        totals = [sum(p.get(c, 0) for c in categories) for p in peaks]
        unit, scale = self.byte_unit(max(totals or [0]))
        xs = list(range(len(labels)))
        bottom = [0.0] * len(labels)
        handles = []
        for c in categories:
            vals = [p.get(c, 0) / scale for p in peaks]
            ax.bar(xs, vals, bottom=bottom, width=0.6, color=self.memory_colors[c], zorder=3)
            bottom = [b + v for b, v in zip(bottom, vals)]
            handles.append(self.Patch(color=self.memory_colors[c], label=c))
        for x, t in zip(xs, totals):
            ax.annotate(fmt_size(t), (x, t / scale), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)
        ax.set_ylim(0, max(bottom or [1.0]) * 1.15 or 1.0)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels)
        ax.grid(axis="x", visible=False)
        ax.set_ylabel(f"peak bytes during the steps ({unit})")
        ax.set_title("Peak memory of a training step by category (largest rank)")
        rows = self.legend(fig, handles, most=3)  # long category names: 3 fit a narrow figure
        return self.save(fig, "model_memory", rows, suptitle=False)

    def model_comparison(self, labels, spreads_a, spreads_b, run_labels):
        """Grouped bars of tokens/s per model, run A beside run B, whiskers over ranks."""
        plt = self.plt
        fig, ax = plt.subplots(figsize=self.model_figsize(2 * len(labels)))
        xs = list(range(len(labels)))
        width = 0.38
        handles = []
        tops = []
        for j, (spreads, run) in enumerate(((spreads_a, run_labels[0]),
                                            (spreads_b, run_labels[1]))):
            bx = [x + (j - 0.5) * width for x in xs]
            ax.bar(bx, [s[0] if finite(s[0]) else 0.0 for s in spreads], width=width,
                   color=self.run_colors[j], zorder=3)
            self.whiskers(ax, bx, spreads)
            handles.append(self.Patch(color=self.run_colors[j], label=run))
            tops += [s[2] if finite(s[2]) else s[0] for s in spreads]
        log = self.log_if_wide(ax, tops)
        if not log:
            ax.set_ylim(0, max([t for t in tops if finite(t)] or [1.0]) * 1.18)
        for x, a, b in zip(xs, spreads_a, spreads_b):
            r = ratio_of(b[0], a[0])
            top = max(v for v in (a[0], a[2], b[0], b[2], 0.0) if finite(v))
            if finite(r) and top > 0:
                ax.annotate(f"B/A {r:.3f}", (x, top), xytext=(0, 4), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels)
        ax.grid(axis="x", visible=False)
        ax.set_ylabel("tokens/s per rank")
        ax.set_title("Training-step throughput per model (mean over ranks; whiskers min–max)")
        rows = self.legend(fig, handles)
        return self.save(fig, "model_compare_tokens", rows, suptitle=False)

    @staticmethod
    def byte_unit(largest):
        """(unit, scale) for an axis of bytes whose largest value is `largest`."""
        for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if largest >= scale:
                return unit, scale
        return "B", 1

    @staticmethod
    def world_axis(ax, sizes):
        """Integer ticks at the measured world sizes (at most about 12)."""
        sizes = sorted(set(int(s) for s in sizes))
        step = max(1, math.ceil(len(sizes) / 12))
        ax.set_xticks(sizes[::step])
        ax.set_xlabel("world size (ranks)")

    def zero_memory(self, precision, panels, categories):
        """One panel per strategy: per world size, stacked bars of the measured peak bytes per
        category (model states solid, the rest hatched and lighter on top) and the formula's
        model-state bytes as diamonds. The panels share the y axis, so ZeRO's saving shows."""
        plt = self.plt
        n = len(panels)
        width = max(len(points) for _, points in panels)
        fig, axes = plt.subplots(1, n, figsize=(max(6.5, min(16, (0.5 * width + 1.6) * n + 1)),
                                                4.8), sharey=True, squeeze=False)
        # Without the per-category columns the measured model state is one grey bar.
        whole_state = not any(c in MODEL_STATE_CATEGORIES for c in categories)
        tops = [sum(p["categories"].get(c, 0) for c in categories)
                + (p["model_state"] if whole_state else 0)
                for _, points in panels for p in points]
        tops += [p[k] for _, points in panels for p in points for k in ("formula", "paper")
                 if finite(p[k])]
        unit, scale = self.byte_unit(max(tops or [0]))
        paper_differs = False
        for ax, (strategy, points) in zip(axes[0], panels):
            xs = list(range(len(points)))
            bottom = [0.0] * len(points)
            if whole_state:
                bottom = [p["model_state"] / scale for p in points]
                ax.bar(xs, bottom, width=0.65, color="0.65", zorder=3)
            for c in categories:
                vals = [p["categories"].get(c, 0) / scale for p in points]
                if c in MODEL_STATE_CATEGORIES:
                    ax.bar(xs, vals, bottom=bottom, width=0.65, color=self.memory_colors[c],
                           zorder=3)
                else:
                    ax.bar(xs, vals, bottom=bottom, width=0.65, color=self.memory_colors[c],
                           alpha=0.45, hatch="//", edgecolor="0.45", linewidth=0, zorder=3)
                bottom = [b + v for b, v in zip(bottom, vals)]
            fx = [x for x, p in zip(xs, points) if finite(p["formula"])]
            ax.plot(fx, [p["formula"] / scale for p in points if finite(p["formula"])],
                    linestyle="none", marker="D", markersize=6, color="black", zorder=5)
            # Padding adds at most N-1 elements per unit: the paper's cross is drawn only where
            # it would not hide under the diamond.
            visible = 0.01 * max(tops or [0])
            paper = [(x, p["paper"]) for x, p in zip(xs, points) if finite(p["paper"])
                     and finite(p["formula"]) and abs(p["paper"] - p["formula"]) > visible]
            if paper:
                paper_differs = True
                ax.plot([x for x, _ in paper], [y / scale for _, y in paper], linestyle="none",
                        marker="x", markersize=7, color="0.35", zorder=5)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(p["world_size"]) for p in points])
            ax.set_xlabel("world size (ranks)")
            ax.grid(axis="x", visible=False)
            ax.set_title(strategy)
        axes[0][0].set_ylabel(f"bytes per rank ({unit})")
        axes[0][0].set_ylim(0, max(tops or [1]) / scale * 1.12 or 1.0)
        handles = [self.Patch(color=self.memory_colors[c], label=c) for c in categories
                   if c in MODEL_STATE_CATEGORIES]
        if whole_state:
            handles.append(self.Patch(color="0.65", label="model state (measured)"))
        handles += [self.Patch(facecolor=self.memory_colors[c], alpha=0.45, hatch="//",
                               edgecolor="0.45", linewidth=0, label=f"not model state: {c}")
                    for c in categories if c not in MODEL_STATE_CATEGORIES]
        handles.append(self.Line2D([], [], linestyle="none", marker="D", markersize=6,
                                   color="black", label="formula: model state"))
        if paper_differs:
            handles.append(self.Line2D([], [], linestyle="none", marker="x", markersize=7,
                                       color="0.35", label="paper formula (no padding)"))
        fig.suptitle("Peak bytes per rank during a training step"
                     + (f", {precision}" if precision else "") + " (largest rank per category)",
                     fontsize=12, fontweight="bold")
        rows = self.legend(fig, handles, most=4)
        return self.save(fig, "zero_memory_" + (precision or "all"), rows)

    def zero_bytes_sent(self, panels):
        """panels: [(precision, [(strategy, points by world size)])]. Grouped bars per world
        size, one per strategy, of the bytes a rank sent per step (mean over ranks); the
        formula as a black bar-wide mark on each."""
        plt = self.plt
        n = len(panels)
        fig, axes = plt.subplots(1, n, figsize=(max(7, min(16, 6 * n)), 4.6), squeeze=False)
        values = [v for _, strategies in panels for _, points in strategies for p in points
                  for v in (p["bytes_sent"], p["formula_bytes_sent"]) if finite(v)]
        unit, scale = self.byte_unit(max(values or [0]))
        strategies_seen = []
        for ax, (precision, strategies) in zip(axes[0], panels):
            sizes = sorted({p["world_size"] for _, points in strategies for p in points})
            pos = {s: i for i, s in enumerate(sizes)}
            width = 0.8 / max(1, len(strategies))
            for j, (strategy, points) in enumerate(strategies):
                if strategy not in strategies_seen:
                    strategies_seen.append(strategy)
                xs = [pos[p["world_size"]] + (j - (len(strategies) - 1) / 2) * width
                      for p in points]
                ax.bar(xs, [p["bytes_sent"] / scale if finite(p["bytes_sent"]) else 0.0
                            for p in points], width=width, color=self.strategy_color(strategy),
                       zorder=3)
                fp = [(x, p["formula_bytes_sent"]) for x, p in zip(xs, points)
                      if finite(p["formula_bytes_sent"])]
                ax.plot([x for x, _ in fp], [y / scale for _, y in fp], linestyle="none",
                        marker="_", markersize=max(6, 60 * width), markeredgewidth=2.2,
                        color="black", zorder=5)
            ax.set_xticks(range(len(sizes)))
            ax.set_xticklabels([str(s) for s in sizes])
            ax.set_xlabel("world size (ranks)")
            ax.grid(axis="x", visible=False)
            ax.set_ylabel(f"bytes sent per rank per step ({unit})")
            ax.set_title(precision)
        handles = [self.Patch(color=self.strategy_color(s), label=s) for s in strategies_seen]
        handles.append(self.Line2D([], [], linestyle="none", marker="_", markersize=12,
                                   markeredgewidth=2.2, color="black", label="formula"))
        fig.suptitle("Bytes each rank sends per training step (mean over ranks) and the formula",
                     fontsize=12, fontweight="bold")
        rows = self.legend(fig, handles)
        return self.save(fig, "zero_bytes_sent", rows)

    def strategy_color(self, strategy):
        return self.palette[order_key(strategy, STRATEGY_ORDER)[0] % len(self.palette)]

    def mode_color(self, mode):
        return self.palette[order_key(mode, SCALING_MODE_ORDER)[0] % len(self.palette)]

    def scaling(self, scaling):
        """Speedup against N with the ideal and the Amdahl fit; efficiency; and, when the table
        has them, exposed communication against the alpha-beta prediction."""
        plt = self.plt
        comm = scaling.has_comm()
        fig, axes = plt.subplots(1, 3 if comm else 2, figsize=(15 if comm else 11, 4.8))
        ax_s, ax_e = axes[0], axes[1]
        handles, sizes = [], []
        for mode, rows in scaling.modes.items():
            color = self.mode_color(mode)
            ns = [r["world_size"] for r in rows]
            sizes += ns
            ax_s.plot(ns, [r["speedup"] for r in rows], marker="o", markersize=4, color=color,
                      linewidth=1.8, zorder=4)
            ax_e.plot(ns, [r["efficiency"] for r in rows], marker="o", markersize=4,
                      color=color, linewidth=1.8, zorder=4)
            handles.append(self.Line2D([], [], marker="o", markersize=4, color=color,
                                       label=f"{mode} (measured)"))
            curve = scaling.amdahl_curve(mode)
            if curve is not None:
                ax_s.plot(curve[0], curve[1], linestyle=":", linewidth=1.6, color=color,
                          zorder=3)
                handles.append(self.Line2D([], [], linestyle=":", linewidth=1.6, color=color,
                                           label=f"Amdahl fit, {mode}: s = "
                                                 f"{scaling.serial_fraction(mode):.3g}"))
            if comm:
                ax_c = axes[2]
                ax_c.plot(ns, [r["exposed_comm_seconds"] * 1e3 for r in rows], marker="o",
                          markersize=4, color=color, linewidth=1.8, zorder=4)
                ax_c.plot(ns, [r["predicted_comm_seconds"] * 1e3 for r in rows], marker="o",
                          markersize=5, markerfacecolor="white", linestyle="--", color=color,
                          linewidth=1.2, zorder=3)
        lo, hi = min(sizes), max(sizes)
        ax_s.plot([lo, hi], [lo, hi], color="0.45", linestyle="--", linewidth=1.2, zorder=2)
        handles.insert(0, self.Line2D([], [], color="0.45", linestyle="--",
                                      label="ideal (speedup = N)"))
        ax_s.set_ylabel("speedup (weak: scaled, N·T1/TN)")
        ax_s.set_title("speedup against one rank")
        ax_e.axhline(1.0, color="0.45", linestyle="--", linewidth=1.2, zorder=2)
        top = max([r["efficiency"] for r in scaling.rows if finite(r["efficiency"])] or [1.0])
        ax_e.set_ylim(0, max(1.05, top * 1.08))
        ax_e.set_ylabel("efficiency (strong: T1/(N·TN); weak: T1/TN)")
        ax_e.set_title("parallel efficiency")
        panels = [ax_s, ax_e]
        if comm:
            ax_c = axes[2]
            ax_c.set_ylim(bottom=0)
            ax_c.set_ylabel("communication per step (ms)")
            ax_c.set_title("exposed communication vs alpha-beta")
            handles.append(self.Line2D([], [], marker="o", markersize=5,
                                       markerfacecolor="white", linestyle="--", color="0.3",
                                       label="alpha-beta prediction (ring all-reduce)"))
            panels.append(ax_c)
        for ax in panels:
            self.world_axis(ax, sizes)
        fig.suptitle("Data-parallel scaling", fontsize=12, fontweight="bold")
        rows = self.legend(fig, handles, most=3)
        return self.save(fig, "scaling", rows)

    def overlap(self, overlap):
        """Per bucket size: exposed communication without and with overlap, the hidden
        fraction written over the overlapped bar."""
        plt = self.plt
        buckets = list(overlap.buckets)
        fig, ax = plt.subplots(figsize=self.model_figsize(2 * len(buckets)))
        width = 0.38
        xs = list(range(len(buckets)))
        tops = []
        handles = []
        for j, (flag, label) in enumerate(((0, "without overlap"), (1, "with overlap"))):
            bx = [x + (j - 0.5) * width for x in xs]
            vals = [overlap.buckets[b][flag]["exposed_comm_seconds"] * 1e3
                    if flag in overlap.buckets[b] else math.nan for b in buckets]
            ax.bar(bx, [v if finite(v) else 0.0 for v in vals], width=width,
                   color=self.run_colors[j], zorder=3)
            handles.append(self.Patch(color=self.run_colors[j], label=label))
            tops += [v for v in vals if finite(v)]
            if flag == 1:
                for x, b, v in zip(bx, buckets, vals):
                    if finite(v) and 1 in overlap.buckets[b]:
                        hidden = overlap.hidden(overlap.buckets[b][1])
                        if finite(hidden):
                            ax.annotate(f"hidden {hidden:.2f}", (x, v), xytext=(0, 3),
                                        textcoords="offset points", ha="center",
                                        va="bottom", fontsize=8, zorder=5)
        ax.set_ylim(0, max(tops or [1.0]) * 1.18 or 1.0)
        ax.set_xticks(xs)
        counts = [next(iter(overlap.buckets[b].values()))["buckets"] for b in buckets]
        ax.set_xticklabels([fmt_size(b) + (f"\n{c} bucket{'s' if c != 1 else ''}" if c > 0 else "")
                            for b, c in zip(buckets, counts)])
        ax.set_xlabel("gradient bucket size")
        ax.grid(axis="x", visible=False)
        ax.set_ylabel("exposed communication per step (ms)")
        ax.set_title("Gradient all-reduce overlapped with backward")
        rows = self.legend(fig, handles)
        return self.save(fig, "overlap", rows, suptitle=False)

    def scaling_comparison(self, scalings, run_labels):
        """Step time against N per mode, run A solid, run B dashed."""
        plt = self.plt
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        handles, sizes = [], []
        modes = list(OrderedDict.fromkeys(m for s in scalings for m in s.modes))
        for mode in modes:
            color = self.mode_color(mode)
            for scaling, ls in zip(scalings, ("-", "--")):
                rows = scaling.modes.get(mode, [])
                ns = [r["world_size"] for r in rows]
                sizes += ns
                ax.plot(ns, [r["step_seconds"] * 1e3 for r in rows], marker="o", markersize=4,
                        linestyle=ls, color=color, linewidth=1.6)
            handles.append(self.Line2D([], [], color=color, label=mode))
        for (ls, word), label in zip((("-", "solid"), ("--", "dashed")), run_labels):
            handles.append(self.Line2D([], [], color="0.3", linestyle=ls,
                                       label=f"{label} ({word})"))
        self.world_axis(ax, sizes)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("step time (ms, slowest rank)")
        ax.set_title("Data-parallel step time per world size, run A and run B")
        rows = self.legend(fig, handles, most=2)
        return self.save(fig, "scaling_compare", rows, suptitle=False)


# --------------------------------------------------------------------------------------------
# HTML

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em auto;
       max-width: 1250px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; font-size: 0.86em; }
th, td { border: 1px solid #d4d4d4; padding: 0.15em 0.5em; vertical-align: top; }
th { background: #f0f0f0; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
tr.native td { font-weight: 600; }
.bad { color: #b00020; font-weight: 600; }
.good { color: #1b6e20; font-weight: 600; }
.note { color: #666; font-style: italic; }
.diff td { background: #fff4d6 !important; }
img { max-width: 100%; border: 1px solid #eee; }
code, .mono { font-family: Menlo, Consolas, monospace; font-size: 0.92em; }
details { margin: 0.3em 0 1em 0; }
summary { cursor: pointer; color: #245; }
ul.glance li { margin: 0.15em 0; }
nav a { margin-right: 1em; }
td.msg { font-family: Menlo, Consolas, monospace; font-size: 0.9em; white-space: pre-wrap;
         max-width: 60em; }
"""


class Page:
    def __init__(self, title):
        self.parts = []
        self.title = title

    def add(self, text):
        self.parts.append(text)

    def p(self, text, cls=None):
        self.add(f"<p class=\"{cls}\">{text}</p>" if cls else f"<p>{text}</p>")

    def note(self, text):
        self.p(esc(text), "note")

    def img(self, fname, alt):
        self.add(f"<p><img src=\"{esc(fname)}\" alt=\"{esc(alt)}\"></p>")

    def table(self, header, rows, numeric=(), row_classes=None):
        """header: list of str; rows: list of lists of already-escaped cell html."""
        out = ["<table><thead><tr>"]
        for i, h in enumerate(header):
            out.append(f"<th class=\"num\">{esc(h)}</th>" if i in numeric else f"<th>{esc(h)}</th>")
        out.append("</tr></thead><tbody>")
        for j, row in enumerate(rows):
            cls = row_classes[j] if row_classes else ""
            out.append(f"<tr class=\"{cls}\">" if cls else "<tr>")
            for i, cell in enumerate(row):
                out.append(f"<td class=\"num\">{cell}</td>" if i in numeric else f"<td>{cell}</td>")
            out.append("</tr>")
        out.append("</tbody></table>")
        self.add("".join(out))

    def details(self, summary, body_fn):
        self.add(f"<details><summary>{esc(summary)}</summary>")
        body_fn()
        self.add("</details>")

    def render(self):
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{esc(self.title)}</title><style>{CSS}</style></head><body>\n"
                f"<h1>{esc(self.title)}</h1>\n" + "\n".join(self.parts) + "\n</body></html>\n")


# --------------------------------------------------------------------------------------------
# Single-run report

def provenance_section(page, rf):
    page.add("<h2 id=\"provenance\">Provenance</h2>")
    names = [n for n in PROVENANCE_ORDER if n in rf.attrs] + \
        sorted(n for n in rf.attrs if n not in PROVENANCE_ORDER)
    rows = []
    for n in names:
        cell = esc(attr_text(n, rf.attrs[n]))
        rows.append([f"<span class=\"mono\">{esc(n)}</span>", cell])
    missing = [n for n in PROVENANCE_ORDER if n not in rf.attrs]
    page.table(["attribute", "value"], rows)
    if missing:
        page.note("Attributes the schema lists but this file lacks: " + ", ".join(missing) + ".")
    if rf.other_tables:
        page.note("Other tables in the file (not shown): " + ", ".join(rf.other_tables) + ".")


def group_table(page, bench, key, rows):
    header = ["size (B)", "count", "algorithm", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
              "#wrong", "p50 (us)", "p95 (us)", "min rank (us)", "max rank (us)",
              "pred. busbw (GB/s)", "busbw / native"]
    numeric = {0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
    body, classes = [], []
    for r in sorted(rows, key=lambda r: (r["size_bytes"],
                                         order_key(r["algorithm"], ALGORITHM_ORDER))):
        wrong = fmt_wrong(r["wrong"])
        if wrong not in ("0", "n/c", "–"):
            wrong = f"<span class=\"bad\">{wrong}</span>"
        body.append([fmt_int(r["size_bytes"]), fmt_int(r["count"]), esc(r["algorithm"]),
                     fmt_time(r["time_us"]), fmt_num(r["algbw_GBps"]), fmt_num(r["busbw_GBps"]),
                     wrong, fmt_time(r["time_p50_us"]), fmt_time(r["time_p95_us"]),
                     fmt_time(r["time_min_rank_us"]), fmt_time(r["time_max_rank_us"]),
                     fmt_num(r["predicted_busbw_GBps"]), fmt_ratio(bench.native_ratio(key, r))])
        classes.append("native" if r["algorithm"] == "native" else "")
    page.table(header, body, numeric, classes)


def by_algorithm(rows):
    algos = defaultdict(list)
    for r in rows:
        algos[r["algorithm"]].append(r)
    return [(a, sorted(algos[a], key=lambda r: r["size_bytes"]))
            for a in sorted(algos, key=lambda a: order_key(a, ALGORITHM_ORDER))]


def best_table(page, best):
    rows = []
    for (coll, algo), key, r, ratio in best:
        rows.append([esc(coll), esc(algo), esc(fmt_size(r["size_bytes"])),
                     esc(f"{r['dtype']} {r['redop']} {placement(r['in_place'])}"),
                     fmt_num(r["busbw_GBps"]), fmt_ratio(ratio)])
    page.table(["collective", "algorithm", "largest size", "best at", "busbw (GB/s)",
                "busbw / native"], rows, numeric={4, 5})


def collectives_section(page, rf, bench, plotter, max_plots):
    page.add("<h2 id=\"collectives\">Collective benchmark</h2>")
    if not bench.present:
        page.note("This file has no /bench/collectives table "
                  "(no collective benchmark in this run).")
        return
    if bench.missing:
        page.note("/bench/collectives lacks required column(s) " + ", ".join(bench.missing)
                  + "; it cannot be shown.")
        return
    if not bench.rows:
        page.note("/bench/collectives is present but has 0 rows.")
        return
    host_bw = host_copy_bw(rf)
    page.p(f"{len(bench.rows)} rows in {len(bench.groups)} groups (collective, type, reduction, "
           "placement). Lines: one per algorithm; <b>native</b> (thick, black) is the backend's "
           "own collective and the baseline. Dotted: alpha-beta prediction; shaded: p50–p95 of "
           "the slowest rank's time" + (f"; dashed grey: host memcpy bandwidth "
                                        f"({host_bw:.3g} GB/s)" if host_bw else "") + ". "
           "#wrong “n/c”: not checked.")
    if host_bw is None:
        page.note("No /host/copy_bandwidth table: no memcpy reference line.")
    page.add("<h3>Best busbw at the largest size</h3>")
    best_table(page, bench.best_at_largest())
    plotted, skipped_budget = 0, 0
    for key, rows in bench.groups.items():
        title = bench.title(key)
        page.add(f"<h3 id=\"g-{esc(slug(title))}\">{esc(title)}</h3>")
        sizes = {r["size_bytes"] for r in rows}
        if len(sizes) < 2:
            page.note(f"Only one size ({fmt_size(next(iter(sizes)))}): table only, no plot.")
        elif plotted >= max_plots:
            skipped_budget += 1
            page.note(f"Plot left out (more than --max-plots {max_plots} groups).")
        else:
            fname = plotter.collective_group(title, by_algorithm(rows), host_bw)
            page.img(fname, f"busbw and latency vs size, {title}")
            plotted += 1
        page.details(f"Table: {len(rows)} rows",
                     lambda rows=rows, key=key: group_table(page, bench, key, rows))
    if skipped_budget:
        page.note(f"{skipped_budget} group plot(s) left out to keep the page bounded.")


def slow_rank_section(page, rf, bench, plotter):
    page.add("<h2 id=\"slow-ranks\">Slow ranks</h2>")
    sr = SlowRanks(rf, bench)
    if not sr.present:
        page.note("This file has no /bench/collectives_rank_times table.")
        return sr
    if sr.missing:
        page.note("/bench/collectives_rank_times lacks column(s) " + ", ".join(sr.missing) + ".")
        return sr
    if not bench.usable:
        page.note("No collective benchmark rows to attribute rank times to.")
        return sr
    if sr.bad_refs:
        page.note(f"{sr.bad_refs} rank-time rows refer to rows outside /bench/collectives; "
                  "ignored.")
    if not sr.entries:
        page.note("No per-rank times for the largest sizes.")
        return sr
    rel, slowest = sr.relative()
    hosts = sr.rank_hosts()
    if rel:
        worst = max(rel, key=rel.get)
        page.p(f"Over the {len(sr.entries)} rows at each group's largest size, the slowest rank "
               f"is <b>rank {worst}</b> (host <b>{esc(hosts.get(worst, '?'))}</b>): on average "
               f"{rel[worst]:.2f}× the median rank's time, and the slowest rank in "
               f"{slowest.get(worst, 0)} of {len(sr.entries)} rows.")
        page.img(plotter.slow_rank_summary(rel, slowest, hosts, len(sr.entries)),
                 "per-rank relative time")
    # One panel per collective (at most 6): its group with the most algorithms.
    per_group = OrderedDict()
    for key, r, times, _ in sr.entries:
        per_group.setdefault(key, []).append((r["algorithm"], times, r["size_bytes"]))
    best_group = {}
    for key, series in per_group.items():
        if key[0] not in best_group or len(series) > len(per_group[best_group[key[0]]]):
            best_group[key[0]] = key
    panels = [(f"{bench.title(key)} at {fmt_size(per_group[key][0][2])}",
               [(a, t) for a, t, _ in per_group[key]]) for key in best_group.values()]
    if panels:
        page.p("Per collective (one group each, at its largest size): every rank's time "
               "relative to the median rank of the same row, per algorithm.")
        page.img(plotter.slow_rank_detail(panels[:6], hosts), "per-rank times per collective")

    def body():
        rows = []
        for key, r, times, rhosts in sr.entries:
            slow = max(times, key=times.get)
            fast = min(times, key=times.get)
            rows.append([esc(bench.title(key)), esc(r["algorithm"]), esc(fmt_size(r["size_bytes"])),
                         f"{slow} ({esc(rhosts.get(slow, '?'))})", fmt_time(times[slow]),
                         f"{fast} ({esc(rhosts.get(fast, '?'))})", fmt_time(times[fast]),
                         fmt_ratio(times[slow] / times[fast] if times[fast] > 0 else math.nan)])
        page.table(["group", "algorithm", "size", "slowest rank (host)", "time (us)",
                    "fastest rank (host)", "time (us)", "slowest / fastest"], rows,
                   numeric={4, 6, 7})
    page.details(f"Table: slowest and fastest rank of each of the {len(sr.entries)} rows", body)
    return sr


def p2p_section(page, runs, plotter):
    """runs: [(label, P2P)]."""
    page.add("<h2 id=\"p2p\">Point-to-point (alpha-beta model)</h2>")
    present = [(l, p) for l, p in runs if p.present]
    for label, p2p in runs:
        if not p2p.present:
            page.note(f"{label}: no /bench/point_to_point table (world size 1, or not measured); "
                      "no alpha-beta constants.")
    if not present:
        return
    rows = []
    for label, p2p in present:
        bw = p2p.bandwidth_GBps
        rows.append([esc(label), fmt_num(p2p.alpha, 3) if p2p.alpha is not None else "–",
                     f"{p2p.beta:.4g}" if p2p.beta is not None else "–",
                     fmt_num(bw) if bw else "–", str(len(p2p.points))])
    page.table(["run", "alpha (us)", "beta (us/B)", "1/beta (GB/s)", "points"], rows,
               numeric={1, 2, 3, 4})
    plottable = [(l, p, ls) for (l, p), ls in zip(present, ("-", "--")) if len(p.points) >= 2]
    if plottable:
        page.img(plotter.point_to_point(plottable), "ping-pong time vs size")
    for label, p2p in present:
        def body(p2p=p2p):
            page.table(["size (B)", "time (us)", "alpha + beta·size (us)"],
                       [[fmt_int(s), fmt_time(t),
                         fmt_time(p2p.alpha + p2p.beta * s)
                         if p2p.alpha is not None and p2p.beta is not None else "–"]
                        for s, t in p2p.points], numeric={0, 1, 2})
        page.details(f"Table: ping-pong points{'' if len(present) == 1 else ' of ' + label}", body)


def check_section(page, check, max_failures):
    page.add("<h2 id=\"conformance\">Conformance</h2>")
    if not check.present:
        page.note("This file has no /check/collectives table (no conformance run).")
        return
    if check.missing:
        page.note("/check/collectives lacks the 'passed' column; it cannot be summarised.")
        return
    cls = "good" if check.failed == 0 else "bad"
    page.p(f"<span class=\"{cls}\">{esc(check.words())}.</span>")
    if not check.total:
        return
    rows = []
    for (coll, algo), (n, ok, bad) in check.cells.items():
        rows.append([esc(coll), esc(algo), str(n), str(ok),
                     f"<span class=\"bad\">{bad}</span>" if bad else "0"])
    rows.append(["<b>total</b>", "", f"<b>{check.total}</b>", f"<b>{check.passed}</b>",
                 f"<b>{check.failed}</b>"])
    page.table(["collective", "algorithm", "cases", "passed", "failed"], rows, numeric={2, 3, 4})
    if check.failures:
        page.add("<h3>Failed cases</h3>")
        shown = check.failures[:max_failures]
        frows = []
        for r in shown:
            guard = "ok" if int(r["guard_ok"]) == 1 else "<span class=\"bad\">clobbered</span>"
            frows.append([f"<span class=\"mono\">{esc(r['case'])}</span>", fmt_wrong(r["wrong"]),
                          guard, fmt_num(r["max_abs_error"], 3), fmt_num(r["tolerance"], 3),
                          esc(r["message"]) if r["message"] else "<span class=\"note\">–</span>"])
        page.table(["case", "wrong", "guard", "max abs error", "tolerance", "message"], frows,
                   numeric={1, 3, 4})
        if len(check.failures) > len(shown):
            page.note(f"{len(check.failures) - len(shown)} more failed cases not listed "
                      f"(--max-failures {max_failures}).")


def mfu_caption(model):
    denominator = model.denominator()
    text = ("MFU = achieved FLOP/s (the step's counted FLOPs / its median step time) divided by "
            "the same rank's matrix-multiply rate measured in the same run (matmul GFLOP/s); ")
    if denominator:
        return text + f"that rate is the {denominator}."
    return text + "the file does not say how that rate was measured (no mfu_denominator)."


def model_section(page, model, plotter):
    """The "Model training step" section; left out entirely when the file has no /bench/model
    (files from before it existed, and subcommands that do not train)."""
    if not model.present:
        return
    page.add("<h2 id=\"model\">Model training step</h2>")
    if not model.usable:
        page.note("/bench/model is present but has 0 rows.")
        return
    a = model.attrs
    nranks = max(m["ranks"] for m in model.models)
    setup = []
    if a.get("optimizer"):
        setup.append(f"optimizer {esc(a['optimizer'])}")
    if finite(a.get("timed_steps")):
        setup.append(f"median of {fmt_int(a['timed_steps'])} timed steps")
    if finite(a.get("warmup_steps")):
        n = fmt_int(a["warmup_steps"])
        setup.append(f"after {n} warm-up step{'' if n == '1' else 's'}")
    if a.get("blas"):
        setup.append(f"BLAS {esc(a['blas'])}")
    page.p("A GPT training step (forward, backward, optimizer step) on every rank, each rank "
           "training its own replica at the same time; one row per model, spreads are over "
           f"its {nranks} rank{'' if nranks == 1 else 's'}"
           + ("; " + ", ".join(setup) if setup else "") + ".")
    rows = []
    for m in model.models:
        rows.append([f"<b>{esc(m['model'])}</b>", f"<span class=\"mono\">{esc(m['config'])}</span>",
                     fmt_count(m["parameters"]),
                     f"{fmt_int(m['batch'])} × {fmt_int(m['sequence'])}",
                     esc(fmt_flops(m["step_flops"])),
                     esc(fmt_spread(m["tokens"], fmt_tokens)),
                     esc(fmt_spread(m["mfu"], fmt_mfu)),
                     esc(fmt_spread(m["matmul"], fmt_num))])
    page.table(["model", "config", "parameters", "batch × sequence", "step FLOPs",
                "tokens/s per rank: mean (min–max)", "MFU: mean (min–max)",
                "matmul GFLOP/s: mean (min–max)"], rows, numeric={2, 3, 4, 5, 6, 7})

    labels = [m["label"] for m in model.models]
    page.p("Throughput: tokens (batch × sequence) per second of one rank's step; bar at the mean "
           "over ranks, whiskers from the slowest to the fastest rank.")
    page.img(plotter.model_bars("model_tokens", labels, [m["tokens"] for m in model.models],
                                "tokens/s per rank", "Training-step throughput per model",
                                fmt_tokens), "tokens per second per model")
    page.p(esc("Model FLOPs utilisation per model (mean over ranks, whiskers min–max). At 1.0 a "
               "step would run at the same-run matrix-multiply rate. " + mfu_caption(model)))
    page.img(plotter.model_bars("model_mfu", labels, [m["mfu"] for m in model.models], "MFU",
                                "Model FLOPs utilisation per model", fmt_mfu,
                                reference=(1.0, "same-run matmul rate")),
             "MFU per model")
    categories = model.memory_categories()
    if categories:
        page.p("Peak bytes allocated from just before the model is built to the end of its "
               "training steps, by category, on the rank with the most: parameters, gradients "
               "and optimizer state are the model states; a category's peak is its own, the "
               "peaks of different categories need not coincide in time.")
        page.img(plotter.model_memory(labels, [m["peaks"] for m in model.models], categories),
                 "peak memory per model by category")
    else:
        page.note("/bench/model has no peak_*_bytes columns: no memory figure.")

    def body():
        body_rows = []
        for m in model.models:
            for r in sorted(m["rows"], key=lambda r: r["rank"]):
                peak = sum(r[f"peak_{c}_bytes"] or 0 for c in MEMORY_CATEGORIES)
                body_rows.append([esc(m["model"]), fmt_int(r["rank"]), esc(r["host"]),
                                  fmt_num(r["step_time_s"] * 1e3, 2)
                                  if finite(r["step_time_s"]) else "–",
                                  fmt_tokens(r["tokens_per_s"]), fmt_num(r["achieved_GFLOPs"]),
                                  fmt_num(r["matmul_GFLOPs"]), fmt_mfu(r["mfu"]),
                                  esc(fmt_size(peak))])
        page.table(["model", "rank", "host", "step time (ms)", "tokens/s", "achieved GFLOP/s",
                    "matmul GFLOP/s", "MFU", "sum of category peaks"], body_rows,
                   numeric={1, 3, 4, 5, 6, 7, 8})
    page.details(f"Table: every rank ({len(model.rows)} rows)", body)


def model_md(model, lead="Model training step"):
    """One line (summary.md, the glance list): per-model tokens/s and MFU, means over ranks."""
    nranks = max(m["ranks"] for m in model.models)
    return f"{lead} (mean over {nranks} rank{'s' if nranks != 1 else ''}): {model.words()}."


def fmt_bytes(x):
    """Whole bytes with thousands separators: '197,520'; '–' for missing."""
    return fmt_count(round(x)) if finite(x) else "–"


def fmt_ms(seconds):
    return fmt_num(seconds * 1e3) if finite(seconds) else "–"


def workload_text(memory):
    text = "; ".join(f"{model} ({config})" if config else str(model)
                     for model, config in memory.workloads() if model or config)
    return text or "the model"


def memory_section(page, memory, plotter):
    """The "ZeRO memory" section; left out entirely when the file has no /bench/memory."""
    if not memory.present:
        return
    page.add("<h2 id=\"memory\">ZeRO memory and communication</h2>")
    if not memory.usable:
        page.note("/bench/memory is present but has 0 rows.")
        return
    page.p(f"Data parallelism (dp) and ZeRO stages 1–3 training {esc(workload_text(memory))} "
           "at every world size measured; one row per rank. "
           f"<span class=\"{'good' if memory.mismatched_rows == 0 else 'bad'}\">"
           f"{esc(capitalized(memory.match_words()))}.</span>")
    formula = memory.attrs.get("model_state_formula")
    page.p("Bars: peak bytes of each category during one training step, on the rank with the "
           "most (per category). Parameters, gradients and optimizer state are the model states "
           "the ZeRO formulas count; activations, communication buffers and workspace (hatched, "
           "lighter) are not model state. Diamonds: the formula's model-state bytes per rank"
           + (f" ({esc(formula)})" if formula else "") + "; crosses, where they differ visibly, "
           "the paper's formula with Psi in place of the padded P.")
    categories = memory.categories()
    for precision in memory.precisions:
        page.img(plotter.zero_memory(precision, memory.panels(precision), categories),
                 f"model-state bytes per rank and strategy, {precision}")
    rows, classes = [], []
    for p in memory.points:
        ok = not p["mismatched"]
        match = "yes" if ok else (f"<span class=\"bad\">no</span> (rank"
                                  f"{'s' if len(p['mismatched']) > 1 else ''} "
                                  f"{compress_ranks(p['mismatched'])})")
        rows.append([esc(p["precision"]), esc(p["strategy"]), fmt_int(p["world_size"]),
                     fmt_count(p["parameters"]) if p["parameters"] >= 0 else "–",
                     fmt_count(p["padded"]) if p["padded"] >= 0 else "–",
                     fmt_bytes(p["model_state"]), fmt_bytes(p["formula"]),
                     fmt_bytes(p["paper"]), esc(fmt_size(p["model_state"])), match])
        classes.append("" if ok else "diff")
    page.table(["precision", "strategy", "world size", "Psi", "P (padded)",
                "model state (B, largest rank)", "formula (B)", "paper formula, Psi (B)",
                "model state", "matches formula"], rows, numeric={2, 3, 4, 5, 6, 7, 8},
               row_classes=classes)
    if memory.has_bytes_sent():
        page.p("Bytes each rank sent in a training step, counted by the communicator (mean over "
               "ranks), against the formula (black marks): 2 Psi (n-1)/n gradient elements for "
               "dp, 2 P (n-1)/n for ZeRO-1 and 2, 3 P (n-1)/n for ZeRO-3 (more when a unit, "
               "such as a tied embedding, is read by two layers).")
        page.img(plotter.zero_bytes_sent([(pr, memory.panels(pr)) for pr in memory.precisions]),
                 "bytes sent per rank and strategy against the formula")

        def sent_body():
            page.table(["precision", "strategy", "world size", "bytes sent (mean over ranks)",
                        "formula", "sent / formula"],
                       [[esc(p["precision"]), esc(p["strategy"]), fmt_int(p["world_size"]),
                         fmt_bytes(p["bytes_sent"]), fmt_bytes(p["formula_bytes_sent"]),
                         fmt_ratio(ratio_of(p["bytes_sent"], p["formula_bytes_sent"]))]
                        for p in memory.points], numeric={2, 3, 4, 5})
        page.details("Table: bytes sent per strategy and world size", sent_body)
    else:
        page.note("/bench/memory has no bytes_sent column: no communication figure.")

    def body():
        body_rows = []
        for p in memory.points:
            for r in sorted(p["rows"], key=lambda r: r["rank"]):
                body_rows.append(
                    [esc(p["precision"]), esc(p["strategy"]), fmt_int(p["world_size"]),
                     fmt_int(r["rank"])]
                    + [fmt_bytes(r[f"{c}_bytes"]) if r[f"{c}_bytes"] is not None else "–"
                       for c in MEMORY_CATEGORIES]
                    + [fmt_bytes(r["model_state_bytes"]),
                       fmt_bytes(r["bytes_sent"]) if r["bytes_sent"] is not None else "–",
                       fmt_ms(r["step_seconds"])])
        page.table(["precision", "strategy", "world size", "rank"] + MEMORY_CATEGORIES
                   + ["model state", "bytes sent", "step time (ms)"], body_rows,
                   numeric=set(range(2, 13)))
    page.details(f"Table: every rank ({len(memory.rows)} rows, bytes)", body)


def precision_words(precision):
    return f" ({precision})" if precision else ""


def memory_md(memory):
    """summary.md lines: model-state bytes at the largest world size, the formula check, and
    bytes sent against the formula."""
    lines = []
    for precision in memory.precisions:
        n, text = memory.at_largest(precision, lambda p: fmt_size(p["model_state"]))
        lines.append(f"- Model-state bytes per rank at {n} ranks{precision_words(precision)}: "
                     f"{text}.")
    lines.append(f"- Model state against the formula: {memory.match_words()}.")
    if memory.has_bytes_sent():
        for precision in memory.precisions:
            n, text = memory.at_largest(
                precision, lambda p: f"{fmt_bytes(p['bytes_sent'])} B "
                                     f"(formula {fmt_bytes(p['formula_bytes_sent'])} B)")
            lines.append(f"- Bytes sent per rank per step at {n} ranks"
                         f"{precision_words(precision)}: {text}.")
    return lines


def scaling_section(page, scaling, plotter):
    """The "Scaling" section; left out entirely when the file has no /bench/scaling."""
    if not scaling.present:
        return
    page.add("<h2 id=\"scaling\">Data-parallel scaling</h2>")
    if not scaling.usable:
        page.note("/bench/scaling is present but has 0 rows.")
        return
    workloads = list(OrderedDict.fromkeys((r["model"], r["config"]) for r in scaling.rows))
    page.p("A data-parallel training step of "
           + esc("; ".join(f"{m} ({c})" if c else str(m) for m, c in workloads))
           + " at every world size. Strong scaling keeps the global batch: speedup T1/TN, "
           "efficiency T1/(N·TN). Weak scaling keeps the rows per rank: scaled speedup "
           "N·T1/TN, efficiency T1/TN. Step time: the median step, slowest rank. Dotted: "
           "Amdahl's law 1/(s + (1-s)/N) fitted to the step times, for each mode the file "
           "fits (parity fits strong scaling only: the law describes a fixed problem). <b>"
           + "; ".join(esc(scaling.words(m)) for m in scaling.modes) + ".</b>")
    if scaling.has_comm():
        ab = scaling.alpha_beta_text()
        page.p("Right: time per step spent waiting for communication, against the alpha-beta "
               "prediction of the gradients' ring all-reduce, 2(n-1)·alpha + "
               "2(n-1)/n·bytes·beta per bucket" + (f"; {esc(ab)}" if ab else "") + ".")
    page.img(plotter.scaling(scaling), "speedup, efficiency and communication against ranks")
    rows = []
    for mode, mode_rows in scaling.modes.items():
        for r in mode_rows:
            rows.append([esc(mode), fmt_int(r["world_size"]), fmt_known(r["global_batch"]),
                         fmt_known(r["rank_batch"]), fmt_ms(r["step_seconds"]),
                         fmt_num(r["speedup"]), fmt_ratio(r["efficiency"]),
                         fmt_num(r["amdahl_speedup"]), fmt_ms(r["exposed_comm_seconds"]),
                         fmt_ms(r["predicted_comm_seconds"]),
                         fmt_count(r["bytes_sent"]) if r["bytes_sent"] >= 0 else "–"])
    page.table(["mode", "world size", "global batch", "rows on rank 0", "step time (ms)",
                "speedup", "efficiency", "Amdahl fit", "exposed comm (ms)",
                "predicted comm (ms)", "bytes sent per rank"], rows,
               numeric=set(range(1, 11)))


def scaling_md(scaling):
    lines = [f"- {capitalized(scaling.words(m))}." for m in scaling.modes]
    ab = scaling.alpha_beta_text()
    if ab:
        lines.append(f"- Alpha-beta constants of the communication prediction: {ab}.")
    return lines


def overlap_section(page, overlap, plotter):
    """The "Overlap" section; left out entirely when the file has no /bench/overlap."""
    if not overlap.present:
        return
    page.add("<h2 id=\"overlap\">Communication overlap</h2>")
    if not overlap.usable:
        page.note("/bench/overlap is present but has 0 rows.")
        return
    worlds = sorted({r["world_size"] for r in overlap.rows if r["world_size"] > 0})
    page.p("The gradients' all-reduce in buckets, issued as each bucket's gradients are ready "
           "(overlapped with the rest of backward) or after backward (not overlapped)"
           + (f", on {', '.join(map(str, worlds))} ranks" if worlds else "") + ". Hidden "
           "fraction: 1 - exposed communication / the same bucket size's communication without "
           f"overlap. <b>{esc(capitalized(overlap.words()))}.</b>")
    page.img(plotter.overlap(overlap), "exposed communication with and without overlap")
    rows = []
    for r in overlap.by_key().values():
        rows.append([esc(fmt_size(r["bucket_bytes"])), fmt_known(r["buckets"]),
                     "yes" if int(r["overlap"]) == 1 else "no", fmt_ms(r["step_seconds"]),
                     fmt_ms(r["compute_seconds"]), fmt_ms(r["exposed_comm_seconds"]),
                     fmt_ms(r["stream_seconds"]), fmt_ms(overlap.alone(r["bucket_bytes"])),
                     fmt_ratio(overlap.hidden(r))])
    page.table(["bucket size", "buckets", "overlap", "step time (ms)", "compute (ms)",
                "exposed comm (ms)", "comm stream busy (ms)", "comm without overlap (ms)",
                "hidden fraction"], rows, numeric={1, 3, 4, 5, 6, 7, 8})


def overlap_md(overlap):
    return [f"- Overlap of the gradient all-reduce with backward: {overlap.words()}."]


def parallel_nav(memories, scalings, overlaps):
    """Navigation links of the sections present in any of the runs."""
    return "".join(f"<a href=\"#{anchor}\">{name}</a>"
                   for benches, anchor, name in ((memories, "memory", "Memory"),
                                                 (scalings, "scaling", "Scaling"),
                                                 (overlaps, "overlap", "Overlap"))
                   if any(b.present for b in benches))


def single_report(rf, label, outdir, title, args):
    plotter = Plotter(outdir)
    bench, check, p2p, model = Bench(rf), Check(rf), P2P(rf), ModelBench(rf)
    memory, scaling, overlap = MemoryBench(rf), ScalingBench(rf), OverlapBench(rf)
    page = Page(title)
    page.add(f"<p class=\"mono\">{esc(label)}</p>")
    page.add("<nav><a href=\"#provenance\">Provenance</a><a href=\"#collectives\">Collectives</a>"
             "<a href=\"#slow-ranks\">Slow ranks</a><a href=\"#p2p\">Point-to-point</a>"
             + ("<a href=\"#model\">Model</a>" if model.present else "")
             + parallel_nav([memory], [scaling], [overlap]) +
             "<a href=\"#conformance\">Conformance</a></nav>")
    glance_at = len(page.parts)
    provenance_section(page, rf)
    collectives_section(page, rf, bench, plotter, args.max_plots)
    sr = slow_rank_section(page, rf, bench, plotter)
    p2p_section(page, [(label, p2p)], plotter)
    model_section(page, model, plotter)
    memory_section(page, memory, plotter)
    scaling_section(page, scaling, plotter)
    overlap_section(page, overlap, plotter)
    check_section(page, check, args.max_failures)

    glance = [f"Conformance: {esc(check.words())}."]
    if bench.usable:
        glance.append(f"Collective benchmark: {len(bench.rows)} rows in {len(bench.groups)} "
                      "groups.")
    else:
        glance.append("Collective benchmark: " + ("absent." if not bench.present else
                                                  "no usable rows."))
    if sr is not None and sr.entries:
        rel, _ = sr.relative()
        if rel:
            worst = max(rel, key=rel.get)
            glance.append(f"Slowest rank at the largest sizes: {worst} "
                          f"({esc(sr.rank_hosts().get(worst, '?'))}), {rel[worst]:.2f}× median.")
    if p2p.present:
        glance.append("Point-to-point: " + esc(p2p.text()) + ".")
    if model.usable:
        glance.append(esc(model_md(model)))
    if memory.usable:
        glance.append(f"ZeRO memory: {esc(memory.match_words())}.")
    if scaling.usable:
        glance.append(esc(capitalized("; ".join(scaling.words(m) for m in scaling.modes))) + ".")
    if overlap.usable:
        glance.append(f"Overlap: {esc(overlap.words())}.")
    ws = rf.world_size
    glance[1:1] = [esc(capitalized(w)) + "." for w in device_words(rf)]
    glance.insert(0, f"{esc(rf.attrs.get('subcommand', '?'))} on {ws if ws else '?'} ranks "
                     f"({esc(hosts_text(rf.hosts)) or 'hosts unknown'}), backend "
                     f"{esc(rf.attrs.get('backend', '?'))}, device "
                     f"{esc(rf.attrs.get('device', '?'))}, parity "
                     f"{esc(rf.attrs.get('parity_version', '?'))}.")
    page.parts.insert(glance_at, "<ul class=\"glance\">" +
                      "".join(f"<li>{g}</li>" for g in glance) + "</ul>")

    md = [f"# {title}", "", f"File: `{label}`", ""]
    md += essentials_md(rf)
    md += [f"- {w}" for w in device_words(rf)]
    md += ["", "## Collective benchmark: best busbw at the largest size", ""]
    if bench.usable:
        md += best_md(bench)
    else:
        md.append("No collective benchmark rows." if bench.present else
                  "No /bench/collectives table.")
    if sr is not None and sr.entries:
        rel, slowest = sr.relative()
        if rel:
            worst = max(rel, key=rel.get)
            md += ["", f"Slowest rank at the largest sizes: rank {worst} "
                       f"({sr.rank_hosts().get(worst, '?')}), {rel[worst]:.2f}× the median rank."]
    if p2p.present:
        md += ["", f"Point-to-point: {p2p.text()}."]
    if model.usable:
        md += ["", "## Model training step", "", model_md(model, "Tokens/s per rank and MFU")]
    elif model.present:
        md += ["", "## Model training step", "", "/bench/model has 0 rows."]
    for bench_, heading, table, lines in (
            (memory, "ZeRO memory and communication", "/bench/memory", memory_md),
            (scaling, "Data-parallel scaling", "/bench/scaling", scaling_md),
            (overlap, "Communication overlap", "/bench/overlap", overlap_md)):
        if bench_.present:
            md += ["", f"## {heading}", ""]
            md += lines(bench_) if bench_.usable else [f"{table} has 0 rows."]
    md += ["", "## Conformance", "", check.words() + "."]
    if check.failures:
        md.append("")
        for r in check.failures[:20]:
            md.append(f"- `{r['case']}`: {r['message'] or 'failed'}")
        if len(check.failures) > 20:
            md.append(f"- … {len(check.failures) - 20} more")
    return page, md


def device_words(rf):
    """What the device of a run was, and what its collective figures measure there."""
    if rf.attrs.get("device") != "cuda":
        return []
    words = [f"GPU: {rf.attrs.get('gpu', '?')}"]
    try:
        sharing = int(rf.attrs.get("ranks_per_gpu", 1))
    except (TypeError, ValueError):
        sharing = 1
    if rf.world_size == 1:
        words.append("one rank: the collective figures time a rank's own copies and kernel "
                     "launches, not a network")
    elif sharing > 1:
        via = ("MPI staging through pinned host memory" if rf.attrs.get("backend") == "mpi"
               else "NCCL within one GPU")
        words.append(f"{sharing} ranks share one GPU: the collective figures measure {via} on "
                     "that GPU and host, not links between GPUs")
    table = rf.table("/bench/device_kernels")
    if table is not None and table.has("kernel", "dtype", "bandwidth_GBps", "ratio_vs_copy"):
        for i in range(len(table)):
            if table["kernel"][i] == "reduce_sum" and int(table["rank"][i]) == 0:
                words.append(f"reduction kernel ({table['dtype'][i]}) at "
                             f"{fmt_size(table['size_bytes'][i])}: "
                             f"{table['bandwidth_GBps'][i]:.1f} GB/s, "
                             f"{table['ratio_vs_copy'][i]:.3f}× the device copy (target ≥ 0.9)")
    return words


def essentials_md(rf, prefix=""):
    out = []
    for n in ESSENTIALS:
        if n in rf.attrs:
            out.append(f"- {prefix}{n}: {attr_text(n, rf.attrs[n])}")
    return out


def best_md(bench):
    lines = ["| collective | algorithm | size | best at | busbw (GB/s) | busbw / native |",
             "|---|---|---:|---|---:|---:|"]
    for (coll, algo), key, r, ratio in bench.best_at_largest():
        lines.append(f"| {coll} | {algo} | {fmt_size(r['size_bytes'])} | {r['dtype']} "
                     f"{r['redop']} {placement(r['in_place'])} | {fmt_num(r['busbw_GBps'])} | "
                     f"{fmt_ratio(ratio)} |")
    return lines


# --------------------------------------------------------------------------------------------
# Comparison report

def match_key(r):
    return (r["collective"], r["algorithm"], r["dtype"], r["redop"], int(r["in_place"]),
            r["size_bytes"])


def match_models(models):
    """[(summary A, summary B)] for the models both runs trained with the same config, in A's
    order. A preset whose config changed (another --dtype, batch or preset definition) is not
    the same workload, so it is not matched."""
    if not all(m.usable for m in models):
        return []
    b = models[1].by_key()
    return [(ma, b[key]) for key, ma in models[0].by_key().items() if key in b]


def model_comparison_section(page, models, labels, plotter):
    """Tokens/s and MFU of B against A per model; returns the matched pairs for summary.md.
    Nothing is drawn when neither run has /bench/model."""
    if not any(m.present for m in models):
        return []
    page.add("<h2 id=\"model\">Model training step: B against A</h2>")
    for name, m in zip("AB", models):
        if not m.present:
            page.note(f"Run {name} has no /bench/model table (no model benchmark in that run).")
        elif not m.usable:
            page.note(f"Run {name}: /bench/model has 0 rows.")
    pairs = match_models(models)
    if not all(m.usable for m in models):
        return []
    keys = [set(m.by_key()) for m in models]
    only = [sorted(f"{k[0]} ({k[1]})" for k in keys[i] - keys[1 - i]) for i in (0, 1)]
    for name, names in zip("AB", only):
        if names:
            page.note(f"Only in run {name} (no model of the same name and config in the other "
                      "run): " + "; ".join(names) + ".")
    if not pairs:
        page.note("No model of the same name and config in both runs: nothing to compare.")
        return []
    page.p("Means over ranks; models matched on name and config. Ratio = B / A (above 1: B "
           "has more tokens/s, or a higher MFU). MFU divides out each run's own matmul rate, so "
           "faster hardware raises tokens/s but need not raise MFU; the last column shows how "
           "that rate itself changed.")
    rows = []
    for ma, mb in pairs:
        rows.append([f"<b>{esc(ma['model'])}</b>",
                     f"<span class=\"mono\">{esc(ma['config'])}</span>",
                     fmt_tokens(ma["tokens"][0]), fmt_tokens(mb["tokens"][0]),
                     fmt_ratio(ratio_of(mb["tokens"][0], ma["tokens"][0])),
                     fmt_mfu(ma["mfu"][0]), fmt_mfu(mb["mfu"][0]),
                     fmt_ratio(ratio_of(mb["mfu"][0], ma["mfu"][0])),
                     fmt_ratio(ratio_of(mb["matmul"][0], ma["matmul"][0]))])
    page.table(["model", "config", "tokens/s A", "tokens/s B", "tokens/s B / A", "MFU A",
                "MFU B", "MFU B / A", "matmul GFLOP/s B / A"], rows,
               numeric={2, 3, 4, 5, 6, 7, 8})
    names = [ma["model"] if sum(p[0]["model"] == ma["model"] for p in pairs) == 1
             else f"{ma['model']}\n{ma['config']}" for ma, _ in pairs]
    page.img(plotter.model_comparison(names, [ma["tokens"] for ma, _ in pairs],
                                      [mb["tokens"] for _, mb in pairs],
                                      [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "tokens per second per model, run A and run B")
    return pairs


def matched_pairs(benches):
    """[(key, A's entry, B's entry)] for the keys both runs have, in A's order; and the keys
    only A has, and only B has."""
    a, b = benches[0].by_key(), benches[1].by_key()
    return ([(k, a[k], b[k]) for k in a if k in b], [k for k in a if k not in b],
            [k for k in b if k not in a])


def comparison_start(page, benches, table, anchor, heading):
    """The heading of a comparison section, when either run has the table, and a note for a run
    without rows; True when both runs have rows to match."""
    if not any(b.present for b in benches):
        return False
    page.add(f"<h2 id=\"{anchor}\">{esc(heading)}</h2>")
    for name, b in zip("AB", benches):
        if not b.present:
            page.note(f"Run {name} has no {table} table.")
        elif not b.usable:
            page.note(f"Run {name}: {table} has 0 rows.")
    return all(b.usable for b in benches)


def only_notes(page, only, what, describe):
    """Notes listing the keys that only one run has; only: (keys only in A, keys only in B)."""
    for name, keys in zip("AB", only):
        if keys:
            page.note(f"Only in run {name} (no {what} in the other run): "
                      + "; ".join(describe(k) for k in keys) + ".")


def ratio_range_words(ratios):
    """'1.000' when they all agree to three decimals, else 'from 0.912 to 1.034'."""
    good = [r for r in ratios if finite(r)]
    if not good:
        return "–"
    lo, hi = fmt_ratio(min(good)), fmt_ratio(max(good))
    return lo if lo == hi else f"from {lo} to {hi}"


def memory_comparison_section(page, memories):
    """Model-state bytes and bytes sent of B against A per (strategy, precision, world size);
    returns the matched pairs for summary.md."""
    if not comparison_start(page, memories, "/bench/memory", "memory",
                            "ZeRO memory and communication: B against A"):
        return []
    pairs, *only = matched_pairs(memories)
    only_notes(page, only, "row of the same strategy, precision and world size",
               lambda k: f"{k[0]} {k[1]} at {k[2]} ranks")
    workloads = [workload_text(m) for m in memories]
    if workloads[0] != workloads[1]:
        page.note(f"The runs trained different models (A: {workloads[0]}; B: {workloads[1]}): "
                  "the ratios compare different workloads.")
    if not pairs:
        page.note("No strategy, precision and world size in both runs: nothing to compare.")
        return []
    page.p("Model-state bytes of the largest rank and bytes sent per rank per step (mean over "
           "ranks), matched on strategy, precision and world size. Ratio = B / A (above 1: B "
           "holds or sends more). Formula match: " + "; ".join(
               f"{name} {esc(m.match_words())}" for name, m in zip("AB", memories)) + ".")
    rows, classes = [], []
    for (strategy, precision, n), a, b in pairs:
        state, sent = (ratio_of(b["model_state"], a["model_state"]),
                       ratio_of(b["bytes_sent"], a["bytes_sent"]))
        rows.append([esc(precision), esc(strategy), fmt_int(n), fmt_bytes(a["model_state"]),
                     fmt_bytes(b["model_state"]), fmt_ratio(state), fmt_bytes(a["bytes_sent"]),
                     fmt_bytes(b["bytes_sent"]), fmt_ratio(sent)])
        classes.append("diff" if a["model_state"] != b["model_state"] or
                       (finite(sent) and fmt_ratio(sent) != "1.000") else "")
    page.table(["precision", "strategy", "world size", "model state A (B)",
                "model state B (B)", "model state B / A", "bytes sent A", "bytes sent B",
                "bytes sent B / A"], rows, numeric=set(range(2, 9)), row_classes=classes)
    page.note("Highlighted rows differ between the runs.")
    return pairs


def scaling_comparison_section(page, scalings, labels, plotter):
    """Step time of B against A per (mode, world size); returns the matched pairs."""
    if not comparison_start(page, scalings, "/bench/scaling", "scaling",
                            "Data-parallel scaling: B against A"):
        return []
    pairs, *only = matched_pairs(scalings)
    only_notes(page, only, "row of the same mode and world size",
               lambda k: f"{k[0]} at {k[1]} ranks")
    if not pairs:
        page.note("No mode and world size in both runs: nothing to compare.")
        return []
    fits = []
    for mode in OrderedDict.fromkeys(k[0] for k, _, _ in pairs):
        s = [sc.serial_fraction(mode) for sc in scalings]
        fits.append(f"{mode} A {s[0]:.3g}, B {s[1]:.3g}" if None not in s else
                    f"{mode} A {'–' if s[0] is None else f'{s[0]:.3g}'}, "
                    f"B {'–' if s[1] is None else f'{s[1]:.3g}'}")
    page.p("Median step time of the slowest rank, matched on mode and world size. Ratio = B / A "
           "(below 1: B is faster). Amdahl serial fraction: " + esc("; ".join(fits)) + ".")
    rows = []
    for (mode, n), a, b in pairs:
        rows.append([esc(mode), fmt_int(n), fmt_ms(a["step_seconds"]), fmt_ms(b["step_seconds"]),
                     fmt_ratio(ratio_of(b["step_seconds"], a["step_seconds"])),
                     fmt_num(a["speedup"]), fmt_num(b["speedup"]), fmt_ratio(a["efficiency"]),
                     fmt_ratio(b["efficiency"])])
    page.table(["mode", "world size", "step time A (ms)", "step time B (ms)", "step time B / A",
                "speedup A", "speedup B", "efficiency A", "efficiency B"], rows,
               numeric=set(range(1, 9)))
    page.img(plotter.scaling_comparison(scalings, [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "step time against ranks, run A and run B")
    return pairs


def overlap_comparison_section(page, overlaps):
    """Exposed communication and hidden fraction of B against A per (bucket size, overlap)."""
    if not comparison_start(page, overlaps, "/bench/overlap", "overlap",
                            "Communication overlap: B against A"):
        return []
    pairs, *only = matched_pairs(overlaps)
    only_notes(page, only, "row of the same bucket size and overlap",
               lambda k: f"{fmt_size(k[0])} {'with' if k[1] else 'without'} overlap")
    if not pairs:
        page.note("No bucket size and overlap setting in both runs: nothing to compare.")
        return []
    page.p("Exposed communication per step, matched on bucket size and overlap. Ratio = B / A "
           "(below 1: B waits less).")
    rows = []
    for (bucket, flag), a, b in pairs:
        rows.append([esc(fmt_size(bucket)), "yes" if flag else "no",
                     fmt_ms(a["exposed_comm_seconds"]), fmt_ms(b["exposed_comm_seconds"]),
                     fmt_ratio(ratio_of(b["exposed_comm_seconds"], a["exposed_comm_seconds"])),
                     fmt_ratio(overlaps[0].hidden(a)), fmt_ratio(overlaps[1].hidden(b))])
    page.table(["bucket size", "overlap", "exposed comm A (ms)", "exposed comm B (ms)",
                "B / A", "hidden fraction A", "hidden fraction B"], rows,
               numeric={2, 3, 4, 5, 6})
    return pairs


def parallel_comparison_md(memory_pairs, scaling_pairs, overlap_pairs, overlaps):
    """summary.md tables of the matched /bench/memory, /bench/scaling and /bench/overlap rows."""
    md = []
    if memory_pairs:
        md += ["", "## ZeRO memory and communication", "",
               "| precision | strategy | world size | model state A | model state B | B / A | "
               "bytes sent A | bytes sent B | B / A |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for (strategy, precision, n), a, b in memory_pairs:
            md.append(f"| {precision} | {strategy} | {n} | {fmt_bytes(a['model_state'])} | "
                      f"{fmt_bytes(b['model_state'])} | "
                      f"{fmt_ratio(ratio_of(b['model_state'], a['model_state']))} | "
                      f"{fmt_bytes(a['bytes_sent'])} | {fmt_bytes(b['bytes_sent'])} | "
                      f"{fmt_ratio(ratio_of(b['bytes_sent'], a['bytes_sent']))} |")
    if scaling_pairs:
        md += ["", "## Data-parallel scaling (step time, slowest rank)", "",
               "| mode | world size | step A (ms) | step B (ms) | B / A | speedup A | speedup B |",
               "|---|---:|---:|---:|---:|---:|---:|"]
        for (mode, n), a, b in scaling_pairs:
            md.append(f"| {mode} | {n} | {fmt_ms(a['step_seconds'])} | "
                      f"{fmt_ms(b['step_seconds'])} | "
                      f"{fmt_ratio(ratio_of(b['step_seconds'], a['step_seconds']))} | "
                      f"{fmt_num(a['speedup'])} | {fmt_num(b['speedup'])} |")
    if overlap_pairs:
        md += ["", "## Communication overlap (exposed communication)", "",
               "| bucket size | overlap | A (ms) | B (ms) | B / A | hidden A | hidden B |",
               "|---|---|---:|---:|---:|---:|---:|"]
        for (bucket, flag), a, b in overlap_pairs:
            ea, eb = a["exposed_comm_seconds"], b["exposed_comm_seconds"]
            md.append(f"| {fmt_size(bucket)} | {'yes' if flag else 'no'} | {fmt_ms(ea)} | "
                      f"{fmt_ms(eb)} | {fmt_ratio(ratio_of(eb, ea))} | "
                      f"{fmt_ratio(overlaps[0].hidden(a))} | {fmt_ratio(overlaps[1].hidden(b))} |")
    return md


def comparison_report(rfs, labels, outdir, title, args):
    plotter = Plotter(outdir)
    a_rf, b_rf = rfs
    benches = [Bench(rf) for rf in rfs]
    checks = [Check(rf) for rf in rfs]
    p2ps = [P2P(rf) for rf in rfs]
    models = [ModelBench(rf) for rf in rfs]
    memories = [MemoryBench(rf) for rf in rfs]
    scalings = [ScalingBench(rf) for rf in rfs]
    overlaps = [OverlapBench(rf) for rf in rfs]
    page = Page(title)
    page.add(f"<p>Run A: <span class=\"mono\">{esc(labels[0])}</span><br>Run B: "
             f"<span class=\"mono\">{esc(labels[1])}</span></p>")
    page.add("<nav><a href=\"#provenance\">Provenance</a><a href=\"#conformance\">Conformance</a>"
             "<a href=\"#collectives\">Collectives</a><a href=\"#p2p\">Point-to-point</a>"
             + ("<a href=\"#model\">Model</a>" if any(m.present for m in models) else "")
             + parallel_nav(memories, scalings, overlaps) + "</nav>")

    # Matching rows
    maps = []
    dups = [0, 0]
    for i, bench in enumerate(benches):
        m = {}
        for r in bench.rows:
            k = match_key(r)
            if k in m:
                dups[i] += 1
                continue
            m[k] = r
        maps.append(m)
    matched = [k for k in maps[0] if k in maps[1]]
    only_a = len(maps[0]) - len(matched)
    only_b = len(maps[1]) - len(matched)

    def ratio(k):
        a, b = maps[0][k]["busbw_GBps"], maps[1][k]["busbw_GBps"]
        return b / a if finite(a) and finite(b) and a > 0 else math.nan

    # Per (collective, algorithm): largest matched size, key with the best A busbw there.
    pairs = defaultdict(list)
    for k in matched:
        pairs[(k[0], k[1])].append(k)
    pair_summary = []
    for pair in sorted(pairs, key=lambda p: (order_key(p[0], COLLECTIVE_ORDER),
                                            order_key(p[1], ALGORITHM_ORDER))):
        ks = pairs[pair]
        largest = max(k[5] for k in ks)
        at = [k for k in ks if k[5] == largest]
        k = max(at, key=lambda k: maps[0][k]["busbw_GBps"] if finite(maps[0][k]["busbw_GBps"])
                else -1)
        rs = [ratio(x) for x in ks if finite(ratio(x)) and ratio(x) > 0]
        gmean = math.exp(sum(math.log(x) for x in rs) / len(rs)) if rs else math.nan
        pair_summary.append((pair, k, ratio(k), gmean, len(ks)))

    # Glance
    glance = [f"Conformance: A {esc(checks[0].words())}; B {esc(checks[1].words())}."]
    if matched:
        rs = [ratio(k) for k in matched if finite(ratio(k)) and ratio(k) > 0]
        if rs:
            g = math.exp(sum(math.log(x) for x in rs) / len(rs))
            glance.append(f"busbw B / A over {len(matched)} matching rows: geometric mean "
                          f"{g:.3f}, range {min(rs):.3f}–{max(rs):.3f}.")
    else:
        glance.append("No matching collective benchmark rows between the runs.")
    model_pairs = match_models(models)
    if model_pairs:
        glance.append("Model training step, tokens/s B / A: " + "; ".join(
            f"{esc(ma['model'])} {fmt_ratio(ratio_of(mb['tokens'][0], ma['tokens'][0]))}"
            for ma, mb in model_pairs) + ".")
    memory_pairs = matched_pairs(memories)[0] if all(m.usable for m in memories) else []
    if memory_pairs:
        glance.append(f"ZeRO model-state bytes B / A over {len(memory_pairs)} matching "
                      "(strategy, precision, world size): " + ratio_range_words(
                          [ratio_of(b["model_state"], a["model_state"])
                           for _, a, b in memory_pairs]) + ".")
    scaling_pairs = matched_pairs(scalings)[0] if all(s.usable for s in scalings) else []
    if scaling_pairs:
        largest = OrderedDict()
        for (mode, n), a, b in scaling_pairs:
            if mode not in largest or n > largest[mode][0]:
                largest[mode] = (n, ratio_of(b["step_seconds"], a["step_seconds"]))
        glance.append("Data-parallel step time B / A at the largest matching world size: "
                      + "; ".join(f"{esc(mode)} at {n} ranks {fmt_ratio(r)}"
                                  for mode, (n, r) in largest.items()) + ".")
    page.add("<ul class=\"glance\">" + "".join(f"<li>{g}</li>" for g in glance) + "</ul>")

    # Provenance side by side
    page.add("<h2 id=\"provenance\">Provenance</h2>")
    names = [n for n in PROVENANCE_ORDER if n in a_rf.attrs or n in b_rf.attrs]
    names += sorted((set(a_rf.attrs) | set(b_rf.attrs)) - set(PROVENANCE_ORDER))
    rows, classes = [], []
    for n in names:
        va = attr_text(n, a_rf.attrs[n]) if n in a_rf.attrs else "–"
        vb = attr_text(n, b_rf.attrs[n]) if n in b_rf.attrs else "–"
        rows.append([f"<span class=\"mono\">{esc(n)}</span>", esc(va), esc(vb)])
        classes.append("diff" if va != vb else "")
    page.table(["attribute", "A: " + labels[0], "B: " + labels[1]], rows, row_classes=classes)
    page.note("Highlighted rows differ between the runs.")

    # Conformance
    page.add("<h2 id=\"conformance\">Conformance</h2>")
    crows = []
    for label, name, check in zip(labels, ("A", "B"), checks):
        if check.usable:
            crows.append([f"{name}: {esc(label)}", str(check.total), str(check.passed),
                          f"<span class=\"bad\">{check.failed}</span>" if check.failed else "0",
                          esc(check.words())])
        else:
            crows.append([f"{name}: {esc(label)}", "–", "–", "–", esc(check.words())])
    page.table(["run", "cases", "passed", "failed", "in words"], crows, numeric={1, 2, 3})
    if all(c.usable for c in checks):
        fa = {r["case"] for r in checks[0].failures}
        fb = {r["case"] for r in checks[1].failures}
        cases_a = {r["case"] for r in checks[0].rows}
        new = sorted(c for c in fb - fa if c in cases_a)
        fixed = sorted(fa - fb)
        if new:
            page.p("<span class=\"bad\">Failing in B but passing in A:</span> " +
                   ", ".join(f"<span class=\"mono\">{esc(c)}</span>" for c in new[:50]) +
                   (f" … and {len(new) - 50} more" if len(new) > 50 else ""))
        if fixed:
            page.p("Failing in A but passing (or absent) in B: " +
                   ", ".join(f"<span class=\"mono\">{esc(c)}</span>" for c in fixed[:50]) +
                   (f" … and {len(fixed) - 50} more" if len(fixed) > 50 else ""))
        for label, check in zip(labels, checks):
            if check.failures:
                def body(check=check):
                    page.table(["case", "message"],
                               [[f"<span class=\"mono\">{esc(r['case'])}</span>", esc(r["message"])]
                                for r in check.failures[:args.max_failures]])
                page.details(f"Failed cases of {label} ({check.failed})", body)

    # Collectives
    page.add("<h2 id=\"collectives\">Collective benchmark: busbw of B against A</h2>")
    for name, label, bench in zip("AB", labels, benches):
        if not bench.present:
            page.note(f"Run {name} ({label}) has no /bench/collectives table.")
        elif bench.missing:
            page.note(f"Run {name} ({label}): /bench/collectives lacks column(s) "
                      + ", ".join(bench.missing) + ".")
        elif not bench.rows:
            page.note(f"Run {name} ({label}): /bench/collectives has 0 rows.")
    if any(dups):
        page.note(f"Rows with a repeated (collective, algorithm, dtype, redop, placement, size): "
                  f"A {dups[0]}, B {dups[1]}; only the first of each is compared.")
    if benches[0].usable or benches[1].usable:
        page.p(f"{len(matched)} rows match on (collective, algorithm, dtype, redop, placement, "
               f"size); {only_a} only in A, {only_b} only in B. Ratio = busbw B / busbw A "
               "(above 1: B is faster).")
    if pair_summary:
        page.add("<h3>At the largest matching size</h3>")
        srows = []
        for (coll, algo), k, rt, gm, n in pair_summary:
            srows.append([esc(coll), esc(algo), esc(fmt_size(k[5])),
                          esc(f"{k[2]} {k[3]} {placement(k[4])}"),
                          fmt_num(maps[0][k]["busbw_GBps"]), fmt_num(maps[1][k]["busbw_GBps"]),
                          fmt_ratio(rt), fmt_ratio(gm), str(n)])
        page.table(["collective", "algorithm", "size", "at", "busbw A (GB/s)", "busbw B (GB/s)",
                    "B / A", "B / A geo. mean, all sizes", "matching rows"], srows,
                   numeric={4, 5, 6, 7, 8})

    host_bws = [host_copy_bw(rf) for rf in rfs]
    groups = defaultdict(lambda: ([], []))
    for i, bench in enumerate(benches):
        for r in bench.rows:
            groups[(r["collective"], r["dtype"], r["redop"], int(r["in_place"]))][i].append(r)
    plotted = 0
    for gkey in sorted(groups, key=lambda g: (order_key(g[0], COLLECTIVE_ORDER),
                                              order_key(g[1], DTYPE_ORDER),
                                              order_key(g[2], REDOP_ORDER), g[3])):
        rows_a, rows_b = groups[gkey]
        coll, dtype, redop, in_place = gkey
        gtitle = " · ".join(p for p in (coll, dtype, redop if redop != "none" else "",
                                        placement(in_place)) if p)
        page.add(f"<h3>{esc(gtitle)}</h3>")
        if not rows_a or not rows_b:
            page.note(f"Only in run {'A' if rows_a else 'B'}.")
        sizes = {r["size_bytes"] for r in rows_a + rows_b}
        algos = sorted({r["algorithm"] for r in rows_a + rows_b},
                       key=lambda a: order_key(a, ALGORITHM_ORDER))
        if len(sizes) < 2:
            page.note("Only one size: table only, no plot.")
        elif plotted >= args.max_plots:
            page.note(f"Plot left out (more than --max-plots {args.max_plots} groups).")
        else:
            series = []
            for a in algos:
                sa = sorted((r for r in rows_a if r["algorithm"] == a),
                            key=lambda r: r["size_bytes"])
                sb = sorted((r for r in rows_b if r["algorithm"] == a),
                            key=lambda r: r["size_bytes"])
                series.append((a, sa, sb))
            page.img(plotter.comparison_group(gtitle, series, ["A", "B"], host_bws),
                     f"busbw A vs B, {gtitle}")
            plotted += 1
        keys = sorted((k for k in matched if (k[0], k[2], k[3], k[4]) == gkey),
                      key=lambda k: (k[5], order_key(k[1], ALGORITHM_ORDER)))
        if keys:
            def body(keys=keys):
                page.table(["size (B)", "algorithm", "busbw A (GB/s)", "busbw B (GB/s)", "B / A",
                            "time A (us)", "time B (us)"],
                           [[fmt_int(k[5]), esc(k[1]), fmt_num(maps[0][k]["busbw_GBps"]),
                             fmt_num(maps[1][k]["busbw_GBps"]), fmt_ratio(ratio(k)),
                             fmt_time(maps[0][k]["time_us"]), fmt_time(maps[1][k]["time_us"])]
                            for k in keys], numeric={0, 2, 3, 4, 5, 6})
            page.details(f"Table: busbw ratios at {len(keys)} matching rows", body)

    p2p_section(page, [("A", p2ps[0]), ("B", p2ps[1])], plotter)
    model_matched = model_comparison_section(page, models, labels, plotter)
    memory_matched = memory_comparison_section(page, memories)
    scaling_matched = scaling_comparison_section(page, scalings, labels, plotter)
    overlap_matched = overlap_comparison_section(page, overlaps)

    md = [f"# {title}", "", f"- A: `{labels[0]}`", f"- B: `{labels[1]}`", ""]
    for name, rf in zip("AB", rfs):
        md += [f"## Run {name}", ""] + essentials_md(rf) + [""]
    md += ["## busbw at the largest matching size", ""]
    if pair_summary:
        md += ["| collective | algorithm | size | at | busbw A (GB/s) | busbw B (GB/s) | B / A | "
               "A / native | B / native |", "|---|---|---:|---|---:|---:|---:|---:|---:|"]
        for (coll, algo), k, rt, gm, n in pair_summary:
            ra, rb = maps[0][k], maps[1][k]
            na = benches[0].native_ratio(Bench.key(ra), ra)
            nb = benches[1].native_ratio(Bench.key(rb), rb)
            md.append(f"| {coll} | {algo} | {fmt_size(k[5])} | {k[2]} {k[3]} "
                      f"{placement(k[4])} | {fmt_num(ra['busbw_GBps'])} | "
                      f"{fmt_num(rb['busbw_GBps'])} | {fmt_ratio(rt)} | {fmt_ratio(na)} | "
                      f"{fmt_ratio(nb)} |")
    else:
        md.append("No matching collective benchmark rows.")
    for name, bench in zip("AB", benches):
        if bench.usable:
            md += ["", f"### Run {name}: best busbw at the largest size", ""] + best_md(bench)
    md += ["", "## Conformance", "", f"- A: {checks[0].words()}", f"- B: {checks[1].words()}"]
    if any(p.present for p in p2ps):
        md += ["", "## Point-to-point", ""]
        for name, p in zip("AB", p2ps):
            md.append(f"- {name}: {p.text()}" if p.present else f"- {name}: not measured")
    if model_matched:
        md += ["", "## Model training step (means over ranks)", "",
               "| model | config | tokens/s A | tokens/s B | B / A | MFU A | MFU B | B / A |",
               "|---|---|---:|---:|---:|---:|---:|---:|"]
        for ma, mb in model_matched:
            md.append(f"| {ma['model']} | {ma['config']} | {fmt_tokens(ma['tokens'][0])} | "
                      f"{fmt_tokens(mb['tokens'][0])} | "
                      f"{fmt_ratio(ratio_of(mb['tokens'][0], ma['tokens'][0]))} | "
                      f"{fmt_mfu(ma['mfu'][0])} | {fmt_mfu(mb['mfu'][0])} | "
                      f"{fmt_ratio(ratio_of(mb['mfu'][0], ma['mfu'][0]))} |")
    md += parallel_comparison_md(memory_matched, scaling_matched, overlap_matched, overlaps)
    return page, md


# --------------------------------------------------------------------------------------------
# Command line

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{one_line(message)} (see --help)")


def one_line(text):
    return " ".join(str(text).split())


def build_parser():
    p = Parser(
        prog="parity_report.py",
        description="Write an HTML report (index.html, PNG plots and summary.md) from one parity "
                    "result file, or a comparison of two (run B against run A).",
        epilog="Exit status: 0 report written; 2 bad input or usage (one line on stderr starting "
               "with 'parity report: '); 1 unexpected failure while drawing (set "
               "PARITY_REPORT_DEBUG=1 for a traceback). The input format is "
               "docs/results-schema.md, schema version 1.")
    p.add_argument("result", metavar="RESULT.h5",
                   help="parity result file (run A when two are given)")
    p.add_argument("other", metavar="OTHER.h5", nargs="?",
                   help="optional second result file (run B); the report then compares B with A")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="output directory, created if missing; index.html, summary.md and "
                        "fig*.png are written there (existing files of those names are replaced)")
    p.add_argument("--title", metavar="T", help="page title (default: derived from file names)")
    p.add_argument("--max-plots", metavar="N", type=int, default=40,
                   help="at most N benchmark group figures; further groups get tables only "
                        "(default 40)")
    p.add_argument("--max-failures", metavar="N", type=int, default=200,
                   help="list at most N failed conformance cases (default 200)")
    return p


def run(argv):
    args = build_parser().parse_args(argv)
    if args.max_plots < 0 or args.max_failures < 0:
        raise UsageError("--max-plots and --max-failures must not be negative")
    import parity_results
    paths = [args.result] + ([args.other] if args.other else [])
    rfs = [parity_results.load_isolated(p) for p in paths]
    labels = list(paths)
    if len(paths) == 2:
        short = [os.path.basename(p) for p in paths]
        if short[0] != short[1]:
            labels = short
    else:
        labels = [os.path.basename(paths[0])]
    try:
        os.makedirs(args.out, exist_ok=True)
        probe = os.path.join(args.out, ".parity-report-write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to output directory {args.out}: "
                         f"{exc.strerror or exc}") from None
    try:
        if len(rfs) == 1:
            title = args.title or f"parity report: {labels[0]}"
            page, md = single_report(rfs[0], paths[0], args.out, title, args)
        else:
            title = args.title or f"parity comparison: {labels[0]} (A) vs {labels[1]} (B)"
            page, md = comparison_report(rfs, labels, args.out, title, args)
        with open(os.path.join(args.out, "index.html"), "w", encoding="utf-8") as fh:
            fh.write(page.render())
        with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(md) + "\n")
    except Exception as exc:
        if os.environ.get("PARITY_REPORT_DEBUG"):
            traceback.print_exc()
        sys.stderr.write(f"{PREFIX}internal error while drawing the report: "
                         f"{one_line(type(exc).__name__ + ': ' + str(exc))}\n")
        return 1
    print(os.path.join(args.out, "index.html"))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        import parity_results
        input_error = parity_results.InputError
    except Exception as exc:  # missing h5py/numpy
        sys.stderr.write(f"{PREFIX}cannot load the HDF5 reader: {one_line(exc)}\n")
        return 2
    try:
        return run(argv)
    except (UsageError, input_error) as exc:
        sys.stderr.write(f"{PREFIX}{one_line(exc)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PREFIX}interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
