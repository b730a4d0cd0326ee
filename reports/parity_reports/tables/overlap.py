"""/bench/overlap: the gradients' bucketed all-reduce with and without overlapping backward,
per bucket size: exposed communication and the fraction overlap hides."""

import math
from collections import OrderedDict

from ..common import (RowTable, capitalized, comparison_md, comparison_pairs, esc, finite,
                      fmt_known, fmt_ms, fmt_num, fmt_ratio, fmt_size, glance_line, ratio_of,
                      section_md, section_start, compare_by_key)

NAME = "overlap"
ORDER = 80
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/bench/overlap": (
        "s:model i:world_size,bucket_bytes,buckets,overlap f:step_seconds,compute_seconds,"
        "exposed_comm_seconds,stream_seconds,comm_seconds_alone,hidden_fraction",
        ["bucket_bytes", "overlap", "exposed_comm_seconds"]),
}

OVERLAP_OPTIONAL = {"world_size": -1, "model": "", "buckets": -1, "step_seconds": math.nan,
                    "compute_seconds": math.nan, "stream_seconds": math.nan,
                    "comm_seconds_alone": math.nan, "hidden_fraction": math.nan}


class OverlapBench(RowTable):
    """/bench/overlap: one row per (bucket size, overlap on or off)."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/overlap", OVERLAP_OPTIONAL)
        self.buckets = OrderedDict()
        for r in sorted(self.rows, key=lambda r: (r["bucket_bytes"], r["overlap"])):
            self.buckets.setdefault(r["bucket_bytes"], {}).setdefault(int(r["overlap"]), r)

    def by_key(self):
        return OrderedDict(((b, o), r) for b, pair in self.buckets.items()
                           for o, r in pair.items())

    def alone(self, bucket):
        """Exposed communication without overlap at this bucket size."""
        pair = self.buckets[bucket]
        for r in pair.values():
            if finite(r["comm_seconds_alone"]):
                return r["comm_seconds_alone"]
        return pair[0]["exposed_comm_seconds"] if 0 in pair else math.nan

    def hidden(self, r):
        """The file's hidden fraction, or 1 - exposed / alone where it has none."""
        if finite(r["hidden_fraction"]):
            return r["hidden_fraction"]
        if int(r["overlap"]) != 1:
            return 0.0
        alone = self.alone(r["bucket_bytes"])
        return 1 - r["exposed_comm_seconds"] / alone if finite(alone) and alone > 0 else math.nan

    def best(self):
        overlapped = [r for r in self.rows if int(r["overlap"]) == 1 and finite(self.hidden(r))]
        return max(overlapped, key=self.hidden) if overlapped else None

    def words(self):
        best = self.best()
        if best is None:
            return "no overlapped row with a hidden fraction"
        b = best["bucket_bytes"]
        return (f"best hidden fraction {fmt_ratio(self.hidden(best))} with {fmt_size(b)} buckets "
                f"(exposed communication {fmt_num(best['exposed_comm_seconds'] * 1e3)} ms "
                f"overlapped, {fmt_num(self.alone(b) * 1e3)} ms without)")


# --------------------------------------------------------------------------------------------
# Figure

def draw(plotter, overlap):
    """Per bucket size: exposed communication without and with overlap, the hidden
    fraction written over the overlapped bar."""
    plt = plotter.plt
    buckets = list(overlap.buckets)
    fig, ax = plt.subplots(figsize=plotter.bars_figsize(2 * len(buckets)))
    width = 0.38
    xs = list(range(len(buckets)))
    tops = []
    handles = []
    for j, (flag, label) in enumerate(((0, "without overlap"), (1, "with overlap"))):
        bx = [x + (j - 0.5) * width for x in xs]
        vals = [overlap.buckets[b][flag]["exposed_comm_seconds"] * 1e3
                if flag in overlap.buckets[b] else math.nan for b in buckets]
        plotter.bar(ax, label, bx, [v if finite(v) else 0.0 for v in vals], width=width,
                    color=plotter.run_colors[j], zorder=3)
        handles.append(plotter.Patch(color=plotter.run_colors[j], label=label))
        tops += [v for v in vals if finite(v)]
        if flag == 1:
            for x, b, v in zip(bx, buckets, vals):
                if finite(v) and 1 in overlap.buckets[b]:
                    hidden = overlap.hidden(overlap.buckets[b][1])
                    if finite(hidden):
                        ax.annotate(f"hidden {hidden:.2f}", (x, v), xytext=(0, 3),
                                    textcoords="offset points", ha="center",
                                    va="bottom", fontsize=8, zorder=5)
    ax.set_ylim(0, max(tops or [1.0]) * 1.18 or 1.0)
    ax.set_xticks(xs)
    counts = [next(iter(overlap.buckets[b].values()))["buckets"] for b in buckets]
    ax.set_xticklabels([fmt_size(b) + (f"\n{c} bucket{'s' if c != 1 else ''}" if c > 0 else "")
                        for b, c in zip(buckets, counts)])
    ax.set_xlabel("gradient bucket size")
    ax.grid(axis="x", visible=False)
    ax.set_ylabel("exposed communication per step (ms)")
    ax.set_title("Gradient all-reduce overlapped with backward")
    return plotter.finish(fig, "overlap", handles)


