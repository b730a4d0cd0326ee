"""/bench/memory: data parallelism and ZeRO stages 1-3 at every world size, one row per rank:
peak bytes per category against the model-state formula, and bytes sent per step against its
formula."""

import math
from collections import OrderedDict, defaultdict

from ..common import (MEMORY_CATEGORIES, MEMORY_OPTIONAL, RowTable, capitalized, comparison_md,
                      comparison_pairs, compress_ranks, esc, finite, fmt_bytes, fmt_count, fmt_int,
                      fmt_ms, fmt_ratio, fmt_size, glance_line, max_of, order_key, ratio_glance,
                      ratio_of, runs_words, section_md, section_start, spread, compare_by_key)

NAME = "memory"
ORDER = 60
VERDICT = False
READS = {
    "/bench/memory": (
        "s:strategy,precision,model,config i:zero_stage,world_size,rank,parameters,"
        "padded_parameters,parameters_bytes,gradients_bytes,optimizer_state_bytes,"
        "activations_bytes,communication_bytes,workspace_bytes,model_state_bytes,"
        "matches_formula,bytes_sent f:formula_parameters_bytes,formula_gradients_bytes,"
        "formula_optimizer_state_bytes,formula_model_state_bytes,paper_model_state_bytes,"
        "bytes_per_parameter_p,bytes_per_gradient_g,optimizer_bytes_K,formula_bytes_sent,"
        "step_seconds",
        ["strategy", "world_size", "rank", "model_state_bytes", "formula_model_state_bytes"]),
}

# ZeRO's model states are the first three memory categories; the others are drawn apart, as
# not model state.
STRATEGY_ORDER = ["dp", "zero1", "zero2", "zero3"]
PRECISION_ORDER = ["mixed", "float32", "float64"]
MODEL_STATE_CATEGORIES = ["parameters", "gradients", "optimizer_state"]
MEMORY_BENCH_OPTIONAL = {"precision": "", "model": "", "config": "", "parameters": -1,
                         "padded_parameters": -1, "paper_model_state_bytes": math.nan,
                         "matches_formula": None, "bytes_sent": None,
                         "formula_bytes_sent": math.nan, "step_seconds": math.nan}


def row_matches_formula(r):
    """A /bench/memory row's own verdict (matches_formula), or, in a file without that column,
    measured model-state bytes == formula rounded to whole bytes (what parity checks)."""
    if r["matches_formula"] is not None:
        return int(r["matches_formula"]) == 1
    return finite(r["formula_model_state_bytes"]) and \
        int(r["model_state_bytes"]) == round(r["formula_model_state_bytes"])


class MemoryBench(RowTable):
    """/bench/memory: one row per (strategy, precision, world size, rank), summarised per
    (strategy, precision, world size) over ranks."""

    def __init__(self, rf):
        # The reader refuses the table without strategy, world_size, rank, model_state_bytes or
        # formula_model_state_bytes; a column absent among the others stays None (or NaN),
        # unlike a measured 0.
        defaults = dict(MEMORY_BENCH_OPTIONAL)
        defaults.update({f"{c}_bytes": None for c in MEMORY_CATEGORIES})
        defaults.update({f"formula_{c}_bytes": math.nan for c in MODEL_STATE_CATEGORIES})
        super().__init__(rf, "/bench/memory", defaults)
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


def workload_text(memory):
    text = "; ".join(f"{model} ({config})" if config else str(model)
                     for model, config in memory.workloads() if model or config)
    return text or "the model"


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


# --------------------------------------------------------------------------------------------
# Figures

def strategy_color(plotter, strategy):
    return plotter.palette[order_key(strategy, STRATEGY_ORDER)[0] % len(plotter.palette)]


