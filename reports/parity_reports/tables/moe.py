"""/bench/moe, /bench/moe_steps and /bench/moe_load: a GPT with mixture-of-experts layers whose
experts are spread over ep ranks (expert parallelism, data parallelism for the rest), in three
sweeps that share their runs. Against ep: the step split into the expert exchange's all-to-alls,
the gradient reduction and compute. Against the router at the largest ep: the load imbalance and
the balancing loss at every step, and the tokens per expert of every MoE layer. Against the
capacity factor: the fraction of choices dropped. Every run's all-to-all bytes beside the
formula from its routing counts (reference/theory/moe.hpp)."""

import math
from collections import OrderedDict

from ..common import (RowTable, capitalized, comparison_md, comparison_pairs, esc, finite,
                      fmt_bytes, fmt_known, fmt_ms, fmt_num, fmt_ratio, fmt_tokens, formula_glance, grouped_rows,
                      md_table, order_key, predicted_table, ratio_glance, ratio_of, runs_md, runs_words,
                      section_md, section_start, step_cells, compare_by_key, verdict_span,
                      yes_no)

NAME = "moe"
ORDER = 110
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/bench/moe": (
        "s:model,config,router i:run,ep,dp,world_size,experts,top_k,moe_layers,in_ep_sweep,"
        "in_router_sweep,in_cf_sweep,batch,bytes_match f:capacity_factor,step_seconds,"
        "tokens_per_second,all_to_all_seconds,gradient_reduction_seconds,compute_seconds,"
        "all_to_all_share,all_to_all_bytes,formula_all_to_all_bytes,mean_load_imbalance,"
        "mean_dropped_fraction",
        ["run", "ep", "router", "capacity_factor", "step_seconds"]),
    "/bench/moe_steps": (
        "i:run,step,block,timed,tokens,dropped f:load_imbalance,admitted_imbalance,"
        "dropped_fraction,unrouted_fraction,balancing_loss,z_loss",
        ["run", "step", "block"]),
    "/bench/moe_load": (
        "i:run,step,block,expert,load,admitted",
        ["run", "step", "block", "expert", "load"]),
}

ROUTER_ORDER = ["top_k", "expert_choice", "aux_free"]
SWEEPS = ["ep", "router", "cf"]
# A column the file lacks reads as unknown: NaN, -1 for the integer counts (shown as "–"), -1
# for a sweep flag (the sweep is then worked out as `parity bench moe` plans it) and None for
# the bytes verdict (then the bytes against the formula decide).
RUN_OPTIONAL = {"model": "", "config": "", "dp": -1, "world_size": -1, "experts": -1,
                "top_k": -1, "moe_layers": -1, "batch": -1, "bytes_match": None}
RUN_OPTIONAL.update({f"in_{s}_sweep": -1 for s in SWEEPS})
RUN_OPTIONAL.update({c: math.nan for c in (
    "tokens_per_second", "all_to_all_seconds", "gradient_reduction_seconds", "compute_seconds",
    "all_to_all_share", "all_to_all_bytes", "formula_all_to_all_bytes", "mean_load_imbalance",
    "mean_dropped_fraction")})
STEP_OPTIONAL = {"timed": -1, "tokens": -1, "dropped": -1}
STEP_OPTIONAL.update({c: math.nan for c in (
    "load_imbalance", "admitted_imbalance", "dropped_fraction", "unrouted_fraction",
    "balancing_loss", "z_loss")})
LOAD_OPTIONAL = {"admitted": -1}
# The step split, stacked from the bottom: (label, column, palette index; None: grey).
SPLIT = [("compute", "compute_seconds", None),
         ("gradient reduction", "gradient_reduction_seconds", 4),
         ("all-to-all", "all_to_all_seconds", 1)]
# Each router's palette index, the same in every figure.
ROUTER_COLORS = {"top_k": 0, "expert_choice": 2, "aux_free": 1}
RED = "#b00020"


def cf_text(cf):
    return "inf" if cf == math.inf else f"{cf:g}"


def percent(x):
    """A fraction as a percentage, three significant digits: '50.9%', '0%'."""
    return f"{100 * x:.3g}%" if finite(x) else "–"


def mean(values):
    values = [v for v in values if finite(v)]
    return sum(values) / len(values) if values else math.nan


def bytes_checked(r):
    """Whether the file says if a run's bytes equal the formula: its bytes_match, or both
    counts."""
    return r["bytes_match"] is not None or (finite(r["all_to_all_bytes"])
                                            and finite(r["formula_all_to_all_bytes"]))


def bytes_differ(r):
    """The file's bytes_match decides; without it, the bytes against the formula to the whole
    byte, as parity checks them."""
    if r["bytes_match"] is not None:
        return int(r["bytes_match"]) != 1
    a, f = r["all_to_all_bytes"], r["formula_all_to_all_bytes"]
    return finite(a) and finite(f) and round(a) != round(f)


