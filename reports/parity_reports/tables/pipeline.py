"""/bench/pipeline, /bench/pipeline_ranks and /bench/pipeline_timeline: pipeline schedules of a
GPT split into stages at p ranks and m micro-batches. Per run the step time, the schedule's span
and its bubble three ways: measured on clocks aligned across ranks, simulated from the action
costs measured in the same run, and the closed form (reference/theory/pipeline.hpp); per rank
its activations at the peak beside the formula; per schedule one step drawn rank by rank."""

import math
from collections import OrderedDict

from ..common import (RowTable, comparison_md, comparison_pairs, esc, finite, fmt_bytes, fmt_int,
                      fmt_known, fmt_ms, fmt_ratio, grouped_rows, known, md_table,
                      order_key, predicted_table, ratio_glance, ratio_of, section_md,
                      section_start, compare_by_key)

NAME = "pipeline"
ORDER = 100
VERDICT = False
READS = {
    "/bench/pipeline": (
        "s:schedule,model,config i:stages,chunks,micro_batches,rows_per_micro_batch,world_size,"
        "peak_activation_bytes,formula_activation_bytes f:step_seconds,makespan_seconds,"
        "simulated_makespan_seconds,measured_bubble,simulated_bubble,closed_form_bubble,"
        "clock_uncertainty_seconds,forward_seconds,backward_seconds,input_grad_seconds,"
        "weight_grad_seconds,message_seconds,activation_message_bytes,predicted_makespan_seconds,"
        "predicted_over_measured",
        ["schedule", "stages", "chunks", "micro_batches", "step_seconds", "measured_bubble"]),
    "/bench/pipeline_ranks": (
        "i:run,rank,stages_held,in_flight,formula_in_flight,peak_activation_bytes,"
        "formula_activation_bytes f:busy_seconds,idle_seconds,measured_bubble,simulated_bubble,"
        "forward_seconds,backward_seconds,input_grad_seconds,weight_grad_seconds,"
        "clock_offset_seconds,clock_uncertainty_seconds",
        ["run", "rank"]),
    "/bench/pipeline_timeline": (
        "s:source,work i:run,rank,stage,micro_batch f:start_seconds,end_seconds",
        ["run", "rank", "source", "work", "start_seconds", "end_seconds"]),
}

SCHEDULE_ORDER = ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"]
SOURCES = ["measured", "simulated"]
WORKS = ["F", "B", "I", "W", "wait"]
WORK_WORDS = {"F": "forward (F)", "B": "backward (B)", "I": "input gradient (I)",
              "W": "weight gradient (W)", "wait": "wait"}
WORK_COLORS = {"F": "#5b9bd5", "B": "#70ad47", "I": "#4fc1c6", "W": "#f2c14e",
               "wait": "#dcdcdc"}
WORK_COLUMNS = [("F", "forward_seconds"), ("B", "backward_seconds"),
                ("I", "input_grad_seconds"), ("W", "weight_grad_seconds")]
# The timeline's boxes: rank r spans r - BOX to r + BOX on its row.
BOX = 0.4

# A column the file lacks reads as unknown: NaN, -1 for the integer counts (shown as "–").
RUN_OPTIONAL = {"model": "", "config": "", "rows_per_micro_batch": -1, "world_size": -1,
                "peak_activation_bytes": -1, "formula_activation_bytes": -1}
RUN_OPTIONAL.update({c: math.nan for c in (
    "makespan_seconds", "simulated_makespan_seconds", "simulated_bubble", "closed_form_bubble",
    "clock_uncertainty_seconds", "forward_seconds", "backward_seconds", "input_grad_seconds",
    "weight_grad_seconds", "message_seconds", "activation_message_bytes", "predicted_makespan_seconds",
    "predicted_over_measured")})
RANK_OPTIONAL = {"stages_held": -1, "in_flight": -1, "formula_in_flight": -1,
                 "peak_activation_bytes": -1, "formula_activation_bytes": -1}
RANK_OPTIONAL.update({c: math.nan for c in (
    "busy_seconds", "idle_seconds", "measured_bubble", "simulated_bubble", "forward_seconds",
    "backward_seconds", "input_grad_seconds", "weight_grad_seconds", "clock_offset_seconds",
    "clock_uncertainty_seconds")})
TIMELINE_OPTIONAL = {"stage": -1, "micro_batch": -1}


def closed_form_bubble(schedule, p, m, v):
    """Idle over the step of the closed forms that need only p, m and v (theory/pipeline.hpp):
    GPipe and 1F1B (p-1)/(m+p-1); interleaved x/(1+x) with x = (p-1)/(v m). None for the
    others (ZB-H1's needs the measured costs: the file's closed_form_bubble has it)."""
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if schedule == "interleaved":
        x = (p - 1) / (v * m)
        return x / (1 + x)
    return None