def draw_memory(plotter, precision, panels, categories):
    """One panel per strategy: per world size, stacked bars of the measured peak bytes per
    category (model states solid, the rest hatched and lighter on top) and the formula's
    model-state bytes as diamonds. The panels share the y axis, so ZeRO's saving shows."""
    plt = plotter.plt
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
    unit, scale = plotter.byte_unit(max(tops or [0]))
    paper_differs = False
    for ax, (strategy, points) in zip(axes[0], panels):
        xs = list(range(len(points)))
        bottom = [0.0] * len(points)
        if whole_state:
            bottom = [p["model_state"] / scale for p in points]
            plotter.bar(ax, "model state", xs, bottom, width=0.65, color="0.65", zorder=3)
        for c in categories:
            vals = [p["categories"].get(c, 0) / scale for p in points]
            style = ({} if c in MODEL_STATE_CATEGORIES else
                     dict(alpha=0.45, hatch="//", edgecolor="0.45", linewidth=0))
            plotter.bar(ax, c, xs, vals, bottom=bottom, width=0.65,
                        color=plotter.memory_colors[c], zorder=3, **style)
            bottom = [b + v for b, v in zip(bottom, vals)]
        fx = [x for x, p in zip(xs, points) if finite(p["formula"])]
        plotter.plot(ax, "formula", fx,
                     [p["formula"] / scale for p in points if finite(p["formula"])],
                     linestyle="none", marker="D", markersize=6, color="black", zorder=5)
        # Padding adds at most N-1 elements per unit: the paper's cross is drawn only where
        # it would not hide under the diamond.
        visible = 0.01 * max(tops or [0])
        paper = [(x, p["paper"]) for x, p in zip(xs, points) if finite(p["paper"])
                 and finite(p["formula"]) and abs(p["paper"] - p["formula"]) > visible]
        if paper:
            paper_differs = True
            plotter.plot(ax, "paper formula", [x for x, _ in paper],
                         [y / scale for _, y in paper], linestyle="none", marker="x",
                         markersize=7, color="0.35", zorder=5)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(p["world_size"]) for p in points])
        ax.set_xlabel("world size (ranks)")
        ax.grid(axis="x", visible=False)
        ax.set_title(strategy)
    axes[0][0].set_ylabel(f"bytes per rank ({unit})")
    axes[0][0].set_ylim(0, max(tops or [1]) / scale * 1.12 or 1.0)
    handles = [plotter.Patch(color=plotter.memory_colors[c], label=c) for c in categories
               if c in MODEL_STATE_CATEGORIES]
    if whole_state:
        handles.append(plotter.Patch(color="0.65", label="model state (measured)"))
    handles += [plotter.Patch(facecolor=plotter.memory_colors[c], alpha=0.45, hatch="//",
                              edgecolor="0.45", linewidth=0, label=f"not model state: {c}")
                for c in categories if c not in MODEL_STATE_CATEGORIES]
    handles.append(plotter.Line2D([], [], linestyle="none", marker="D", markersize=6,
                                  color="black", label="formula: model state"))
    if paper_differs:
        handles.append(plotter.Line2D([], [], linestyle="none", marker="x", markersize=7,
                                      color="0.35", label="paper formula (no padding)"))
    return plotter.finish(fig, "zero_memory_" + (precision or "all"), handles, most=4,
                          title="Peak bytes per rank during a training step"
                          + (f", {precision}" if precision else "") + " (largest rank per category)")


def draw_bytes_sent(plotter, panels):
    """panels: [(precision, [(strategy, points by world size)])]. Grouped bars per world
    size, one per strategy, of the bytes a rank sent per step (mean over ranks); the
    formula as a black bar-wide mark on each."""
    plt = plotter.plt
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(max(7, min(16, 6 * n)), 4.6), squeeze=False)
    values = [v for _, strategies in panels for _, points in strategies for p in points
              for v in (p["bytes_sent"], p["formula_bytes_sent"]) if finite(v)]
    unit, scale = plotter.byte_unit(max(values or [0]))
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
            plotter.bar(ax, f"{strategy} bytes sent", xs,
                        [p["bytes_sent"] / scale if finite(p["bytes_sent"]) else 0.0
                         for p in points], width=width, color=strategy_color(plotter, strategy),
                        zorder=3)
            fp = [(x, p["formula_bytes_sent"]) for x, p in zip(xs, points)
                  if finite(p["formula_bytes_sent"])]
            plotter.plot(ax, f"{strategy} formula", [x for x, _ in fp],
                         [y / scale for _, y in fp], linestyle="none", marker="_",
                         markersize=max(6, 60 * width), markeredgewidth=2.2, color="black",
                         zorder=5)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([str(s) for s in sizes])
        ax.set_xlabel("world size (ranks)")
        ax.grid(axis="x", visible=False)
        ax.set_ylabel(f"bytes sent per rank per step ({unit})")
        ax.set_title(precision)
    handles = [plotter.Patch(color=strategy_color(plotter, s), label=s) for s in strategies_seen]
    handles.append(plotter.Line2D([], [], linestyle="none", marker="_", markersize=12,
                                  markeredgewidth=2.2, color="black", label="formula"))
    return plotter.finish(fig, "zero_bytes_sent", handles, title="Bytes each rank sends per training "
                          "step (mean over ranks) and the formula")


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = MemoryBench
TITLE = "Memory"


