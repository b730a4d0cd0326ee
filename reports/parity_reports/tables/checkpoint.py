"""/bench/checkpoint: activation checkpointing, one row per policy (none, the baseline, first).
What each policy saves, the activation bytes the blocks store between forward and backward and
hold at their peak, against what it costs, the step time over the same model's step without
recompute in the same run; and each count beside its formula (reference/theory/checkpoint.hpp):
the bytes, and the FLOPs recomputation adds."""

import math
import re
from collections import OrderedDict

from ..common import (RowTable, comparison_md, comparison_pairs, esc, finite, fmt_bytes,
                      fmt_flops, fmt_ms, fmt_ratio, fmt_size, fmt_spread, formula_differences, formula_glance,
                      known, md_table, plural, ratio_glance, ratio_of, runs_md,
                      predicted_table, section_md, section_start, compare_by_key,
                      verdict_span, yes_no)

NAME = "checkpoint"
ORDER = 120
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/bench/checkpoint": (
        "s:policy,kind,layout,dtype i:every_k,budget_bytes,recomputed_blocks,segments,selective,"
        "layers,batch,sequence,hidden,heads,stored_bytes,formula_stored_bytes,peak_bytes,"
        "formula_peak_bytes,step_flops,baseline_step_flops,recompute_flops,"
        "formula_recompute_flops,recomputed_forwards,timed_pairs,ranks,losses_equal,"
        "matches_formula f:step_time_s,baseline_step_time_s,time_ratio,time_ratio_rank_min,"
        "time_ratio_rank_max,predicted_step_time_s,predicted_time_ratio,predicted_over_measured",
        ["policy", "peak_bytes", "formula_peak_bytes", "time_ratio"]),
}

# A column the file lacks reads as unknown: "" for a string (the kind is then read off the
# policy's name), -1 for an integer count (shown as "–"), NaN for a time, and None for a
# verdict, which the report then works out from the columns it has.
CHECKPOINT_OPTIONAL = {"kind": "", "layout": "", "dtype": "", "losses_equal": None,
                       "matches_formula": None}
CHECKPOINT_OPTIONAL.update({c: -1 for c in (
    "every_k", "budget_bytes", "recomputed_blocks", "segments", "selective", "layers", "batch",
    "sequence", "hidden", "heads", "stored_bytes", "formula_stored_bytes", "step_flops",
    "baseline_step_flops", "recompute_flops", "formula_recompute_flops", "recomputed_forwards",
    "timed_pairs", "ranks")})
CHECKPOINT_OPTIONAL.update({c: math.nan for c in (
    "step_time_s", "baseline_step_time_s", "time_ratio_rank_min", "time_ratio_rank_max",
    "predicted_step_time_s", "predicted_time_ratio", "predicted_over_measured")})
# The counts that must equal their formula (bench_checkpoint's matches_formula), as words.
FORMULA_CHECKS = [("stored_bytes", "stored bytes"), ("peak_bytes", "peak bytes"),
                  ("recompute_flops", "recompute FLOPs")]
# The trade-off figure's panels: (title, measured column, its formula).
PANELS = [("peak: the most the blocks hold at once", "peak_bytes", "formula_peak_bytes"),
          ("stored between forward and backward", "stored_bytes", "formula_stored_bytes")]
# Each kind of policy's colour (a palette index; none in black), the same in every figure.
KIND_COLORS = {"full": 0, "every": 2, "sqrt": 4, "selective": 1, "budget": 7}
KIND_WORDS = {"none": "none (no recompute)", "full": "full", "every": "every k-th block",
              "sqrt": "sqrt (segments of ceil(sqrt L))", "selective": "selective (attention)",
              "budget": "byte budget"}
RED = "#b00020"


def kind_of(r):
    """The policy without its argument: the file's kind, else the name less its digits."""
    return r["kind"] or re.sub(r"\d+$", "", str(r["policy"]))


