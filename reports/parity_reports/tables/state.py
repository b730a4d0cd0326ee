"""/bench/state: the training state saved and restored per layout, one row per layout, repeat
and rank. Per layout (the median over repeats): the aggregate save and load bandwidth (the bytes
of all ranks over the slowest rank's seconds) beside the file system's sequential write and
read of the same bytes in the same run, the bytes against the formula, whether the restore held
every element, and the asynchronous save's cost on the step."""

import math
from collections import OrderedDict

from ..common import (RowTable, comparison_md, comparison_pairs, esc, finite, fmt_bytes, fmt_ms,
                      fmt_ratio, glance_line, md_table, median, ratio_glance, ratio_of,
                      on_ranks, plain_cells, section_md, section_start, compare_by_key, yes_no)

NAME = "state"
ORDER = 135
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {
    "/bench/state": (
        "s:layout,precision i:repeat,rank,world_size,restored_exactly "
        "f:bytes,file_bytes,total_bytes,formula_bytes,save_s,load_s,load_bytes,fs_write_s,"
        "fs_read_s,step_s,async_staged_s,async_step_s,async_finish_s",
        ["layout", "rank", "save_s"]),
}

OPTIONAL = {"precision": "", "repeat": 0, "world_size": -1, "restored_exactly": -1,
            "bytes": math.nan, "file_bytes": math.nan, "total_bytes": math.nan,
            "formula_bytes": math.nan, "load_s": math.nan, "load_bytes": math.nan,
            "fs_write_s": math.nan, "fs_read_s": math.nan, "step_s": math.nan,
            "async_staged_s": math.nan, "async_step_s": math.nan, "async_finish_s": math.nan}


def rate(bytes_, seconds):
    """Bytes per second, NaN where either is unknown or the time is not positive."""
    return bytes_ / seconds if finite(bytes_) and finite(seconds) and seconds > 0 else math.nan


def fmt_rate(x):
    return f"{x / 1e9:.3g} GB/s" if finite(x) else "–"


class Repeat:
    """One save and restore of a layout, over its ranks: the aggregate figures."""

    def __init__(self, rows):
        self.rows = rows
        slowest = lambda c: max((r[c] for r in rows if finite(r[c])), default=math.nan)
        written = sum(r["bytes"] for r in rows if finite(r["bytes"]))
        read = sum(r["load_bytes"] for r in rows if finite(r["load_bytes"]))
        baseline = sum(max(r["bytes"], 1 << 20) for r in rows if finite(r["bytes"]))
        self.total = rows[0]["total_bytes"]
        self.formula = rows[0]["formula_bytes"]
        self.on_disk = sum(r["file_bytes"] for r in rows if finite(r["file_bytes"]))
        self.save = rate(written, slowest("save_s"))
        self.load = rate(read, slowest("load_s"))
        self.fs_write = rate(baseline, slowest("fs_write_s"))
        self.fs_read = rate(baseline, slowest("fs_read_s"))
        self.step = slowest("step_s")
        self.async_staged = slowest("async_staged_s")
        self.async_step = slowest("async_step_s")
        self.exact = all(r["restored_exactly"] == 1 for r in rows)


class StateBench(RowTable):
    """/bench/state: per layout (file order), its repeats, each over its ranks."""

    def __init__(self, rf):
        super().__init__(rf, "/bench/state", OPTIONAL)
        grouped = OrderedDict()
        for r in self.rows:
            grouped.setdefault(r["layout"], OrderedDict()).setdefault(r["repeat"], []).append(r)
        self.layouts = OrderedDict((layout, [Repeat(rows) for rows in repeats.values()])
                                   for layout, repeats in grouped.items())

    @property
    def usable(self):
        return bool(self.layouts)

    def figure(self, layout, attribute):
        """The median over the layout's repeats of one aggregate figure."""
        values = [getattr(r, attribute) for r in self.layouts[layout] if finite(getattr(r, attribute))]
        return median(values) if values else math.nan

    def by_key(self):
        """{layout: {figure: median}} for the comparison."""
        return OrderedDict((layout, {"save": self.figure(layout, "save"),
                                     "load": self.figure(layout, "load")})
                           for layout in self.layouts)

    def world(self):
        return max((int(r["world_size"]) for r in self.rows), default=-1)

    def bytes_match(self, layout):
        return all(r.total == r.formula for r in self.layouts[layout])

    def exact(self, layout):
        return all(r.exact for r in self.layouts[layout])


def rows_of(bench):
    """Per layout: its cells, as text."""
    out = []
    for layout, repeats in bench.layouts.items():
        save, load = bench.figure(layout, "save"), bench.figure(layout, "load")
        fs_write, fs_read = bench.figure(layout, "fs_write"), bench.figure(layout, "fs_read")
        step, staged, during = (bench.figure(layout, a) for a in ("step", "async_staged", "async_step"))
        total, formula = repeats[0].total, repeats[0].formula
        out.append([layout, fmt_bytes(total),
                    fmt_bytes(formula) if total == formula else f"<span class=\"bad\">{fmt_bytes(formula)}</span>",
                    fmt_bytes(repeats[0].on_disk), fmt_rate(save), fmt_rate(fs_write),
                    fmt_ratio(ratio_of(save, fs_write)), fmt_rate(load), fmt_rate(fs_read),
                    fmt_ratio(ratio_of(load, fs_read)), fmt_ms(staged), fmt_ratio(ratio_of(during, step)),
                    yes_no(bench.exact(layout))])
    return out


