"""/bench/scaling: a data-parallel training step at every world size, strong and weak: speedup
and efficiency, the Amdahl fit, and exposed communication against the alpha-beta prediction."""

import math
from collections import OrderedDict, defaultdict

from ..common import (RowTable, capitalized, comparison_md, comparison_pairs, esc, finite,
                      fmt_count, fmt_int, fmt_known, fmt_ms, fmt_num, fmt_ratio, matched,
                      order_key, predicted_table, ratio_of, section_md, section_start,
                      compare_by_key)

NAME = "scaling"
ORDER = 70
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/bench/scaling": (
        "s:mode,model,config i:world_size,global_batch,rank_batch,bytes_sent "
        "f:step_seconds,speedup,efficiency,amdahl_serial_fraction,amdahl_speedup,"
        "exposed_comm_seconds,predicted_comm_seconds,predicted_step_seconds,predicted_over_measured",
        ["mode", "world_size", "step_seconds", "speedup", "efficiency"]),
}

SCALING_MODE_ORDER = ["strong", "weak"]
SCALING_OPTIONAL = {"model": "", "config": "", "global_batch": -1, "rank_batch": -1,
                    "amdahl_serial_fraction": math.nan, "amdahl_speedup": math.nan,
                    "exposed_comm_seconds": math.nan, "predicted_comm_seconds": math.nan,
                    "bytes_sent": -1, "predicted_step_seconds": math.nan,
                    "predicted_over_measured": math.nan}


def amdahl_speedup(serial_fraction, n):
    """Amdahl's law: 1 / (s + (1 - s) / N) (theory::amdahl_speedup)."""
    return 1 / (serial_fraction + (1 - serial_fraction) / n)


class ScalingBench(RowTable):
    """/bench/scaling: one row per (mode, world size)."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/scaling", SCALING_OPTIONAL)
        modes = defaultdict(list)
        for r in self.rows:
            modes[r["mode"]].append(r)
        self.modes = OrderedDict(
            (m, sorted(modes[m], key=lambda r: r["world_size"]))
            for m in sorted(modes, key=lambda m: order_key(m, SCALING_MODE_ORDER)))
        self.read_alpha_beta()

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


# --------------------------------------------------------------------------------------------
# Figures

def mode_color(plotter, mode):
    return plotter.palette[order_key(mode, SCALING_MODE_ORDER)[0] % len(plotter.palette)]


def draw(plotter, scaling):
    """Speedup against N with the ideal and the Amdahl fit; efficiency; and, when the table
    has them, exposed communication against the alpha-beta prediction."""
    plt = plotter.plt
    comm = scaling.has_comm()
    fig, axes = plt.subplots(1, 3 if comm else 2, figsize=(15 if comm else 11, 4.8))
    ax_s, ax_e = axes[0], axes[1]
    handles, sizes = [], []
    for mode, rows in scaling.modes.items():
        color = mode_color(plotter, mode)
        ns = [r["world_size"] for r in rows]
        sizes += ns
        plotter.plot(ax_s, f"{mode} speedup", ns, [r["speedup"] for r in rows], marker="o",
                     markersize=4, color=color, linewidth=1.8, zorder=4)
        plotter.plot(ax_e, f"{mode} efficiency", ns, [r["efficiency"] for r in rows],
                     marker="o", markersize=4, color=color, linewidth=1.8, zorder=4)
        handles.append(plotter.Line2D([], [], marker="o", markersize=4, color=color,
                                      label=f"{mode} (measured)"))
        curve = scaling.amdahl_curve(mode)
        if curve is not None:
            plotter.plot(ax_s, f"{mode} Amdahl fit", curve[0], curve[1], linestyle=":",
                         linewidth=1.6, color=color, zorder=3)
            handles.append(plotter.Line2D([], [], linestyle=":", linewidth=1.6, color=color,
                                          label=f"Amdahl fit, {mode}: s = "
                                                f"{scaling.serial_fraction(mode):.3g}"))
        if comm:
            ax_c = axes[2]
            plotter.plot(ax_c, f"{mode} exposed comm", ns,
                         [r["exposed_comm_seconds"] * 1e3 for r in rows], marker="o",
                         markersize=4, color=color, linewidth=1.8, zorder=4)
            plotter.plot(ax_c, f"{mode} predicted comm", ns,
                         [r["predicted_comm_seconds"] * 1e3 for r in rows], marker="o",
                         markersize=5, markerfacecolor="white", linestyle="--", color=color,
                         linewidth=1.2, zorder=3)
    lo, hi = min(sizes), max(sizes)
    plotter.plot(ax_s, "ideal", [lo, hi], [lo, hi], color="0.45", linestyle="--",
                 linewidth=1.2, zorder=2)
    handles.insert(0, plotter.Line2D([], [], color="0.45", linestyle="--",
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
        handles.append(plotter.Line2D([], [], marker="o", markersize=5,
                                      markerfacecolor="white", linestyle="--", color="0.3",
                                      label="alpha-beta prediction (ring all-reduce)"))
        panels.append(ax_c)
    for ax in panels:
        plotter.world_axis(ax, sizes)
    return plotter.finish(fig, "scaling", handles, most=3, title="Data-parallel scaling")


def draw_comparison(plotter, scalings, run_labels):
    """Step time against N per mode, run A solid, run B dashed."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    handles, sizes = [], []
    modes = list(OrderedDict.fromkeys(m for s in scalings for m in s.modes))
    for mode in modes:
        color = mode_color(plotter, mode)
        for scaling, run, ls in zip(scalings, run_labels, ("-", "--")):
            rows = scaling.modes.get(mode, [])
            ns = [r["world_size"] for r in rows]
            sizes += ns
            plotter.plot(ax, f"{mode} step time {run}", ns,
                         [r["step_seconds"] * 1e3 for r in rows], marker="o", markersize=4,
                         linestyle=ls, color=color, linewidth=1.6)
        handles.append(plotter.Line2D([], [], color=color, label=mode))
    for (ls, word), label in zip((("-", "solid"), ("--", "dashed")), run_labels):
        handles.append(plotter.Line2D([], [], color="0.3", linestyle=ls,
                                      label=f"{label} ({word})"))
    plotter.world_axis(ax, sizes)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("step time (ms, slowest rank)")
    ax.set_title("Data-parallel step time per world size, run A and run B")
    return plotter.finish(fig, "scaling_compare", handles, most=2)


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = ScalingBench
TITLE = "Scaling"


