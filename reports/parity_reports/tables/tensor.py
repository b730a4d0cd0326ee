"""/bench/tensor: tensor parallelism (with and without sequence parallelism) of a GPT against the
tensor-parallel size t, one row per run: activation bytes per block, bytes per rank per step by
layer and the step split into compute and tensor-parallel communication, each beside its
formula (reference/theory/tensor.hpp)."""

import math
from collections import OrderedDict

from ..common import (RowTable, comparison_md, comparison_pairs, esc, finite, fmt_bytes, fmt_count,
                      fmt_known, fmt_ms, fmt_ratio, fmt_tokens, formula_differences, formula_glance, known,
                      md_table, predicted_table, ratio_glance, ratio_of, runs_md, runs_words,
                      section_md, section_start, step_cells, compare_by_key, verdict_span, yes_no)

NAME = "tensor"
ORDER = 90
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
PARTS = ["embedding", "block", "head", "loss"]
READS = {
    "/bench/tensor": (
        "s:model,config i:tp,dp,sequence_parallel,world_size,batch,rank_batch,bytes_match,"
        "activation_bytes_per_block,formula_activation_bytes_per_block,parameters_per_rank,"
        "formula_parameters_per_rank,optimizer_state_bytes,formula_optimizer_state_bytes,"
        "memory_match f:step_seconds,tokens_per_second,tp_comm_seconds,compute_seconds,"
        "comm_share,predicted_comm_seconds,"
        + ",".join(f"bytes_{p},formula_bytes_{p}" for p in PARTS + ["total"])
        + ",korthikanti_activation_bytes_per_block,predicted_step_seconds,predicted_over_measured",
        ["model", "tp", "dp", "sequence_parallel", "step_seconds", "bytes_total",
         "formula_bytes_total"]),
}

# A column the file lacks reads as unknown: NaN, -1 for the integer counts (shown as "–") and
# None for a verdict, which the report then works out from the columns it has.
TENSOR_OPTIONAL = {"config": "", "world_size": -1, "batch": -1, "rank_batch": -1,
                   "tokens_per_second": math.nan, "tp_comm_seconds": math.nan,
                   "compute_seconds": math.nan, "comm_share": math.nan,
                   "predicted_comm_seconds": math.nan, "bytes_match": None,
                   "predicted_step_seconds": math.nan, "predicted_over_measured": math.nan,
                   "activation_bytes_per_block": -1, "formula_activation_bytes_per_block": -1,
                   "korthikanti_activation_bytes_per_block": math.nan,
                   "parameters_per_rank": -1, "formula_parameters_per_rank": -1,
                   "optimizer_state_bytes": -1, "formula_optimizer_state_bytes": -1,
                   "memory_match": None}
TENSOR_OPTIONAL.update({f"{kind}bytes_{p}": math.nan for p in PARTS
                        for kind in ("", "formula_")})
# The counts that must equal their formula (bench_tensor's memory_match), as words.
MEMORY_CHECKS = [("activation_bytes_per_block", "activations"),
                 ("parameters_per_rank", "parameters"),
                 ("optimizer_state_bytes", "optimizer state")]


def same_bytes(a, b):
    """Equal to the whole byte, as parity checks (llround on both sides)."""
    return finite(a) and finite(b) and round(a) == round(b)


