"""/bench/collectives: the collective benchmark, one figure and table per group (collective, type,
reduction, placement), algorithms against the backend's native collective; /host/copy_bandwidth
gives its memcpy reference line."""

import math
from collections import OrderedDict, defaultdict

from ..common import (ALGORITHM_ORDER, COLLECTIVE_ORDER, DTYPE_ORDER, REDOP_ORDER, esc, finite,
                      fmt_int, fmt_num, fmt_ratio, fmt_size, fmt_time, fmt_wrong, order_key,
                      slug, table_rows)

NAME = "collectives"
ORDER = 10
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/host/copy_bandwidth": ("s:host i:rank,size_bytes f:bandwidth_GBps", []),
    # Nothing required of the reader: a file lacking one of BENCH_REQUIRED gets a note on the
    # page instead (Bench.missing), as the older tables always have.
    "/bench/collectives": (
        "s:collective,algorithm,dtype,redop i:root,in_place,size_bytes,count,world_size,"
        "iterations,wrong f:time_us,time_p50_us,time_p95_us,time_min_rank_us,time_max_rank_us,"
        "algbw_GBps,busbw_GBps,predicted_time_us,predicted_busbw_GBps", []),
}

BENCH_REQUIRED = ["collective", "algorithm", "size_bytes", "busbw_GBps", "time_us"]
BENCH_OPTIONAL = {"dtype": "", "redop": "", "in_place": 0, "root": -1, "world_size": -1,
                  "count": -1, "iterations": -1, "time_p50_us": math.nan,
                  "time_p95_us": math.nan, "time_min_rank_us": math.nan,
                  "time_max_rank_us": math.nan, "algbw_GBps": math.nan, "wrong": -1,
                  "predicted_time_us": math.nan, "predicted_busbw_GBps": math.nan}


def placement(in_place):
    return "in place" if int(in_place) == 1 else "out of place"


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
        # The busbw panels' reference line.
        self.host_bw = host_copy_bw(rf)
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


def zero_busbw_note(rows):
    ranks = {int(r["world_size"]) for r in rows}
    one_rank = ranks == {1}
    return ("No row of this group has a positive busbw"
            + (" (at one rank the bus factor is 0: nothing crosses a link)" if one_rank else "")
            + ", so its panel has a linear axis instead of a log one.")


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


def best_md(bench):
    lines = ["| collective | algorithm | size | best at | busbw (GB/s) | busbw / native |",
             "|---|---|---:|---|---:|---:|"]
    for (coll, algo), key, r, ratio in bench.best_at_largest():
        lines.append(f"| {coll} | {algo} | {fmt_size(r['size_bytes'])} | {r['dtype']} "
                     f"{r['redop']} {placement(r['in_place'])} | {fmt_num(r['busbw_GBps'])} | "
                     f"{fmt_ratio(ratio)} |")
    return lines


def match_key(r):
    return (r["collective"], r["algorithm"], r["dtype"], r["redop"], int(r["in_place"]),
            r["size_bytes"])


# --------------------------------------------------------------------------------------------
# Figures


def has_positive(rows, column):
    return any(finite(r[column]) and r[column] > 0 for r in rows)


def drawable(plotter, xs, ys, log):
    """The points a panel can show: positive ones on a log axis, every finite one (zeros
    included) on a linear axis."""
    if log:
        return plotter.positive(xs, ys)
    pts = [(x, y) for x, y in zip(xs, ys) if finite(x) and finite(y) and x > 0]
    return [p[0] for p in pts], [p[1] for p in pts]


