"""Figure basics shared by the table modules: the Plotter holds matplotlib, the colours every
figure agrees on, file naming and the common axes. Each table's own figures live in its module
and draw through a Plotter, whose plot, bar, band, whiskers and hline draw a series of data and
note it in Plotter.drawn (a Series each) when its figure is saved."""

import math
import os
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .common import ALGORITHM_ORDER, MEMORY_CATEGORIES, finite, fmt_size, slug


@dataclass
class Series:
    """One series of a saved figure, with the values handed to matplotlib. file: the PNG's
    name; figure: the name it was saved under (Plotter.save); axes: its panel's title; label:
    what the series shows. x and y: a line's or marker's points, a bar's position and height
    (its bottom apart), a band's or a whisker's edge (two series, low and high); a horizontal
    line has its y alone and an empty x. Pieces drawn under one label in one panel (a bar per
    row, say) are joined in the order they were drawn."""
    file: str
    figure: str
    axes: str
    label: str
    x: np.ndarray
    y: np.ndarray


class Plotter:
    """Writes PNG figures into the output directory, numbered in the order they are drawn.
    matplotlib is imported here only, so that reading the tables needs none of it."""

    def __init__(self, outdir):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        self.plt, self.Line2D, self.Patch = plt, Line2D, Patch
        self.outdir = outdir
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
        fig.tight_layout(rect=[0, bottom, 1, top])
        fname = f"fig{self.count:03d}_{slug(name)}.png"
        self.count += 1
        fig.savefig(os.path.join(self.outdir, fname), dpi=100)
        self.file_series(fname, name)
        self.plt.close(fig)
        return fname

    # Drawing that is recorded: the figure's data, as opposed to its reference lines and text.
    # what: the series' label in drawn; the keyword arguments go to matplotlib.

    def record(self, ax, what, x, y):
        self.pending.append((ax, what, np.atleast_1d(np.asarray(x, dtype=float)),
                             np.atleast_1d(np.asarray(y, dtype=float))))

    def file_series(self, fname, name):
        """Moves the pending series into drawn, as the series of the figure just saved."""
        joined = OrderedDict()
        for ax, what, x, y in self.pending:
            joined.setdefault((ax, what), []).append((x, y))
        for (ax, what), parts in joined.items():
            self.drawn.append(Series(fname, name, ax.get_title(), what,
                                     np.concatenate([x for x, _ in parts]),
                                     np.concatenate([y for _, y in parts])))
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

    def whiskers(self, ax, whats, x, mid, low, high, **kw):
        """Error bars from low to high through mid; whats: (low's label, high's)."""
        self.record(ax, whats[0], x, low)
        self.record(ax, whats[1], x, high)
        return ax.errorbar(x, mid, yerr=[[m - lo for m, lo in zip(mid, low)],
                                         [hi - m for m, hi in zip(mid, high)]], **kw)

    def hline(self, ax, what, y, **kw):
        self.record(ax, what, [], y)
        return ax.axhline(y, **kw)

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