# --------------------------------------------------------------------------------------------
# One run

# What load() and nav() are made of (tables/__init__.py).
TABLE = OverlapBench
TITLE = "Overlap"


def section(page, ctx, overlap):
    """The "Overlap" section; left out entirely when the file has no /bench/overlap."""
    plotter = ctx.plotter
    if not section_start(page, overlap, "overlap", "Communication overlap", "/bench/overlap"):
        return
    worlds = sorted({r["world_size"] for r in overlap.rows if r["world_size"] > 0})
    page.p("The gradients' all-reduce in buckets, issued as each bucket's gradients are ready "
           "(overlapped with the rest of backward) or after backward (not overlapped)"
           + (f", on {', '.join(map(str, worlds))} ranks" if worlds else "") + ". Hidden "
           "fraction: 1 - exposed communication / the same bucket size's communication without "
           f"overlap. <b>{esc(capitalized(overlap.words()))}.</b>")
    page.img(draw(plotter, overlap), "exposed communication with and without overlap")
    rows = []
    for r in overlap.by_key().values():
        rows.append([esc(fmt_size(r["bucket_bytes"])), fmt_known(r["buckets"]),
                     "yes" if int(r["overlap"]) == 1 else "no", fmt_ms(r["step_seconds"]),
                     fmt_ms(r["compute_seconds"]), fmt_ms(r["exposed_comm_seconds"]),
                     fmt_ms(r["stream_seconds"]), fmt_ms(overlap.alone(r["bucket_bytes"])),
                     fmt_ratio(overlap.hidden(r))])
    page.table(["bucket size", "buckets", "overlap", "step time (ms)", "compute (ms)",
                "exposed comm (ms)", "comm stream busy (ms)", "comm without overlap (ms)",
                "hidden fraction"], rows, numeric={1, 3, 4, 5, 6, 7, 8})


def glance(ctx, overlap):
    return glance_line(TITLE, overlap, lambda o: o.words())


def markdown(ctx, overlap):
    return section_md(overlap, "Communication overlap", "/bench/overlap", lambda: [
        f"- Overlap of the gradient all-reduce with backward: {overlap.words()}."])


# --------------------------------------------------------------------------------------------
# Two runs

# compare(): the runs' rows matched on (bucket size, overlap).
compare = compare_by_key


def compare_glance(ctx, overlaps, matches):
    return []


def compare_section(page, ctx, overlaps, matches):
    """Exposed communication and hidden fraction of B against A per (bucket size, overlap)."""
    pairs = comparison_pairs(page, overlaps, matches, "/bench/overlap", "overlap",
                             "Communication overlap: B against A",
                             "row of the same bucket size and overlap",
                             lambda k: f"{fmt_size(k[0])} {'with' if k[1] else 'without'} overlap",
                             "bucket size and overlap setting")
    if pairs is None:
        return
    page.p("Exposed communication per step, matched on bucket size and overlap. Ratio = B / A "
           "(below 1: B waits less).")
    page.table(["bucket size", "overlap", "exposed comm A (ms)", "exposed comm B (ms)",
                "B / A", "hidden fraction A", "hidden fraction B"],
               [[esc(c) for c in pair_cells(overlaps, key, a, b)] for key, a, b in pairs],
               numeric={2, 3, 4, 5, 6})


def pair_cells(overlaps, key, a, b):
    """(bucket size, overlap, exposed communication A, B and B / A, hidden fraction A and B)."""
    (bucket, flag), ea, eb = key, a["exposed_comm_seconds"], b["exposed_comm_seconds"]
    return [fmt_size(bucket), "yes" if flag else "no", fmt_ms(ea), fmt_ms(eb),
            fmt_ratio(ratio_of(eb, ea)), fmt_ratio(overlaps[0].hidden(a)),
            fmt_ratio(overlaps[1].hidden(b))]


def compare_markdown(ctx, overlaps, matches):
    return comparison_md(
        matches, "Communication overlap (exposed communication)",
        ["bucket size", "overlap", "A (ms)", "B (ms)", "B / A", "hidden A", "hidden B"],
        "llrrrrr", lambda key, a, b: pair_cells(overlaps, key, a, b))