class MoeBench(RowTable):
    """The three MoE tables: runs in the order they ran, and each run's steps and tokens per
    expert by its run index (the `run` column)."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/moe", RUN_OPTIONAL)
        self.rows.sort(key=lambda r: int(r["run"]))
        self.has_steps, self.steps = grouped_rows(
            rf, "/bench/moe_steps", STEP_OPTIONAL, lambda s: int(s["run"]),
            lambda s: (int(s["step"]), int(s["block"])))
        # {(run, step): timed} from /bench/moe_steps' timed column, for both step tables.
        self.step_timed = {(int(s["run"]), int(s["step"])): int(s["timed"]) == 1
                           for rows in self.steps.values() for s in rows if int(s["timed"]) >= 0}
        self.has_load, self.load = grouped_rows(rf, "/bench/moe_load", LOAD_OPTIONAL,
                                                lambda x: int(x["run"]))
        for r in self.rows:
            r["differs"] = bytes_differ(r)
        self.checked = [r for r in self.rows if bytes_checked(r)]
        self.mismatched = [r for r in self.rows if r["differs"]]
        self.sizes = sorted({int(r["ep"]) for r in self.rows})

    @staticmethod
    def key(r):
        return (int(r["ep"]), r["router"], float(r["capacity_factor"]), int(r["experts"]),
                int(r["top_k"]))

    def in_sweep(self, r, sweep):
        """Whether run r serves the sweep ("ep", "router" or "cf"): its in_*_sweep column, or
        without it the plan of `parity bench moe`: every ep with the first run's router and cf,
        every router at the largest ep with that cf, every cf with top_k at the largest ep."""
        flag = int(r[f"in_{sweep}_sweep"])
        if flag >= 0:
            return flag == 1
        first, top = self.rows[0], max(self.sizes)
        if sweep == "ep":
            return (r["router"], r["capacity_factor"]) == (first["router"],
                                                           first["capacity_factor"])
        if sweep == "router":
            return int(r["ep"]) == top and r["capacity_factor"] == first["capacity_factor"]
        return int(r["ep"]) == top and r["router"] == "top_k"

    def sweep(self, sweep):
        """The runs of a sweep in its order: by ep, by router, by cf."""
        rows = [r for r in self.rows if self.in_sweep(r, sweep)]
        order = {"ep": lambda r: (int(r["ep"]), int(r["dp"])),
                 "router": lambda r: order_key(r["router"], ROUTER_ORDER),
                 "cf": lambda r: (order_key(r["router"], ROUTER_ORDER), r["capacity_factor"])}
        return sorted(rows, key=order[sweep])

    def warmup(self):
        w = self.attrs.get("warmup_steps")
        return int(w) if finite(w) else None

    def timed(self, s):
        """Whether a /bench/moe_steps or /bench/moe_load row is of a timed step: as the step's
        `timed` column says, else after the group's warmup_steps, else every step."""
        at = (int(s["run"]), int(s["step"]))
        if at in self.step_timed:
            return self.step_timed[at]
        warmup = self.warmup()
        return warmup is None or at[1] >= warmup

    def warmup_steps_of(self, run):
        """The steps of a run that are not timed."""
        return sorted({int(s["step"]) for s in self.steps.get(run, []) if not self.timed(s)})

    def per_step(self, run, column):
        """(steps, the mean over the MoE layers of column at each step) of a run."""
        by_step = OrderedDict()
        for s in self.steps.get(run, []):
            by_step.setdefault(int(s["step"]), []).append(s[column])
        return list(by_step), [mean(v) for v in by_step.values()]

    def first_step(self, run, column):
        """The mean over the MoE layers of column at the run's first step."""
        steps, values = self.per_step(run, column)
        return values[0] if steps else math.nan

    def timed_mean(self, r, column):
        """The timed steps' mean over the MoE layers: the file's mean_<column>, else from
        /bench/moe_steps."""
        if finite(r[f"mean_{column}"]):
            return r[f"mean_{column}"]
        return mean(s[column] for s in self.steps.get(int(r["run"]), []) if self.timed(s))

    def tokens_per_expert(self, run):
        """(blocks, experts, rows of tokens chosen per expert summed over the timed steps, one
        row per block) of a run."""
        sums = OrderedDict()
        for x in self.load.get(run, []):
            if self.timed(x):
                cell = (int(x["block"]), int(x["expert"]))
                sums[cell] = sums.get(cell, 0) + int(x["load"])
        blocks = sorted({b for b, _ in sums})
        experts = sorted({e for _, e in sums})
        return blocks, experts, [[sums.get((b, e), 0) for e in experts] for b in blocks]

    def timed_steps_of(self, run):
        return len({int(x["step"]) for x in self.load.get(run, []) if self.timed(x)})

    def several_shapes(self):
        """Whether the runs have different E, or different k among the routers with one (expert
        choice has none): then a run's words name them."""
        return (len({int(r["experts"]) for r in self.rows}) > 1
                or len({int(r["top_k"]) for r in self.rows if r["router"] != "expert_choice"}) > 1)

    def run_words(self, r):
        """'ep = 4 top_k cf = 1.25' (with E and k when the file has several)."""
        words = f"ep = {int(r['ep'])} {r['router']} cf = {cf_text(r['capacity_factor'])}"
        if self.several_shapes():
            words += f" E = {fmt_known(r['experts'])}" + (
                f" k = {int(r['top_k'])}" if int(r["top_k"]) > 0 else "")
        return words

    def tick_label(self, r):
        """A run as a tick label over three lines: 'ep=4', 'top_k', 'cf=1.25'."""
        extra = (f"\nE={fmt_known(r['experts'])}" + (f" k={int(r['top_k'])}"
                                                      if int(r["top_k"]) > 0 else "")
                 if self.several_shapes() else "")
        return (f"ep={int(r['ep'])}\n{r['router']}\ncf={cf_text(r['capacity_factor'])}"
                + extra)

    def sizes_words(self):
        return "ep = " + ", ".join(str(ep) for ep in self.sizes)

    def match_words(self):
        """'all-to-all bytes equal the formula in every run', or in which runs they do not."""
        total, checked = len(self.rows), len(self.checked)
        if not checked:
            return "no all-to-all bytes in the file"
        if not self.mismatched:
            return ("all-to-all bytes equal the formula in "
                    + ("the one run" if total == 1 else "every run" if checked == total
                       else f"the {checked} of {total} runs that have them"))
        return (f"all-to-all bytes differ from the formula in {len(self.mismatched)} of {total} "
                "runs: " + "; ".join(self.run_words(r) for r in self.mismatched))

    def imbalance_words(self):
        """'load imbalance top_k 1.44, expert_choice 1.00, aux_free 1.47' over the router
        sweep; None without one."""
        runs = self.sweep("router")
        values = [f"{r['router']} {fmt_num(self.timed_mean(r, 'load_imbalance'))}" for r in runs
                  if finite(self.timed_mean(r, "load_imbalance"))]
        return "load imbalance " + ", ".join(values) if values else None

    def dropped_words(self):
        """'dropped 50.9% at cf 0.5 -> 0% at inf' over the cf sweep (timed steps' mean), or at
        its one cf; None without one."""
        runs = [r for r in self.sweep("cf") if finite(self.timed_mean(r, "dropped_fraction"))]
        if not runs:
            return None
        lo, hi = runs[0], runs[-1]
        words = (f"dropped {percent(self.timed_mean(lo, 'dropped_fraction'))} at cf "
                 f"{cf_text(lo['capacity_factor'])}")
        if hi is not lo:
            words += (f" -> {percent(self.timed_mean(hi, 'dropped_fraction'))} at "
                      f"{cf_text(hi['capacity_factor'])}")
        return words

    def runs_words(self):
        n = len(self.rows)
        return f"{n} run{'s' if n != 1 else ''} at {self.sizes_words()}"

    def workload_words(self):
        """'tiny, E = 8, k = 2, 1 MoE layer' from the columns the file has."""
        def values(column, skip):
            return sorted({int(r[column]) for r in self.rows if int(r[column]) > skip})
        parts = [", ".join(OrderedDict.fromkeys(str(r["model"]) for r in self.rows
                                                if r["model"])) or "a GPT"]
        for column, name, skip in (("experts", "E", 0), ("top_k", "k", 0)):
            if values(column, skip):
                parts.append(f"{name} = " + ", ".join(map(str, values(column, skip))))
        layers = values("moe_layers", 0)
        if layers:
            parts.append(", ".join(map(str, layers)) + " MoE layer"
                         + ("s" if layers != [1] else ""))
        return ", ".join(parts)