class TensorBench(RowTable):
    """/bench/tensor: one row per (model, config, t, dp, sequence parallelism)."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/tensor", TENSOR_OPTIONAL)
        models = list(OrderedDict.fromkeys((r["model"], r["config"]) for r in self.rows))
        # Models in file order, then t, dp and SP off before on: the order of every figure.
        self.rows.sort(key=lambda r: (models.index((r["model"], r["config"])), int(r["tp"]),
                                      int(r["dp"]), int(r["sequence_parallel"])))
        self.workloads = models
        for r in self.rows:
            r["differs"] = self.differences(r)
        self.mismatched = [r for r in self.rows if r["differs"]]
        self.sizes = sorted({int(r["tp"]) for r in self.rows})
        self.read_alpha_beta()

    @staticmethod
    def key(r):
        return (r["model"], r["config"], int(r["tp"]), int(r["dp"]), int(r["sequence_parallel"]))

    @staticmethod
    def differences(r):
        """What of a row differs from its formula: ["block bytes", "activations", ...]. The
        file's own verdicts (bytes_match, memory_match) decide; the columns say which part, and
        stand in for a verdict the file lacks."""
        out = []
        parts = [p for p in PARTS if finite(r[f"bytes_{p}"]) or finite(r[f"formula_bytes_{p}"])]
        wrong = [p for p in parts if not same_bytes(r[f"bytes_{p}"], r[f"formula_bytes_{p}"])]
        if not parts and not same_bytes(r["bytes_total"], r["formula_bytes_total"]):
            wrong = ["total"]
        if r["bytes_match"] is None or int(r["bytes_match"]) != 1:
            if wrong:
                out.append(" and ".join(wrong) + " bytes")
            elif r["bytes_match"] is not None:
                out.append("bytes")
        return out + formula_differences(r, MEMORY_CHECKS, "memory_match", "memory")

    def sp_words(self):
        """'without and with sequence parallelism (SP)', or the one the file has."""
        modes = sorted({int(r["sequence_parallel"]) for r in self.rows})
        words = {(0,): "without", (1,): "with"}.get(tuple(modes), "without and with")
        return f"{words} sequence parallelism (SP)"

    def sizes_words(self):
        return "t = " + ", ".join(str(t) for t in self.sizes)

    def match_words(self):
        """'bytes, activations and parameters equal the formulas in all 5 rows', or which rows
        do not."""
        total = len(self.rows)
        if not self.mismatched:
            return ("bytes, activations and parameters equal the formulas in "
                    + ("the one row" if total == 1 else f"all {total} rows"))
        where = "; ".join(f"{run_words(r, self)} ({', '.join(r['differs'])})"
                          for r in self.mismatched)
        return f"{len(self.mismatched)} of {total} rows differ from the formulas: {where}"

    def has_parts(self):
        return any(finite(r[f"bytes_{p}"]) for r in self.rows for p in PARTS)

    def has_activations(self):
        return any(known(r["activation_bytes_per_block"]) for r in self.rows)

    def has_split(self):
        return any(finite(r["tp_comm_seconds"]) for r in self.rows)

    def several_dp(self):
        return any(int(r["dp"]) != 1 for r in self.rows)


def run_words(r, bench):
    """'t = 2 with SP' (and the dp size, the model when the file has several)."""
    words = f"t = {int(r['tp'])}"
    if bench.several_dp():
        words += f" x dp {int(r['dp'])}"
    words += " with SP" if int(r["sequence_parallel"]) else ""
    if len(bench.workloads) > 1:
        words = f"{r['model']} {words}"
    return words


def tick_label(r, bench):
    """A run as a tick label: 't=2', 't=2 SP', 't=2 dp=2', with the model when several."""
    parts = ([r["model"]] if len(bench.workloads) > 1 else []) + [f"t={int(r['tp'])}"]
    if bench.several_dp():
        parts.append(f"dp={int(r['dp'])}")
    if int(r["sequence_parallel"]):
        parts.append("SP")
    return " ".join(parts)


def count_or_dash(x):
    return fmt_count(x) if known(x) else "–"


def workload_text(bench):
    return "; ".join(f"{m} ({c})" if c else str(m) for m, c in bench.workloads) or "the model"


# --------------------------------------------------------------------------------------------
# Figures

def sp_color(plotter, sp):
    return plotter.palette[2 if sp else 0]


SP_WORDS = {0: "without SP", 1: "with SP"}


def positions(bench, rows):
    """x of each row: one slot per (model, t, dp), SP off on the left and on on the right;
    and the slots' tick labels and the bar width."""
    def slot(r):
        return (r["model"], r["config"], int(r["tp"]), int(r["dp"]))

    slots = list(OrderedDict.fromkeys(slot(r) for r in rows))
    both = {s for s in slots if len({int(r["sequence_parallel"]) for r in rows
                                     if slot(r) == s}) > 1}
    width = 0.38
    xs = [slots.index(slot(r)) + (0.0 if slot(r) not in both else
                                  width / 2 if int(r["sequence_parallel"]) else -width / 2)
          for r in rows]
    labels = [tick_label(dict(next(r for r in rows if slot(r) == s), sequence_parallel=0), bench)
              for s in slots]
    return xs, labels, width


