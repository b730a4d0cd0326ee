"""Formatting and data helpers shared by the table modules: numbers and sizes as the report
writes them, the canonical orders of collectives, algorithms and types, and the matching of two
runs' rows."""

import html
import math
import re
from collections import OrderedDict

COLLECTIVE_ORDER = ["all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
                    "all_to_all", "all_to_all_v"]
ALGORITHM_ORDER = ["native", "ring", "naive", "recursive_doubling", "rabenseifner",
                   "binomial_tree", "pairwise"]
DTYPE_ORDER = ["float64", "float32", "float16", "bfloat16", "int32", "int64"]
REDOP_ORDER = ["sum", "prod", "max", "min", "avg", "none"]

# Memory categories of /bench/model and /bench/memory in the order they are stacked.
# communication is drawn only when some row has any: a replica training on its own rank
# allocates none, and an always-empty legend entry would only add noise. The others are always
# in the legend so that a category that stays at 0 (parameters exist before the steps start) is
# visibly 0, not forgotten.
MEMORY_CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations",
                     "communication", "workspace"]
MEMORY_OPTIONAL = {"communication"}


# --------------------------------------------------------------------------------------------
# Formatting

def esc(value):
    return html.escape(str(value), quote=True)


def finite(x):
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt_size(n):
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_num(x, digits=2):
    """Fixed decimals for values >= 1, three significant digits below; '–' for missing."""
    if not finite(x):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 1:
        return f"{x:.{digits}f}"
    return f"{x:.3g}"


def fmt_time(us):
    if not finite(us):
        return "–"
    return f"{us:.2f}" if abs(us) < 1e4 else f"{us:.0f}"


def fmt_ratio(x):
    return f"{x:.3f}" if finite(x) else "–"


def fmt_int(x):
    try:
        return str(int(x))
    except (TypeError, ValueError):
        return "–"


def fmt_wrong(x):
    try:
        x = int(x)
    except (TypeError, ValueError):
        return "–"
    return "n/c" if x < 0 else str(x)


def fmt_known(x):
    """An integer column whose -1 stands for absent (an optional column the file lacks)."""
    return fmt_int(x) if finite(x) and x >= 0 else "–"


def fmt_count(x):
    """Integer with thousands separators (parameter counts)."""
    try:
        return f"{int(x):,}"
    except (TypeError, ValueError):
        return "–"


def fmt_bytes(x):
    """Whole bytes with thousands separators: '197,520'; '–' for missing."""
    return fmt_count(round(x)) if finite(x) else "–"


def fmt_ms(seconds):
    return fmt_num(seconds * 1e3) if finite(seconds) else "–"


def fmt_flops(x):
    """FLOP with an SI prefix and three significant digits: 6.04 GFLOP."""
    if not finite(x):
        return "–"
    x = float(x)
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}FLOP"
    return f"{x:.0f} FLOP"


def fmt_mfu(x):
    return f"{x:.3f}" if finite(x) else "–"


def fmt_tokens(x):
    return fmt_num(x, 0)


def capitalized(text):
    return text[:1].upper() + text[1:]


def fmt_spread(spread, fmt):
    """'mean (min–max)', or just the mean when the ranks agree or there is one rank."""
    mean, lo, hi, n = spread
    if n <= 1 or not (finite(lo) and finite(hi)) or fmt(lo) == fmt(hi):
        return fmt(mean)
    return f"{fmt(mean)} ({fmt(lo)}–{fmt(hi)})"


def compress_ranks(ranks):
    ranks = sorted(ranks)
    parts, start, prev = [], None, None
    for r in ranks:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def hosts_summary(hosts):
    """['a','a','b'] -> [('a', '0-1'), ('b', '2')] in order of first appearance."""
    by_host = OrderedDict()
    for rank, h in enumerate(hosts):
        by_host.setdefault(h, []).append(rank)
    return [(h, compress_ranks(r)) for h, r in by_host.items()]


def hosts_text(hosts):
    return "; ".join(f"{h}: ranks {r}" for h, r in hosts_summary(hosts))


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80]


# --------------------------------------------------------------------------------------------
# Data preparation

def table_rows(table, defaults):
    """List of dict rows; missing optional columns filled from defaults."""
    n = len(table)
    cols = {c: table[c].tolist() for c in table.columns}
    rows = []
    for i in range(n):
        row = {c: cols[c][i] for c in cols}
        for c, d in defaults.items():
            row.setdefault(c, d)
        row["_row"] = i
        rows.append(row)
    return rows


def spread(values):
    """(mean, min, max, count) over the finite values; NaNs when there are none."""
    vals = [float(v) for v in values if finite(v)]
    if not vals:
        return (math.nan, math.nan, math.nan, 0)
    return (sum(vals) / len(vals), min(vals), max(vals), len(vals))


def ratio_of(b, a):
    return b / a if finite(a) and finite(b) and a > 0 else math.nan


def ratio_range_words(ratios):
    """'1.000' when they all agree to three decimals, else 'from 0.912 to 1.034'."""
    good = [r for r in ratios if finite(r)]
    if not good:
        return "–"
    lo, hi = fmt_ratio(min(good)), fmt_ratio(max(good))
    return lo if lo == hi else f"from {lo} to {hi}"


def median(values):
    vals = sorted(v for v in values if finite(v))
    if not vals:
        return math.nan
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else 0.5 * (vals[mid - 1] + vals[mid])


def max_of(rows, column):
    vals = [r[column] for r in rows if r[column] is not None and finite(r[column])]
    return max(vals) if vals else None


def order_key(value, order):
    return (order.index(value) if value in order else len(order), str(value))


# --------------------------------------------------------------------------------------------
# Two runs: tables whose loaded object has by_key() ({key: entry} in file order)

def matched_pairs(tables):
    """[(key, A's entry, B's entry)] for the keys both runs have, in A's order; and the keys
    only A has, and only B has."""
    a, b = tables[0].by_key(), tables[1].by_key()
    return ([(k, a[k], b[k]) for k in a if k in b], [k for k in a if k not in b],
            [k for k in b if k not in a])


def usable_matched_pairs(tables):
    """matched_pairs of the runs; None unless every run's table has rows."""
    return matched_pairs(tables) if all(t.usable for t in tables) else None


def section_md(table, heading, path, body):
    """A run's markdown section: nothing without the table, a note when it has no rows, else
    the heading and body() (a list of lines)."""
    if not table.present:
        return []
    return ["", f"## {heading}", ""] + (body() if table.usable else [f"{path} has 0 rows."])


def comparison_start(page, tables, table, anchor, heading):
    """The heading of a comparison section, when either run has the table, and a note for a run
    without rows; True when both runs have rows to match."""
    if not any(t.present for t in tables):
        return False
    page.add(f"<h2 id=\"{anchor}\">{esc(heading)}</h2>")
    for name, t in zip("AB", tables):
        if not t.present:
            page.note(f"Run {name} has no {table} table.")
        elif not t.usable:
            page.note(f"Run {name}: {table} has 0 rows.")
    return all(t.usable for t in tables)


def only_notes(page, only, what, describe):
    """Notes listing the keys that only one run has; only: (keys only in A, keys only in B)."""
    for name, keys in zip("AB", only):
        if keys:
            page.note(f"Only in run {name} (no {what} in the other run): "
                      + "; ".join(describe(k) for k in keys) + ".")