def router_color(plotter, router):
    return (plotter.palette[ROUTER_COLORS[router]] if router in ROUTER_COLORS
            else plotter.color(router))


# --------------------------------------------------------------------------------------------
# Figures

def draw_split(plotter, bench, runs):
    """Per run of the ep sweep, the step stacked from compute, the gradient reduction and the
    all-to-alls (the slowest rank's medians), the all-to-all share of the step on top."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(len(runs)))
    colors = {label: "0.72" if i is None else plotter.palette[i] for label, _, i in SPLIT}
    split_drawn = whole_drawn = False
    tops = []
    for x, r in enumerate(runs):
        parts = [r[column] * 1e3 for _, column, _ in SPLIT]
        if all(finite(v) for v in parts):
            bottom = 0.0
            for (label, _, _), v in zip(SPLIT, parts):
                plotter.bar(ax, label, x, v, bottom=bottom, width=0.65, color=colors[label],
                            zorder=3)
                bottom += v
            share = (r["all_to_all_share"] if finite(r["all_to_all_share"])
                     else ratio_of(r["all_to_all_seconds"], r["step_seconds"]))
            if finite(share):
                ax.annotate(f"all-to-all {100 * share:.0f}%", (x, bottom),
                            textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8,
                            color="0.25")
            tops.append(bottom)
            split_drawn = True
        else:
            plotter.bar(ax, "step", x, r["step_seconds"] * 1e3, width=0.65, color="0.72",
                        hatch="//", edgecolor="0.5", linewidth=0, zorder=3)
            tops.append(r["step_seconds"] * 1e3)
            whole_drawn = True
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([f"ep={int(r['ep'])}" + (f"\ndp={int(r['dp'])}" if int(r["dp"]) > 0
                                                else "") for r in runs])
    ax.set_xlabel("expert-parallel size (dp = world / ep)")
    ax.grid(axis="x", visible=False)
    ax.set_ylim(0, max([t for t in tops if finite(t)] or [1]) * 1.15)
    ax.set_ylabel("time per step (ms, slowest rank)")
    handles = []
    if split_drawn:
        handles += [plotter.Patch(color=colors[label], label=label)
                    for label, _, _ in reversed(SPLIT)]
    if whole_drawn:
        handles.append(plotter.Patch(facecolor="0.72", hatch="//", edgecolor="0.5", linewidth=0,
                                     label="step (no split in the file)"))
    first = runs[0]
    return plotter.finish(fig, "moe_step", handles, most=4,
                          title=f"Step time against ep: {first['router']} router, cf = "
                          f"{cf_text(first['capacity_factor'])}")


def draw_bytes(plotter, bench, runs):
    """Per run, the bytes the busiest rank sent in the last step's all-to-alls as a bar (red
    where they differ from the formula), the formula as a black mark."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(max(6.5, min(16, 0.85 * len(runs) + 3)), 5.0))
    values = [v for r in runs for v in (r["all_to_all_bytes"], r["formula_all_to_all_bytes"])
              if finite(v)]
    unit, scale = plotter.byte_unit(max(values or [0]))
    for x, r in enumerate(runs):
        plotter.bar(ax, "measured", x, r["all_to_all_bytes"] / scale, width=0.65,
                    color=RED if r["differs"] else plotter.palette[0], zorder=3)
        if finite(r["formula_all_to_all_bytes"]):
            plotter.plot(ax, "formula", x, r["formula_all_to_all_bytes"] / scale,
                         linestyle="none", marker="_", markersize=24, markeredgewidth=2.2,
                         color="black", zorder=5)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([bench.tick_label(r) for r in runs], fontsize=8)
    ax.grid(axis="x", visible=False)
    top = max(values or [0]) / scale
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)
    ax.set_ylabel(f"bytes sent per step, busiest rank ({unit})")
    handles = [plotter.Patch(color=plotter.palette[0], label="measured, equal to the formula"),
               plotter.Line2D([], [], linestyle="none", marker="_", markersize=16,
                              markeredgewidth=2.2, color="black", label="formula")]
    if bench.mismatched:
        handles.insert(1, plotter.Patch(color=RED, label="measured, differs from the formula"))
    return plotter.finish(fig, "moe_bytes", handles, most=3,
                          title="All-to-all bytes against the formula, per run")