def draw_activations(plotter, bench):
    """Measured activation bytes per block as bars per t (without and with SP side by side),
    parity's formula as diamonds, Korthikanti's 16-bit figure as crosses."""
    plt = plotter.plt
    rows = [r for r in bench.rows if known(r["activation_bytes_per_block"])]
    xs, labels, width = positions(bench, rows)
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(len(rows)))
    values = [v for r in rows for v in (r["activation_bytes_per_block"],
                                        r["formula_activation_bytes_per_block"],
                                        r["korthikanti_activation_bytes_per_block"]) if known(v)]
    unit, scale = plotter.byte_unit(max(values or [0]))
    seen_sp, korthikanti = set(), False
    for x, r in zip(xs, rows):
        sp = int(r["sequence_parallel"])
        seen_sp.add(sp)
        plotter.bar(ax, "measured", x, r["activation_bytes_per_block"] / scale,
                    width=width * 0.95, color=sp_color(plotter, sp), zorder=3,
                    edgecolor="#b00020" if "activations" in r["differs"] else "none",
                    linewidth=2)
        if known(r["formula_activation_bytes_per_block"]):
            plotter.plot(ax, "formula", x, r["formula_activation_bytes_per_block"] / scale,
                         linestyle="none", marker="D", markersize=6, color="black", zorder=5)
        if finite(r["korthikanti_activation_bytes_per_block"]):
            korthikanti = True
            plotter.plot(ax, "Korthikanti", x,
                         r["korthikanti_activation_bytes_per_block"] / scale, linestyle="none",
                         marker="x", markersize=8, markeredgewidth=2, color="0.4", zorder=5)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_xlabel("tensor-parallel size")
    ax.grid(axis="x", visible=False)
    ax.set_ylim(0, max(values or [1]) / scale * 1.12)
    ax.set_ylabel(f"bytes a block keeps for backward, per rank ({unit})")
    handles = [plotter.Patch(color=sp_color(plotter, sp), label=f"measured, {SP_WORDS[sp]}")
               for sp in sorted(seen_sp)]
    handles.append(plotter.Line2D([], [], linestyle="none", marker="D", markersize=6,
                                  color="black", label="formula (parity's accounting)"))
    if korthikanti:
        handles.append(plotter.Line2D([], [], linestyle="none", marker="x", markersize=8,
                                      markeredgewidth=2, color="0.4",
                                      label="Korthikanti et al. 2022, 16-bit (for reference)"))
    return plotter.finish(fig, "tensor_activations", handles, most=2,
                          title="Activation bytes per block and rank against t")


def draw_bytes(plotter, bench, rows, parts):
    """One panel per part (embedding, one block, head, loss): bars of the bytes a rank sent per
    step in its tensor-parallel group, one per (t, SP), the formula as a black bar-wide mark;
    a bar that differs from its formula is outlined in red."""
    plt = plotter.plt
    n = len(parts)
    fig, axes = plt.subplots(1, n, figsize=(max(7, min(16, (0.55 * len(rows) + 1.4) * n)), 4.6),
                             squeeze=False)
    seen_sp, any_wrong = set(), False
    labels = [tick_label(r, bench) for r in rows]
    for ax, part in zip(axes[0], parts):
        measured = [r[f"bytes_{part}"] for r in rows]
        formula = [r[f"formula_bytes_{part}"] for r in rows]
        unit, scale = plotter.byte_unit(max([v for v in measured + formula if finite(v)] or [0]))
        xs = list(range(len(rows)))
        for x, r, m, f in zip(xs, rows, measured, formula):
            sp = int(r["sequence_parallel"])
            seen_sp.add(sp)
            wrong = finite(m) and finite(f) and not same_bytes(m, f)
            any_wrong = any_wrong or wrong
            plotter.bar(ax, "measured", x, m / scale if finite(m) else 0.0, width=0.7,
                        color=sp_color(plotter, sp), zorder=3,
                        edgecolor="#b00020" if wrong else "none", linewidth=2)
            if finite(f):
                plotter.plot(ax, "formula", x, f / scale, linestyle="none", marker="_",
                             markersize=22, markeredgewidth=2.2, color="black", zorder=5)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=30 if len(rows) > 4 else 0,
                           ha="right" if len(rows) > 4 else "center")
        ax.grid(axis="x", visible=False)
        ax.set_ylabel(f"bytes per rank per step ({unit})")
        ax.set_title({"block": "one block", "total": "whole step"}.get(part, part))
    handles = [plotter.Patch(color=sp_color(plotter, sp), label=f"measured, {SP_WORDS[sp]}")
               for sp in sorted(seen_sp)]
    handles.append(plotter.Line2D([], [], linestyle="none", marker="_", markersize=14,
                                  markeredgewidth=2.2, color="black", label="formula"))
    if any_wrong:
        handles.append(plotter.Patch(facecolor="white", edgecolor="#b00020", linewidth=2,
                                     label="differs from the formula"))
    return plotter.finish(fig, "tensor_bytes", handles, most=4,
                          title="Bytes a rank sends per step in its tensor-parallel group, by layer")