def differences(r):
    """What of a row fails: ["losses", "peak bytes", ...]. The file's verdicts decide
    (losses_equal, matches_formula); the columns say which count differs from its formula, and
    stand in for a matches_formula the file lacks."""
    losses = r["losses_equal"] is not None and int(r["losses_equal"]) != 1
    return (["losses"] if losses else []) + formula_differences(r, FORMULA_CHECKS,
                                                                 "matches_formula", "formulas")


def overhead(flops, r):
    """FLOPs over the step without recompute: recompute_flops or its formula as a fraction of
    baseline_step_flops; NaN where the file lacks either."""
    return flops / r["baseline_step_flops"] if known(flops) and known(
        r["baseline_step_flops"]) and r["baseline_step_flops"] > 0 else math.nan


def formula_ratio(r):
    """The time ratio the formula's FLOPs predict: 1 + recompute FLOPs / step FLOPs."""
    return 1 + overhead(r["formula_recompute_flops"], r)


class CheckpointBench(RowTable):
    """/bench/checkpoint: one row per policy, in the order `parity bench checkpoint` ran them
    (none first)."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/checkpoint", CHECKPOINT_OPTIONAL)
        for r in self.rows:
            r["kind"] = kind_of(r)
            r["differs"] = differences(r)
        self.failed = [r for r in self.rows if r["differs"]]
        self.baseline = next((r for r in self.rows if r["policy"] == "none"), None)

    @staticmethod
    def key(r):
        return r["policy"]

    def kinds(self):
        return list(OrderedDict.fromkeys(r["kind"] for r in self.rows))

    def match_words(self):
        """'every policy's losses equal the run without recompute bit for bit, and its bytes
        and FLOPs equal the formulas', or which policies fail and why."""
        total = len(self.rows)
        if self.failed:
            return (f"{len(self.failed)} of {total} policies fail: " + "; ".join(
                f"{r['policy']} ({', '.join(r['differs'])} differ)" for r in self.failed))
        claims = []
        if any(r["losses_equal"] is not None for r in self.rows):
            claims.append("losses equal the run without recompute bit for bit")
        if any(r["matches_formula"] is not None for r in self.rows):
            claims.append("bytes and FLOPs equal the formulas")
        else:
            words = [word for column, word in FORMULA_CHECKS
                     if any(known(r[column]) and known(r[f"formula_{column}"]) for r in self.rows)]
            claims.append(" and ".join(words) + " equal the formula"
                          + ("s" if len(words) > 1 else ""))
        return (("the one policy's " if total == 1 else "every policy's ")
                + ", and its ".join(claims))

    def workload_words(self):
        """'tiny (V=256 L=4 h=64 a=4 s=64 tied float32)', from the attributes or the columns."""
        model, config = self.attrs.get("model"), self.attrs.get("config")
        if model or config:
            return f"{model} ({config})" if model and config else str(model or config)
        r = self.rows[0]
        sizes = [f"{name}={int(r[c])}" for name, c in (("L", "layers"), ("b", "batch"),
                                                       ("s", "sequence"), ("h", "hidden"),
                                                       ("a", "heads")) if known(r[c])]
        return "a GPT" + (f" ({' '.join(sizes + ([r['dtype']] if r['dtype'] else []))})"
                          if sizes else "")

    def full_words(self):
        """'full recompute: peak 1.5 MiB against 5.08 MiB without, time x 1.390', or None
        without both rows."""
        full = next((r for r in self.rows if r["policy"] == "full"), None)
        if full is None or self.baseline is None:
            return None
        return (f"full recompute: peak {fmt_size(full['peak_bytes'])} against "
                f"{fmt_size(self.baseline['peak_bytes'])} without, time × "
                f"{fmt_ratio(full['time_ratio'])}")


def kind_color(plotter, kind):
    if kind == "none":
        return "black"
    return plotter.palette[KIND_COLORS[kind]] if kind in KIND_COLORS else plotter.color(kind)