def draw_load(plotter, bench, runs):
    """One panel per router: tokens chosen per expert (columns) and MoE layer (rows) summed over
    the timed steps, coloured from blue (below balanced, white) to red (above); the count in
    each cell where they fit. Balanced is the mean over the panel's cells: 1/E of a layer's
    choices, every layer routing the same tokens."""
    plt = plotter.plt
    from matplotlib.colors import Normalize
    grids = [(r, *bench.tokens_per_expert(int(r["run"]))) for r in runs]
    n_blocks = max(len(blocks) for _, blocks, _, _ in grids)
    n_experts = max(len(experts) for _, _, experts, _ in grids)
    width = min(5.5, max(3.2, 0.36 * n_experts + 1.3))
    fig, axes = plt.subplots(1, len(grids), squeeze=False,
                             figsize=(width * len(grids) + 0.6, 0.5 * n_blocks + 2.6))
    for ax, (r, blocks, experts, grid) in zip(axes[0], grids):
        cells = [v for row in grid for v in row]
        balanced = sum(cells) / len(cells)
        reach = max([abs(v - balanced) for v in cells] + [0.05 * balanced, 1.0])
        ax.set_title(f"{r['router']}: balanced {balanced:.4g} per expert")
        mesh = plotter.heatmap(ax, f"{r['router']} tokens", experts, blocks, grid,
                               cmap="RdBu_r", norm=Normalize(balanced - reach, balanced + reach))
        if len(cells) <= 96:
            for b, row in zip(blocks, grid):
                for e, v in zip(experts, row):
                    ax.text(e, b, str(v), ha="center", va="center", fontsize=7,
                            color="white" if abs(v - balanced) > 0.6 * reach else "black")
        ax.set_xticks(experts[::max(1, math.ceil(len(experts) / 16))])
        ax.set_yticks(blocks)
        ax.set_yticklabels([f"block {b}" for b in blocks])
        ax.invert_yaxis()  # the first block on top
        ax.set_xlabel("expert")
        bar = fig.colorbar(mesh, ax=ax, fraction=0.08, pad=0.03)
        bar.ax.axhline(balanced, color="black", linewidth=1.2)
        bar.set_label(f"tokens chosen, {bench.timed_steps_of(int(r['run']))} timed steps")
    axes[0][0].set_ylabel("MoE layer")
    fig.suptitle(f"Tokens per expert and MoE layer at ep = {int(runs[0]['ep'])}, timed steps "
                 "summed", fontsize=12, fontweight="bold")
    return plotter.save(fig, "moe_load", legend_rows=0)


def warmup_span(ax, steps):
    """Shades the warm-up steps, the first ones of a run."""
    if steps:
        ax.axvspan(min(steps) - 0.5, max(steps) + 0.5, color="0.85", alpha=0.6, zorder=1,
                   linewidth=0)


