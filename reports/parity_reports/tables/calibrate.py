"""/bench/calibrate and /bench/calibrate_links: the primitives `parity bench calibrate` (or a
benchmark that predicts its step) measured on every rank at once: matrix products over a grid
of shapes, the ops of a training step over several lengths, and the all-reduce against the ring
on the ping-pong's link. The rates the planner and the benchmarks' predictions are made of."""

import math
from collections import OrderedDict

from ..common import RowTable, esc, fmt_int, fmt_num, fmt_ratio, side_by_side

NAME = "calibrate"
ORDER = 35
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/bench/calibrate": ("s:host,dtype,kind,op i:rank,m,n,k,elements,bytes f:seconds,GFLOPs,ns_per_element",
                         ["rank", "dtype", "kind", "op", "m", "n", "k", "elements", "seconds"]),
    "/bench/calibrate_links": ("s:level,collective i:size_bytes,ranks f:time_s,ring_model_s,bus_GBps,efficiency",
                               ["size_bytes", "efficiency"]),
    "/bench/calibrate_collectives": ("s:level,collective i:ranks f:alpha_us,beta_us_per_byte,bandwidth_GBps",
                                     ["level", "collective", "alpha_us", "bandwidth_GBps"]),
    "/bench/calibrate_levels": ("s:level,peer_host i:peer f:alpha_us,beta_us_per_byte,bandwidth_GBps",
                                ["level", "alpha_us", "bandwidth_GBps"]),
}


# The ops that take one exp per element (GeLU's sigmoid, softmax's and cross-entropy's
# exponentials): read against the vectorised exp's rate as well as memcpy's.
EXP_OPS = ("gelu_forward", "gelu_backward", "softmax_forward", "cross_entropy_forward", "cross_entropy_backward")


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