def draw_group(plotter, title, by_algo, host_bw):
    """by_algo: [(algorithm, rows sorted by size)]. Two panels: busbw and latency, each on a
    log axis unless it has no positive value (busbw at one rank), then on a linear one."""
    plt = plotter.plt
    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(12, 5.0))
    handles, has_pred, has_band = [], False, False
    all_sizes = []
    every_row = [r for _, rows in by_algo for r in rows]
    bw_log = has_positive(every_row, "busbw_GBps")
    time_log = has_positive(every_row, "time_us")
    for algo, rows in by_algo:
        st = plotter.style(algo)
        sizes = [r["size_bytes"] for r in rows]
        all_sizes += sizes
        x, y = drawable(plotter, sizes, [r["busbw_GBps"] for r in rows], bw_log)
        plotter.plot(ax_bw, f"{algo} busbw", x, y, marker="o", markersize=3, label=algo, **st)
        x, y = drawable(plotter, sizes, [r["predicted_busbw_GBps"] for r in rows], bw_log)
        if len(x) > 1:
            plotter.plot(ax_bw, f"{algo} predicted busbw", x, y, linestyle=":", linewidth=1.0,
                         color=st["color"], zorder=2)
            has_pred = True
        x, y = drawable(plotter, sizes, [r["time_us"] for r in rows], time_log)
        plotter.plot(ax_t, f"{algo} time", x, y, marker="o", markersize=3, **st)
        band = [(r["size_bytes"], r["time_p50_us"], r["time_p95_us"]) for r in rows
                if r["size_bytes"] > 0 and finite(r["time_p50_us"]) and finite(r["time_p95_us"])
                and r["time_p50_us"] > 0 and r["time_p95_us"] > 0]
        if len(band) > 1:
            plotter.band(ax_t, (f"{algo} p50 time", f"{algo} p95 time"), [b[0] for b in band],
                         [b[1] for b in band], [b[2] for b in band], color=st["color"],
                         alpha=0.15, linewidth=0, zorder=1)
            has_band = True
        x, y = drawable(plotter, sizes, [r["predicted_time_us"] for r in rows], time_log)
        if len(x) > 1:
            plotter.plot(ax_t, f"{algo} predicted time", x, y, linestyle=":", linewidth=1.0,
                         color=st["color"], zorder=2)
        handles.append(plotter.Line2D([], [], marker="o", markersize=3, label=algo, **st))
    if host_bw:
        plotter.hline(ax_bw, "host memcpy", host_bw, color="0.45", linestyle="--",
                      linewidth=1.2, zorder=1)
        handles.append(plotter.Line2D([], [], color="0.45", linestyle="--",
                                      label=f"host memcpy {host_bw:.3g} GB/s"))
    if has_pred:
        handles.append(plotter.Line2D([], [], color="0.3", linestyle=":",
                                      label="alpha-beta prediction"))
    if has_band:
        handles.append(plotter.Patch(color="0.3", alpha=0.2, label="p50–p95 time"))
    for ax, column in ((ax_bw, "busbw_GBps"), (ax_t, "time_us")):
        plotter.size_axis(ax, all_sizes)
        if not plotter.log_axis_if_positive(ax, [r[column] for r in every_row]):
            ax.text(0.5, 0.5, "no positive busbw" if column == "busbw_GBps" else
                    "no positive time", transform=ax.transAxes, ha="center", va="center",
                    color="0.4")
        ax.set_xlabel("size (bytes)")
    ax_bw.set_ylabel("busbw (GB/s)")
    ax_bw.set_title("bus bandwidth (higher is better)")
    ax_t.set_ylabel("time (us)")
    ax_t.set_title("time per operation (lower is better)")
    return plotter.finish(fig, "coll_" + title, handles, title=title)


def draw_comparison(plotter, title, by_algo, labels, host_bws):
    """by_algo: [(algorithm, rows_a, rows_b)] rows sorted by size. busbw + ratio panels."""
    plt = plotter.plt
    fig, (ax_bw, ax_r) = plt.subplots(1, 2, figsize=(12, 5.0))
    handles, all_sizes, ratio_vals = [], [], []
    bw_log = has_positive([r for _, rows_a, rows_b in by_algo for r in rows_a + rows_b],
                          "busbw_GBps")
    for algo, rows_a, rows_b in by_algo:
        st = plotter.style(algo)
        for run, rows, ls in ((labels[0], rows_a, "-"), (labels[1], rows_b, "--")):
            sizes = [r["size_bytes"] for r in rows]
            all_sizes += sizes
            x, y = drawable(plotter, sizes, [r["busbw_GBps"] for r in rows], bw_log)
            if x:
                plotter.plot(ax_bw, f"{algo} busbw {run}", x, y, marker="o", markersize=3,
                             linestyle=ls, **st)
        bmap = {r["size_bytes"]: r["busbw_GBps"] for r in rows_b}
        pts = [(r["size_bytes"], bmap[r["size_bytes"]] / r["busbw_GBps"]) for r in rows_a
               if r["size_bytes"] in bmap and finite(r["busbw_GBps"]) and r["busbw_GBps"] > 0
               and finite(bmap[r["size_bytes"]]) and r["size_bytes"] > 0]
        if pts:
            plotter.plot(ax_r, f"{algo} busbw {labels[1]} / {labels[0]}", [p[0] for p in pts],
                         [p[1] for p in pts], marker="o", markersize=3, **st)
            ratio_vals += [p[1] for p in pts]
        handles.append(plotter.Line2D([], [], label=algo, **st))
    styles = [("-", "solid"), ("--", "dashed")]
    for (ls, word), label, hb in zip(styles, labels, host_bws):
        handles.append(plotter.Line2D([], [], color="0.3", linestyle=ls,
                                      label=f"{label} ({word})"))
        if hb:
            plotter.hline(ax_bw, f"host memcpy {label}", hb, color="0.6", linestyle=ls,
                          linewidth=1.0, zorder=1)
    if any(host_bws):
        handles.append(plotter.Line2D([], [], color="0.6", linewidth=1.0,
                                      label="host memcpy (grey)"))
    for ax in (ax_bw, ax_r):
        plotter.size_axis(ax, all_sizes)
        ax.set_xlabel("size (bytes)")
    if not plotter.log_axis_if_positive(
            ax_bw, [r["busbw_GBps"] for _, rows_a, rows_b in by_algo for r in rows_a + rows_b]):
        ax_bw.text(0.5, 0.5, "no positive busbw in either run", transform=ax_bw.transAxes,
                   ha="center", va="center", color="0.4")
    ax_bw.set_ylabel("busbw (GB/s)")
    ax_bw.set_title("bus bandwidth")
    ax_r.axhline(1.0, color="0.3", linewidth=1.0, zorder=1)
    good = [v for v in ratio_vals if finite(v) and v > 0]
    if good and (max(good) / min(good) > 20):
        ax_r.set_yscale("log")
    ax_r.set_ylabel(f"busbw ratio {labels[1]} / {labels[0]}")
    ax_r.set_title("B / A (above 1: B faster)")
    return plotter.finish(fig, "cmp_" + title, handles, title=title)


