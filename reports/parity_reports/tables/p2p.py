"""/bench/point_to_point: ping-pong times between ranks 0 and 1 and the alpha-beta model fitted
to them (the group's alpha_us and beta_us_per_byte)."""

import math

from ..common import esc, finite, fmt_int, fmt_num, fmt_time, side_by_side

NAME = "p2p"
ORDER = 30
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {"/bench/point_to_point": ("i:size_bytes f:time_us", [])}


class P2P:
    """The ping-pong points and the alpha-beta constants fitted to them."""

    def __init__(self, rf):
        self.table = rf.table("/bench/point_to_point")
        self.present = self.table is not None
        attrs = rf.group_attrs.get("/bench/point_to_point", {})
        self.alpha = attrs.get("alpha_us")
        self.beta = attrs.get("beta_us_per_byte")
        self.alpha = float(self.alpha) if finite(self.alpha) else None
        self.beta = float(self.beta) if finite(self.beta) else None
        self.points = []
        if self.present and self.table.has("size_bytes", "time_us"):
            self.points = sorted(zip(self.table["size_bytes"].tolist(),
                                     self.table["time_us"].tolist()))
        self.usable = self.present

    @property
    def bandwidth_GBps(self):
        if self.beta is None or self.beta <= 0:
            return None
        return 1e-3 / self.beta  # 1 B/us = 1e-3 GB/s

    def text(self):
        parts = []
        parts.append(f"alpha = {self.alpha:.3g} us" if self.alpha is not None else "alpha = –")
        if self.beta is not None:
            bw = self.bandwidth_GBps
            parts.append(f"beta = {self.beta:.4g} us/B" + (f" ({bw:.3g} GB/s)" if bw else ""))
        else:
            parts.append("beta = –")
        return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Figure and section

def draw(plotter, runs):
    """runs: [(label, P2P, linestyle)]."""
    plt = plotter.plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    handles = []
    for i, (label, p2p, ls) in enumerate(runs):
        color = plotter.palette[i]
        x, y = plotter.positive([p[0] for p in p2p.points], [p[1] for p in p2p.points])
        if x:
            plotter.plot(ax, f"{label} ping-pong", x, y, marker="o", markersize=4,
                         linestyle="none", color=color)
        if p2p.alpha is not None and p2p.beta is not None and x:
            xs = [2.0 ** (k / 4) for k in range(int(4 * math.log2(min(x))),
                                                int(4 * math.log2(max(x))) + 1)]
            fit = [p2p.alpha + p2p.beta * s for s in xs]
            fx, fy = plotter.positive(xs, fit)
            plotter.plot(ax, f"{label} alpha-beta fit", fx, fy, linestyle=ls, color=color,
                         linewidth=1.3)
        handles.append(plotter.Line2D([], [], marker="o", markersize=4, linestyle=ls,
                                      color=color, label=f"{label}: {p2p.text()}"))
    plotter.size_axis(ax, [p[0] for _, p2p, _ in runs for p in p2p.points])
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("half round-trip time (us)")
    ax.set_title("Ping-pong rank 0 <-> rank 1 (points) and alpha + beta·size fit (line)")
    fig.legend(handles=handles, loc="lower center", ncol=1, frameon=False)
    return plotter.save(fig, "point_to_point", len(handles) + 0.3, suptitle=False)


def runs_section(page, runs, plotter):
    """The section of one run or of two side by side; runs: [(label, P2P)]."""
    page.add("<h2 id=\"p2p\">Point-to-point (alpha-beta model)</h2>")
    present = [(l, p) for l, p in runs if p.present]
    for label, p2p in runs:
        if not p2p.present:
            page.note(f"{label}: no /bench/point_to_point table (world size 1, or not measured); "
                      "no alpha-beta constants.")
    if not present:
        return
    rows = []
    for label, p2p in present:
        bw = p2p.bandwidth_GBps
        rows.append([esc(label), fmt_num(p2p.alpha, 3) if p2p.alpha is not None else "–",
                     f"{p2p.beta:.4g}" if p2p.beta is not None else "–",
                     fmt_num(bw) if bw else "–", str(len(p2p.points))])
    page.table(["run", "alpha (us)", "beta (us/B)", "1/beta (GB/s)", "points"], rows,
               numeric={1, 2, 3, 4})
    plottable = [(l, p, ls) for (l, p), ls in zip(present, ("-", "--")) if len(p.points) >= 2]
    if plottable:
        page.img(draw(plotter, plottable), "ping-pong time vs size")
    for label, p2p in present:
        def body(p2p=p2p):
            page.table(["size (B)", "time (us)", "alpha + beta·size (us)"],
                       [[fmt_int(s), fmt_time(t),
                         fmt_time(p2p.alpha + p2p.beta * s)
                         if p2p.alpha is not None and p2p.beta is not None else "–"]
                        for s, t in p2p.points], numeric={0, 1, 2})
        page.details(f"Table: ping-pong points{'' if len(present) == 1 else ' of ' + label}", body)


# --------------------------------------------------------------------------------------------
# One run, and two: the same section

def load(rf, loaded):
    return P2P(rf)


def nav(tables):
    return [("p2p", "Point-to-point")]


(section, glance, markdown, compare, compare_glance, compare_section,
 compare_markdown) = side_by_side(runs_section, "Point-to-point", lambda p: p.present)