def known_bytes(x):
    return fmt_bytes(x) if known(x) else "–"


class PipelineBench(RowTable):
    """The three pipeline tables: runs in schedule order, then v, p and m; each run's ranks and
    timeline intervals by the run's row index in /bench/pipeline."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/pipeline", RUN_OPTIONAL)
        self.rows.sort(key=lambda r: (order_key(r["schedule"], SCHEDULE_ORDER), int(r["chunks"]),
                                      int(r["stages"]), int(r["micro_batches"])))
        self.has_ranks, self.ranks = grouped_rows(rf, "/bench/pipeline_ranks", RANK_OPTIONAL,
                                                  lambda r: int(r["run"]), lambda r: int(r["rank"]))
        self.has_timeline, self.timeline = grouped_rows(
            rf, "/bench/pipeline_timeline", TIMELINE_OPTIONAL,
            lambda r: (int(r["run"]), r["source"]))
        self.variants = OrderedDict()
        for r in self.rows:
            self.variants.setdefault((r["schedule"], int(r["chunks"])), []).append(r)
        self.sizes = sorted({int(r["stages"]) for r in self.rows})
        self.read_alpha_beta()

    @staticmethod
    def key(r):
        return (r["schedule"], int(r["stages"]), int(r["chunks"]), int(r["micro_batches"]))

    @property
    def oversubscribed(self):
        try:
            return int(self.attrs.get("oversubscribed", 0)) == 1
        except (TypeError, ValueError):
            return False

    @property
    def note(self):
        return str(self.attrs.get("note") or "").strip().rstrip(".")

    def oversubscribed_words(self):
        """Why the measured idle is not the figure to compare: the file's note, else the same
        in the report's words with the group's counts."""
        if self.note:
            return self.note
        ranks, cores = self.attrs.get("ranks_per_host"), self.attrs.get("cores_per_host")
        where = (f" ({int(ranks)} ranks on a host with {int(cores)} "
                 f"core{'s' if int(cores) != 1 else ''})" if finite(ranks) and finite(cores)
                 else "")
        return ("ranks outnumber cores" + where + ", so a rank also waits for a core: wall-clock "
                "idle means little, and the simulated bubble, from the costs measured in this "
                "run, is the figure to compare")

    def label(self, schedule, chunks):
        """'1f1b'; 'interleaved v=2' (and v for any schedule run with several)."""
        several = len({c for s, c in self.variants if s == schedule}) > 1
        return f"{schedule} v={chunks}" if schedule == "interleaved" or several else schedule

    def row_label(self, r):
        return self.label(r["schedule"], int(r["chunks"]))

    def chosen(self):
        """{(schedule, chunks): the run drawn rank by rank}: at the largest p in the file (the
        schedule's largest when it never ran there), the m closest to 2p (the smaller on a
        tie)."""
        top = max(self.sizes) if self.sizes else 0
        out = OrderedDict()
        for variant, rows in self.variants.items():
            p = top if any(int(r["stages"]) == top for r in rows) else \
                max(int(r["stages"]) for r in rows)
            at_p = [r for r in rows if int(r["stages"]) == p]
            out[variant] = min(at_p, key=lambda r: (abs(int(r["micro_batches"]) - 2 * p),
                                                    int(r["micro_batches"])))
        return out

    def closed_form_differences(self):
        """Rows whose closed_form_bubble differs from closed_form_bubble() computed here."""
        out = []
        for r in self.rows:
            mine = closed_form_bubble(r["schedule"], int(r["stages"]), int(r["micro_batches"]),
                                      int(r["chunks"]))
            if mine is not None and finite(r["closed_form_bubble"]) and \
                    abs(mine - r["closed_form_bubble"]) > 1e-9 * max(1.0, mine):
                out.append((r, mine))
        return out

    def schedules_words(self):
        return ", ".join(self.label(s, c) for s, c in self.variants)

    def sizes_words(self):
        ms = sorted({int(r["micro_batches"]) for r in self.rows})
        m_words = f"m = {ms[0]}" if len(ms) == 1 else f"m = {ms[0]} to {ms[-1]}"
        return "p = " + ", ".join(str(p) for p in self.sizes) + f" and {m_words}"

    def bubble_words(self):
        """'at p = 4, m = 8, bubble measured / simulated / closed form: gpipe 0.350 / 0.349 /
        0.273; ...' over the drawn runs."""
        chosen = list(self.chosen().values())
        same = len({(int(r["stages"]), int(r["micro_batches"])) for r in chosen}) == 1

        def at(r):
            return f"p = {int(r['stages'])}, m = {int(r['micro_batches'])}"

        def values(r):
            return " / ".join(fmt_ratio(r[c]) for c in ("measured_bubble", "simulated_bubble",
                                                        "closed_form_bubble"))
        lead = (f"at {at(chosen[0])}, " if same else "") + \
            "bubble measured / simulated / closed form: "
        return lead + "; ".join(f"{self.row_label(r)}{'' if same else ' at ' + at(r)} "
                                f"{values(r)}" for r in chosen)


