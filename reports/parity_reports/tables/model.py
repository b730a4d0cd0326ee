"""/bench/model: a GPT training step on every rank, one row per (model, rank): throughput, MFU
against the same run's matmul rate, and peak memory by category; for the GPU fast path, MFU and
HFU over the GPU's datasheet peak, where the step's time went and the attention rate."""

import math
from collections import OrderedDict, defaultdict

from ..common import (MEMORY_CATEGORIES, MEMORY_OPTIONAL, RowTable, comparison_md, esc, finite,
                      fmt_count, fmt_flops, fmt_int, fmt_mfu, fmt_num, fmt_ratio, fmt_size,
                      fmt_spread, fmt_tokens, predicted_table, ratio_of, section_md,
                      section_start, spread)

NAME = "model"
ORDER = 50
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/bench/model": (
        "s:model,config,host i:rank,parameters,batch,sequence,layers,hidden,step_flops,"
        "peak_parameters_bytes,peak_gradients_bytes,peak_optimizer_state_bytes,"
        "peak_activations_bytes,peak_communication_bytes,peak_workspace_bytes "
        "f:megatron_step_flops,step_time_s,tokens_per_s,achieved_GFLOPs,matmul_GFLOPs,mfu,"
        "hardware_step_flops,peak_GFLOPs,mfu_of_peak,hfu_of_peak,products_fraction,"
        "attention_fraction,other_fraction,attention_GFLOPs,predicted_step_time_s,"
        "predicted_over_measured s:path",
        ["model", "config", "rank", "parameters", "batch", "sequence", "step_flops",
         "tokens_per_s", "matmul_GFLOPs", "mfu"]),
}

# The fast path's columns (GPU rows of `bench model --path fast`; NaN on the reference path and
# absent from older files).
FAST_COLUMNS = ("peak_GFLOPs", "mfu_of_peak", "hfu_of_peak", "products_fraction", "attention_fraction",
                "other_fraction", "attention_GFLOPs")
# The step predicted from the run's calibration (absent from older files).
PREDICTED_COLUMNS = ("predicted_step_time_s", "predicted_over_measured")
MODEL_OPTIONAL = {"host": "", "layers": -1, "hidden": -1, "megatron_step_flops": math.nan,
                  "step_time_s": math.nan, "achieved_GFLOPs": math.nan, "path": "",
                  "hardware_step_flops": math.nan, **{c: math.nan for c in FAST_COLUMNS + PREDICTED_COLUMNS}}


class ModelBench(RowTable):
    """/bench/model: one row per (model, rank), summarised per (model, config) over ranks."""

    def __init__(self, rf):
        # The reader refuses a /bench/model without its required columns, so only the optional
        # ones need defaults. A peak column that is absent stays None, unlike a measured 0.
        defaults = dict(MODEL_OPTIONAL)
        defaults.update({f"peak_{c}_bytes": None for c in MEMORY_CATEGORIES})
        super().__init__(rf, "/bench/model", defaults)
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
                "path": first["path"],
                **{c: spread(r[c] for r in rows) for c in FAST_COLUMNS + PREDICTED_COLUMNS},
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

    def on_peak(self):
        """The models with MFU over a datasheet peak (the fast path on a GPU the table knows)."""
        return [m for m in self.models if finite(m["mfu_of_peak"][0])]

    def words(self):
        """'tiny 24201 tokens/s, MFU 0.209; small ...' (means over ranks); a model with a
        datasheet peak adds its MFU over that peak."""
        return "; ".join(f"{m['model']} {fmt_tokens(m['tokens'][0])} tokens/s, MFU "
                         f"{fmt_mfu(m['mfu'][0])}"
                         + (f" ({fmt_mfu(m['mfu_of_peak'][0])} of the GPU's peak)"
                            if finite(m["mfu_of_peak"][0]) else "") for m in self.models)


def mfu_caption(model):
    denominator = model.denominator()
    text = ("MFU = achieved FLOP/s (the step's counted FLOPs / its median step time) divided by "
            "the same rank's matrix-multiply rate measured in the same run (matmul GFLOP/s); ")
    if denominator:
        return text + f"that rate is the {denominator}."
    return text + "the file does not say how that rate was measured (no mfu_denominator)."


def model_md(model, lead="Model training step"):
    """One line (summary.md, the glance list): per-model tokens/s and MFU, means over ranks."""
    nranks = max(m["ranks"] for m in model.models)
    return f"{lead} (mean over {nranks} rank{'s' if nranks != 1 else ''}): {model.words()}."


# --------------------------------------------------------------------------------------------
# Figures

def log_if_wide(ax, values):
    """Log scale when positive values span more than 20x (a tiny and a large model)."""
    good = [v for v in values if finite(v) and v > 0]
    if good and max(good) / min(good) > 20:
        ax.set_yscale("log")
        return True
    return False


