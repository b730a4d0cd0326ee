"""Figure basics shared by the table modules: the Plotter holds matplotlib, the colours every
figure agrees on, file naming and the common axes. Each table's own figures live in its module
and draw through a Plotter, whose plot, bar, band, boxes, whiskers, hline, vline and heatmap draw a
series of data and note it in Plotter.drawn (a Series each) when its figure is saved."""

import math
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .common import ALGORITHM_ORDER, MEMORY_CATEGORIES, finite, fmt_size, slug


@dataclass
class Series:
    """One series of a saved figure, with the values handed to matplotlib. file: the PNG's
    name; figure: the name it was saved under (Plotter.save); axes: its panel's title; label:
    what the series shows. x and y: a line's or marker's points, a bar's position and height
    (its bottom apart), a band's or a whisker's edge (two series, low and high); a horizontal
    line has its y alone and an empty x, a vertical one its x alone and an empty y; a heatmap
    has the centres of its columns in x, of its rows in y, and its cells in z (a row per y, a
    column per x; None for the others). Pieces drawn under one label in one panel (a bar per
    row, say) are joined in the order they were drawn (a heatmap's rows one under the other)."""
    file: str
    figure: str
    axes: str
    label: str
    x: np.ndarray
    y: np.ndarray
    z: Optional[np.ndarray] = None