def workload_text(bench):
    workloads = OrderedDict.fromkeys((r["model"], r["config"]) for r in bench.rows)
    return "; ".join(f"{m} ({c})" if c else str(m) for m, c in workloads if m) or "a GPT"


def run_words(r, bench):
    return f"{bench.row_label(r)} p = {int(r['stages'])}, m = {int(r['micro_batches'])}"


# --------------------------------------------------------------------------------------------
# Figures

def size_color(plotter, bench, p):
    return plotter.palette[bench.sizes.index(p) % len(plotter.palette)]


def lighter(color, share):
    """The colour mixed with white (share of white): a rank's later chunks of stages."""
    from matplotlib.colors import to_rgb
    return tuple(c + (1 - c) * share for c in to_rgb(color))


def micro_batch_axis(ax, ms):
    ax.set_xscale("log", base=2)
    ms = sorted(set(ms))
    ax.set_xticks(ms)
    ax.set_xticklabels([str(m) for m in ms])
    ax.minorticks_off()
    ax.set_xlim(ms[0] / 1.35, ms[-1] * 1.35)
    ax.set_xlabel("micro-batches m")


def panel_grid(plt, n, width, height, **kw):
    """n panels in rows of at most three (two when there are four); the unused ones hidden."""
    ncols = 2 if n == 4 else min(3, n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + 0.6, height * nrows + 0.9),
                             squeeze=False, **kw)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def draw_timeline(plotter, bench, variant, r):
    """One step of one run, a row per rank: each action a box coloured by its work (F, B, I,
    W, a rank's second chunk of stages lighter) with its micro-batch written in it where it
    fits, waits grey; the measured panel above the simulated, on one time axis (ms)."""
    plt = plotter.plt
    run, p = r["_row"], int(r["stages"])
    chunks = int(r["chunks"])
    sources = [s for s in SOURCES if bench.timeline.get((run, s))]
    width = 13.0
    fig, axes = plt.subplots(len(sources), 1, sharex=True, squeeze=False,
                             figsize=(width, (0.42 * p + 1.15) * len(sources) + 0.6))
    intervals = [i for s in sources for i in bench.timeline[(run, s)]]
    begin = min([0.0] + [i["start_seconds"] * 1e3 for i in intervals])
    end = max(i["end_seconds"] for i in intervals) * 1e3
    end = end if end > begin else begin + 1.0
    px_per_ms = (width - 1.8) * 100 / (end - begin)  # the figure's 100 dpi
    seen = set()
    for ax, source in zip(axes[:, 0], sources):
        intervals = bench.timeline[(run, source)]
        held = {}
        boxes = plotter.boxes(ax)
        for i in intervals:
            rank, work, stage = int(i["rank"]), i["work"], int(i["stage"])
            start, stop = i["start_seconds"] * 1e3, i["end_seconds"] * 1e3
            color = WORK_COLORS.get(work, "0.5")
            if work != "wait" and chunks > 1 and stage >= p:
                color = lighter(color, 0.55 * min(stage // p, chunks - 1) / (chunks - 1))
                seen.add("chunk")
            if work != "wait" and stage >= 0:
                held.setdefault(rank, set()).add(stage)
            seen.add(work)
            boxes.add((f"{source} {work} bottom", f"{source} {work} top"), start, stop, rank - BOX, rank + BOX,
                      facecolor=color, edgecolor="white" if work != "wait" else "none", linewidth=0.6,
                      zorder=3 if work != "wait" else 2)
            mb = int(i["micro_batch"])
            text = str(mb)
            if work != "wait" and mb >= 0 and (stop - start) * px_per_ms >= 6 * len(text) + 3:
                ax.text((start + stop) / 2, rank, text, ha="center", va="center", fontsize=7,
                        color="0.1", zorder=4, clip_on=True)
        boxes.draw()
        ranks = sorted({int(i["rank"]) for i in intervals})
        ax.set_yticks(ranks)
        ax.set_yticklabels([f"rank {k}" + (f"\nstages {', '.join(map(str, sorted(held[k])))}"
                                           if chunks > 1 and held.get(k) else "")
                            for k in ranks], fontsize=8 if chunks > 1 else 9)
        ax.set_ylim(max(ranks) + 0.6, min(ranks) - 0.6)  # rank 0 on top
        ax.grid(axis="y", visible=False)
        ax.set_xlim(begin, end + 0.005 * (end - begin))
        span = r["makespan_seconds"] if source == "measured" else r["simulated_makespan_seconds"]
        bubble = r["measured_bubble"] if source == "measured" else r["simulated_bubble"]
        what = ("measured on aligned clocks" if source == "measured" else
                "simulated with the costs measured in this run")
        if source == "measured" and bench.oversubscribed:
            what += " (oversubscribed: its idle means little)"
        ax.set_title(f"{what}: span {fmt_ms(span)} ms, bubble {fmt_ratio(bubble)}")
    axes[-1, 0].set_xlabel("time from the step's start (ms)")
    handles = [plotter.Patch(facecolor=WORK_COLORS[w], edgecolor="0.6" if w == "wait" else "none",
                             label=WORK_WORDS[w]) for w in WORKS if w in seen]
    if "chunk" in seen:
        later = f"stage {p}" if p * chunks - 1 == p else f"stages {p} to {p * chunks - 1}"
        handles.append(plotter.Patch(facecolor=lighter("0.45", 0.55),
                                     label=f"lighter: {later}, a rank's later chunks"))
    name = f"pipeline_timeline_{variant[0]}" + (f"_v{variant[1]}" if variant[1] > 1 and
                                                variant[0] == "interleaved" else "")
    return plotter.finish(fig, name, handles, most=6,
                          title=f"{bench.label(*variant)}: one training step at p = {p}, "
                          f"m = {int(r['micro_batches'])}; the number in a box is its micro-batch")


def draw_bubble(plotter, bench):
    """One panel per schedule: the bubble against m for each p, measured (filled, solid) and
    simulated (open, dashed), and the closed form: a curve computed here for GPipe, 1F1B and
    interleaved, the file's closed_form_bubble points (crosses) for the others."""
    plt = plotter.plt
    fig, axes = panel_grid(plt, len(bench.variants), 4.6, 3.6, sharey=True)
    top, file_points = 0.0, False
    faint = bench.oversubscribed
    for ax, ((schedule, chunks), rows) in zip(axes, bench.variants.items()):
        label = bench.label(schedule, chunks)
        ms = []
        for p in sorted({int(r["stages"]) for r in rows}):
            at_p = sorted((r for r in rows if int(r["stages"]) == p),
                          key=lambda r: int(r["micro_batches"]))
            color = size_color(plotter, bench, p)
            xs = [int(r["micro_batches"]) for r in at_p]
            ms += xs
            measured = [r["measured_bubble"] for r in at_p]
            simulated = [r["simulated_bubble"] for r in at_p]
            top = max([top] + [v for v in measured + simulated if finite(v)])
            plotter.plot(ax, f"{label} p={p} measured", xs, measured, marker="o", markersize=5,
                         color=color, linewidth=1.6, alpha=0.45 if faint else 1.0, zorder=4)
            plotter.plot(ax, f"{label} p={p} simulated", xs, simulated, marker="s",
                         markersize=5, markerfacecolor="white", linestyle="--", color=color,
                         linewidth=1.2, zorder=5)
            if closed_form_bubble(schedule, p, xs[0], chunks) is not None:
                lo, hi = xs[0], xs[-1]
                curve_m = [lo * (hi / lo) ** (k / 60) for k in range(61)] if hi > lo else [lo]
                curve = [closed_form_bubble(schedule, p, m, chunks) for m in curve_m]
                top = max([top] + curve)
                plotter.plot(ax, f"{label} p={p} closed form", curve_m, curve, linestyle=":",
                             linewidth=1.8, color=color, marker="" if hi > lo else "_",
                             zorder=3)
            else:
                pts = [(m, r["closed_form_bubble"]) for m, r in zip(xs, at_p)
                       if finite(r["closed_form_bubble"])]
                if pts:
                    file_points = True
                    top = max([top] + [y for _, y in pts])
                    plotter.plot(ax, f"{label} p={p} closed form", [m for m, _ in pts],
                                 [y for _, y in pts], linestyle=":", linewidth=1.4, marker="x",
                                 markersize=7, markeredgewidth=1.8, color=color, zorder=3)
        micro_batch_axis(ax, ms)
        ax.set_title(label)
    axes[0].set_ylim(0, max(top, 0.05) * 1.12)
    for i, ax in enumerate(axes):
        if i % (2 if len(axes) == 4 else min(3, len(axes))) == 0:
            ax.set_ylabel("bubble: idle / span, mean over ranks")
    handles = [plotter.Line2D([], [], color=size_color(plotter, bench, p), linewidth=3,
                              label=f"p = {p}") for p in bench.sizes]
    handles += [plotter.Line2D([], [], marker="o", markersize=5, color="0.3", linewidth=1.6,
                               alpha=0.45 if faint else 1.0,
                               label="measured" + (" (oversubscribed)" if faint else "")),
                plotter.Line2D([], [], marker="s", markersize=5, markerfacecolor="white",
                               linestyle="--", color="0.3", label="simulated, measured costs"),
                plotter.Line2D([], [], linestyle=":", linewidth=1.8, color="0.3",
                               label="closed form")]
    if file_points:
        handles.append(plotter.Line2D([], [], linestyle=":", marker="x", markersize=7,
                                      markeredgewidth=1.8, color="0.3",
                                      label="closed form with the measured F, I, W (file)"))
    return plotter.finish(fig, "pipeline_bubble", handles, most=4,
                          title="Pipeline bubble against the number of micro-batches")


def draw_activations(plotter, bench, chosen):
    """Per schedule at its drawn run, each rank's activation bytes at the peak (measured)
    beside the formula (activations in flight x each stage's bytes per micro-batch)."""
    plt = plotter.plt
    fig, axes = panel_grid(plt, len(chosen), 4.6, 3.8, sharey=True)
    values = [v for r in chosen.values() for x in bench.ranks.get(r["_row"], [])
              for v in (x["peak_activation_bytes"], x["formula_activation_bytes"]) if known(v)]
    unit, scale = plotter.byte_unit(max(values or [0]))
    width = 0.38
    for i, (ax, (variant, r)) in enumerate(zip(axes, chosen.items())):
        label = bench.label(*variant)
        rows = bench.ranks.get(r["_row"], [])
        for x in rows:
            k = int(x["rank"])
            if known(x["peak_activation_bytes"]):
                plotter.bar(ax, f"{label} measured peak", k - width / 2,
                            x["peak_activation_bytes"] / scale, width=width * 0.95,
                            color=plotter.palette[0], zorder=3)
            if known(x["formula_activation_bytes"]):
                plotter.bar(ax, f"{label} formula", k + width / 2,
                            x["formula_activation_bytes"] / scale, width=width * 0.95,
                            color="0.8", hatch="//", edgecolor="0.45", linewidth=0, zorder=3)
        ax.set_xticks([int(x["rank"]) for x in rows])
        ax.set_xticklabels([f"rank {int(x['rank'])}" + (f"\n{int(x['in_flight'])} in flight"
                                                         if known(x["in_flight"]) else "")
                            for x in rows], fontsize=8)
        ax.grid(axis="x", visible=False)
        ax.set_title(f"{label}, p = {int(r['stages'])}, m = {int(r['micro_batches'])}")
        if i % (2 if len(axes) == 4 else min(3, len(axes))) == 0:
            ax.set_ylabel(f"activation bytes at the peak ({unit})")
    axes[0].set_ylim(0, max(values or [1]) / scale * 1.12)
    handles = [plotter.Patch(color=plotter.palette[0], label="measured peak"),
               plotter.Patch(facecolor="0.8", hatch="//", edgecolor="0.45", linewidth=0,
                             label="formula: in flight x the stage's bytes per micro-batch")]
    return plotter.finish(fig, "pipeline_activations", handles, most=2,
                          title="Activation bytes per rank, measured and by the formula")


def draw_comparison(plotter, benches, pairs, run_labels):
    """Per schedule, the step time against m of the matched runs, run A solid, run B dashed,
    one colour per p."""
    plt = plotter.plt
    variants = OrderedDict()
    for (schedule, p, chunks, m), a, b in pairs:
        variants.setdefault((schedule, chunks), []).append((p, m, a, b))
    fig, axes = panel_grid(plt, len(variants), 4.6, 3.6)
    sizes = sorted({p for rows in variants.values() for p, _, _, _ in rows})
    colors = {p: plotter.palette[i % len(plotter.palette)] for i, p in enumerate(sizes)}
    for i, (ax, (variant, rows)) in enumerate(zip(axes, variants.items())):
        label = benches[0].label(*variant)
        for p in sorted({p for p, _, _, _ in rows}):
            at_p = sorted((x for x in rows if x[0] == p), key=lambda x: x[1])
            ms = [m for _, m, _, _ in at_p]
            for j, (run, ls) in enumerate(zip(run_labels, ("-", "--"))):
                plotter.plot(ax, f"{label} p={p} {run}", ms,
                             [x[2 + j]["step_seconds"] * 1e3 for x in at_p], marker="o",
                             markersize=4, linestyle=ls, color=colors[p], linewidth=1.6)
        micro_batch_axis(ax, [m for _, m, _, _ in rows])
        ax.set_ylim(bottom=0)
        ax.set_title(label)
        if i % (2 if len(axes) == 4 else min(3, len(axes))) == 0:
            ax.set_ylabel("step time (ms, slowest rank)")
    handles = [plotter.Line2D([], [], color=colors[p], linewidth=3, label=f"p = {p}")
               for p in sizes]
    for (ls, word), label in zip((("-", "solid"), ("--", "dashed")), run_labels):
        handles.append(plotter.Line2D([], [], color="0.3", linestyle=ls,
                                      label=f"{label} ({word})"))
    return plotter.finish(fig, "pipeline_compare", handles, most=3,
                          title="Pipeline step time against m, run A and run B")


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = PipelineBench
TITLE = "Pipeline parallelism"


def oversubscribed_html(bench, name=""):
    return (f"<p><span class=\"bad\">{name}Oversubscribed:</span> "
            f"{esc(bench.oversubscribed_words())}.</p>")


def section(page, ctx, bench):
    """The "Pipeline parallelism" section; left out entirely when the file has no
    /bench/pipeline."""
    plotter = ctx.plotter
    if not section_start(page, bench, NAME, TITLE, "/bench/pipeline"):
        return
    steps, warmup = bench.attrs.get("timed_steps"), bench.attrs.get("warmup_steps")
    uncertainty = max([r["clock_uncertainty_seconds"] for r in bench.rows
                       if finite(r["clock_uncertainty_seconds"])] or [math.nan])
    ab = bench.alpha_beta_text()
    page.p(f"{esc(workload_text(bench))} split into stages over p pipeline ranks, one stage per "
           f"rank (interleaved: v, zb-v: 2), trained with each schedule "
           f"({esc(bench.schedules_words())}) at {esc(bench.sizes_words())} micro-batches; step "
           "time: the slowest rank's"
           + (f" median of {int(steps)} timed steps after {int(warmup)} warm-up"
              if finite(steps) and finite(warmup) else " median step") + ". The bubble, a "
           "rank's idle time over the schedule's span, mean over ranks, three ways: "
           "<b>measured</b> on clocks aligned across ranks"
           + (f" (uncertainty at most {uncertainty * 1e6:.3g} us)" if finite(uncertainty)
              else "")
           + "; <b>simulated</b> by parity's discrete-event simulator fed with the action costs "
           "measured in the same run and messages of alpha + bytes x beta"
           + (f" ({esc(ab)})" if ab else "")
           + "; and the <b>closed form</b>, which takes every stage equally fast and messages "
           "free.")
    if bench.oversubscribed:
        page.add(oversubscribed_html(bench))
    elif bench.note:
        page.p(f"{esc(bench.note)}.", "note")
    formulas = bench.attrs.get("formulas")
    if formulas:
        page.p(f"Formulas: {esc(formulas)}.", "note")
    for r, mine in bench.closed_form_differences():
        page.note(f"{run_words(r, bench)}: closed_form_bubble {fmt_ratio(r['closed_form_bubble'])} "
                  f"in the file, {fmt_ratio(mine)} by the closed form computed here.")

    chosen = bench.chosen()
    if not bench.has_timeline:
        page.note("The file has no /bench/pipeline_timeline: no timeline figures.")
    else:
        drawn = [(v, r) for v, r in chosen.items()
                 if any(bench.timeline.get((r["_row"], s)) for s in SOURCES)]
        if drawn:
            page.p("One training step rank by rank, per schedule at the largest p and the m "
                   "closest to 2p: forward (F), backward (B), or backward split into the input "
                   "gradient (I), which the previous stage waits for, and the weight gradient "
                   "(W), which can wait; grey: a rank waiting. The number in a box is its "
                   "micro-batch. Measured above, simulated below, on one time axis.")
        for variant, r in drawn:
            page.img(draw_timeline(plotter, bench, variant, r),
                     f"timeline of {run_words(r, bench)}")
        for variant, r in chosen.items():
            if (variant, r) not in drawn:
                page.note(f"{run_words(r, bench)} has no intervals in /bench/pipeline_timeline.")

    from_file = sorted({bench.label(r["schedule"], int(r["chunks"])) for r in bench.rows
                        if finite(r["closed_form_bubble"]) and closed_form_bubble(
                            r["schedule"], 1, 1, 1) is None})
    page.p("The bubble against m, per schedule and p: measured (filled), simulated from the "
           "measured costs (open, dashed) and the closed form (dotted): (p-1)/(m+p-1) for GPipe "
           "and 1F1B, x/(1+x) with x = (p-1)/(v m) interleaved, computed here"
           + (f"; for {esc(', '.join(from_file))} the file's closed_form_bubble, from the "
              "measured F, I and W (crosses)" if from_file else "") + ".")
    page.img(draw_bubble(plotter, bench), "pipeline bubble against m")

    with_ranks = OrderedDict((v, r) for v, r in chosen.items() if any(
        known(x["peak_activation_bytes"]) or known(x["formula_activation_bytes"])
        for x in bench.ranks.get(r["_row"], [])))
    if with_ranks:
        page.p("Activation bytes each rank held at its peak in the drawn runs, measured, beside "
               "the formula: the (stage, micro-batch) pairs in flight (forward run, backward not "
               "yet), counted from the schedule, times each stage's measured bytes per "
               "micro-batch. A deferred W keeps the inputs of its weight gradient, which the "
               "measured peak includes.")
        page.img(draw_activations(plotter, bench, with_ranks),
                 "activation bytes per rank, measured and formula")
    elif not bench.has_ranks:
        page.note("The file has no /bench/pipeline_ranks: no per-rank figure.")

    body = []
    for r in bench.rows:
        peak, formula = r["peak_activation_bytes"], r["formula_activation_bytes"]
        body.append([esc(r["schedule"]), fmt_int(r["stages"]), fmt_int(r["chunks"]),
                     fmt_int(r["micro_batches"]), fmt_ms(r["step_seconds"]),
                     fmt_ms(r["makespan_seconds"]), fmt_ms(r["simulated_makespan_seconds"]),
                     fmt_ratio(r["measured_bubble"]), fmt_ratio(r["simulated_bubble"]),
                     fmt_ratio(r["closed_form_bubble"]), known_bytes(peak), known_bytes(formula),
                     fmt_ratio(ratio_of(peak, formula)) if known(peak) and known(formula)
                     else "–"])
    page.table(["schedule", "p", "v", "m", "step time (ms)", "span measured (ms)",
                "span simulated (ms)", "bubble measured", "bubble simulated",
                "bubble closed form", "peak activations (B)", "formula (B)",
                "peak / formula"], body, numeric=set(range(1, 13)))
    predicted_table(page, "the schedule simulated with every rank's actions costed op by op "
                    "(the layers of its stages) and the ping-pong's messages; the span of the "
                    "step's actions", ["schedule", "p", "v", "m"],
                    [((r["schedule"], int(r["stages"]), int(r["chunks"]), int(r["micro_batches"])),
                      r["predicted_makespan_seconds"], r["makespan_seconds"], r["predicted_over_measured"])
                     for r in bench.rows])

    def costs_body():
        rows = [[esc(run_words(r, bench)), fmt_known(r["world_size"]),
                 fmt_known(r["rows_per_micro_batch"])]
                + [fmt_ms(r[column]) for _, column in WORK_COLUMNS]
                + [fmt_ms(r["message_seconds"]), fmt_bytes(r["activation_message_bytes"]),
                   f"{r['clock_uncertainty_seconds'] * 1e6:.3g}"
                   if finite(r["clock_uncertainty_seconds"]) else "–"]
                for r in bench.rows]
        page.table(["run", "world size", "rows per micro-batch", "F (ms)", "B (ms)", "I (ms)",
                    "W (ms)", "message (ms)", "message (B)", "clock uncertainty (us)"], rows,
                   numeric=set(range(1, 10)))
    page.details("Table: action costs (mean over ranks of each rank's median) and messages",
                 costs_body)

    if bench.ranks:
        def ranks_body():
            rows = []
            for r in bench.rows:
                for x in bench.ranks.get(r["_row"], []):
                    rows.append([esc(run_words(r, bench)), fmt_int(x["rank"]),
                                 fmt_known(x["stages_held"]), fmt_known(x["in_flight"]),
                                 fmt_known(x["formula_in_flight"]),
                                 known_bytes(x["peak_activation_bytes"]),
                                 known_bytes(x["formula_activation_bytes"]),
                                 fmt_ms(x["busy_seconds"]), fmt_ms(x["idle_seconds"]),
                                 fmt_ratio(x["measured_bubble"]),
                                 fmt_ratio(x["simulated_bubble"]),
                                 fmt_ms(x["clock_offset_seconds"]),
                                 f"{x['clock_uncertainty_seconds'] * 1e6:.3g}"
                                 if finite(x["clock_uncertainty_seconds"]) else "–"])
            page.table(["run", "rank", "stages held", "in flight", "formula", "peak activations "
                        "(B)", "formula (B)", "busy (ms)", "idle (ms)", "bubble measured",
                        "bubble simulated", "clock offset (ms)", "clock uncertainty (us)"],
                       rows, numeric=set(range(1, 13)))
        page.details(f"Table: every rank of every run "
                     f"({sum(len(v) for v in bench.ranks.values())} rows)", ranks_body)


def glance(ctx, bench):
    if not bench.usable:
        return []
    line = (f"Pipeline: {bench.schedules_words()} at {bench.sizes_words()}; "
            f"{bench.bubble_words()}")
    if bench.oversubscribed:
        line += " (oversubscribed: compare the simulated bubble)"
    return [esc(line + ".")]


def pipeline_md(bench):
    lines = [f"- Runs: {workload_text(bench)}, {bench.schedules_words()} at "
             f"{bench.sizes_words()}.",
             f"- Drawn rank by rank: {bench.bubble_words()}."]
    if bench.oversubscribed:
        lines.append(f"- **Oversubscribed:** {bench.oversubscribed_words()}.")
    rows = [[r["schedule"], int(r["stages"]), int(r["chunks"]), int(r["micro_batches"]),
             fmt_ms(r["step_seconds"]), fmt_ms(r["makespan_seconds"]),
             fmt_ms(r["simulated_makespan_seconds"]), fmt_ratio(r["measured_bubble"]),
             fmt_ratio(r["simulated_bubble"]), fmt_ratio(r["closed_form_bubble"]),
             known_bytes(r["peak_activation_bytes"]), known_bytes(r["formula_activation_bytes"])]
            for r in bench.rows]
    return lines + [""] + md_table(
        ["schedule", "p", "v", "m", "step (ms)", "span (ms)", "simulated (ms)", "bubble",
         "simulated", "closed form", "peak activations", "formula"], "lrrrrrrrrrrr", rows)


def markdown(ctx, bench):
    return section_md(bench, TITLE, "/bench/pipeline", lambda: pipeline_md(bench))


# --------------------------------------------------------------------------------------------
# Two runs

# compare(): the runs matched on (schedule, p, v, m).
compare = compare_by_key


def oversubscribed_runs(benches):
    """[(run name, its table)] of the oversubscribed runs."""
    return [(name, b) for name, b in zip("AB", benches) if b.oversubscribed]


def compare_glance(ctx, benches, matches):
    lines = ratio_glance(matches, "Pipeline step time", "matching run", "step_seconds")
    over = [name for name, _ in oversubscribed_runs(benches)]
    if lines and over:
        lines.append(esc(f"Pipeline: run {' and '.join(over)} oversubscribed; compare the "
                         "simulated bubbles."))
    return lines


def compare_section(page, ctx, benches, matches):
    """Step time and bubbles of B against A per (schedule, p, v, m)."""
    labels, plotter = ctx.labels, ctx.plotter

    def oversubscribed_notes(page):
        for name, bench in oversubscribed_runs(benches):
            page.add(oversubscribed_html(bench, f"Run {name} "))
    pairs = comparison_pairs(page, benches, matches, "/bench/pipeline", "pipeline",
                             "Pipeline parallelism: B against A",
                             "run of the same schedule, p, v and m",
                             lambda k: f"{k[0]} p = {k[1]}, v = {k[2]}, m = {k[3]}",
                             "schedule, p, v and m", notes=oversubscribed_notes)
    if pairs is None:
        return
    page.p("Median step time of the slowest rank, matched on schedule, p, v and m. Ratio = B / "
           "A (below 1: B is faster). Bubbles: measured on aligned clocks, and simulated from "
           "each run's measured costs.")
    rows = []
    for _, a, b in pairs:
        rows.append([esc(a["schedule"]), fmt_int(a["stages"]), fmt_int(a["chunks"]),
                     fmt_int(a["micro_batches"]), fmt_ms(a["step_seconds"]),
                     fmt_ms(b["step_seconds"]),
                     fmt_ratio(ratio_of(b["step_seconds"], a["step_seconds"])),
                     fmt_ratio(a["measured_bubble"]), fmt_ratio(b["measured_bubble"]),
                     fmt_ratio(a["simulated_bubble"]), fmt_ratio(b["simulated_bubble"])])
    page.table(["schedule", "p", "v", "m", "step time A (ms)", "step time B (ms)",
                "step time B / A", "bubble A", "bubble B", "simulated A", "simulated B"], rows,
               numeric=set(range(1, 11)))
    page.img(draw_comparison(plotter, benches, pairs, [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "pipeline step time against m, run A and run B")


def compare_markdown(ctx, benches, matches):
    def oversubscribed_lines():
        over = [f"- **{name} oversubscribed:** {bench.oversubscribed_words()}."
                for name, bench in oversubscribed_runs(benches)]
        return [""] + over if over else []
    return comparison_md(
        matches, "Pipeline parallelism (step time, slowest rank)",
        ["schedule", "p", "v", "m", "step A (ms)", "step B (ms)", "B / A", "bubble A",
         "bubble B"], "lrrrrrrrr",
        lambda key, a, b: [*key, fmt_ms(a["step_seconds"]), fmt_ms(b["step_seconds"]),
                           fmt_ratio(ratio_of(b["step_seconds"], a["step_seconds"])),
                           fmt_ratio(a["measured_bubble"]), fmt_ratio(b["measured_bubble"])],
        oversubscribed_lines)