def whiskers(plotter, ax, what, xs, spreads):
    """Min-max whiskers over ranks, recorded as "{what} min" and "{what} max"; returns whether
    any was drawn."""
    pts = [(x, s) for x, s in zip(xs, spreads)
           if s[3] > 1 and finite(s[0]) and finite(s[1]) and finite(s[2])]
    if not pts:
        return False
    plotter.whiskers(ax, (f"{what} min", f"{what} max"), [x for x, _ in pts],
                     [s[0] for _, s in pts], [s[1] for _, s in pts], [s[2] for _, s in pts],
                     fmt="none", ecolor="black", elinewidth=1.2, capsize=5, zorder=4)
    return True


def draw_bars(plotter, name, labels, spreads, ylabel, title, fmt, reference=None):
    """One bar per model at the mean over ranks, whiskers to the min and max rank.
    reference: (y, label) for a horizontal line that the axis keeps in view."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(len(labels)))
    xs = list(range(len(labels)))
    means = [s[0] if finite(s[0]) else 0.0 for s in spreads]
    plotter.bar(ax, "mean", xs, means, width=0.6, color=plotter.run_colors[0], zorder=3)
    handles = [plotter.Patch(color=plotter.run_colors[0], label="mean over ranks")]
    if whiskers(plotter, ax, "rank", xs, spreads):
        handles.append(plotter.Line2D([], [], color="black", marker="_", markersize=10,
                                      label="min–max over ranks"))
    tops = [s[2] if finite(s[2]) else s[0] for s in spreads]
    log = log_if_wide(ax, tops)
    if reference is not None:
        y, text = reference
        ax.axhline(y, color="0.3", linestyle="--", linewidth=1.2, zorder=2)
        handles.append(plotter.Line2D([], [], color="0.3", linestyle="--", label=text))
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
    return plotter.finish(fig, name, handles, most=3)


def draw_memory(plotter, labels, peaks, categories):
    """Stacked bars of peak bytes per category, one bar per model."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(len(labels)))
    totals = [sum(p.get(c, 0) for c in categories) for p in peaks]
    unit, scale = plotter.byte_unit(max(totals or [0]))
    xs = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    handles = []
    for c in categories:
        vals = [p.get(c, 0) / scale for p in peaks]
        plotter.bar(ax, c, xs, vals, bottom=bottom, width=0.6, color=plotter.memory_colors[c],
                    zorder=3)
        bottom = [b + v for b, v in zip(bottom, vals)]
        handles.append(plotter.Patch(color=plotter.memory_colors[c], label=c))
    for x, t in zip(xs, totals):
        ax.annotate(fmt_size(t), (x, t / scale), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, max(bottom or [1.0]) * 1.15 or 1.0)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax.grid(axis="x", visible=False)
    ax.set_ylabel(f"peak bytes during the steps ({unit})")
    ax.set_title("Peak memory of a training step by category (largest rank)")
    # Long category names: 3 fit a narrow figure.
    return plotter.finish(fig, "model_memory", handles, most=3)