def section(page, ctx, memory):
    """The "ZeRO memory" section; left out entirely when the file has no /bench/memory."""
    plotter = ctx.plotter
    if not section_start(page, memory, "memory", "ZeRO memory and communication",
                         "/bench/memory"):
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
        page.img(draw_memory(plotter, precision, memory.panels(precision), categories),
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
        page.img(draw_bytes_sent(plotter, [(pr, memory.panels(pr)) for pr in memory.precisions]),
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


def glance(ctx, memory):
    return glance_line("ZeRO memory", memory, lambda m: m.match_words())


def markdown(ctx, memory):
    return section_md(memory, "ZeRO memory and communication", "/bench/memory",
                      lambda: memory_md(memory))


# --------------------------------------------------------------------------------------------
# Two runs

# compare(): the runs' rows matched on (strategy, precision, world size).
compare = compare_by_key


def compare_glance(ctx, memories, matches):
    return ratio_glance(matches, "ZeRO model-state bytes", "matching (strategy, precision, "
                        "world size)", "model_state", "matching (strategy, precision, world size)")


def sent_ratio(a, b):
    return ratio_of(b["bytes_sent"], a["bytes_sent"])


def compare_section(page, ctx, memories, matches):
    """Model-state bytes and bytes sent of B against A per (strategy, precision, world size)."""
    pairs = comparison_pairs(
        page, memories, matches, "/bench/memory", "memory",
        "ZeRO memory and communication: B against A",
        "row of the same strategy, precision and world size",
        lambda k: f"{k[0]} {k[1]} at {k[2]} ranks", "strategy, precision and world size",
        (workload_text, "the ratios compare different workloads"))
    if pairs is None:
        return
    page.p("Model-state bytes of the largest rank and bytes sent per rank per step (mean over "
           "ranks), matched on strategy, precision and world size. Ratio = B / A (above 1: B "
           "holds or sends more). Formula match: "
           + runs_words(memories, lambda m: m.match_words(), True) + ".")
    rows, classes = [], []
    for key, a, b in pairs:
        rows.append([esc(key[1]), esc(key[0]), fmt_int(key[2])] + pair_cells(key, a, b)[3:])
        sent = sent_ratio(a, b)
        classes.append("diff" if a["model_state"] != b["model_state"] or
                       (finite(sent) and fmt_ratio(sent) != "1.000") else "")
    page.table(["precision", "strategy", "world size", "model state A (B)",
                "model state B (B)", "model state B / A", "bytes sent A", "bytes sent B",
                "bytes sent B / A"], rows, numeric=set(range(2, 9)), row_classes=classes)
    page.note("Highlighted rows differ between the runs.")


def pair_cells(key, a, b):
    """(precision, strategy, world size, then model state and bytes sent A, B and B / A)."""
    strategy, precision, n = key
    return [precision, strategy, n, fmt_bytes(a["model_state"]), fmt_bytes(b["model_state"]),
            fmt_ratio(ratio_of(b["model_state"], a["model_state"])), fmt_bytes(a["bytes_sent"]),
            fmt_bytes(b["bytes_sent"]), fmt_ratio(sent_ratio(a, b))]


def compare_markdown(ctx, memories, matches):
    return comparison_md(
        matches, "ZeRO memory and communication",
        ["precision", "strategy", "world size", "model state A", "model state B", "B / A",
         "bytes sent A", "bytes sent B", "B / A"], "llrrrrrrr", pair_cells)