def draw_step(plotter, bench):
    """Per run, the step as stacked bars: compute below, the tensor-parallel group's
    communication above; a white diamond at compute + the alpha-beta prediction of that
    communication, so the top of the bar meets it where the prediction holds."""
    plt = plotter.plt
    rows = bench.rows
    xs = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(len(rows)))
    compute_color, comm_color = "0.72", plotter.palette[1]
    split = bench.has_split()
    predicted_drawn = False
    tops = []
    for x, r in zip(xs, rows):
        step = r["step_seconds"] * 1e3
        comm = r["tp_comm_seconds"] * 1e3 if finite(r["tp_comm_seconds"]) else math.nan
        compute = (r["compute_seconds"] * 1e3 if finite(r["compute_seconds"]) else
                   step - comm if finite(comm) else math.nan)
        if split and finite(comm) and finite(compute):
            plotter.bar(ax, "compute", x, compute, width=0.65, color=compute_color, zorder=3)
            plotter.bar(ax, "tp comm", x, comm, bottom=compute, width=0.65, color=comm_color,
                        zorder=3)
            share = r["comm_share"] if finite(r["comm_share"]) else ratio_of(comm, step)
            if finite(share) and int(r["tp"]) > 1:
                ax.annotate(f"{100 * share:.0f}%", (x, compute + comm), textcoords="offset points",
                            xytext=(0, 3), ha="center", fontsize=8, color="0.25")
        else:
            plotter.bar(ax, "step", x, step, width=0.65, color=compute_color, hatch="//",
                        edgecolor="0.5", linewidth=0, zorder=3)
        tops.append(step)
        predicted = r["predicted_comm_seconds"]
        if finite(predicted) and finite(compute) and int(r["tp"]) > 1:
            y = compute + predicted * 1e3
            tops.append(y)
            plotter.plot(ax, "compute + predicted comm", x, y, linestyle="none", marker="D",
                         markersize=7, markerfacecolor="white", markeredgecolor="black",
                         zorder=5)
            predicted_drawn = True
    ax.set_xticks(xs)
    ax.set_xticklabels([tick_label(r, bench) for r in rows])
    ax.set_xlabel("tensor-parallel size")
    ax.grid(axis="x", visible=False)
    ax.set_ylim(0, max([t for t in tops if finite(t)] or [1]) * 1.12)
    ax.set_ylabel("step time (ms, slowest rank)")
    if split:
        handles = [plotter.Patch(color=compute_color, label="compute"),
                   plotter.Patch(color=comm_color,
                                 label="tensor-parallel communication (share on top)")]
    else:
        handles = [plotter.Patch(facecolor=compute_color, hatch="//", edgecolor="0.5",
                                 linewidth=0, label="step (no split in the file)")]
    if predicted_drawn:
        handles.append(plotter.Line2D([], [], linestyle="none", marker="D", markersize=7,
                                      markerfacecolor="white", markeredgecolor="black",
                                      label="compute + alpha-beta prediction"))
    return plotter.finish(fig, "tensor_step", handles, most=3,
                          title="Step time: compute and tensor-parallel communication")


def draw_comparison(plotter, pairs, bench, run_labels):
    """Per matched run, the step time of A and of B side by side, the tensor-parallel
    communication hatched on top of compute where the files split it."""
    return plotter.step_pairs(pairs, [tick_label(a, bench) for _, a, _ in pairs], "tp_comm_seconds",
                              ("compute", "tp comm", "tensor-parallel communication"), run_labels,
                              "Tensor-parallel step time, run A and run B", "tensor_compare",
                              xlabel="tensor-parallel size")


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = TensorBench
TITLE = "Tensor parallelism"


