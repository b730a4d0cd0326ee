"""/bench/context: context parallelism per variant, cp and sequence length, one row per
configuration. The section draws the step and attention time against the sequence for each
(variant, cp), lists every configuration with the ring's hidden share of its transfers and the
bytes and activations beside their formulas (red where they differ), and compares two runs'
tokens/s configuration by configuration."""

import math
from collections import OrderedDict

from ..common import (RowTable, comparison_md, comparison_pairs, esc, finite, fmt_bytes, fmt_ms,
                      fmt_num, fmt_ratio, glance_line, md_table, ratio_glance, ratio_of, section_md,
                      on_ranks, plain_cells, section_start, compare_by_key)

NAME = "context"
ORDER = 128
VERDICT = False
WALL_CLOCK = True
READS = {
    "/bench/context": (
        "s:variant,precision i:cp,dp,world_size,sequence,rows,layers "
        "f:step_s,tokens_per_s,attention_s,communication_s,serial_attention_s,"
        "serial_communication_s,hidden_fraction,forward_bytes,backward_bytes,formula_forward_bytes,"
        "formula_backward_bytes,activation_bytes,formula_activation_bytes",
        ["variant", "cp", "sequence", "step_s"]),
}

OPTIONAL = {"dp": -1, "world_size": -1, "rows": -1, "precision": "", "layers": -1,
            "tokens_per_s": math.nan, "attention_s": math.nan, "communication_s": math.nan,
            "serial_attention_s": math.nan, "serial_communication_s": math.nan,
            "hidden_fraction": math.nan, "forward_bytes": math.nan, "backward_bytes": math.nan,
            "formula_forward_bytes": math.nan, "formula_backward_bytes": math.nan,
            "activation_bytes": math.nan, "formula_activation_bytes": math.nan}

VARIANT_ORDER = ["none", "ring", "allgather", "ulysses"]


def key_of(r):
    return f"{r['variant']} cp{int(r['cp'])} s{int(r['sequence'])}"


def matches_formula(measured, formula):
    """True when both are known and equal, None when either is unknown."""
    if not (finite(measured) and finite(formula)):
        return None
    return measured == formula


class ContextBench(RowTable):
    """/bench/context: its rows in file order, grouped by (variant, cp) for the figure."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/context", OPTIONAL)
        self.curves = OrderedDict()
        for r in sorted(self.rows, key=lambda r: (VARIANT_ORDER.index(r["variant"])
                                                  if r["variant"] in VARIANT_ORDER else 9,
                                                  r["cp"], r["sequence"])):
            self.curves.setdefault((r["variant"], int(r["cp"])), []).append(r)

    @property
    def usable(self):
        return bool(self.rows)

    def by_key(self):
        return OrderedDict((key_of(r), r) for r in self.rows)

    def off_formula(self):
        """The configurations whose bytes or activations differ from their formulas."""
        return [key_of(r) for r in self.rows
                if False in (matches_formula(r["forward_bytes"], r["formula_forward_bytes"]),
                             matches_formula(r["backward_bytes"], r["formula_backward_bytes"]),
                             matches_formula(r["activation_bytes"], r["formula_activation_bytes"]))]


def label(variant, cp):
    return "cp 1 (no split)" if variant == "none" else f"{variant} cp {cp}"


def draw(plotter, bench):
    """Step time (solid) and attention time (dashed) against the sequence, per (variant, cp)."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(9, 4.8))
    drawn = OrderedDict()
    handles = []
    for i, ((variant, cp), rows) in enumerate(bench.curves.items()):
        color = plotter.palette[i % len(plotter.palette)]
        xs = [r["sequence"] for r in rows]
        step = [r["step_s"] * 1e3 for r in rows]
        attention = [r["attention_s"] * 1e3 for r in rows]
        name = label(variant, cp)
        plotter.plot(ax, f"{name} step", xs, step, color=color, marker="o")
        plotter.plot(ax, f"{name} attention", xs, attention, color=color, marker="x", linestyle="--")
        drawn[f"{name} step"] = (xs, step)
        drawn[f"{name} attention"] = (xs, attention)
        handles.append(plotter.Patch(color=color, label=name))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("ms (solid: step, dashed: attention)")
    ax.set_title("Context parallelism: step and attention time against the sequence")
    return plotter.save(fig, "context_time", plotter.legend(fig, handles, most=4)), drawn


def formula_cell(measured, formula):
    ok = matches_formula(measured, formula)
    if ok is False:
        return f"{fmt_bytes(measured)} <span class=\"bad\">(formula {fmt_bytes(formula)})</span>"
    return fmt_bytes(measured)


