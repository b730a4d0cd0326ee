"""/bench/collectives_rank_times: each rank's time in the collective benchmark's rows at each
group's largest size, to find the rank (and host) that holds the others up."""

import math
from collections import OrderedDict, defaultdict

from ..common import ALGORITHM_ORDER, esc, finite, fmt_ratio, fmt_size, fmt_time, median, order_key

NAME = "slow_ranks"
ORDER = 20
VERDICT = False
# Its figures are wall-clock times: an oversubscribed run marks them (report.py).
WALL_CLOCK = True
READS = {"/bench/collectives_rank_times": ("i:row,rank s:host f:time_us", [])}


class SlowRanks:
    """Per-rank times of the rows at each group's largest size."""

    def __init__(self, rf, bench):
        self.bench = bench
        self.table = rf.table("/bench/collectives_rank_times")
        self.present = self.table is not None
        self.missing = (self.table.missing(["row", "rank", "time_us"]) if self.present else [])
        self.entries = []  # (key, bench row, {rank: time}, {rank: host})
        self.bad_refs = 0
        if not (self.present and not self.missing and bench.usable):
            return
        by_row = defaultdict(dict)
        hosts_by_row = defaultdict(dict)
        host_col = self.table.get("host")
        rows_col = self.table["row"].tolist()
        rank_col = self.table["rank"].tolist()
        time_col = self.table["time_us"].tolist()
        hosts = rf.hosts
        n = len(bench.rows)
        for i, (row, rank, t) in enumerate(zip(rows_col, rank_col, time_col)):
            if not (0 <= row < n):
                self.bad_refs += 1
                continue
            by_row[row][rank] = t
            if host_col is not None:
                hosts_by_row[row][rank] = host_col[i]
            elif 0 <= rank < len(hosts):
                hosts_by_row[row][rank] = hosts[rank]
        for key, rows in bench.groups.items():
            largest = max(r["size_bytes"] for r in rows)
            for r in sorted((r for r in rows if r["size_bytes"] == largest),
                            key=lambda r: order_key(r["algorithm"], ALGORITHM_ORDER)):
                times = {k: v for k, v in by_row.get(r["_row"], {}).items() if finite(v)}
                if times:
                    self.entries.append((key, r, times, hosts_by_row.get(r["_row"], {})))

    @property
    def usable(self):
        return bool(self.entries)

    def rank_hosts(self):
        out = {}
        for _, _, _, hosts in self.entries:
            out.update(hosts)
        return out

    def relative(self):
        """Mean over entries of rank time / median rank time of that row; and slowest counts."""
        sums, counts, slowest = defaultdict(float), defaultdict(int), defaultdict(int)
        for _, _, times, _ in self.entries:
            med = median(times.values())
            if not med > 0:
                continue
            for rank, t in times.items():
                sums[rank] += t / med
                counts[rank] += 1
            slowest[max(times, key=times.get)] += 1
        rel = {rank: sums[rank] / counts[rank] for rank in sums}
        return rel, slowest


# --------------------------------------------------------------------------------------------
# Figures