def section(page, ctx, bench):
    """The "Tensor parallelism" section; left out entirely when the file has no
    /bench/tensor."""
    plotter = ctx.plotter
    if not section_start(page, bench, NAME, TITLE, "/bench/tensor"):
        return
    steps = bench.attrs.get("timed_steps")
    warmup = bench.attrs.get("warmup_steps")
    page.p(f"{esc(workload_text(bench))} trained with tensor parallelism of size t "
           f"({esc(bench.sizes_words())}) on the first t × dp ranks, {bench.sp_words()}; "
           "counts are the first rank's (every rank of a group sends and holds the same), times "
           "the slowest rank's"
           + (f", the median of {int(steps)} timed steps after {int(warmup)} warm-up"
              if finite(steps) and finite(warmup) else "") + ". "
           + verdict_span(not bench.mismatched, bench.match_words()))
    formulas = bench.attrs.get("formulas")
    if formulas:
        page.p(f"Formulas: {esc(formulas)}.", "note")

    if bench.has_activations():
        page.p("Bytes a block keeps for backward on one rank, measured between the block's "
               "forward hooks, without and with SP side by side. Diamonds: parity's formula, "
               "which the bars must equal. Crosses: Korthikanti et al. (2022)'s figure for "
               "16-bit activations with dropout masks, for reference only (another accounting "
               "and element size).")
        page.img(draw_activations(plotter, bench), "activation bytes per block against t")
    else:
        page.note("/bench/tensor has no activation_bytes_per_block column: no activation "
                  "figure.")

    sending = [r for r in bench.rows if int(r["tp"]) > 1]
    parts = PARTS if bench.has_parts() else ["total"]
    if sending:
        page.p("Bytes the first rank sent in its tensor-parallel group in a step, by layer "
               "(" + ("one block of the model's L" if "block" in parts else "the whole step")
               + "), against the formula (black marks); a red outline marks a part that differs. "
               "At t = 1 nothing is sent.")
        page.img(draw_bytes(plotter, bench, sending, parts),
                 "bytes per rank per step by layer against the formula")
    else:
        page.note("Every run has t = 1: nothing is sent in a tensor-parallel group, so there "
                  "is no bytes figure.")

    ab = bench.alpha_beta_text()
    page.p("The step split into compute and the time spent in the tensor-parallel group's "
           "collectives (its share of the step on top). Diamonds: compute plus the alpha-beta "
           "prediction of those collectives with ring algorithms"
           + (f" ({esc(ab)}, from this run's ping-pong)" if ab else
              " (not drawn: the file has no alpha and beta, as with one rank)") + ".")
    page.img(draw_step(plotter, bench), "step time split into compute and communication")

    several = len(bench.workloads) > 1
    rows, classes = [], []
    for r in bench.rows:
        bytes_ok = not any(d.endswith("bytes") for d in r["differs"])
        memory_ok = not any(not d.endswith("bytes") for d in r["differs"])
        rows.append(([esc(r["model"])] if several else [])
                    + [str(int(r["tp"])), str(int(r["dp"])),
                       "yes" if int(r["sequence_parallel"]) else "no",
                       fmt_ms(r["step_seconds"]), fmt_tokens(r["tokens_per_second"]),
                       fmt_ms(r["tp_comm_seconds"]), fmt_ms(r["predicted_comm_seconds"]),
                       fmt_ratio(r["comm_share"]), fmt_bytes(r["bytes_total"]),
                       fmt_bytes(r["formula_bytes_total"]),
                       count_or_dash(r["activation_bytes_per_block"]),
                       count_or_dash(r["formula_activation_bytes_per_block"]),
                       count_or_dash(r["parameters_per_rank"]),
                       count_or_dash(r["formula_parameters_per_rank"]),
                       yes_no(bytes_ok), yes_no(memory_ok)])
        classes.append("diff" if r["differs"] else "")
    first = 1 if several else 0
    page.table((["model"] if several else [])
               + ["t", "dp", "SP", "step time (ms)", "tokens/s", "tp comm (ms)",
                  "predicted comm (ms)", "comm share", "bytes sent (B)", "formula (B)",
                  "activations per block (B)", "formula (B)", "parameters per rank", "formula",
                  "bytes = formula", "memory = formula"], rows,
               numeric=set(range(first, first + 2)) | set(range(first + 3, first + 14)),
               row_classes=classes)

    def parts_body():
        body = []
        for r in bench.rows:
            body.append([esc(tick_label(r, bench))]
                        + [cell for p in PARTS for cell in (fmt_bytes(r[f"bytes_{p}"]),
                                                            fmt_bytes(r[f"formula_bytes_{p}"]))]
                        + [count_or_dash(r["optimizer_state_bytes"]),
                           count_or_dash(r["formula_optimizer_state_bytes"]),
                           fmt_bytes(r["korthikanti_activation_bytes_per_block"]),
                           fmt_known(r["world_size"]), fmt_known(r["rank_batch"])])
        page.table(["run"] + [h for p in PARTS for h in (f"{p} (B)", "formula")]
                   + ["optimizer state (B)", "formula", "Korthikanti 16-bit (B)", "world size",
                      "rows on the first rank"], body, numeric=set(range(1, 14)))
    page.details("Table: bytes per layer, optimizer state and the reference figures", parts_body)
    predicted_table(page, "a rank's share of the step op by op, plus its tensor-parallel "
                    "collectives and, with dp > 1, the gradients' all-reduce", ["run"],
                    [((tick_label(r, bench),), r["predicted_step_seconds"], r["step_seconds"],
                      r["predicted_over_measured"]) for r in bench.rows])