def percent(x):
    """A fraction as a signed percentage: '+31.1%'; '–' when unknown."""
    return f"{100 * x:+.1f}%" if finite(x) else "–"


def flops_cell(flops, r):
    """'117 MFLOP (+31.1%)': FLOPs and their share of the step without recompute."""
    if not known(flops):
        return "–"
    share = overhead(flops, r)
    return fmt_flops(flops) + (f" ({percent(share)})" if finite(share) else "")


def measured_cell(r, column, text):
    """A measured count's cell, in red where it differs from its formula."""
    formula = r[f"formula_{column}"]
    if known(r[column]) and known(formula) and int(r[column]) != int(formula):
        return f"<span class=\"bad\">{text}</span>"
    return text


def count_cell(x):
    return fmt_bytes(x) if known(x) else "–"


# --------------------------------------------------------------------------------------------
# Figures

def draw_tradeoff(plotter, bench):
    """One panel per byte count (the peak; the stored bytes where the file has them): each
    policy's measured time ratio against its measured bytes as a filled dot named by its policy,
    and where the formulas put it, 1 + recompute FLOPs / step FLOPs against the formula's bytes,
    as a hollow diamond of the same colour; a red ring marks a failing policy. x = 1: the step
    without recompute."""
    plt = plotter.plt
    panels = [p for p in PANELS if any(known(r[p[1]]) for r in bench.rows)]
    fig, axes = plt.subplots(1, len(panels), squeeze=False, figsize=(6.4 * len(panels) + 0.6, 5.2))
    ratios = [v for r in bench.rows for v in (r["time_ratio"], formula_ratio(r)) if finite(v)]
    width = max(ratios + [1.0]) - min(ratios + [1.0]) or 1.0
    for ax, (title, column, formula) in zip(axes[0], panels):
        values = [v for r in bench.rows for v in (r[column], r[formula]) if known(v)]
        unit, scale = plotter.byte_unit(max(values or [0]))
        height = max(values) or 1
        placed = []  # the named points, as fractions of the axes' spans
        for r in bench.rows:
            color = kind_color(plotter, r["kind"])
            x, y = r["time_ratio"], r[column]
            if finite(x) and known(y):
                plotter.plot(ax, "measured", x, y / scale, linestyle="none", marker="o",
                             markersize=7, color=color,
                             markeredgecolor=RED if r["differs"] else color,
                             markeredgewidth=2.2 if r["differs"] else 1.0, zorder=5)
                # Policies at about the same point get their names one under the other.
                spot = (x / width, y / height)
                near = sum(1 for px, py in placed
                           if abs(px - spot[0]) < 0.08 and abs(py - spot[1]) < 0.04)
                placed.append(spot)
                ax.annotate(r["policy"], (x, y / scale), textcoords="offset points",
                            xytext=(6, 3 - 10 * near), fontsize=7.5, color="0.2")
            fx, fy = formula_ratio(r), r[formula]
            if finite(fx) and known(fy):
                plotter.plot(ax, "formula", fx, fy / scale, linestyle="none", marker="D",
                             markersize=8, markerfacecolor="none", markeredgecolor=color,
                             markeredgewidth=1.5, zorder=6)
        plotter.vline(ax, "no recompute", 1.0, color="0.45", linestyle="--", linewidth=1.1,
                      zorder=2)
        ax.set_title(title)
        ax.set_xlabel("step time / step without recompute")
        ax.set_ylabel(f"activation bytes of the blocks ({unit})")
        ax.set_ylim(bottom=0, top=max(values or [1]) / scale * 1.1)
    handles = [plotter.Line2D([], [], linestyle="none", marker="o", markersize=7,
                              color=kind_color(plotter, kind), label=KIND_WORDS.get(kind, kind))
               for kind in bench.kinds()]
    handles += [plotter.Line2D([], [], linestyle="none", marker="D", markersize=8,
                               markerfacecolor="none", markeredgecolor="0.3",
                               label="formula: 1 + recompute / step FLOPs, formula bytes"),
                plotter.Line2D([], [], color="0.45", linestyle="--",
                               label="no recompute (time ratio 1)")]
    if bench.failed:
        handles.append(plotter.Line2D([], [], linestyle="none", marker="o", markersize=7,
                                      color="white", markeredgecolor=RED, markeredgewidth=2.2,
                                      label="fails: losses or formulas differ"))
    return plotter.finish(fig, "checkpoint_tradeoff", handles, most=4,
                          title="Activation memory against recompute time, per policy")