def draw_routers(plotter, bench, runs):
    """Per router at the largest ep, the load imbalance (max / mean tokens per expert, mean over
    the MoE layers) at every training step; beside it the balancing loss of the routers that
    have one; the warm-up steps shaded."""
    plt = plotter.plt
    with_loss = [r for r in runs
                 if any(finite(v) and v != 0 for v in bench.per_step(int(r["run"]),
                                                                    "balancing_loss")[1])]
    panels = 2 if with_loss else 1
    fig, axes = plt.subplots(1, panels, squeeze=False, figsize=(6.2 * panels + 0.6, 4.4))
    axes = axes[0]
    warm = sorted({s for r in runs for s in bench.warmup_steps_of(int(r["run"]))})
    all_steps = []
    for r in runs:
        run = int(r["run"])
        steps, imbalance = bench.per_step(run, "load_imbalance")
        all_steps += steps
        plotter.plot(axes[0], f"{r['router']} load imbalance", steps, imbalance, marker="o",
                     markersize=4, linewidth=1.6, color=router_color(plotter, r["router"]),
                     zorder=4)
        if r in with_loss:
            steps, loss = bench.per_step(run, "balancing_loss")
            plotter.plot(axes[1], f"{r['router']} balancing loss", steps, loss, marker="o",
                         markersize=4, linewidth=1.6, color=router_color(plotter, r["router"]),
                         zorder=4)
    plotter.hline(axes[0], "balanced", 1.0, color="black", linestyle=":", linewidth=1.2,
                  zorder=2)
    axes[0].set_ylabel("load imbalance: max / mean tokens per expert")
    axes[0].set_title("load imbalance (1: balanced)")
    if with_loss:
        axes[1].set_ylabel("balancing loss (alpha included)")
        none = [r["router"] for r in runs if r not in with_loss]
        axes[1].set_title("Switch balancing loss" + (f" ({', '.join(none)}: none)"
                                                     if none else ""))
    steps = sorted(set(all_steps))
    for ax in axes:
        warmup_span(ax, warm)
        ax.set_xlabel("training step")
        if steps:
            ax.set_xticks(steps[::max(1, math.ceil(len(steps) / 12))])
            ax.set_xlim(steps[0] - 0.5, steps[-1] + 0.5)
    handles = [plotter.Line2D([], [], color=router_color(plotter, r["router"]), marker="o",
                              markersize=4, linewidth=1.6, label=r["router"]) for r in runs]
    handles.append(plotter.Line2D([], [], color="black", linestyle=":", label="balanced"))
    if warm:
        handles.append(plotter.Patch(color="0.85", alpha=0.6, label="warm-up (not timed)"))
    return plotter.finish(fig, "moe_routers", handles, title=f"Routers at ep = {int(runs[0]['ep'])} "
                          "step by step (mean over the MoE layers)")


def cf_positions(cfs):
    """{cf: x}: a finite cf at itself, inf a gap past the largest finite one; and where the
    break between them goes (None without inf)."""
    finite_cfs = sorted(c for c in cfs if c != math.inf)
    top = finite_cfs[-1] if finite_cfs else 0.0
    gap = max(0.5, 0.25 * top)
    out = {c: c for c in finite_cfs}
    if math.inf in cfs:
        out[math.inf] = top + gap
        return out, top + gap / 2
    return out, None


def draw_dropped(plotter, bench, runs):
    """The fraction of choices dropped over capacity against cf, at the first step and the
    timed steps' mean (over the MoE layers); inf (dropless) past a break on the right."""
    plt = plotter.plt
    from matplotlib.ticker import PercentFormatter
    x_of, gap = cf_positions({r["capacity_factor"] for r in runs})
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    routers = list(OrderedDict.fromkeys(r["router"] for r in runs))
    tops = []
    for router in routers:
        mine = [r for r in runs if r["router"] == router]
        xs = [x_of[r["capacity_factor"]] for r in mine]
        first = [bench.first_step(int(r["run"]), "dropped_fraction") for r in mine]
        timed = [bench.timed_mean(r, "dropped_fraction") for r in mine]
        color = router_color(plotter, router)
        if any(finite(v) for v in first):
            plotter.plot(ax, f"{router} first step", xs, first, marker="s", markersize=6,
                         markerfacecolor="white", linestyle="--", linewidth=1.3, color=color,
                         zorder=4)
        plotter.plot(ax, f"{router} timed mean", xs, timed, marker="o", markersize=6,
                     linewidth=1.8, color=color, zorder=5)
        tops += [v for v in first + timed if finite(v)]
    if gap is not None:
        ax.axvline(gap, color="0.5", linestyle=(0, (2, 3)), linewidth=1)
    ax.set_xticks(list(x_of.values()))
    ax.set_xticklabels([cf_text(c) if c != math.inf else "inf\n(dropless)" for c in x_of])
    span = max(x_of.values()) - min(x_of.values())
    ax.set_xlim(min(x_of.values()) - 0.08 * span, max(x_of.values()) + 0.08 * span)
    ax.set_ylim(-0.02 * max(tops + [0.05]), max(tops + [0.05]) * 1.12)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("capacity factor cf (an expert takes ceil(k cf tokens / E) rows)")
    ax.set_ylabel("choices dropped over capacity")
    handles = []
    for router in routers:
        color = router_color(plotter, router)
        handles += [plotter.Line2D([], [], color=color, marker="o", linewidth=1.8,
                                   label=f"{router}: mean over the timed steps"),
                    plotter.Line2D([], [], color=color, marker="s", markerfacecolor="white",
                                   linestyle="--", label=f"{router}: first step")]
    r = runs[0]
    return plotter.finish(fig, "moe_dropped", handles, most=2,
                          title=f"Dropped choices against the capacity factor at ep = {int(r['ep'])}"
                          + (f", E = {int(r['experts'])}" if int(r["experts"]) > 0 else "")
                          + (f", k = {int(r['top_k'])}" if int(r["top_k"]) > 0 else ""))