class Plotter:
    """Writes PNG figures into the output directory, numbered in the order they are drawn.
    matplotlib is imported here only, so that reading the tables needs none of it."""

    def __init__(self, outdir, render=True):
        """render False: each figure's series recorded, nothing laid out or written (a test that
        reads the series alone)."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        self.plt, self.Line2D, self.Patch = plt, Line2D, Patch
        self.outdir = outdir
        self.render = render
        self.count = 0
        self.drawn = []     # Series of every saved figure, in the order they were drawn
        self.pending = []   # (axes, label, x, y) of the figure being drawn
        self.colors = {}
        palette = plt.get_cmap("tab10").colors
        self.palette = [palette[i] for i in (0, 1, 2, 3, 4, 6, 8, 9, 5, 7)]
        for i, a in enumerate(ALGORITHM_ORDER[1:]):
            self.colors[a] = self.palette[i]
        # Fixed per category (not handed out in order of appearance) so that a category has the
        # same colour in every figure and every report. Set2 keeps them apart from the
        # algorithm colours of the collective figures.
        set2 = plt.get_cmap("Set2").colors
        self.memory_colors = {c: set2[i] for i, c in enumerate(MEMORY_CATEGORIES)}
        self.run_colors = [palette[0], palette[1]]  # run A, run B
        plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10,
                             "legend.fontsize": 9, "axes.grid": True, "grid.alpha": 0.3,
                             "grid.linestyle": "-"})

    def color(self, algorithm):
        if algorithm == "native":
            return "black"
        if algorithm not in self.colors:
            self.colors[algorithm] = self.palette[len(self.colors) % len(self.palette)]
        return self.colors[algorithm]

    def style(self, algorithm):
        if algorithm == "native":
            return dict(color="black", linewidth=2.8, zorder=4)
        return dict(color=self.color(algorithm), linewidth=1.6, zorder=3)

    def save(self, fig, name, legend_rows=1, suptitle=True):
        height = fig.get_size_inches()[1]
        bottom = min(0.35, (0.12 + 0.24 * legend_rows) / height) if legend_rows else 0
        top = 1 - 0.4 / height if suptitle else 1
        fname = f"fig{self.count:03d}_{slug(name)}.png"
        self.count += 1
        if self.render:
            fig.tight_layout(rect=[0, bottom, 1, top])
            fig.savefig(os.path.join(self.outdir, fname), dpi=100)
        self.file_series(fname, name)
        self.plt.close(fig)
        return fname

    # Drawing that is recorded: the figure's data, as opposed to its reference lines and text.
    # what: the series' label in drawn; the keyword arguments go to matplotlib.

    def record(self, ax, what, x, y, z=None):
        self.pending.append((ax, what, np.atleast_1d(np.asarray(x, dtype=float)),
                             np.atleast_1d(np.asarray(y, dtype=float)),
                             None if z is None else np.atleast_2d(np.asarray(z, dtype=float))))

    def file_series(self, fname, name):
        """Moves the pending series into drawn, as the series of the figure just saved."""
        joined = OrderedDict()
        for ax, what, x, y, z in self.pending:
            joined.setdefault((ax, what), []).append((x, y, z))
        for (ax, what), parts in joined.items():
            cells = [z for _, _, z in parts if z is not None]
            self.drawn.append(Series(fname, name, ax.get_title(), what,
                                     np.concatenate([x for x, _, _ in parts]),
                                     np.concatenate([y for _, y, _ in parts]),
                                     np.concatenate(cells) if cells else None))
        self.pending = []

    def plot(self, ax, what, x, y, **kw):
        self.record(ax, what, x, y)
        return ax.plot(x, y, **kw)

    def bar(self, ax, what, x, height, **kw):
        self.record(ax, what, x, height)
        return ax.bar(x, height, **kw)

    def band(self, ax, whats, x, low, high, **kw):
        """A shaded band between low and high; whats: (low's label, high's)."""
        self.record(ax, whats[0], x, low)
        self.record(ax, whats[1], x, high)
        return ax.fill_between(x, low, high, **kw)

    def boxes(self, ax):
        """Rectangles drawn as bands are, recorded as they are added and drawn together at
        Boxes.draw (one collection per z-order, not one per rectangle: a pipeline timeline has
        hundreds)."""
        return Boxes(self, ax)

    def whiskers(self, ax, whats, x, mid, low, high, **kw):
        """Error bars from low to high through mid; whats: (low's label, high's)."""
        self.record(ax, whats[0], x, low)
        self.record(ax, whats[1], x, high)
        return ax.errorbar(x, mid, yerr=[[m - lo for m, lo in zip(mid, low)],
                                         [hi - m for m, hi in zip(mid, high)]], **kw)

    def hline(self, ax, what, y, **kw):
        self.record(ax, what, [], y)
        return ax.axhline(y, **kw)

    def vline(self, ax, what, x, **kw):
        self.record(ax, what, x, [])
        return ax.axvline(x, **kw)

    def heatmap(self, ax, what, x, y, values, **kw):
        """Cells coloured by values (a row per y, a column per x), each centred on its x and y,
        without the grid lines the other axes have; returns matplotlib's mesh, for a
        colorbar."""
        self.record(ax, what, x, y, values)
        ax.grid(False)
        return ax.pcolormesh(self.edges(x), self.edges(y), np.asarray(values, dtype=float),
                             shading="flat", **kw)

    @staticmethod
    def edges(centres):
        """The cell edges around increasing centres: halfway between neighbours, half a step
        beyond the ends (a step of 1 for a single cell)."""
        c = np.asarray(centres, dtype=float)
        if len(c) == 1:
            return np.array([c[0] - 0.5, c[0] + 0.5])
        mid = (c[1:] + c[:-1]) / 2
        return np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])

    @staticmethod
    def size_axis(ax, sizes):
        sizes = [s for s in sizes if s > 0]
        ax.set_xscale("log", base=2)
        if not sizes:
            return
        k0 = math.floor(math.log2(min(sizes)))
        k1 = math.ceil(math.log2(max(sizes)))
        step = max(1, math.ceil((k1 - k0) / 8))
        ticks = [2.0 ** k for k in range(k0, k1 + 1, step)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_size(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlim(2.0 ** k0 / 1.3, 2.0 ** k1 * 1.3)

    @staticmethod
    def log_axis_if_positive(ax, values):
        """A log y axis when some value is positive; else a linear one from 0, and False: a log
        axis with nothing to show cannot be drawn (busbw is 0 throughout at one rank, where the
        bus factor (n-1)/n is 0). Call it after drawing: the linear axis keeps what is drawn in
        view, zeros just above its bottom edge."""
        if any(finite(v) and v > 0 for v in values):
            ax.set_yscale("log")
            return True
        top = max(1.0, ax.get_ylim()[1])
        ax.set_ylim(-0.05 * top, top)
        return False

    @staticmethod
    def positive(xs, ys):
        pts = [(x, y) for x, y in zip(xs, ys) if finite(x) and finite(y) and x > 0 and y > 0]
        return [p[0] for p in pts], [p[1] for p in pts]

    def legend(self, fig, handles, most=5):
        ncol = max(1, min(len(handles), most))
        fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False,
                   bbox_to_anchor=(0.5, 0.0))
        return math.ceil(len(handles) / ncol) if handles else 0

    def finish(self, fig, name, handles, most=5, title=None):
        """Saves fig (save) with the legend of handles below its panels, at most `most` entries
        a row, and, given title, the figure's title above them in bold (None: each panel has
        its own title and the figure none)."""
        if title is not None:
            fig.suptitle(title, fontsize=12, fontweight="bold")
        return self.save(fig, name, self.legend(fig, handles, most), suptitle=title is not None)

    def step_pairs(self, pairs, ticks, part, names, run_labels, title, name, xlabel=None):
        """Per matched row (pairs: (key, a, b)), A's and B's step time side by side in ms, the
        column `part` (seconds of communication, say) hatched on top where the file has it.
        names: the series' labels of the rest and of the part, after the run's label, and the
        part's legend entry."""
        rest, part_name, part_legend = names
        fig, ax = self.plt.subplots(figsize=self.bars_figsize(2 * len(pairs)))
        width = 0.38
        for i, (_, a, b) in enumerate(pairs):
            for j, r in enumerate((a, b)):
                x = i + (j - 0.5) * width
                step = r["step_seconds"] * 1e3
                top = r[part] * 1e3 if finite(r[part]) else 0.0
                color, run = self.run_colors[j], run_labels[j]
                self.bar(ax, f"{run} {rest}", x, step - top, width=width * 0.95, color=color,
                         zorder=3)
                if top > 0:
                    self.bar(ax, f"{run} {part_name}", x, top, bottom=step - top,
                             width=width * 0.95, color=color, alpha=0.45, hatch="//",
                             edgecolor="0.3", linewidth=0, zorder=3)
        ax.set_xticks(range(len(pairs)))
        ax.set_xticklabels(ticks, fontsize=8)
        if xlabel:
            ax.set_xlabel(xlabel)
        ax.grid(axis="x", visible=False)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("step time (ms, slowest rank)")
        handles = [self.Patch(color=self.run_colors[j], label=label)
                   for j, label in enumerate(run_labels)]
        handles.append(self.Patch(facecolor="0.7", hatch="//", edgecolor="0.3", linewidth=0,
                                  label=part_legend))
        ax.set_title(title)
        return self.finish(fig, name, handles, most=3)

    @staticmethod
    def bars_figsize(n_bars):
        """Wider with more bars, from 6.5 to 14 inches."""
        return (max(6.5, min(14, 1.1 * n_bars + 3)), 4.8)

    @staticmethod
    def byte_unit(largest):
        """(unit, scale) for an axis of bytes whose largest value is `largest`."""
        for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if largest >= scale:
                return unit, scale
        return "B", 1

    @staticmethod
    def world_axis(ax, sizes):
        """Integer ticks at the measured world sizes (at most about 12)."""
        sizes = sorted(set(int(s) for s in sizes))
        step = max(1, math.ceil(len(sizes) / 12))
        ax.set_xticks(sizes[::step])
        ax.set_xlabel("world size (ranks)")