def draw_formulas(plotter, bench):
    """Per policy, above: the stored and the peak bytes as bars side by side (red where they
    differ from the formula), each formula as a black mark; below: the FLOPs recomputation
    added, in percent of the step without recompute, as a bar with the formula's mark, and the
    measured time overhead as a dot."""
    plt = plotter.plt
    rows = bench.rows
    xs = list(range(len(rows)))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True,
                                      figsize=(max(7.5, min(14, 0.9 * len(rows) + 3)), 7.2),
                                      gridspec_kw={"height_ratios": [3, 2]})
    values = [v for r in rows for c in ("stored_bytes", "formula_stored_bytes", "peak_bytes",
                                        "formula_peak_bytes") for v in [r[c]] if known(v)]
    unit, scale = plotter.byte_unit(max(values or [0]))
    width = 0.38
    shades = {"stored_bytes": "#9ecae1", "peak_bytes": plotter.palette[0]}
    bars = [("stored", "stored_bytes", -width / 2), ("peak", "peak_bytes", width / 2)]
    if not any(known(r["stored_bytes"]) for r in rows):
        bars = [("peak", "peak_bytes", 0.0)]
        width = 0.6
    for x, r in zip(xs, rows):
        for label, column, dx in bars:
            measured, formula = r[column], r[f"formula_{column}"]
            if known(measured):
                wrong = known(formula) and int(measured) != int(formula)
                plotter.bar(top, label, x + dx, measured / scale, width=width * 0.95,
                            color=RED if wrong else shades[column], zorder=3)
            if known(formula):
                plotter.plot(top, f"{label} formula", x + dx, formula / scale, linestyle="none",
                             marker="_", markersize=13, markeredgewidth=2.2, color="black",
                             zorder=5)
    top.set_ylabel(f"activation bytes ({unit})")
    top.set_ylim(0, max(values or [1]) / scale * 1.1)
    top.set_title("activation bytes of the blocks")
    tops = []
    for x, r in zip(xs, rows):
        measured = overhead(r["recompute_flops"], r)
        formula = overhead(r["formula_recompute_flops"], r)
        if finite(measured):
            wrong = known(r["formula_recompute_flops"]) and int(r["recompute_flops"]) != int(
                r["formula_recompute_flops"])
            plotter.bar(bottom, "recompute FLOPs", x, 100 * measured, width=0.6,
                        color=RED if wrong else "0.7", zorder=3)
            tops.append(100 * measured)
        if finite(formula):
            plotter.plot(bottom, "recompute FLOPs formula", x, 100 * formula, linestyle="none",
                         marker="_", markersize=20, markeredgewidth=2.2, color="black", zorder=5)
            tops.append(100 * formula)
        if finite(r["time_ratio"]):
            plotter.plot(bottom, "time overhead", x, 100 * (r["time_ratio"] - 1),
                         linestyle="none", marker="o", markersize=6,
                         color=kind_color(plotter, r["kind"]), zorder=6)
            tops.append(100 * (r["time_ratio"] - 1))
    bottom.axhline(0, color="0.3", linewidth=0.8)
    low = min(tops + [0])
    bottom.set_ylim(low * 1.2 - 1, max(tops + [1]) * 1.15)
    bottom.set_ylabel("% of the step without recompute")
    bottom.set_title("recompute FLOPs and time overhead")
    bottom.set_xticks(xs)
    bottom.set_xticklabels([r["policy"] for r in rows], rotation=30 if len(rows) > 6 else 0,
                           ha="right" if len(rows) > 6 else "center", fontsize=8)
    for ax in (top, bottom):
        ax.grid(axis="x", visible=False)
    handles = [plotter.Patch(color=shades[column], label=f"{label} bytes, measured")
               for label, column, _ in bars]
    handles += [plotter.Patch(color="0.7", label="recompute FLOPs, counted"),
                plotter.Line2D([], [], linestyle="none", marker="_", markersize=13,
                               markeredgewidth=2.2, color="black", label="formula"),
                plotter.Line2D([], [], linestyle="none", marker="o", markersize=6, color="0.3",
                               label="measured time overhead (time ratio - 1)")]
    if any(set(r["differs"]) - {"losses"} for r in rows):
        handles.append(plotter.Patch(color=RED, label="differs from the formula"))
    return plotter.finish(fig, "checkpoint_formulas", handles, most=3,
                          title="Bytes and recompute FLOPs against their formulas, per policy")