def fmt_share(x):
    return f"{100 * x:.0f}%" if finite(x) else "–"


def rows_of(bench):
    out = []
    for rows in bench.curves.values():
        for r in rows:
            out.append([esc(r["variant"]), str(int(r["cp"])), str(int(r["sequence"])),
                        fmt_ms(r["step_s"]), fmt_num(r["tokens_per_s"], 0), fmt_ms(r["attention_s"]),
                        fmt_ms(r["communication_s"]), fmt_ms(r["serial_communication_s"]),
                        fmt_share(r["hidden_fraction"]),
                        formula_cell(r["forward_bytes"], r["formula_forward_bytes"]),
                        formula_cell(r["backward_bytes"], r["formula_backward_bytes"]),
                        formula_cell(r["activation_bytes"], r["formula_activation_bytes"])])
    return out


HEADER = ["variant", "cp", "sequence", "step (ms)", "tokens/s", "attention (ms)", "waited (ms)",
          "waited, no overlap (ms)", "ring hidden", "bytes/layer fwd", "bytes/layer bwd",
          "activations/block (B)"]


# What load() and nav() are made of (tables/__init__.py).
TABLE = ContextBench
TITLE = "Context parallelism"


def summary_words(bench):
    """'ring cp 4 at 1024 tokens: 47.7 ms a step, 20% of its transfers hidden; ...'."""
    longest = max(r["sequence"] for r in bench.rows)
    parts = []
    for (variant, cp), rows in bench.curves.items():
        for r in rows:
            if r["sequence"] != longest:
                continue
            words = f"{label(variant, cp)} at {int(longest)} tokens: {fmt_ms(r['step_s'])} ms a step"
            if finite(r["hidden_fraction"]):
                words += f", {fmt_share(r['hidden_fraction'])} of the ring's transfers hidden"
            parts.append(words)
    off = bench.off_formula()
    return "; ".join(parts) + (f"; OFF the formulas: {', '.join(off)}" if off else "")


def section(page, ctx, bench):
    if not section_start(page, bench, NAME, TITLE, "/bench/context"):
        return
    world = max((int(r["world_size"]) for r in bench.rows), default=-1)
    page.p(f"{esc(str(bench.attrs.get('model', 'A GPT')))}"
           + on_ranks(world)
           + ", each sequence split over cp ranks (chunks r and 2cp-1-r) and the batch over dp. "
           "Times are the slowest rank's median step; 'waited' is the time attention spent on the "
           "cp group, and for the ring the same steps were run again with each block's transfer "
           "waited for before its compute: the hidden share is 1 - waited / waited without "
           "overlap. Bytes a rank sends per layer and the activations a block keeps are measured "
           "and shown in red where they differ from their formulas.")
    page.img(draw(ctx.plotter, bench)[0], "step and attention time against the sequence")
    page.table(HEADER, rows_of(bench), numeric=set(range(1, 12)))


def glance(ctx, bench):
    return glance_line(TITLE, bench, summary_words)


def markdown(ctx, bench):
    return section_md(bench, TITLE, "/bench/context",
                      lambda: [f"- {summary_words(bench)}.", ""] + md_table(
                          HEADER, "lrrrrrrrrrrr",
                          plain_cells(rows_of(bench))))


# compare(): the runs' rows matched on the configuration (variant, cp, sequence).
compare = compare_by_key


# The comparison's table, on the page and in summary.md: a row of pair_cells per configuration.
PAIR_HEADER = ["configuration", "tokens/s A", "tokens/s B", "B / A"]


def pair_cells(key, a, b):
    return [key, fmt_num(a["tokens_per_s"], 0), fmt_num(b["tokens_per_s"], 0),
            fmt_ratio(ratio_of(b["tokens_per_s"], a["tokens_per_s"]))]


def compare_glance(ctx, benches, matches):
    return ratio_glance(matches, "Context-parallel tokens/s", "configuration", "tokens_per_s")


def compare_section(page, ctx, benches, matches):
    pairs = comparison_pairs(page, benches, matches, "/bench/context", "context",
                             "Context parallelism: B against A", "run", str, "configuration")
    if pairs is None:
        return
    page.p("Tokens per second per configuration (variant, cp, sequence); ratio = B / A.")
    page.table(PAIR_HEADER, [[esc(c) for c in pair_cells(*p)] for p in pairs], numeric={1, 2, 3})


def compare_markdown(ctx, benches, matches):
    return comparison_md(matches, "Context parallelism (tokens/s)", PAIR_HEADER, "lrrr", pair_cells)