def draw_comparison(plotter, pairs, bench, run_labels):
    """Per matched run, the step time of A and of B side by side, the all-to-alls hatched on top
    where the files have them."""
    return plotter.step_pairs(pairs, [bench.tick_label(a) for _, a, _ in pairs], "all_to_all_seconds",
                              ("rest of the step", "all-to-all", "all-to-all"), run_labels,
                              "Mixture-of-experts step time, run A and run B", "moe_compare")


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = MoeBench
TITLE = "Mixture of experts"


def verdict_words(bench):
    """The bytes' verdict, green or red once the file has bytes to check."""
    if not bench.checked:
        return esc(capitalized(bench.match_words())) + "."
    return verdict_span(not bench.mismatched, bench.match_words())


def sweeps_cell(bench, r):
    return ", ".join(s for s in SWEEPS if bench.in_sweep(r, s)) or "–"


def section(page, ctx, bench):
    """The "Mixture of experts" section; left out entirely when the file has no /bench/moe."""
    plotter = ctx.plotter
    if not section_start(page, bench, NAME, TITLE, "/bench/moe"):
        return
    steps, warmup = bench.attrs.get("timed_steps"), bench.attrs.get("warmup_steps")
    algorithm = bench.attrs.get("all_to_all")
    page.p(f"Model: {esc(bench.workload_words())}. The experts of each MoE layer are spread "
           f"over ep ranks ({esc(bench.sizes_words())}) of an ep × dp grid of every rank, the "
           "rest of the model is data-parallel; times are the slowest rank's"
           + (f" median of {int(steps)} timed steps after {int(warmup)} warm-up"
              if finite(steps) and finite(warmup) else " median step")
           + (f"; the experts' all-to-alls use the {esc(algorithm)} all_to_all_v"
              if algorithm else "")
           + ". The runs serve three sweeps: every ep with the first router and cf, every "
           "router at the largest ep, every cf with the top_k router at the largest ep. "
           + verdict_words(bench))
    formulas = bench.attrs.get("formulas")
    if formulas:
        page.p(f"Formulas: {esc(formulas)}.", "note")

    ep_runs = bench.sweep("ep")
    if ep_runs:
        page.p("The step against ep, split into the all-to-alls of the expert exchange (counts "
               "and rows, forward and backward, every MoE layer), the exposed data-parallel "
               "gradient reduction, and the rest (compute); each the slowest rank's median. The "
               "all-to-all share of the step on top.")
        page.img(draw_split(plotter, bench, ep_runs), "step time split against ep")
    else:
        page.note("No run of the ep sweep: no step-split figure.")

    with_bytes = [r for r in bench.rows if finite(r["all_to_all_bytes"])]
    sending = [r for r in with_bytes if int(r["ep"]) > 1]
    if sending:
        page.p("Bytes the busiest rank sent to other ranks in the last step's all-to-alls "
               "(dispatch, combine and their backward, every MoE layer), against the formula "
               "from the routing counts of that step (black marks), which they must equal; a "
               "red bar differs. At ep = 1 every expert is local and nothing is sent: those "
               "runs are in the table only.")
        page.img(draw_bytes(plotter, bench, sending),
                 "all-to-all bytes against the formula per run")
    elif with_bytes:
        page.note("Every run has ep = 1: every expert is local and nothing is sent, so there "
                  "is no bytes figure.")
    else:
        page.note("/bench/moe has no all_to_all_bytes column: no bytes figure.")

    router_runs = bench.sweep("router")
    if not router_runs:
        page.note("No run of the router sweep: no tokens-per-expert or per-step figures.")
    if router_runs and not bench.has_load:
        page.note("The file has no /bench/moe_load: no tokens-per-expert figure.")
    heat = [r for r in router_runs if bench.tokens_per_expert(int(r["run"]))[0]]
    if heat:
        page.p("Tokens each expert was chosen for (before capacity) in each MoE layer, summed "
               "over the timed steps and the data ranks, per router at the largest ep. "
               "Balanced, each expert would get 1/E of the layer's choices (white, the black line "
               "on each scale); red cells got more, blue fewer. Expert choice gives every expert "
               "the same number of rows by construction.")
        page.img(draw_load(plotter, bench, heat), "tokens per expert and MoE layer per router")
    if router_runs and not bench.has_steps:
        page.note("The file has no /bench/moe_steps: no per-step figure and no dropped-fraction "
                  "figure at the first step.")
    stepped = [r for r in router_runs
               if any(finite(v) for v in bench.per_step(int(r["run"]), "load_imbalance")[1])]
    if bench.has_steps and router_runs and not stepped:
        page.note("/bench/moe_steps has no load imbalance of the router sweep's runs: no "
                  "per-step figure.")
    if stepped:
        page.p("Per router, the load imbalance (max / mean over the experts of the tokens each "
               "was chosen for; 1 is balanced) at every training step, warm-up included "
               "(shaded), and beside it the Switch balancing loss of the routers trained with "
               "one; with several MoE layers, the mean over them.")
        page.img(draw_routers(plotter, bench, stepped),
                 "load imbalance and balancing loss against the step per router")

    cf_sweep = bench.sweep("cf")
    cf_runs = [r for r in cf_sweep if finite(bench.timed_mean(r, "dropped_fraction"))]
    if len({r["capacity_factor"] for r in cf_runs}) > 1:
        page.p("The fraction of the k × tokens choices dropped because their expert was full "
               "(capacity ceil(k cf tokens / E)), against cf: at the first step (the router as "
               "initialised) and the mean over the timed steps, over the MoE layers. inf: "
               "dropless, drawn past the break.")
        page.img(draw_dropped(plotter, bench, cf_runs), "dropped fraction against cf")
    elif cf_runs:
        r = cf_runs[0]
        page.note(f"The capacity-factor sweep has one cf ({cf_text(r['capacity_factor'])}, "
                  f"dropped {percent(bench.timed_mean(r, 'dropped_fraction'))}): no "
                  "dropped-fraction figure.")
    elif cf_sweep:
        page.note("The file has no dropped fraction of the capacity-factor sweep's runs: no "
                  "dropped-fraction figure.")
    else:
        page.note("No run of the capacity-factor sweep: no dropped-fraction figure.")

    several = bench.several_shapes()
    rows, classes = [], []
    for r in bench.rows:
        rows.append([fmt_known(r["run"]), str(int(r["ep"])), fmt_known(r["dp"]),
                     esc(r["router"])]
                    + ([fmt_known(r["experts"]), fmt_known(r["top_k"])] if several else [])
                    + [esc(cf_text(r["capacity_factor"])), fmt_ms(r["step_seconds"]),
                       fmt_tokens(r["tokens_per_second"]), fmt_ms(r["all_to_all_seconds"]),
                       fmt_ms(r["gradient_reduction_seconds"]),
                       fmt_ratio(r["all_to_all_share"]), fmt_bytes(r["all_to_all_bytes"]),
                       fmt_bytes(r["formula_all_to_all_bytes"]),
                       yes_no(not r["differs"]) if bytes_checked(r) else "–",
                       fmt_ratio(bench.timed_mean(r, "load_imbalance")),
                       fmt_ratio(bench.timed_mean(r, "dropped_fraction")),
                       esc(sweeps_cell(bench, r))])
        classes.append("diff" if r["differs"] else "")
    x = 2 if several else 0
    page.table(["run", "ep", "dp", "router"] + (["E", "k"] if several else [])
               + ["cf", "step time (ms)", "tokens/s", "all-to-all (ms)",
                  "gradient reduction (ms)", "all-to-all share", "all-to-all bytes (B)",
                  "formula (B)", "bytes = formula", "mean load imbalance",
                  "mean dropped fraction", "sweeps"], rows,
               numeric={0, 1, 2} | set(range(4, 4 + x)) | set(range(5 + x, 12 + x))
               | {13 + x, 14 + x}, row_classes=classes)

    shown = sum(len(bench.steps.get(int(r["run"]), [])) for r in bench.rows)
    if shown:
        def steps_body():
            body = []
            for r in bench.rows:
                for s in bench.steps.get(int(r["run"]), []):
                    body.append([esc(bench.run_words(r)), str(int(s["step"])),
                                 "yes" if bench.timed(s) else "no", str(int(s["block"])),
                                 fmt_known(s["tokens"]), fmt_ratio(s["load_imbalance"]),
                                 fmt_ratio(s["admitted_imbalance"]), fmt_known(s["dropped"]),
                                 fmt_ratio(s["dropped_fraction"]),
                                 fmt_ratio(s["unrouted_fraction"]),
                                 fmt_num(s["balancing_loss"], 4), fmt_num(s["z_loss"], 4)])
            page.table(["run", "step", "timed", "block", "tokens", "load imbalance",
                        "admitted imbalance", "dropped", "dropped fraction",
                        "unrouted fraction", "balancing loss", "z-loss"], body,
                       numeric={1} | set(range(3, 12)))
        page.details(f"Table: every MoE layer at every step of every run ({shown} rows)",
                     steps_body)
    nan = float("nan")
    predicted_table(page, "each rank's step op by op with its MoE blocks as the last step routed "
                    "them, the all-to-alls on the ping-pong's alpha-beta link, and the gradients' "
                    "reductions (the slowest rank's)", ["run"],
                    [((bench.run_words(r),), r.get("predicted_step_seconds", nan), r["step_seconds"],
                      r.get("predicted_over_measured", nan)) for r in bench.rows])