# --------------------------------------------------------------------------------------------
# One run

def load(rf, loaded):
    return Bench(rf)


def nav(benches):
    return [("collectives", "Collectives")]


def section(page, ctx, bench):
    plotter, max_plots = ctx.plotter, ctx.args.max_plots
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
    host_bw = bench.host_bw
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
            fname = draw_group(plotter, title, by_algorithm(rows), host_bw)
            page.img(fname, f"busbw and latency vs size, {title}")
            plotted += 1
            if not has_positive(rows, "busbw_GBps"):
                page.note(zero_busbw_note(rows))
        page.details(f"Table: {len(rows)} rows",
                     lambda rows=rows, key=key: group_table(page, bench, key, rows))
    if skipped_budget:
        page.note(f"{skipped_budget} group plot(s) left out to keep the page bounded.")


def glance(ctx, bench):
    if bench.usable:
        return [f"Collective benchmark: {len(bench.rows)} rows in {len(bench.groups)} groups."]
    return ["Collective benchmark: " + ("absent." if not bench.present else "no usable rows.")]


def markdown(ctx, bench):
    md = ["", "## Collective benchmark: best busbw at the largest size", ""]
    if bench.usable:
        md += best_md(bench)
    else:
        md.append("No collective benchmark rows." if bench.present else
                  "No /bench/collectives table.")
    return md


# --------------------------------------------------------------------------------------------
# Two runs

class Matches:
    """The rows of runs A and B matched on match_key (the first of a repeated key), and per
    (collective, algorithm) the ratio at the largest matching size."""

    def __init__(self, benches):
        self.maps = []
        self.dups = [0, 0]
        for i, bench in enumerate(benches):
            m = {}
            for r in bench.rows:
                k = match_key(r)
                if k in m:
                    self.dups[i] += 1
                    continue
                m[k] = r
            self.maps.append(m)
        self.matched = [k for k in self.maps[0] if k in self.maps[1]]
        self.only_a = len(self.maps[0]) - len(self.matched)
        self.only_b = len(self.maps[1]) - len(self.matched)
        # Per (collective, algorithm): largest matched size, key with the best A busbw there.
        pairs = defaultdict(list)
        for k in self.matched:
            pairs[(k[0], k[1])].append(k)
        self.pair_summary = []
        for pair in sorted(pairs, key=lambda p: (order_key(p[0], COLLECTIVE_ORDER),
                                                 order_key(p[1], ALGORITHM_ORDER))):
            ks = pairs[pair]
            largest = max(k[5] for k in ks)
            at = [k for k in ks if k[5] == largest]
            k = max(at, key=lambda k: self.maps[0][k]["busbw_GBps"]
                    if finite(self.maps[0][k]["busbw_GBps"]) else -1)
            rs = [self.ratio(x) for x in ks if finite(self.ratio(x)) and self.ratio(x) > 0]
            gmean = math.exp(sum(math.log(x) for x in rs) / len(rs)) if rs else math.nan
            self.pair_summary.append((pair, k, self.ratio(k), gmean, len(ks)))

    def ratio(self, k):
        a, b = self.maps[0][k]["busbw_GBps"], self.maps[1][k]["busbw_GBps"]
        return b / a if finite(a) and finite(b) and a > 0 else math.nan


