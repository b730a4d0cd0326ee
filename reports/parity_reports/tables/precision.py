"""/bench/precision: the same GPT trained from the same start in float64, float32, bfloat16 and
float16, one row per precision and step. The loss of each against float64's, and float16's
dynamic loss scale: halved, and the step skipped, when a rank's gradients overflow; doubled
after growth_interval clean steps."""

import math
from collections import OrderedDict

from ..common import (RowTable, capitalized, comparison_md, comparison_pairs, esc, finite, fmt_int,
                      fmt_num, fmt_ratio, glance_line, md_table, order_key, ratio_glance, ratio_of,
                      section_md, section_start, compare_by_key)

NAME = "precision"
ORDER = 130
VERDICT = False
READS = {
    "/bench/precision": ("s:precision i:step,skipped,world_size f:loss,loss_scale",
                         ["precision", "step", "loss"]),
}

PRECISION_ORDER = ["float64", "float32", "bfloat16", "float16"]
# A column the file lacks reads as unknown: NaN for the scale, -1 for a count.
PRECISION_OPTIONAL = {"loss_scale": math.nan, "skipped": -1, "world_size": -1}
# Each precision's colour (a palette index), the same in every report; float64 is black.
PRECISION_COLORS = {"float32": 0, "bfloat16": 1, "float16": 2}
RED = "#b00020"


def fmt_loss(x):
    return f"{x:.4f}" if finite(x) else "–"


def fmt_scale(x):
    """A loss scale: '2^15' for a power of two, else the number; '–' when unknown."""
    if not finite(x) or x <= 0:
        return "–"
    e = math.log2(x)
    return f"2^{int(e)}" if e == int(e) else fmt_num(x)