HEADER = ["layout", "saved (B)", "formula (B)", "on disk (B)", "save", "file system write", "/ fs",
          "load", "file system read", "/ fs", "async save held (ms)", "step with it / alone",
          "restored exactly"]


def draw(plotter, bench):
    """Save and load bandwidth per layout beside the file system's write and read."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(9, 4.8))
    layouts = list(bench.layouts)
    width = 0.2
    drawn = OrderedDict()
    for i, (label, attribute) in enumerate((("save", "save"), ("file system write", "fs_write"),
                                            ("load", "load"), ("file system read", "fs_read"))):
        xs = [j + (i - 1.5) * width for j in range(len(layouts))]
        ys = [bench.figure(layout, attribute) / 1e9 for layout in layouts]
        plotter.bar(ax, label, xs, ys, width=width, color=plotter.palette[i])
        drawn[label] = (layouts, ys)
    ax.set_xticks(range(len(layouts)))
    ax.set_xticklabels(layouts)
    ax.set_ylabel("GB/s, all ranks (median over repeats)")
    ax.set_title("Training state: save and load against the file system")
    handles = [plotter.Patch(color=plotter.palette[i], label=label)
               for i, label in enumerate(drawn)]
    return plotter.save(fig, "state_bandwidth", plotter.legend(fig, handles, most=4)), drawn


# What load() and nav() are made of (tables/__init__.py).
TABLE = StateBench
TITLE = "Training state"


def summary_words(bench):
    """'dp: 1.4 MB saved at 0.12 GB/s (0.2 of the file system's write), loaded at ...'."""
    parts = []
    for layout, repeats in bench.layouts.items():
        save, fs_write = bench.figure(layout, "save"), bench.figure(layout, "fs_write")
        load_, fs_read = bench.figure(layout, "load"), bench.figure(layout, "fs_read")
        parts.append(f"{layout} {fmt_bytes(repeats[0].total)} B saved at {fmt_rate(save)} "
                     f"({fmt_ratio(ratio_of(save, fs_write))} of the file system's write), "
                     f"loaded at {fmt_rate(load_)} ({fmt_ratio(ratio_of(load_, fs_read))} of its read)"
                     + ("" if bench.exact(layout) else ", NOT restored exactly")
                     + ("" if bench.bytes_match(layout) else ", bytes OFF the formula"))
    return "; ".join(parts)


def section(page, ctx, bench):
    if not section_start(page, bench, NAME, TITLE, "/bench/state"):
        return
    world = bench.world()
    page.p(f"{esc(str(bench.attrs.get('model', 'A GPT')))}"
           + on_ranks(world)
           + ": its training state saved per layout (every rank writes its own share, the index "
           "last), restored into a fresh trainer of the layout, and saved again asynchronously "
           "while a step runs. Bandwidths are all ranks' bytes over the slowest rank's seconds, "
           "the median over repeats, beside each rank writing and reading the same bytes with "
           "POSIX on the same file system in the same run; saved bytes against the formula "
           "(every value, master and moment once).")
    page.img(draw(ctx.plotter, bench)[0], "save and load bandwidth per layout")
    page.table(HEADER, rows_of(bench), numeric=set(range(1, 12)))


def glance(ctx, bench):
    return glance_line(TITLE, bench, summary_words)


def markdown(ctx, bench):
    return section_md(bench, TITLE, "/bench/state",
                      lambda: [f"- {summary_words(bench)}.", ""] + md_table(
                          HEADER, "lrrrrrrrrrrrl",
                          plain_cells(rows_of(bench))))


# compare(): the runs' layouts matched by name.
compare = compare_by_key


# The comparison's table, on the page and in summary.md: a row of pair_cells per layout.
PAIR_HEADER = ["layout", "save A", "save B", "B / A", "load A", "load B", "B / A"]


def pair_cells(key, a, b):
    return [key, fmt_rate(a["save"]), fmt_rate(b["save"]), fmt_ratio(ratio_of(b["save"], a["save"])),
            fmt_rate(a["load"]), fmt_rate(b["load"]), fmt_ratio(ratio_of(b["load"], a["load"]))]


def compare_glance(ctx, benches, matches):
    return ratio_glance(matches, "Training-state save bandwidth", "layout", "save")


def compare_section(page, ctx, benches, matches):
    pairs = comparison_pairs(page, benches, matches, "/bench/state", "state",
                             "Training state: B against A", "saved in that layout", str, "layout")
    if pairs is None:
        return
    page.p("Aggregate save and load bandwidth per layout (median over repeats); ratio = B / A.")
    page.table(PAIR_HEADER, [[esc(c) for c in pair_cells(*p)] for p in pairs],
               numeric={1, 2, 3, 4, 5, 6})


def compare_markdown(ctx, benches, matches):
    return comparison_md(matches, "Training state (bandwidth)", PAIR_HEADER, "lrrrrrr", pair_cells)