def compare(ctx, benches):
    return Matches(benches)


def compare_glance(ctx, benches, m):
    if not m.matched:
        return ["No matching collective benchmark rows between the runs."]
    rs = [m.ratio(k) for k in m.matched if finite(m.ratio(k)) and m.ratio(k) > 0]
    if not rs:
        return []
    g = math.exp(sum(math.log(x) for x in rs) / len(rs))
    return [f"busbw B / A over {len(m.matched)} matching rows: geometric mean {g:.3f}, range "
            f"{min(rs):.3f}–{max(rs):.3f}."]


def compare_section(page, ctx, benches, m):
    labels, maps = ctx.labels, m.maps
    page.add("<h2 id=\"collectives\">Collective benchmark: busbw of B against A</h2>")
    for name, label, bench in zip("AB", labels, benches):
        if not bench.present:
            page.note(f"Run {name} ({label}) has no /bench/collectives table.")
        elif bench.missing:
            page.note(f"Run {name} ({label}): /bench/collectives lacks column(s) "
                      + ", ".join(bench.missing) + ".")
        elif not bench.rows:
            page.note(f"Run {name} ({label}): /bench/collectives has 0 rows.")
    if any(m.dups):
        page.note(f"Rows with a repeated (collective, algorithm, dtype, redop, placement, size): "
                  f"A {m.dups[0]}, B {m.dups[1]}; only the first of each is compared.")
    if benches[0].usable or benches[1].usable:
        page.p(f"{len(m.matched)} rows match on (collective, algorithm, dtype, redop, placement, "
               f"size); {m.only_a} only in A, {m.only_b} only in B. Ratio = busbw B / busbw A "
               "(above 1: B is faster).")
    if m.pair_summary:
        page.add("<h3>At the largest matching size</h3>")
        srows = []
        for (coll, algo), k, rt, gm, n in m.pair_summary:
            srows.append([esc(coll), esc(algo), esc(fmt_size(k[5])),
                          esc(f"{k[2]} {k[3]} {placement(k[4])}"),
                          fmt_num(maps[0][k]["busbw_GBps"]), fmt_num(maps[1][k]["busbw_GBps"]),
                          fmt_ratio(rt), fmt_ratio(gm), str(n)])
        page.table(["collective", "algorithm", "size", "at", "busbw A (GB/s)", "busbw B (GB/s)",
                    "B / A", "B / A geo. mean, all sizes", "matching rows"], srows,
                   numeric={4, 5, 6, 7, 8})

    host_bws = [bench.host_bw for bench in benches]
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
        elif plotted >= ctx.args.max_plots:
            page.note(f"Plot left out (more than --max-plots {ctx.args.max_plots} groups).")
        else:
            series = []
            for a in algos:
                sa = sorted((r for r in rows_a if r["algorithm"] == a),
                            key=lambda r: r["size_bytes"])
                sb = sorted((r for r in rows_b if r["algorithm"] == a),
                            key=lambda r: r["size_bytes"])
                series.append((a, sa, sb))
            page.img(draw_comparison(ctx.plotter, gtitle, series, ["A", "B"], host_bws),
                     f"busbw A vs B, {gtitle}")
            plotted += 1
        keys = sorted((k for k in m.matched if (k[0], k[2], k[3], k[4]) == gkey),
                      key=lambda k: (k[5], order_key(k[1], ALGORITHM_ORDER)))
        if keys:
            def body(keys=keys):
                page.table(["size (B)", "algorithm", "busbw A (GB/s)", "busbw B (GB/s)", "B / A",
                            "time A (us)", "time B (us)"],
                           [[fmt_int(k[5]), esc(k[1]), fmt_num(maps[0][k]["busbw_GBps"]),
                             fmt_num(maps[1][k]["busbw_GBps"]), fmt_ratio(m.ratio(k)),
                             fmt_time(maps[0][k]["time_us"]), fmt_time(maps[1][k]["time_us"])]
                            for k in keys], numeric={0, 2, 3, 4, 5, 6})
            page.details(f"Table: busbw ratios at {len(keys)} matching rows", body)


def compare_markdown(ctx, benches, m):
    maps = m.maps
    md = ["", "## busbw at the largest matching size", ""]
    if m.pair_summary:
        md += ["| collective | algorithm | size | at | busbw A (GB/s) | busbw B (GB/s) | B / A | "
               "A / native | B / native |", "|---|---|---:|---|---:|---:|---:|---:|---:|"]
        for (coll, algo), k, rt, gm, n in m.pair_summary:
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
    return md