class PrecisionBench(RowTable):
    """/bench/precision: per precision (float64 first), its rows in step order."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/precision", PRECISION_OPTIONAL)
        self.runs = OrderedDict()
        for r in sorted(self.rows, key=lambda r: (order_key(r["precision"], PRECISION_ORDER),
                                             r["step"])):
            self.runs.setdefault(r["precision"], []).append(r)

    @property
    def usable(self):
        return bool(self.runs)

    def by_key(self):
        """{precision: its last step's row}."""
        return OrderedDict((p, rows[-1]) for p, rows in self.runs.items())

    def steps(self):
        return max(int(r["step"]) for rows in self.runs.values() for r in rows) + 1

    def baseline(self):
        """float64's last row, or None."""
        rows = self.runs.get("float64")
        return rows[-1] if rows else None

    def final_ratio(self, precision):
        base = self.baseline()
        return (ratio_of(self.runs[precision][-1]["loss"], base["loss"]) if base is not None
                else math.nan)

    def skipped_steps(self, precision):
        """The steps skipped (overflow), or None when the file does not say."""
        rows = self.runs[precision]
        if all(r["skipped"] < 0 for r in rows):
            return None
        return [int(r["step"]) for r in rows if r["skipped"] == 1]

    def model_words(self):
        model = self.attrs.get("model")
        return str(model) if model else "a GPT"


def precision_color(plotter, precision):
    if precision == "float64":
        return "black"
    if precision in PRECISION_COLORS:
        return plotter.palette[PRECISION_COLORS[precision]]
    return plotter.color(precision)


# --------------------------------------------------------------------------------------------
# Figure

def draw_losses(plotter, bench):
    """Above: each precision's loss against the step, float64 the thick black baseline. Below
    (where the file has loss scales): the loss scale on a log2 axis, a red x at each skipped
    step. Returns (the PNG's name, what was drawn: {"loss": {precision: (steps, losses)},
    "scale": {precision: (steps, scales)}, "skipped": {precision: (steps, scales)}})."""
    plt = plotter.plt
    drawn = {"loss": OrderedDict(), "scale": OrderedDict(), "skipped": OrderedDict()}
    has_scale = any(finite(r["loss_scale"]) and r["loss_scale"] > 0
                    for rows in bench.runs.values() for r in rows)
    fig, axes = plt.subplots(2 if has_scale else 1, 1, sharex=True, squeeze=False,
                             figsize=(9, 7.2 if has_scale else 4.8),
                             gridspec_kw={"height_ratios": [3, 2]} if has_scale else None)
    top = axes[0][0]
    top.set_title("training loss")
    for precision, rows in bench.runs.items():
        steps = [r["step"] for r in rows]
        losses = [r["loss"] for r in rows]
        style = (dict(color="black", linewidth=2.8, zorder=4) if precision == "float64" else
                 dict(color=precision_color(plotter, precision), linewidth=1.4, zorder=3))
        plotter.plot(top, precision, steps, losses, **style)
        drawn["loss"][precision] = (steps, losses)
    top.set_ylabel("loss (mean over the global batch)")
    if has_scale:
        bottom = axes[1][0]
        bottom.set_title("loss scale")
        for precision, rows in bench.runs.items():
            scaled = [r for r in rows if finite(r["loss_scale"]) and r["loss_scale"] > 0]
            if not scaled:
                continue
            steps = [r["step"] for r in scaled]
            scales = [r["loss_scale"] for r in scaled]
            plotter.plot(bottom, f"{precision} scale", steps, scales, drawstyle="steps-post",
                         color=precision_color(plotter, precision),
                         linewidth=2.2 if precision == "float64" else 1.4)
            drawn["scale"][precision] = (steps, scales)
            skipped = [r for r in scaled if r["skipped"] == 1]
            if skipped:
                xs, ys = [r["step"] for r in skipped], [r["loss_scale"] for r in skipped]
                plotter.plot(bottom, f"{precision} skipped", xs, ys, linestyle="none",
                             marker="x", markersize=9, markeredgewidth=2, color=RED, zorder=5)
                drawn["skipped"][precision] = (xs, ys)
        bottom.set_yscale("log", base=2)
        bottom.set_ylabel("loss scale")
    axes[-1][0].set_xlabel("optimizer step")
    handles = [plotter.Line2D([], [], color=precision_color(plotter, p),
                              linewidth=2.8 if p == "float64" else 1.4, label=p)
               for p in bench.runs]
    if drawn["skipped"]:
        handles.append(plotter.Line2D([], [], linestyle="none", marker="x", markersize=9,
                                      markeredgewidth=2, color=RED,
                                      label="skipped step (gradients overflowed)"))
    return plotter.finish(fig, "precision_loss", handles,
                          title="Training loss and loss scale per precision"), drawn


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = PrecisionBench
TITLE = "Mixed precision"


def final_rows(bench):
    """Per precision: (precision, final loss, / float64, skipped steps, final scale), as text."""
    out = []
    for precision, rows in bench.runs.items():
        skipped = bench.skipped_steps(precision)
        out.append((precision, fmt_loss(rows[-1]["loss"]), fmt_ratio(bench.final_ratio(precision)),
                    "–" if skipped is None else str(len(skipped)),
                    fmt_scale(rows[-1]["loss_scale"])))
    return out


def summary_words(bench):
    """'after 60 steps the loss is float64 2.1000, float32 2.1000 (×1.000), ..., float16
    2.1010 (×1.000; 2 steps skipped, final scale 2^15)'."""
    parts = []
    for precision, rows in bench.runs.items():
        extra = []
        if precision != "float64" and finite(bench.final_ratio(precision)):
            extra.append(f"×{fmt_ratio(bench.final_ratio(precision))}")
        skipped = bench.skipped_steps(precision)
        if skipped:
            extra.append(f"{len(skipped)} step{'s' if len(skipped) != 1 else ''} skipped, "
                         f"final scale {fmt_scale(rows[-1]['loss_scale'])}")
        parts.append(f"{precision} {fmt_loss(rows[-1]['loss'])}"
                     + (f" ({'; '.join(extra)})" if extra else ""))
    return f"after {bench.steps()} steps the loss is " + ", ".join(parts)


def section(page, ctx, bench):
    """The "Mixed precision" section; left out entirely without /bench/precision."""
    if not section_start(page, bench, NAME, TITLE, "/bench/precision"):
        return
    setup = [f"Model: {esc(bench.model_words())}."]
    world = max(int(r["world_size"]) for rows in bench.runs.values() for r in rows)
    if world > 0:
        setup.append(f"{world} rank{'s' if world != 1 else ''}.")
    growth, initial = bench.attrs.get("growth_interval"), bench.attrs.get("initial_scale")
    if finite(growth) or finite(initial):
        setup.append("float16's dynamic loss scale"
                     + (f" starts at {fmt_scale(initial)}" if finite(initial) else "")
                     + (" and" if finite(growth) and finite(initial) else "")
                     + (f" doubles after {int(growth)} clean steps" if finite(growth) else "")
                     + "; a step whose gradients overflow on any rank is skipped and the scale "
                     "halved.")
    page.p(" ".join(setup) + " Each precision trains the model from the same start on the same "
           "batches; the loss is the step's mean over the global batch, float64 the baseline.")
    page.img(draw_losses(ctx.plotter, bench)[0], "training loss and loss scale per precision")
    page.table(["precision", "final loss", "/ float64", "skipped steps", "final loss scale"],
               [[esc(c) for c in row] for row in final_rows(bench)], numeric={1, 2, 3, 4})


def glance(ctx, bench):
    return glance_line(TITLE, bench, summary_words)


def precision_md(bench):
    return [f"- Model: {bench.model_words()}.", f"- {capitalized(summary_words(bench))}.",
            ""] + md_table(["precision", "final loss", "/ float64", "skipped steps",
                            "final loss scale"], "lrrrr", final_rows(bench))


def markdown(ctx, bench):
    return section_md(bench, TITLE, "/bench/precision", lambda: precision_md(bench))


# --------------------------------------------------------------------------------------------
# Two runs

# compare(): the runs' last rows matched on the precision.
compare = compare_by_key


# The comparison's table, on the page and in summary.md: a row of pair_cells per precision.
PAIR_HEADER = ["precision", "final loss A", "final loss B", "B / A", "steps A", "steps B"]


def pair_cells(key, a, b):
    """(precision, final loss A, B and B / A, steps A and B)."""
    return [key, fmt_loss(a["loss"]), fmt_loss(b["loss"]),
            fmt_ratio(ratio_of(b["loss"], a["loss"])), fmt_int(a["step"] + 1),
            fmt_int(b["step"] + 1)]


def compare_glance(ctx, benches, matches):
    return ratio_glance(matches, "Mixed precision final loss", "precision", "loss")


def compare_section(page, ctx, benches, matches):
    pairs = comparison_pairs(page, benches, matches, "/bench/precision", "precision",
                             "Mixed precision: B against A", "run in that precision", str,
                             "precision")
    if pairs is None:
        return
    page.p("The last step's loss of each precision both runs trained; ratio = B / A.")
    page.table(PAIR_HEADER, [[esc(c) for c in pair_cells(*p)] for p in pairs],
               numeric={1, 2, 3, 4, 5})


def compare_markdown(ctx, benches, matches):
    return comparison_md(matches, "Mixed precision (final loss)", PAIR_HEADER, "lrrrrr", pair_cells)