def glance(ctx, bench):
    if not bench.usable:
        return []
    return [esc(f"Tensor parallelism: {bench.sizes_words()}; {bench.match_words()}.")]


def tensor_md(bench):
    rows = [[int(r["tp"]), int(r["dp"]), "yes" if int(r["sequence_parallel"]) else "no",
             fmt_ms(r["step_seconds"]), fmt_tokens(r["tokens_per_second"]),
             fmt_ratio(r["comm_share"]), fmt_bytes(r["bytes_total"]),
             fmt_bytes(r["formula_bytes_total"]), count_or_dash(r["activation_bytes_per_block"]),
             count_or_dash(r["formula_activation_bytes_per_block"])] for r in bench.rows]
    return [f"- Runs: {workload_text(bench)} at {bench.sizes_words()}, {bench.sp_words()}.",
            f"- Against the formulas: {bench.match_words()}.", ""] + md_table(
        ["t", "dp", "SP", "step (ms)", "tokens/s", "tp comm share", "bytes sent", "formula",
         "activations per block", "formula"], "rrlrrrrrrr", rows)


def markdown(ctx, bench):
    return section_md(bench, TITLE, "/bench/tensor", lambda: tensor_md(bench))


# --------------------------------------------------------------------------------------------
# Two runs

# compare(): the runs matched on (model, config, t, dp, SP).
compare = compare_by_key


def compare_glance(ctx, benches, matches):
    lines = ratio_glance(matches, "Tensor-parallel step time", "matching run", "step_seconds")
    if lines:
        lines += formula_glance(benches, "Tensor parallelism against the formulas: ",
                                lambda b: b.mismatched, esc)
    return lines


def compare_section(page, ctx, benches, matches):
    """Step time and tokens/s of B against A per (model, t, dp, SP)."""
    labels, plotter = ctx.labels, ctx.plotter
    pairs = comparison_pairs(
        page, benches, matches, "/bench/tensor", "tensor", "Tensor parallelism: B against A",
        "run of the same model, t, dp and SP",
        lambda k: f"{k[0]} t = {k[2]} x dp {k[3]}" + (" with SP" if k[4] else ""),
        "model, t, dp and SP",
        (workload_text, "only the runs of the same model and configuration are compared"))
    if pairs is None:
        return
    page.p("Median step time of the slowest rank and tokens/s, matched on model, configuration, "
           "t, dp and SP. Ratio = B / A (step time below 1 or tokens/s above 1: B is faster). "
           "Against the formulas: " + runs_words(benches, lambda b: b.match_words(), True) + ".")
    rows, classes = [], []
    for _, a, b in pairs:
        rows.append([esc(tick_label(a, benches[0]))] + step_cells(a, b)
                    + [fmt_ratio(a["comm_share"]), fmt_ratio(b["comm_share"]),
                       yes_no(not a["differs"]), yes_no(not b["differs"])])
        classes.append("diff" if a["differs"] or b["differs"] else "")
    page.table(["run", "step time A (ms)", "step time B (ms)", "step time B / A", "tokens/s A",
                "tokens/s B", "tokens/s B / A", "comm share A", "comm share B",
                "formulas A", "formulas B"], rows, numeric=set(range(1, 9)),
               row_classes=classes)
    page.img(draw_comparison(plotter, pairs, benches[0],
                             [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "tensor-parallel step time, run A and run B")


def compare_markdown(ctx, benches, matches):
    return comparison_md(
        matches, "Tensor parallelism (step time, slowest rank)",
        ["t", "dp", "SP", "step A (ms)", "step B (ms)", "B / A", "tokens/s A", "tokens/s B",
         "B / A"], "rrlrrrrrr",
        lambda key, a, b: [key[2], key[3], "yes" if key[4] else "no"] + step_cells(a, b),
        lambda: runs_md(benches, " against the formulas: ", lambda b: b.match_words()))