def glance(ctx, bench):
    """'MoE: 9 runs at ep = 1, 2, 4; all-to-all bytes equal the formula in every run; load
    imbalance top_k 1.44, ...; dropped 50.9% at cf 0.5 -> 0% at inf.', the bytes in red where
    they differ from the formula."""
    if not bench.usable:
        return []
    match = esc(bench.match_words())
    if bench.mismatched:
        match = f"<span class=\"bad\">{match}</span>"
    parts = [esc(bench.runs_words()), match] + [esc(w) for w in (bench.imbalance_words(),
                                                                 bench.dropped_words()) if w]
    return ["MoE: " + "; ".join(parts) + "."]


def moe_md(bench):
    lines = [f"- Runs: {bench.workload_words()}; {bench.runs_words()}.",
             f"- Against the formula: {bench.match_words()}."]
    imbalance, dropped = bench.imbalance_words(), bench.dropped_words()
    if imbalance:
        lines.append(f"- Per router (timed steps' mean): {imbalance}.")
    if dropped:
        lines.append(f"- Capacity-factor sweep (timed steps' mean): {dropped}.")
    rows = [[int(r["ep"]), fmt_known(r["dp"]), r["router"], cf_text(r["capacity_factor"]),
             fmt_ms(r["step_seconds"]), fmt_tokens(r["tokens_per_second"]),
             fmt_ratio(r["all_to_all_share"]), fmt_bytes(r["all_to_all_bytes"]),
             fmt_bytes(r["formula_all_to_all_bytes"]),
             fmt_ratio(bench.timed_mean(r, "load_imbalance")),
             fmt_ratio(bench.timed_mean(r, "dropped_fraction"))] for r in bench.rows]
    return lines + [""] + md_table(
        ["ep", "dp", "router", "cf", "step (ms)", "tokens/s", "all-to-all share", "bytes",
         "formula", "load imbalance", "dropped"], "rrllrrrrrrr", rows)