def draw_comparison(plotter, labels, spreads_a, spreads_b, run_labels):
    """Grouped bars of tokens/s per model, run A beside run B, whiskers over ranks."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(2 * len(labels)))
    xs = list(range(len(labels)))
    width = 0.38
    handles = []
    tops = []
    for j, (spreads, run) in enumerate(((spreads_a, run_labels[0]),
                                        (spreads_b, run_labels[1]))):
        bx = [x + (j - 0.5) * width for x in xs]
        plotter.bar(ax, f"{run} mean", bx, [s[0] if finite(s[0]) else 0.0 for s in spreads],
                    width=width, color=plotter.run_colors[j], zorder=3)
        whiskers(plotter, ax, f"{run} rank", bx, spreads)
        handles.append(plotter.Patch(color=plotter.run_colors[j], label=run))
        tops += [s[2] if finite(s[2]) else s[0] for s in spreads]
    log = log_if_wide(ax, tops)
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
    return plotter.finish(fig, "model_compare_tokens", handles)


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = ModelBench
TITLE = "Model"


def section(page, ctx, model):
    """The "Model training step" section; left out entirely when the file has no /bench/model
    (files from before it existed, and subcommands that do not train)."""
    plotter = ctx.plotter
    if not section_start(page, model, "model", "Model training step", "/bench/model"):
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
    page.img(draw_bars(plotter, "model_tokens", labels, [m["tokens"] for m in model.models],
                       "tokens/s per rank", "Training-step throughput per model",
                       fmt_tokens), "tokens per second per model")
    page.p(esc("Model FLOPs utilisation per model (mean over ranks, whiskers min–max). At 1.0 a "
               "step would run at the same-run matrix-multiply rate. " + mfu_caption(model)))
    page.img(draw_bars(plotter, "model_mfu", labels, [m["mfu"] for m in model.models], "MFU",
                       "Model FLOPs utilisation per model", fmt_mfu,
                       reference=(1.0, "same-run matmul rate")),
             "MFU per model")
    predicted_table(page, "each rank's step op by op", ["model"],
                    [((m["model"],), m["predicted_step_time_s"][0], m["step_time"][0],
                      m["predicted_over_measured"][0]) for m in model.models])
    fast = model.on_peak()
    if fast:
        page.p("On the GPU's datasheet peak (the fast path, --path fast): MFU and HFU divide the "
               "model's FLOPs and the FLOPs the kernels execute (causal tiles, backward's "
               "recomputation) per second by the GPU's dense peak for the type; the step's time "
               "split comes from one more step with events between its parts; attention is "
               "forward plus backward at the model's shape, counted as FlashAttention counts it.")
        page.table(["model", "peak TFLOP/s", "MFU of peak", "HFU of peak", "products", "attention",
                    "rest", "attention TFLOP/s"],
                   [[f"<b>{esc(m['model'])}</b>", fmt_num(m["peak_GFLOPs"][0] / 1e3, 1),
                     esc(fmt_spread(m["mfu_of_peak"], fmt_mfu)), esc(fmt_spread(m["hfu_of_peak"], fmt_mfu)),
                     fmt_ratio(m["products_fraction"][0]), fmt_ratio(m["attention_fraction"][0]),
                     fmt_ratio(m["other_fraction"][0]), fmt_num(m["attention_GFLOPs"][0] / 1e3, 1)]
                    for m in fast], numeric={1, 2, 3, 4, 5, 6, 7})
    categories = model.memory_categories()
    if categories:
        page.p("Peak bytes allocated from just before the model is built to the end of its "
               "training steps, by category, on the rank with the most: parameters, gradients "
               "and optimizer state are the model states; a category's peak is its own, the "
               "peaks of different categories need not coincide in time.")
        page.img(draw_memory(plotter, labels, [m["peaks"] for m in model.models], categories),
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


def glance(ctx, model):
    return [esc(model_md(model))] if model.usable else []


def markdown(ctx, model):
    return section_md(model, "Model training step", "/bench/model",
                      lambda: [model_md(model, "Tokens/s per rank and MFU")])


# --------------------------------------------------------------------------------------------
# Two runs

def match_models(models):
    """[(summary A, summary B)] for the models both runs trained with the same config, in A's
    order. A preset whose config changed (another --dtype, batch or preset definition) is not
    the same workload, so it is not matched."""
    if not all(m.usable for m in models):
        return []
    b = models[1].by_key()
    return [(ma, b[key]) for key, ma in models[0].by_key().items() if key in b]


def compare(ctx, models):
    return match_models(models)


def compare_glance(ctx, models, pairs):
    if not pairs:
        return []
    return ["Model training step, tokens/s B / A: " + "; ".join(
        f"{esc(ma['model'])} {fmt_ratio(ratio_of(mb['tokens'][0], ma['tokens'][0]))}"
        for ma, mb in pairs) + "."]


def compare_section(page, ctx, models, pairs):
    """Tokens/s and MFU of B against A per model. Nothing is drawn when neither run has
    /bench/model."""
    labels, plotter = ctx.labels, ctx.plotter
    if not any(m.present for m in models):
        return
    page.add("<h2 id=\"model\">Model training step: B against A</h2>")
    for name, m in zip("AB", models):
        if not m.present:
            page.note(f"Run {name} has no /bench/model table (no model benchmark in that run).")
        elif not m.usable:
            page.note(f"Run {name}: /bench/model has 0 rows.")
    if not all(m.usable for m in models):
        return
    keys = [set(m.by_key()) for m in models]
    only = [sorted(f"{k[0]} ({k[1]})" for k in keys[i] - keys[1 - i]) for i in (0, 1)]
    for name, names in zip("AB", only):
        if names:
            page.note(f"Only in run {name} (no model of the same name and config in the other "
                      "run): " + "; ".join(names) + ".")
    if not pairs:
        page.note("No model of the same name and config in both runs: nothing to compare.")
        return
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
    page.img(draw_comparison(plotter, names, [ma["tokens"] for ma, _ in pairs],
                             [mb["tokens"] for _, mb in pairs],
                             [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "tokens per second per model, run A and run B")


def compare_markdown(ctx, models, pairs):
    return comparison_md(
        (pairs,), "Model training step (means over ranks)",
        ["model", "config", "tokens/s A", "tokens/s B", "B / A", "MFU A", "MFU B", "B / A"],
        "llrrrrrr",
        lambda ma, mb: [ma["model"], ma["config"], fmt_tokens(ma["tokens"][0]),
                        fmt_tokens(mb["tokens"][0]),
                        fmt_ratio(ratio_of(mb["tokens"][0], ma["tokens"][0])),
                        fmt_mfu(ma["mfu"][0]), fmt_mfu(mb["mfu"][0]),
                        fmt_ratio(ratio_of(mb["mfu"][0], ma["mfu"][0]))])