class Calibration(RowTable):
    """Per type, the median over ranks of each product's GFLOP/s and each op's ns per element,
    with the slowest rank's; and the links' rows."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/calibrate", {"host": "", "GFLOPs": math.nan, "ns_per_element": math.nan,
                                                  "bytes": -1})
        # Files from before the other collectives were measured hold the all-reduce alone.
        self.links = RowTable(rf, "/bench/calibrate_links", {"level": "world", "collective": "all_reduce", "ranks": -1,
                                                              "time_s": math.nan,
                                                              "ring_model_s": math.nan,
                                                              "bus_GBps": math.nan})
        self.fits = RowTable(rf, "/bench/calibrate_collectives", {"ranks": -1, "beta_us_per_byte": math.nan})
        self.levels = RowTable(rf, "/bench/calibrate_levels", {"peer": -1, "peer_host": "",
                                                                "beta_us_per_byte": math.nan})
        # dtype -> {"products": {(m, n, k): [seconds]}, "ops": {op: {elements: [s]}},
        #           "stream": {elements: [s]}, "copy" and "exp": {elements: [s]},
        #           "bytes": {(op, elements): bytes read and written once}}
        self.types = OrderedDict()
        for r in self.rows:
            t = self.types.setdefault(r["dtype"], {"products": OrderedDict(), "ops": OrderedDict(),
                                                   "stream": OrderedDict(), "copy": OrderedDict(),
                                                   "exp": OrderedDict(), "bytes": {}})
            if r["kind"] == "gemm":
                t["products"].setdefault((int(r["m"]), int(r["n"]), int(r["k"])), []).append(r["seconds"])
            elif r["kind"] in ("stream", "copy", "exp"):
                t[r["kind"]].setdefault(int(r["elements"]), []).append(r["seconds"])
            else:
                t["ops"].setdefault(r["op"], OrderedDict()).setdefault(int(r["elements"]), []).append(r["seconds"])
            if r["bytes"] >= 0:
                t["bytes"][(r["kind"] if r["kind"] in ("copy", "exp") else r["op"], int(r["elements"]))] = r["bytes"]
        self.ranks = len({r["rank"] for r in self.rows})

    def product_rates(self, dtype):
        """[(m, n, k, median GFLOP/s, slowest rank's GFLOP/s)] in file order."""
        out = []
        for (m, n, k), seconds in self.types[dtype]["products"].items():
            flops = 2.0 * m * n * k
            out.append((m, n, k, flops / median(seconds) / 1e9, flops / max(seconds) / 1e9))
        return out

    def op_rates(self, dtype):
        """{op: [(elements, median ns per element)]}."""
        return {op: [(e, median(s) / e * 1e9) for e, s in sizes.items()]
                for op, sizes in self.types[dtype]["ops"].items()}

    def stream_rates(self, dtype):
        """[(footprint bytes, median GB/s)]: the add over three arrays of each length, the bytes a
        step's operands take from the level that holds that footprint."""
        size = 8 if dtype == "float64" else 4
        return [(3 * e * size, 3 * e * size / median(s) / 1e9) for e, s in self.types[dtype]["stream"].items()]

    def copy_fractions(self, dtype):
        """{op: [(elements, fraction)]}: each op's bytes (read and written once, the file's bytes
        column) per second over memcpy's at the same length, both medians over ranks."""
        t = self.types[dtype]
        out = OrderedDict()
        for op, sizes in t["ops"].items():
            points = [(e, t["bytes"][(op, e)] / median(s) / (t["bytes"][("copy", e)] / median(t["copy"][e])))
                      for e, s in sizes.items() if e in t["copy"] and (op, e) in t["bytes"] and ("copy", e) in t["bytes"]]
            if points:
                out[op] = points
        return out

    def exp_fractions(self, dtype):
        """{op: [(elements, fraction)]} for the ops that take an exp per element (EXP_OPS): their
        elements per second over the vectorised exp's at the same length (medians over ranks;
        none where the exp was not timed, on a GPU)."""
        t = self.types[dtype]
        out = OrderedDict()
        for op, sizes in t["ops"].items():
            if op not in EXP_OPS:
                continue
            points = [(e, median(t["exp"][e]) / median(s)) for e, s in sizes.items()
                      if e in t["exp"] and math.isfinite(median(t["exp"][e]))]
            if points:
                out[op] = points
        return out

    def text(self):
        parts = []
        for dtype in self.types:
            best = max((g for *_, g, _ in self.product_rates(dtype)), default=math.nan)
            parts.append(f"{dtype}: products up to {best:.1f} GFLOP/s (median over {self.ranks} ranks)")
        return "; ".join(parts)


def draw_products(plotter, label, calibration, dtype):
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    rates = calibration.product_rates(dtype)
    for i, k in enumerate(sorted({r[2] for r in rates})):
        # One point per shape, by its FLOPs; a colour per k (the reduction length).
        points = sorted((2.0 * m * n * kk, g) for m, n, kk, g, _ in rates if kk == k)
        plotter.plot(ax, f"k = {k}", [x for x, _ in points], [g for _, g in points], marker="o", markersize=4,
                     linestyle="none", color=plotter.palette[i], label=f"k = {k}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOPs of the product (2 m n k)")
    ax.set_ylabel("GFLOP/s (median over ranks)")
    ax.set_title(f"{label}: matrix products C[m,n] = A[m,k] B[k,n] in {dtype}")
    ax.legend(frameon=False, fontsize=8)
    return plotter.save(fig, f"calibrate_products_{dtype}", 0, suptitle=False)


def draw_ops(plotter, label, calibration, dtype):
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for i, (op, points) in enumerate(calibration.op_rates(dtype).items()):
        plotter.plot(ax, op, [e for e, _ in points], [ns for _, ns in points], marker="o", markersize=3, label=op,
                     color=plotter.palette[i % len(plotter.palette)],
                     linestyle="-" if i < len(plotter.palette) else "--")
    stream = calibration.types[dtype]["stream"]
    if stream:
        points = [(e, median(sec) / e * 1e9) for e, sec in stream.items()]
        plotter.plot(ax, "stream (add, operands from farther)", [e for e, _ in points], [ns for _, ns in points],
                     marker="s", markersize=3, color="black", linestyle=":", label="stream: add from farther")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("elements")
    ax.set_ylabel("ns per element (median over ranks)")
    ax.set_title(f"{label}: the ops of a training step in {dtype}")
    ax.legend(frameon=False, fontsize=7, ncol=2)
    return plotter.save(fig, f"calibrate_ops_{dtype}", 0, suptitle=False)


def draw_ceilings(plotter, label, calibration, dtype):
    """Each op against memcpy (left) and the exp-heavy ops against the vectorised exp (right; a
    calibration without the exp, a GPU's, draws the left panel alone)."""
    plt = plotter.plt
    exp = calibration.exp_fractions(dtype)
    fig, axes = plt.subplots(1, 2 if exp else 1, figsize=(10, 4.2) if exp else (6, 4.2), squeeze=False)
    left = axes[0][0]
    for i, (op, points) in enumerate(calibration.copy_fractions(dtype).items()):
        plotter.plot(left, op, [e for e, _ in points], [f for _, f in points], marker="o", markersize=3, label=op,
                     color=plotter.palette[i % len(plotter.palette)],
                     linestyle="-" if i < len(plotter.palette) else "--")
    panels = [(left, "fraction of memcpy's bytes/s")]
    if exp:
        right = axes[0][1]
        for i, (op, points) in enumerate(exp.items()):
            plotter.plot(right, "exp: " + op, [e for e, _ in points], [f for _, f in points], marker="o",
                         markersize=3, label=op, color=plotter.palette[i % len(plotter.palette)])
        panels.append((right, "fraction of the vectorised exp's elements/s"))
    for ax, what in panels:
        ax.set_xscale("log")
        ax.set_xlabel("elements")
        ax.set_ylabel(what)
        ax.axhline(1.0, color="grey", linewidth=0.6)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(frameon=False, fontsize=6 if ax is left else 7, ncol=2 if ax is left else 1)
    fig.suptitle(f"{label}: the ops in {dtype} against their ceilings, measured in the same run")
    return plotter.save(fig, f"calibrate_ceilings_{dtype}", 0, suptitle=False)


def runs_section(page, runs, plotter):
    """The section of one run or of two side by side; runs: [(label, Calibration)]."""
    present = [(label, c) for label, c in runs if c.usable]
    if not present:
        return
    page.add("<h2 id=\"calibrate\">Calibration</h2>")
    page.p("The primitives measured on every rank at once (the load the benchmarks run under), each "
           "the median of three timed batches of calls: matrix products over every (m, n, k) of 16, "
           "64, 256, 1024, and the ops a training step is made of over 4K to 2M elements. "
           "`parity plan --cluster` reads them from the cluster description bench calibrate "
           "writes; the benchmarks predict their steps from them (reference/theory/calibration.hpp).")
    for label, c in present:
        for dtype in c.types:
            page.img(draw_products(plotter, label, c, dtype), f"product rates in {dtype}")
            page.img(draw_ops(plotter, label, c, dtype), f"op rates in {dtype}")

            def body(c=c, dtype=dtype):
                page.table(["m", "n", "k", "GFLOP/s (median)", "GFLOP/s (slowest rank)"],
                           [[fmt_int(m), fmt_int(n), fmt_int(k), fmt_num(g, 1), fmt_num(s, 1)]
                            for m, n, k, g, s in c.product_rates(dtype)], numeric={0, 1, 2, 3, 4})
            page.details(f"Table: {label}, every product in {dtype}", body)
            if c.copy_fractions(dtype):
                page.img(draw_ceilings(plotter, label, c, dtype), f"op rates against memcpy and exp in {dtype}")
                fractions, exps = c.copy_fractions(dtype), c.exp_fractions(dtype)
                sizes = sorted({e for points in fractions.values() for e, _ in points})
                page.p(esc(f"{label}: each op's bytes per second (what it reads and writes once) over "
                           f"memcpy's at the same length, and for the ops that take an exp per element "
                           f"their elements per second over the vectorised exp's ({dtype}, medians over ranks)."))
                page.table(["op"] + [f"memcpy, {fmt_int(e)}" for e in sizes] + [f"exp, {fmt_int(e)}" for e in sizes],
                           [[esc(op)] + [fmt_ratio(dict(points).get(e, math.nan)) for e in sizes] +
                            [fmt_ratio(dict(exps.get(op, [])).get(e, math.nan)) for e in sizes]
                            for op, points in fractions.items()],
                           numeric=set(range(1, 1 + 2 * len(sizes))))
            if c.types[dtype]["stream"]:
                page.p(esc(f"{label}: memory by footprint in {dtype}: an add over three arrays, each "
                           "footprint streamed from the level that holds it. A step's operands come "
                           "from the level that holds its working set; the predictions add that cost "
                           "beyond what each op took on operands it had just used."))
                page.table(["footprint (MiB)", "GB/s (median)"],
                           [[fmt_num(b / 2**20, 2), fmt_num(g, 1)] for b, g in c.stream_rates(dtype)],
                           numeric={0, 1})
        rows_table(page, c.links,
                   f"{label}: each collective over every rank against its ring (all-to-all: "
                   "pairwise) model on the ping-pong's alpha-beta link; efficiency is the model's "
                   "time over the measured one, what the planner's collectives of that kind take "
                   "at each size.",
                   ["level", "collective", "size (B)", "ranks", "time (ms)", "model (ms)", "bus GB/s", "efficiency"],
                   lambda r: [esc(r["level"]), esc(r["collective"]), fmt_int(r["size_bytes"]), fmt_int(r["ranks"]),
                              fmt_num(r["time_s"] * 1e3, 3), fmt_num(r["ring_model_s"] * 1e3, 3),
                              fmt_num(r["bus_GBps"]), fmt_ratio(r["efficiency"])], {2, 3, 4, 5, 6, 7})
        rows_table(page, c.fits,
                   f"{label}: each collective's own alpha and beta at each level, fitted to its "
                   "sweep as the ping-pong's are (the smallest size's time, the slope to the largest).",
                   ["level", "collective", "ranks", "alpha (us)", "GB/s"],
                   lambda r: [esc(r["level"]), esc(r["collective"]), fmt_int(r["ranks"]), fmt_num(r["alpha_us"], 2),
                              fmt_num(r["bandwidth_GBps"], 2)], {2, 3, 4})
        rows_table(page, c.levels,
                   f"{label}: the link at each level, rank 0's ping-pong with the first rank on its "
                   "host (node) and on another host (network), fitted to alpha and beta: the "
                   "cluster description's node and network figures.",
                   ["level", "peer rank", "peer host", "latency (us)", "bandwidth (GB/s)"],
                   lambda r: [esc(r["level"]), fmt_int(r["peer"]), esc(r["peer_host"]), fmt_num(r["alpha_us"], 3),
                              fmt_num(r["bandwidth_GBps"])], {1, 3, 4})


def rows_table(page, table, words, header, cells, numeric):
    """words (escaped here) over a table of cells(row) for each of table's rows; nothing when it
    has none."""
    if table.usable:
        page.p(esc(words))
        page.table(header, [cells(r) for r in table.rows], numeric=numeric)


def load(rf, loaded):
    return Calibration(rf)


def nav(tables):
    return [("calibrate", "Calibration")] if any(t.usable for t in tables) else []


(section, glance, markdown, compare, compare_glance, compare_section,
 compare_markdown) = side_by_side(runs_section, "Calibration", lambda c: c.usable)