def section(page, ctx, scaling):
    """The "Scaling" section; left out entirely when the file has no /bench/scaling."""
    plotter = ctx.plotter
    if not section_start(page, scaling, "scaling", "Data-parallel scaling", "/bench/scaling"):
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
    page.img(draw(plotter, scaling), "speedup, efficiency and communication against ranks")
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
    predicted_table(page, "the largest rank's shard op by op, plus the bucketed all-reduces that its "
                    "backward does not hide", ["mode", "world size"],
                    [((mode, int(r["world_size"])), r["predicted_step_seconds"], r["step_seconds"],
                      r["predicted_over_measured"])
                     for mode, mode_rows in scaling.modes.items() for r in mode_rows])

def glance(ctx, scaling):
    if not scaling.usable:
        return []
    return [esc(capitalized("; ".join(scaling.words(m) for m in scaling.modes))) + "."]


def scaling_md(scaling):
    """summary.md lines: each mode's speedup and fit, and the alpha-beta constants."""
    lines = [f"- {capitalized(scaling.words(m))}." for m in scaling.modes]
    ab = scaling.alpha_beta_text()
    if ab:
        lines.append(f"- Alpha-beta constants of the communication prediction: {ab}.")
    return lines


def markdown(ctx, scaling):
    return section_md(scaling, "Data-parallel scaling", "/bench/scaling",
                      lambda: scaling_md(scaling))


# --------------------------------------------------------------------------------------------
# Two runs

# compare(): the runs' rows matched on (mode, world size).
compare = compare_by_key


def compare_glance(ctx, scalings, matches):
    pairs = matched(matches)
    if not pairs:
        return []
    largest = OrderedDict()
    for (mode, n), a, b in pairs:
        if mode not in largest or n > largest[mode][0]:
            largest[mode] = (n, ratio_of(b["step_seconds"], a["step_seconds"]))
    return ["Data-parallel step time B / A at the largest matching world size: "
            + "; ".join(f"{esc(mode)} at {n} ranks {fmt_ratio(r)}"
                        for mode, (n, r) in largest.items()) + "."]


def compare_section(page, ctx, scalings, matches):
    """Step time of B against A per (mode, world size)."""
    labels, plotter = ctx.labels, ctx.plotter
    pairs = comparison_pairs(page, scalings, matches, "/bench/scaling", "scaling",
                             "Data-parallel scaling: B against A",
                             "row of the same mode and world size",
                             lambda k: f"{k[0]} at {k[1]} ranks", "mode and world size")
    if pairs is None:
        return
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
    page.img(draw_comparison(plotter, scalings, [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "step time against ranks, run A and run B")


def compare_markdown(ctx, scalings, matches):
    return comparison_md(
        matches, "Data-parallel scaling (step time, slowest rank)",
        ["mode", "world size", "step A (ms)", "step B (ms)", "B / A", "speedup A", "speedup B"],
        "lrrrrrr",
        lambda key, a, b: [*key, fmt_ms(a["step_seconds"]), fmt_ms(b["step_seconds"]),
                           fmt_ratio(ratio_of(b["step_seconds"], a["step_seconds"])),
                           fmt_num(a["speedup"]), fmt_num(b["speedup"])])
