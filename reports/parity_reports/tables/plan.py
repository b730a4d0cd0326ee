"""/plan/layouts: parity plan's predicted memory per GPU and step time of each layout
(docs/planner.md): the step's parts stacked for the fastest layouts, and memory per category
against what a GPU holds."""

from ..common import esc, finite, fmt_num, runs_with_rows, side_by_side

NAME = "plan"
ORDER = 135
VERDICT = False
READS = {"/plan/layouts": ("s:model,cluster,schedule,recompute "
                           "i:gpus,global_batch,tp,pp,dp,cp,ep,v,micro_batch,micro_batches,zero,sp,parameters,fits "
                           "f:params_bytes,grads_bytes,optimizer_bytes,activation_bytes,memory_bytes,compute_s,"
                           "recompute_s,tp_comm_s,pp_comm_s,ep_comm_s,cp_comm_s,bubble_s,dp_comm_s,optimizer_s,step_time_s,tokens_per_s,"
                           "mfu,hfu,tflops_per_gpu",
                           ["model", "cluster", "gpus", "tp", "pp", "dp", "v", "micro_batch", "zero", "recompute",
                            "sp", "memory_bytes", "fits", "step_time_s", "tokens_per_s"]),
         "/plan/scaling": ("s:mode,layout i:gpus,global_batch,fits f:step_time_s,tokens_per_s,mfu,speedup,efficiency",
                           ["mode", "gpus", "global_batch", "fits", "tokens_per_s"])}

# The step's parts as stacked, bottom first: (label, its seconds from a row).
TIME_PARTS = [("compute", lambda r: r["compute_s"] - r["recompute_s"]), ("recompute", lambda r: r["recompute_s"]),
              ("tensor-parallel", lambda r: r["tp_comm_s"]), ("point-to-point", lambda r: r["pp_comm_s"]),
              ("expert all-to-all", lambda r: r.get("ep_comm_s", 0.0)),
              ("ring attention", lambda r: r.get("cp_comm_s", 0.0)),
              ("bubble", lambda r: r["bubble_s"]), ("data-parallel", lambda r: r["dp_comm_s"]),
              ("optimizer", lambda r: r["optimizer_s"])]
MEMORY_PARTS = [("parameters", "params_bytes"), ("gradients", "grads_bytes"), ("optimizer", "optimizer_bytes"),
                ("activations", "activation_bytes")]
SHOWN = 12  # layouts drawn and listed, fastest first


def label(r):
    """'tp8 pp2 dp4 v2 mb1 zero1 full sp' (the planner's own spelling)."""
    return (f"tp{r['tp']} pp{r['pp']} dp{r['dp']}{' ep' + str(r['ep']) if r.get('ep', 1) > 1 else ''}"
            f"{' cp' + str(r['cp']) if r.get('cp', 1) > 1 else ''} v{r['v']} "
            f"mb{r['micro_batch']} zero{r['zero']} "
            f"{r['recompute']}{' sp' if r['sp'] else ''}")


class Plan:
    def __init__(self, rf):
        table = rf.table("/plan/layouts")
        self.present = table is not None
        self.rows = []
        attrs = rf.group_attrs.get("/plan/layouts", {})
        self.usable_memory = float(attrs["usable_memory_bytes"]) if finite(attrs.get("usable_memory_bytes")) else None
        self.evaluated = attrs.get("evaluated")
        if self.present:
            names = [c for c in table.columns]
            for i in range(len(table)):
                self.rows.append({n: (table[n][i] if not hasattr(table[n][i], "item") else table[n][i].item())
                                  for n in names})
        scaling = rf.table("/plan/scaling")
        self.scaling = []
        if scaling is not None:
            for i in range(len(scaling)):
                self.scaling.append({n: (scaling[n][i].item() if hasattr(scaling[n][i], "item") else scaling[n][i])
                                     for n in scaling.columns})
        self.usable = bool(self.rows)

    def curve(self, mode):
        """(gpus, tokens/s) of the counts where a layout fits, in increasing gpus."""
        points = sorted((r["gpus"], r["tokens_per_s"]) for r in self.scaling if r["mode"] == mode and r["fits"])
        return [g for g, _ in points], [t for _, t in points]

    @property
    def best(self):
        fitting = [r for r in self.rows if r["fits"]]
        return max(fitting, key=lambda r: r["tokens_per_s"]) if fitting else None

    def text(self):
        if not self.rows:
            return "no layouts"
        r0 = self.rows[0]
        head = f"{r0['model']} on {r0['gpus']} GPUs of {r0['cluster']}, global batch {r0['global_batch']}"
        best = self.best
        if best is None:
            return head + ": no layout listed fits"
        return (f"{head}: fastest that fits {label(best)}, {best['step_time_s']:.3g} s a step, "
                f"{best['tokens_per_s']:.4g} tokens/s, MFU {best['mfu']:.3f}, {best['memory_bytes'] / 1e9:.1f} GB per GPU")