def draw_comparison(plotter, pairs, run_labels):
    """Per matched policy, the time ratio of A and of B side by side; the step without
    recompute at 1."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(len(pairs)))
    for j, label in enumerate(run_labels):
        xs = [i + (j - 0.5) * 0.3 for i in range(len(pairs))]
        ratios = [(a, b)[j]["time_ratio"] for _, a, b in pairs]
        plotter.plot(ax, f"{label} time ratio", xs, ratios, linestyle="none", marker="o",
                     markersize=8, color=plotter.run_colors[j], zorder=5)
    plotter.hline(ax, "no recompute", 1.0, color="0.45", linestyle="--", linewidth=1.1, zorder=2)
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels([key for key, _, _ in pairs], rotation=30 if len(pairs) > 6 else 0,
                       ha="right" if len(pairs) > 6 else "center", fontsize=8)
    ax.grid(axis="x", visible=False)
    ax.set_ylabel("step time / step without recompute")
    handles = [plotter.Line2D([], [], linestyle="none", marker="o", markersize=8,
                              color=plotter.run_colors[j], label=label)
               for j, label in enumerate(run_labels)]
    handles.append(plotter.Line2D([], [], color="0.45", linestyle="--", label="no recompute"))
    ax.set_title("Activation checkpointing time ratio, run A and run B")
    return plotter.finish(fig, "checkpoint_compare", handles, most=3)


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = CheckpointBench
TITLE = "Activation checkpointing"


def verdict_cell(value, derived=None):
    """The file's 0/1 verdict as yes or a red no; without it, `derived` (or '–')."""
    if value is None:
        return "–" if derived is None else yes_no(derived)
    return yes_no(int(value) == 1)


def setup_words(bench):
    """'4 ranks, 5 timed pairs after 1 warm-up pair', from what the file has."""
    r = bench.rows[0]
    parts = []
    if known(r["ranks"]):
        parts.append(f"{int(r['ranks'])} rank{'s' if int(r['ranks']) != 1 else ''}")
    warmup = bench.attrs.get("warmup_pairs")
    if known(r["timed_pairs"]):
        parts.append(f"{int(r['timed_pairs'])} timed pairs"
                     + (f" after {int(warmup)} warm-up" if finite(warmup) else ""))
    return ", ".join(parts)