def markdown(ctx, bench):
    return section_md(bench, TITLE, "/bench/moe", lambda: moe_md(bench))


# --------------------------------------------------------------------------------------------
# Two runs

def key_words(k):
    ep, router, cf, experts, top_k = k
    return (f"ep = {ep} {router} cf = {cf_text(cf)} E = {experts if experts >= 0 else '–'}"
            + (f" k = {top_k}" if top_k > 0 else ""))


def bytes_change(a, b):
    """B's all-to-all bytes minus A's, NaN where either lacks them."""
    x, y = a["all_to_all_bytes"], b["all_to_all_bytes"]
    return y - x if finite(x) and finite(y) else math.nan


def fmt_change(d):
    return "–" if not finite(d) else "0" if round(d) == 0 else f"{round(d):+,}"


def bytes_words(pairs):
    """'the same in A and B in every matching run', or how many differ and by how much."""
    changes = [bytes_change(a, b) for _, a, b in pairs]
    known = [d for d in changes if finite(d)]
    differ = [d for d in known if round(d) != 0]
    if not known:
        return None
    if not differ:
        return "the same in A and B in every matching run with bytes"
    return (f"B - A differs in {len(differ)} of {len(known)} matching runs, from "
            f"{fmt_change(min(differ))} to {fmt_change(max(differ))} B")


# compare(): the runs matched on (ep, router, cf, E, k).
compare = compare_by_key


def compare_glance(ctx, benches, matches):
    if matches is None:
        return []
    if not matches[0]:
        return ["MoE: no run of the same ep, router, cf, E and k in both files."]
    lines = ratio_glance(matches, "MoE step time", "matching run", "step_seconds")
    words = bytes_words(matches[0])
    if words:
        lines.append(esc(f"MoE all-to-all bytes: {words}."))
    return lines + formula_glance(benches, "MoE against the formula: ", lambda b: b.mismatched)


def compare_section(page, ctx, benches, matches):
    """Step time, tokens/s and all-to-all bytes of B against A per (ep, router, cf, E, k)."""
    labels, plotter = ctx.labels, ctx.plotter
    pairs = comparison_pairs(
        page, benches, matches, "/bench/moe", "moe", "Mixture of experts: B against A",
        "run of the same ep, router, cf, E and k", key_words, "ep, router, cf, E and k",
        (lambda b: b.workload_words(),
         "only the runs of the same ep, router, cf, E and k are compared"))
    if pairs is None:
        return
    page.p("Median step time of the slowest rank, tokens/s and the all-to-all bytes of the "
           "busiest rank, matched on ep, router, cf, E and k. Ratio = B / A (step time below 1 "
           "or tokens/s above 1: B is faster); bytes: B - A. Against the formula: "
           + runs_words(benches, lambda b: b.match_words(), True) + ".")
    rows, classes = [], []
    for _, a, b in pairs:
        rows.append([esc(benches[0].run_words(a))] + step_cells(a, b)
                    + [fmt_ratio(a["all_to_all_share"]), fmt_ratio(b["all_to_all_share"]),
                       fmt_bytes(a["all_to_all_bytes"]), fmt_bytes(b["all_to_all_bytes"]),
                       fmt_change(bytes_change(a, b))]
                    + [yes_no(not r["differs"]) if bytes_checked(r) else "–" for r in (a, b)])
        classes.append("diff" if a["differs"] or b["differs"] else "")
    page.table(["run", "step time A (ms)", "step time B (ms)", "step time B / A", "tokens/s A",
                "tokens/s B", "tokens/s B / A", "all-to-all share A", "all-to-all share B",
                "bytes A (B)", "bytes B (B)", "bytes B - A", "bytes = formula A",
                "bytes = formula B"], rows, numeric=set(range(1, 12)), row_classes=classes)
    page.img(draw_comparison(plotter, pairs, benches[0], [f"A: {labels[0]}", f"B: {labels[1]}"]),
             "mixture-of-experts step time, run A and run B")


def compare_markdown(ctx, benches, matches):
    return comparison_md(
        matches, "Mixture of experts (step time, slowest rank)",
        ["ep", "router", "cf", "E", "k", "step A (ms)", "step B (ms)", "B / A", "tokens/s A",
         "tokens/s B", "B / A", "bytes A", "bytes B", "B - A"], "rllrrrrrrrrrrr",
        lambda key, a, b: [key[0], key[1], cf_text(key[2]), fmt_known(key[3]),
                           fmt_known(key[4])] + step_cells(a, b)
        + [fmt_bytes(a["all_to_all_bytes"]), fmt_bytes(b["all_to_all_bytes"]),
           fmt_change(bytes_change(a, b))],
        lambda: runs_md(benches, " against the formula: ", lambda b: b.match_words()))