class Boxes:
    """Plotter.boxes: add(whats, x0, x1, low, high, facecolor, edgecolor, linewidth, zorder)
    records the two edges as Plotter.band would (whats: low's label, high's) and keeps the
    rectangle; draw() adds them to the axes, one PolyCollection per z-order in the order they
    were added."""

    def __init__(self, plotter, ax):
        self.plotter, self.ax = plotter, ax
        self.by_z = OrderedDict()

    def add(self, whats, x0, x1, low, high, facecolor, edgecolor, linewidth, zorder):
        self.plotter.record(self.ax, whats[0], [x0, x1], [low, low])
        self.plotter.record(self.ax, whats[1], [x0, x1], [high, high])
        self.by_z.setdefault(zorder, []).append(((x0, x1, low, high), facecolor, edgecolor, linewidth))

    def draw(self):
        from matplotlib.collections import PolyCollection
        for zorder, boxes in self.by_z.items():
            polygons = [[(x0, low), (x1, low), (x1, high), (x0, high)]
                        for (x0, x1, low, high), _, _, _ in boxes]
            self.ax.add_collection(PolyCollection(
                polygons, facecolors=[b[1] for b in boxes], edgecolors=[b[2] for b in boxes],
                linewidths=[b[3] for b in boxes], zorder=zorder), autolim=False)
        self.by_z.clear()