def section(page, ctx, bench):
    """The "Activation checkpointing" section; left out entirely when the file has no
    /bench/checkpoint."""
    plotter = ctx.plotter
    if not section_start(page, bench, NAME, TITLE,
                         "/bench/checkpoint"):
        return
    setup = setup_words(bench)
    page.p(f"Model: {esc(bench.workload_words())}. Each policy trains the model side by side "
           "with the same model without recompute, on every rank, a step of each in "
           "alternating order" + (f" ({esc(setup)})" if setup else "") + "; the time ratio is "
           "the policy's step over the step without recompute, the median over the timed "
           "pairs, the mean over ranks (none's is an A/A measurement of 1). "
           + verdict_span(not bench.failed, bench.match_words()))

    page.p("What each policy saves against what it costs: the time ratio against the blocks' "
           "activation bytes at their peak (the most held at once in forward or backward, "
           "above their first input) and stored between forward and backward. Hollow "
           "diamonds: where the formulas put the policy, its formula bytes at 1 + the "
           "recompute FLOPs over the step's (the time recomputing would cost if time followed "
           "the matmul FLOPs); a dot right of its diamond took longer than its FLOPs.")
    page.img(draw_tradeoff(plotter, bench), "activation bytes against the time ratio per policy")

    page.p("The counts behind it, per policy: the stored and peak bytes the memory tracker "
           "measured (the last step) and the FLOPs the ops' counter added, each against its "
           "formula (black marks), which they must equal; a red bar differs. Dots: the "
           "measured time overhead, beside the FLOP overhead.")
    page.img(draw_formulas(plotter, bench), "bytes and recompute FLOPs against the formulas")

    rows, classes = [], []
    for r in bench.rows:
        derived = not any(d != "losses" for d in r["differs"])
        spread = (r["time_ratio"], r["time_ratio_rank_min"], r["time_ratio_rank_max"],
                  int(r["ranks"]) if known(r["ranks"]) else 2)
        rows.append([esc(r["policy"]),
                     f"<span class=\"mono\">{esc(r['layout'])}</span>" if r["layout"] else "–",
                     count_cell(r["recomputed_blocks"]),
                     measured_cell(r, "stored_bytes", count_cell(r["stored_bytes"])),
                     count_cell(r["formula_stored_bytes"]),
                     measured_cell(r, "peak_bytes", count_cell(r["peak_bytes"])),
                     count_cell(r["formula_peak_bytes"]),
                     measured_cell(r, "recompute_flops", flops_cell(r["recompute_flops"], r)),
                     flops_cell(r["formula_recompute_flops"], r), fmt_ms(r["step_time_s"]),
                     fmt_spread(spread, fmt_ratio), verdict_cell(r["losses_equal"]),
                     verdict_cell(r["matches_formula"], derived)])
        classes.append("diff" if r["differs"] else "")
    page.table(["policy", "layout", "recomputed blocks", "stored (B)", "formula (B)",
                "peak (B)", "formula (B)", "recompute FLOPs (of the step)", "formula",
                "step time (ms)", "time ratio (rank min–max)", "losses equal",
                "bytes and FLOPs = formula"], rows, numeric=set(range(2, 11)),
               row_classes=classes)
    page.note("Layout, block by block: - kept, s kept but its attention probabilities "
              "(selective), a digit the segment it is recomputed in.")
    predicted_table(page, "the step without recompute op by op, plus one block's forward per "
                    "recomputed block and the attention core's per selective one", ["policy"],
                    [((r["policy"],), r["predicted_step_time_s"], r["step_time_s"],
                      r["predicted_over_measured"]) for r in bench.rows])


def glance(ctx, bench):
    """'Activation checkpointing: 9 policies; full recompute: peak 1.5 MiB against 5.08 MiB
    without, time x 1.390; losses equal ...', the verdict in red where a policy fails."""
    if not bench.usable:
        return []
    match = esc(bench.match_words())
    if bench.failed:
        match = f"<span class=\"bad\">{match}</span>"
    n = len(bench.rows)
    parts = [f"{n} {plural(n, 'policy', 'policies')}"]
    if bench.full_words():
        parts.append(esc(bench.full_words()))
    return ["Activation checkpointing: " + "; ".join(parts + [match]) + "."]


def md_verdict(value, derived=None):
    """verdict_cell for summary.md: yes, no or '–'."""
    if value is None:
        return "–" if derived is None else "yes" if derived else "no"
    return "yes" if int(value) == 1 else "no"