def stacked(plotter, rows, parts, ylabel, title, name, line=None):
    """One stacked bar per layout (parts: [(label, value of a row)], bottom first), with a
    horizontal (label, y) line when given; returns the figure's file."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(len(rows)))
    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for i, (part, value) in enumerate(parts):
        heights = [value(r) for r in rows]
        plotter.bar(ax, part, x, heights, bottom=bottom, color=plotter.palette[i % len(plotter.palette)], label=part)
        bottom = [b + h for b, h in zip(bottom, heights)]
    if line is not None:
        plotter.hline(ax, line[0], line[1], color="0.3", linestyle="--", linewidth=1, label="what a GPU holds")
    ax.set_xticks(x)
    ax.set_xticklabels([label(r) for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=8)
    return plotter.save(fig, name, 1, suptitle=False)


def draw_time(plotter, plan, rows):
    return stacked(plotter, rows, TIME_PARTS, "predicted seconds per step", "Where the step's time goes (predicted)",
                   "plan_time")


def draw_memory(plotter, plan, rows):
    parts = [(part, lambda r, c=column: r[c] / 1e9) for part, column in MEMORY_PARTS]
    line = ("usable memory", plan.usable_memory / 1e9) if plan.usable_memory is not None else None
    return stacked(plotter, rows, parts, "GB per GPU (predicted)", "Memory per GPU by category (predicted)",
                   "plan_memory", line)


def draw_scaling(plotter, plan):
    """Predicted tokens per second against GPUs, strong and weak, each with its ideal line from
    its first count that fits."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for i, mode in enumerate(("strong", "weak")):
        gpus, rate = plan.curve(mode)
        if not gpus:
            continue
        color = plotter.palette[i]
        plotter.plot(ax, mode, gpus, rate, marker="o", color=color, label=f"{mode} scaling (predicted)")
        plotter.plot(ax, f"{mode} ideal", gpus, [rate[0] * g / gpus[0] for g in gpus], linestyle=":", color=color,
                     label=f"{mode}: linear from {gpus[0]} GPUs")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("tokens per second (predicted)")
    ax.set_title("Scaling: the fastest layout that fits at each GPU count")
    ax.legend(frameon=False, fontsize=8)
    return plotter.save(fig, "plan_scaling", 1, suptitle=False)


def load(rf, loaded):
    return Plan(rf)


def nav(tables):
    return [("plan", "Plan")] if any(t.usable for t in tables) else []


# The section's note: what the predictions are made of.
ABOUT = ("Predicted by parity plan's step model (docs/planner.md), not measured: matrix products by "
         "tile waves at the cluster's product rate, element-wise work by HBM bandwidth, ring collectives "
         "per link, the pipeline's fill and drain; memory by ZeRO's accounting and Korthikanti's "
         "activation formulas. The fastest layouts first; MFU counts model FLOPs, HFU adds the recompute.")


def runs_section(page, runs, plotter):
    for name, p in runs_with_rows(page, runs, "plan", "Plan: predicted memory and step time", ABOUT):
        page.p(esc(p.text()) + (f" ({int(p.evaluated)} layouts evaluated)." if finite(p.evaluated) else "."))
        rows = p.rows[:SHOWN]
        page.table(["layout", "fits", "memory (GB)", "step (s)", "tokens/s", "MFU", "HFU", "TFLOP/s per GPU"],
                   [[esc(label(r)), "yes" if r["fits"] else "<span class=\"bad\">no</span>",
                     fmt_num(r["memory_bytes"] / 1e9, 3), fmt_num(r["step_time_s"], 4), fmt_num(r["tokens_per_s"], 4),
                     f"{r['mfu']:.3f}", f"{r['hfu']:.3f}", fmt_num(r["tflops_per_gpu"], 4)] for r in rows],
                   numeric={2, 3, 4, 5, 6, 7})
        page.img(draw_time(plotter, p, rows), "predicted step time by part for each layout")
        page.img(draw_memory(plotter, p, rows), "predicted memory per GPU by category for each layout")
        if p.scaling:
            page.p("Strong scaling keeps the global batch; weak scaling grows it with the GPUs from its size at "
                   "one node. Efficiency is against the first count where a layout fits (above 1 where that "
                   "count needs a slower layout to fit).")
            page.table(["mode", "GPUs", "global batch", "layout", "step (s)", "tokens/s", "MFU", "speedup",
                        "efficiency"],
                       [[esc(r["mode"]), str(r["gpus"]), str(r["global_batch"]),
                         esc(r["layout"]) if r["fits"] else "<span class=\"bad\">nothing fits</span>",
                         fmt_num(r["step_time_s"], 4), fmt_num(r["tokens_per_s"], 4), fmt_num(r["mfu"], 3),
                         fmt_num(r["speedup"], 4), fmt_num(r["efficiency"], 3)] for r in p.scaling],
                       numeric={1, 2, 4, 5, 6, 7, 8})
            page.img(draw_scaling(plotter, p), "predicted tokens per second against GPUs, strong and weak")


(section, glance, markdown, compare, compare_glance, compare_section,
 compare_markdown) = side_by_side(runs_section, "Plan", lambda t: t.usable, "Plan (predicted)")