def draw_summary(plotter, rel, slowest, rank_hosts, n_rows):
    plt = plotter.plt
    ranks = sorted(rel)
    fig, ax = plt.subplots(figsize=(max(6, min(14, 0.35 * len(ranks) + 3)), 4.2))
    host_list = list(OrderedDict.fromkeys(rank_hosts.get(r, "?") for r in ranks))
    hcolor = {h: plotter.palette[i % len(plotter.palette)] for i, h in enumerate(host_list)}
    worst = max(ranks, key=lambda r: rel[r])
    plotter.bar(ax, "rank time / median", range(len(ranks)), [rel[r] for r in ranks],
                color=[hcolor[rank_hosts.get(r, "?")] for r in ranks],
                edgecolor=["red" if r == worst else "none" for r in ranks], linewidth=2)
    ax.axhline(1.0, color="0.3", linewidth=1.0)
    lo = min(rel.values())
    ax.set_ylim(min(0.9, lo - 0.02), max(rel.values()) * 1.05)
    step = max(1, math.ceil(len(ranks) / 32))
    shown = list(range(0, len(ranks), step))
    ax.set_xticks(shown)
    if len(ranks) <= 16:
        ax.set_xticklabels([f"{ranks[i]}\n{rank_hosts.get(ranks[i], '')}" for i in shown])
    else:
        ax.set_xticklabels([str(ranks[i]) for i in shown])
    ax.set_xlabel("rank")
    ax.set_ylabel("rank time / median rank time")
    ax.set_title(f"Rank time relative to the median rank, at each group's largest size\n"
                 f"(mean over {n_rows} rows; red edge: slowest rank, {worst})")
    handles = [plotter.Patch(color=hcolor[h], label=h) for h in host_list[:10]]
    rows = plotter.legend(fig, handles) if len(host_list) > 1 else 0
    return plotter.save(fig, "slow_ranks", rows, suptitle=False)


def draw_detail(plotter, panels, rank_hosts):
    """panels: [(title, [(algorithm, {rank: time})])] one subplot each. Each rank's time is
    shown relative to the median rank of the same row, as a deviation from 1."""
    plt = plotter.plt
    n = len(panels)
    ncols = 2 if n > 1 else 1
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(12, 3.4 * nrows + 0.8), squeeze=False)
    algos_seen = []
    for ax, (title, series) in zip(axes.flat, panels):
        ranks = sorted({r for _, times in series for r in times})
        width = 0.8 / max(1, len(series))
        for j, (algo, times) in enumerate(series):
            if algo not in algos_seen:
                algos_seen.append(algo)
            med = median(list(times.values()))
            rel = [times[r] / med if r in times and med > 0 else math.nan for r in ranks]
            color = plotter.color(algo) if algo != "native" else "0.15"
            if len(ranks) <= 16:
                xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(ranks))]
                plotter.bar(ax, f"{algo} rank time / median - 1", xs, [v - 1 for v in rel],
                            bottom=1.0, width=width, color=color)
            else:
                plotter.plot(ax, f"{algo} rank time / median", range(len(ranks)), rel,
                             marker="o", markersize=2.5, linewidth=1.0, color=color)
        ax.axhline(1.0, color="0.3", linewidth=0.8)
        step = max(1, math.ceil(len(ranks) / 16))
        shown = list(range(0, len(ranks), step))
        ax.set_xticks(shown)
        if len(ranks) <= 16:
            ax.set_xticklabels([f"{ranks[i]}\n{rank_hosts.get(ranks[i], '')}" for i in shown],
                               fontsize=8)
        else:
            ax.set_xticklabels([str(ranks[i]) for i in shown], fontsize=8)
            ax.set_xlabel("rank", fontsize=9)
        ax.set_ylabel("time / median rank")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", visible=False)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    handles = [plotter.Patch(color=plotter.color(a) if a != "native" else "0.15", label=a)
               for a in algos_seen]
    return plotter.finish(fig, "slow_rank_detail", handles,
                          title="Per-rank time at the largest size, relative to the median rank "
                          "(above 1: slower)")


# --------------------------------------------------------------------------------------------
# One run

def load(rf, loaded):
    return SlowRanks(rf, loaded["collectives"])


def nav(tables):
    return [("slow-ranks", "Slow ranks")] if len(tables) == 1 else []