def checkpoint_md(bench):
    rows = [[r["policy"], r["layout"] or "–", count_cell(r["recomputed_blocks"]),
             count_cell(r["stored_bytes"]), count_cell(r["formula_stored_bytes"]),
             count_cell(r["peak_bytes"]), count_cell(r["formula_peak_bytes"]),
             flops_cell(r["recompute_flops"], r), flops_cell(r["formula_recompute_flops"], r),
             fmt_ratio(r["time_ratio"]), md_verdict(r["losses_equal"]),
             md_verdict(r["matches_formula"], not any(d != "losses" for d in r["differs"]))]
            for r in bench.rows]
    return [f"- Model: {bench.workload_words()}.",
            f"- Against the run without recompute and the formulas: {bench.match_words()}.",
            ""] + md_table(["policy", "layout", "recomputed", "stored", "formula", "peak",
                            "formula", "recompute FLOPs", "formula", "time ratio",
                            "losses equal", "= formula"], "llrrrrrrrrll", rows)


def markdown(ctx, bench):
    return section_md(bench, TITLE, "/bench/checkpoint",
                      lambda: checkpoint_md(bench))


# --------------------------------------------------------------------------------------------
# Two runs

# compare(): the runs' rows matched on the policy.
compare = compare_by_key


def compare_glance(ctx, benches, matches):
    lines = ratio_glance(matches, "Activation checkpointing time ratio", "matching policy",
                         "time_ratio", "matching policies")
    if lines:
        lines += formula_glance(benches, "Activation checkpointing: ", lambda b: b.failed)
    return lines


def compare_section(page, ctx, benches, matches):
    """Time ratio and peak bytes of B against A per policy."""
    labels, plotter = ctx.labels, ctx.plotter
    pairs = comparison_pairs(
        page, benches, matches, "/bench/checkpoint", "checkpoint",
        "Activation checkpointing: B against A", "policy of the same name", str, "policy",
        (lambda b: b.workload_words(), "the policies of the same name are compared all the "
         "same"))
    if pairs is None:
        return
    page.p("The time ratio (the policy's step over the step without recompute, in the same run) "
           "and the peak activation bytes of each policy both runs have. Ratio = B / A (below 1: "
           "recompute cost B less). " + "; ".join(
               f"{name}: {esc(b.match_words())}" for name, b in zip("AB", benches)) + ".")
    rows, classes = [], []
    for key, a, b in pairs:
        rows.append([esc(key), fmt_ratio(a["time_ratio"]), fmt_ratio(b["time_ratio"]),
                     fmt_ratio(ratio_of(b["time_ratio"], a["time_ratio"])),
                     count_cell(a["peak_bytes"]), count_cell(b["peak_bytes"]),
                     yes_no(not a["differs"]), yes_no(not b["differs"])])
        classes.append("diff" if a["differs"] or b["differs"] else "")
    page.table(["policy", "time ratio A", "time ratio B", "B / A", "peak A (B)", "peak B (B)",
                "passes A", "passes B"], rows, numeric=set(range(1, 6)), row_classes=classes)
    page.img(draw_comparison(plotter, pairs, [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "activation checkpointing time ratio, run A and run B")


def compare_markdown(ctx, benches, matches):
    return comparison_md(
        matches, "Activation checkpointing (time ratio against no recompute)",
        ["policy", "time ratio A", "time ratio B", "B / A", "peak A", "peak B"], "lrrrrr",
        lambda key, a, b: [key, fmt_ratio(a["time_ratio"]), fmt_ratio(b["time_ratio"]),
                           fmt_ratio(ratio_of(b["time_ratio"], a["time_ratio"])),
                           count_cell(a["peak_bytes"]), count_cell(b["peak_bytes"])],
        lambda: runs_md(benches, ": ", lambda b: b.match_words()))
