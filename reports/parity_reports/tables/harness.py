"""/bench/harness_overhead: what parity's wrapper (checks and the watchdog scope) adds to a
native all_reduce, measured beside a direct MPI_Allreduce in the same run, on the world and
on a one-rank communicator (the wrapper's own cost), against the group's target_us."""

from ..common import finite, fmt_int, fmt_num, runs_with_rows, side_by_side

NAME = "harness"
ORDER = 40
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {"/bench/harness_overhead": ("i:size_bytes,calls f:direct_us,wrapped_us,overhead_us,halves_spread_us,"
                                     "own_overhead_us",
                                     ["size_bytes", "direct_us", "wrapped_us", "overhead_us"])}


class Harness:
    """The per-size direct and wrapped times of one run."""

    def __init__(self, rf):
        self.table = rf.table("/bench/harness_overhead")
        self.present = self.table is not None
        target = rf.group_attrs.get("/bench/harness_overhead", {}).get("target_us")
        self.target = float(target) if finite(target) else None
        self.rows = []
        if self.present:
            # Files from before a column existed: nan, shown as a dash.
            def column(name):
                return (self.table[name].tolist() if self.table.has(name)
                        else [float("nan")] * len(self.table["size_bytes"]))
            self.rows = sorted(zip(self.table["size_bytes"].tolist(), self.table["direct_us"].tolist(),
                                   self.table["wrapped_us"].tolist(), self.table["overhead_us"].tolist(),
                                   column("halves_spread_us"), column("own_overhead_us")))
        self.usable = bool(self.rows)

    @property
    def worst(self):
        return max(r[3] for r in self.rows) if self.rows else None

    @property
    def worst_own(self):
        own = [r[5] for r in self.rows if finite(r[5])]
        return max(own) if own else None

    def verdict(self, value):
        if self.target is None:
            return ""
        return f" (target < {self.target:g} us: {'met' if value < self.target else 'missed'})"

    def text(self):
        if not self.rows:
            return "not measured"
        out = (f"at most {self.worst:.3f} us per call over {fmt_int(self.rows[0][0])} B - {fmt_int(self.rows[-1][0])} B"
               f"{self.verdict(self.worst)}")
        if self.worst_own is not None:
            out += f"; the wrapper's own cost (one rank) at most {self.worst_own:.3f} us{self.verdict(self.worst_own)}"
        return out


def draw(plotter, harness):
    """The overhead per call against size, with the target line; returns the figure's file."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    sizes = [r[0] for r in harness.rows]
    plotter.plot(ax, "overhead", sizes, [r[3] for r in harness.rows], marker="o",
                 color=plotter.palette[0], label="wrapped - direct, all ranks (us per call)")
    own = [r[5] for r in harness.rows]
    if any(finite(x) for x in own):
        plotter.plot(ax, "own", sizes, own, marker="s", color=plotter.palette[1],
                     label="wrapped - direct, one-rank communicator (the wrapper's own cost)")
    if harness.target is not None:
        plotter.hline(ax, "target", harness.target, color="0.4", linestyle="--", linewidth=1,
                      label=f"target {harness.target:g} us")
    ax.axhline(0, color="0.8", linewidth=0.8)
    plotter.size_axis(ax, sizes)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("overhead per call (us)")
    ax.set_title("Harness overhead on a native all_reduce")
    ax.legend(frameon=False)
    return plotter.save(fig, "harness_overhead", 1, suptitle=False)


def load(rf, loaded):
    return Harness(rf)


def nav(tables):
    return [("harness", "Harness")] if any(t.usable for t in tables) else []


# The section's note: how the times and the overhead are measured.
ABOUT = ("The same native float32 all_reduce timed as a direct MPI_Allreduce and through "
         "parity's wrapper (argument checks, watchdog scope), in pairs of calls in alternating order; "
         "the times are medians and the overhead the median of the per-pair differences, averaged "
         "over ranks. The spread is how far that overhead differs between the first and second "
         "halves of the pairs: differences within it are noise. \"Own\" is the same on a one-rank "
         "communicator: the wrapper's cost alone, which no other rank's timing enters. On the world "
         "at the larger sizes the wrapper runs with its code and data pushed out of the caches by "
         "the transfer before it, and costs more.")


def runs_section(page, runs, plotter):
    for label, h in runs_with_rows(page, runs, "harness", "Harness overhead", ABOUT):
        page.table(["size (B)", "direct (us)", "wrapped (us)", "overhead (us)", "spread (us)", "own overhead (us)"],
                   [[fmt_int(s), fmt_num(d, 3), fmt_num(w, 3), f"{o:.3f}", fmt_num(sp, 3), fmt_num(own, 3)]
                    for s, d, w, o, sp, own in h.rows],
                   numeric={0, 1, 2, 3, 4, 5})
        page.img(draw(plotter, h), "harness overhead per call against message size")


# One run, and two side by side: the same section.
(section, glance, markdown, compare, compare_glance, compare_section,
 compare_markdown) = side_by_side(runs_section, "Harness overhead", lambda t: t.usable,
                                  "Harness overhead per native call")