def section(page, ctx, sr):
    bench, plotter = sr.bench, ctx.plotter
    page.add("<h2 id=\"slow-ranks\">Slow ranks</h2>")
    if not sr.present:
        page.note("This file has no /bench/collectives_rank_times table.")
        return
    if sr.missing:
        page.note("/bench/collectives_rank_times lacks column(s) " + ", ".join(sr.missing) + ".")
        return
    if not bench.usable:
        page.note("No collective benchmark rows to attribute rank times to.")
        return
    if sr.bad_refs:
        page.note(f"{sr.bad_refs} rank-time rows refer to rows outside /bench/collectives; "
                  "ignored.")
    if not sr.entries:
        page.note("No per-rank times for the largest sizes.")
        return
    rel, slowest = sr.relative()
    hosts = sr.rank_hosts()
    if rel:
        worst = max(rel, key=rel.get)
        page.p(f"Over the {len(sr.entries)} rows at each group's largest size, the slowest rank "
               f"is <b>rank {worst}</b> (host <b>{esc(hosts.get(worst, '?'))}</b>): on average "
               f"{rel[worst]:.2f}× the median rank's time, and the slowest rank in "
               f"{slowest.get(worst, 0)} of {len(sr.entries)} rows.")
        page.img(draw_summary(plotter, rel, slowest, hosts, len(sr.entries)),
                 "per-rank relative time")
    # One panel per collective (at most 6): its group with the most algorithms.
    per_group = OrderedDict()
    for key, r, times, _ in sr.entries:
        per_group.setdefault(key, []).append((r["algorithm"], times, r["size_bytes"]))
    best_group = {}
    for key, series in per_group.items():
        if key[0] not in best_group or len(series) > len(per_group[best_group[key[0]]]):
            best_group[key[0]] = key
    panels = [(f"{bench.title(key)} at {fmt_size(per_group[key][0][2])}",
               [(a, t) for a, t, _ in per_group[key]]) for key in best_group.values()]
    if panels:
        page.p("Per collective (one group each, at its largest size): every rank's time "
               "relative to the median rank of the same row, per algorithm.")
        page.img(draw_detail(plotter, panels[:6], hosts), "per-rank times per collective")

    def body():
        rows = []
        for key, r, times, rhosts in sr.entries:
            slow = max(times, key=times.get)
            fast = min(times, key=times.get)
            rows.append([esc(bench.title(key)), esc(r["algorithm"]), esc(fmt_size(r["size_bytes"])),
                         f"{slow} ({esc(rhosts.get(slow, '?'))})", fmt_time(times[slow]),
                         f"{fast} ({esc(rhosts.get(fast, '?'))})", fmt_time(times[fast]),
                         fmt_ratio(times[slow] / times[fast] if times[fast] > 0 else math.nan)])
        page.table(["group", "algorithm", "size", "slowest rank (host)", "time (us)",
                    "fastest rank (host)", "time (us)", "slowest / fastest"], rows,
                   numeric={4, 6, 7})
    page.details(f"Table: slowest and fastest rank of each of the {len(sr.entries)} rows", body)


def worst_rank(sr):
    """(rank, its mean time relative to the median rank) of the slowest rank; None without
    per-rank times."""
    if not sr.entries:
        return None
    rel, _ = sr.relative()
    if not rel:
        return None
    worst = max(rel, key=rel.get)
    return worst, rel[worst]


def glance(ctx, sr):
    worst = worst_rank(sr)
    if worst is None:
        return []
    rank, rel = worst
    return [f"Slowest rank at the largest sizes: {rank} "
            f"({esc(sr.rank_hosts().get(rank, '?'))}), {rel:.2f}× median."]


def markdown(ctx, sr):
    worst = worst_rank(sr)
    if worst is None:
        return []
    rank, rel = worst
    return ["", f"Slowest rank at the largest sizes: rank {rank} "
                f"({sr.rank_hosts().get(rank, '?')}), {rel:.2f}× the median rank."]


# --------------------------------------------------------------------------------------------
# Two runs: the comparison has no slow-rank section

def compare(ctx, tables):
    return None


def compare_glance(ctx, tables, matches):
    return []


def compare_section(page, ctx, tables, matches):
    pass


def compare_markdown(ctx, tables, matches):
    return []
