"""/state/train: a GPT trained under a layout, saving its training state as it goes (parity
state train), possibly restarted from a save on other ranks: each step's loss with the saves
marked, and the run's parameters and optimizer state against training on one device."""

import math

from ..common import (RowTable, esc, fmt_num, glance_line, md_table, section_md,
                      section_start, verdict_span)

NAME = "state_train"
ORDER = 136
VERDICT = True
READS = {
    "/state/train": ("s:layout i:step,saved,world_size f:loss,seconds", ["step", "loss"]),
}
OPTIONAL = {"seconds": math.nan, "saved": -1, "layout": "", "world_size": -1}


class StateTrain(RowTable):
    """/state/train: its steps in order and the group's verdict attributes."""

    def __init__(self, rf):
        super().__init__(rf, "/state/train", OPTIONAL)
        self.rows.sort(key=lambda r: r["step"])

    def restarted_from(self):
        value = self.attr_number("restarted_from")
        return int(value) if value is not None and value >= 0 else None

    def verdict(self):
        """(error, bound, passed) of the run against one device; None where the file lacks them."""
        error, bound = self.attr_number("error"), self.attr_number("bound")
        if error is None or bound is None:
            return None
        return error, bound, error <= bound

    def words(self):
        first, last = self.rows[0], self.rows[-1]
        text = (f"{len(self.rows)} steps ({int(first['step'])} to {int(last['step'])}) under "
                f"{last['layout'] or 'a layout'} on {int(last['world_size'])} ranks")
        start = self.restarted_from()
        if start is not None:
            text += f", restarted from the save at step {start}"
        verdict = self.verdict()
        if verdict:
            error, bound, ok = verdict
            text += (f"; against one device {fmt_num(error, 3)} (bound {fmt_num(bound, 3)})"
                     + ("" if ok else ": beyond the bound"))
        return text


def draw(plotter, run):
    """The loss against the step; a dot at each step after which the state was saved."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(9, 4.4))
    steps = [r["step"] for r in run.rows]
    losses = [r["loss"] for r in run.rows]
    plotter.plot(ax, "loss", steps, losses, color="black", linewidth=1.6)
    saved = [r for r in run.rows if r["saved"] == 1]
    if saved:
        plotter.plot(ax, "saved", [r["step"] for r in saved], [r["loss"] for r in saved],
                     linestyle="none", marker="o", markersize=5, color=plotter.palette[0])
    start = run.restarted_from()
    if start is not None:
        plotter.vline(ax, "restart", start, color=plotter.palette[3], linestyle="--")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (mean over the global batch)")
    handles = [plotter.Line2D([], [], color="black", label="loss"),
               plotter.Line2D([], [], linestyle="none", marker="o", color=plotter.palette[0],
                              label="state saved after the step")]
    if start is not None:
        handles.append(plotter.Line2D([], [], color=plotter.palette[3], linestyle="--",
                                      label="restarted from the save"))
    return plotter.finish(fig, "state_train_loss", handles, most=3,
                          title="Training with its state saved")


# What load() and nav() are made of (tables/__init__.py).
TABLE = StateTrain
TITLE = "Training with saves"


def section(page, ctx, run):
    if not section_start(page, run, NAME, TITLE, "/state/train"):
        return
    verdict = run.verdict()
    if verdict:
        page.p(verdict_span(verdict[2], run.words()))
    else:
        page.p(esc(run.words()) + ".")
    page.img(draw(ctx.plotter, run), "loss per step, saves marked")


def glance(ctx, run):
    return glance_line(TITLE, run, lambda r: r.words())


def markdown(ctx, run):
    return section_md(run, TITLE, "/state/train",
                      lambda: [f"- {run.words()}.", ""] + md_table(
                          ["step", "loss", "saved"], "rrl",
                          [[int(r["step"]), f"{r['loss']:.4f}", "yes" if r["saved"] == 1 else ""]
                           for r in run.rows]))


def compare(ctx, runs):
    return None


def compare_glance(ctx, runs, matches):
    return []


def compare_section(page, ctx, runs, matches):
    usable = [(name, run) for name, run in zip("AB", runs) if run.usable]
    if not usable:
        return
    page.add("<h2 id=\"state_train\">Training with saves</h2>")
    for name, run in usable:
        page.p(f"Run {name}: " + esc(run.words()) + ".")


def compare_markdown(ctx, runs, matches):
    lines = [f"- {name}: {run.words()}." for name, run in zip("AB", runs) if run.usable]
    return ["", "## Training with saves", ""] + lines if lines else []
