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


def known(x):
    """A count the file has: finite and not negative (-1 stands for a column it lacks)."""
    return finite(x) and x >= 0


def fmt_known(x):
    """An integer column whose -1 stands for absent (an optional column the file lacks)."""
    return fmt_int(x) if known(x) else "–"


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


class RowTable:
    """One result table of a run, read as rows: table (None when the file lacks it), present,
    its group's attrs and rows, each optional column the file lacks at its default
    (table_rows); usable when it has rows. A subclass's key(row) matches two runs' rows
    (by_key, in file order)."""

    def __init__(self, rf, path, defaults):
        self.table = rf.table(path)
        self.present = self.table is not None
        self.attrs = rf.group_attrs.get(path, {})
        self.rows = table_rows(self.table, defaults) if self.present else []

    @property
    def usable(self):
        return bool(self.rows)

    def by_key(self):
        return OrderedDict((self.key(r), r) for r in self.rows)

    def attr_number(self, name):
        """A numeric attribute of the table's group, None where it is absent or not finite."""
        value = self.attrs.get(name)
        return float(value) if finite(value) else None

    def read_alpha_beta(self):
        """alpha (s) and beta (s per byte), the alpha-beta constants the group states."""
        self.alpha, self.beta = self.attr_number("alpha_s"), self.attr_number("beta_s_per_byte")

    def alpha_beta_text(self):
        if self.alpha is None or self.beta is None or self.beta <= 0:
            return None
        return (f"alpha = {self.alpha * 1e6:.3g} us, beta = {self.beta:.4g} s/B "
                f"({1e-9 / self.beta:.3g} GB/s)")


def grouped_rows(rf, path, defaults, key, order=None):
    """(whether the file has the table, {key(row): its rows}, each list sorted by order when
    given) of a table whose rows belong to another table's (a run index)."""
    table = rf.table(path)
    out = {}
    for r in table_rows(table, defaults) if table is not None else []:
        out.setdefault(key(r), []).append(r)
    for rows in out.values() if order else ():
        rows.sort(key=order)
    return table is not None, out


def formula_differences(r, checks, verdict, failed):
    """The words of a row's counts that differ from their formula (checks: [(column, word)],
    each beside formula_<column>), unless the row's verdict column says it passes; `failed`
    alone when the verdict fails and no count differs; nothing without either."""
    if r[verdict] is not None and int(r[verdict]) == 1:
        return []
    wrong = [word for column, word in checks
             if known(r[column]) and known(r[f"formula_{column}"])
             and int(r[column]) != int(r[f"formula_{column}"])]
    return wrong or ([failed] if r[verdict] is not None else [])


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


def compare_by_key(ctx, tables):
    """compare() of a table module whose runs are matched on their entries' keys (by_key()):
    matched_pairs of the runs; None unless every run's table has rows."""
    return matched_pairs(tables) if all(t.usable for t in tables) else None


def plural(n, one, many=None):
    """one for n == 1, else many (one + "s" unless given): '1 matching run', '2 policies'."""
    return one if n == 1 else (many or one + "s")


def yes_no(ok):
    """A verdict cell: yes, or a red no."""
    return "yes" if ok else "<span class=\"bad\">no</span>"


def bad_span(text):
    """Text in red (escaped here)."""
    return f"<span class=\"bad\">{esc(text)}</span>"


def verdict_span(ok, words):
    """A table's verdict as a sentence, green when ok, red when not."""
    return f"<span class=\"{'good' if ok else 'bad'}\">{esc(capitalized(words))}.</span>"


def on_ranks(world):
    """' on 4 ranks' (' on 1 rank') for a world size read from the rows, '' when unknown (< 1)."""
    return f" on {world} {plural(world, 'rank')}" if world > 0 else ""


def plain_cells(rows):
    """Table cells without their red spans (for markdown)."""
    return [[str(c).replace("<span class=\"bad\">", "").replace("</span>", "") for c in row] for row in rows]


def md_table(header, align, rows):
    """A markdown table: the header's cells, each column's alignment ("l" or "r", one letter a
    column) and the rows' cells."""
    return (["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


# --------------------------------------------------------------------------------------------
# A table's sections, one run and two: the openings every table module shares

def nav_entry(tables, anchor, text):
    """The navigation link of a section, when any run has its table."""
    return [(anchor, text)] if any(t.present for t in tables) else []


def section_start(page, table, anchor, heading, path):
    """The heading of a run's section when the file has the table, and a note when the table
    has no rows; True when there are rows to draw."""
    if not table.present:
        return False
    page.add(f"<h2 id=\"{anchor}\">{esc(heading)}</h2>")
    if not table.usable:
        page.note(f"{path} is present but has 0 rows.")
        return False
    return True


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


def matched(matches):
    """The matched pairs of compare()'s (pairs, only in A, only in B), or [] without them."""
    return matches[0] if matches else []


def ratio_glance(matches, what, noun, column, many=None):
    """'<what> B / A over N <noun>s: from 0.912 to 1.034.' of column over the matched pairs;
    nothing without any."""
    pairs = matched(matches)
    if not pairs:
        return []
    return [f"{what} B / A over {len(pairs)} {plural(len(pairs), noun, many)}: "
            + ratio_range_words([ratio_of(b[column], a[column]) for _, a, b in pairs]) + "."]


def comparison_pairs(page, tables, matches, table, anchor, heading, what, describe, nothing,
                     workloads=None, notes=None):
    """Opens a comparison section: its heading and notes on a run without rows
    (comparison_start), the keys only one run has (only_notes: what, describe), a note when the
    runs' workloads differ (workloads: (words(table), what that means for the comparison)),
    notes(page) when given, and "No <nothing> in both runs" when no key is in both. The matched
    pairs, or None when there is nothing to compare."""
    if not comparison_start(page, tables, table, anchor, heading):
        return None
    pairs, *only = matches
    only_notes(page, only, what, describe)
    if workloads:
        words, consequence = workloads
        a, b = (words(t) for t in tables)
        if a != b:
            page.note(f"The runs trained different models (A: {a}; B: {b}): {consequence}.")
    if notes:
        notes(page)
    if not pairs:
        page.note(f"No {nothing} in both runs: nothing to compare.")
        return None
    return pairs


def comparison_md(matches, heading, header, align, row, tail=None):
    """summary.md's comparison of a table: the heading and a row(key, A's entry, B's entry) of
    cells per matched pair, then the lines tail() gives; nothing without matched pairs."""
    pairs = matched(matches)
    if not pairs:
        return []
    return (["", f"## {heading}", ""] + md_table(header, align, [row(*p) for p in pairs])
            + (tail() if tail else []))


def glance_line(lead, table, words, shown=lambda t: t.usable):
    """A run's at-a-glance line '<lead>: <words(table)>.' (escaped), when shown(table) (the
    table has rows); nothing otherwise."""
    return [f"{lead}: " + esc(words(table)) + "."] if shown(table) else []


def formula_glance(tables, lead, failed, wrap=bad_span):
    """A comparison's at-a-glance line on the runs' formulas, '<lead>A <A's match_words()>;
    B <B's>.', through wrap (in red unless given), when failed(table) for either run; nothing
    otherwise."""
    if not any(failed(t) for t in tables):
        return []
    return [wrap(lead + runs_words(tables, lambda t: t.match_words()) + ".")]


def runs_words(tables, words, escape=False):
    """'A <words of A>; B <words of B>' (each escaped for HTML with escape)."""
    return "; ".join(f"{name} {esc(words(t)) if escape else words(t)}"
                     for name, t in zip("AB", tables))


def side_by_side(runs_section, heading, shown, md_lead=None):
    """section, glance, markdown, compare, compare_glance, compare_section and compare_markdown
    of a table that a comparison draws as it draws one run, the runs side by side:
    runs_section(page, [(label, table)], plotter) draws the section; shown(table): whether a
    run has the table to show. One run's at-a-glance line is '<heading>: <its text()>.' and its
    summary.md line '<md_lead>: <its text()>.' (md_lead: the heading unless given); with two,
    summary.md lists each run's text() under the heading."""
    md_lead = md_lead or heading

    def section(page, ctx, table):
        runs_section(page, [(ctx.labels[0], table)], ctx.plotter)

    def glance(ctx, table):
        return glance_line(heading, table, lambda t: t.text(), shown)

    def markdown(ctx, table):
        return ["", f"{md_lead}: {table.text()}."] if shown(table) else []

    def compare(ctx, tables):
        return None

    def compare_glance(ctx, tables, matches):
        return []

    def compare_section(page, ctx, tables, matches):
        runs_section(page, list(zip("AB", tables)), ctx.plotter)

    def compare_markdown(ctx, tables, matches):
        if not any(shown(t) for t in tables):
            return []
        return ["", f"## {heading}", ""] + [f"- {name}: {t.text() if shown(t) else 'not measured'}"
                                             for name, t in zip("AB", tables)]
    return section, glance, markdown, compare, compare_glance, compare_section, compare_markdown


def runs_with_rows(page, runs, anchor, heading, note):
    """For a section drawn for one run or two side by side: the runs [(label, table)] whose
    table has rows, each, when two have, after a heading of its label. The section's heading
    and note come before the first; without any run, nothing is drawn."""
    shown = [(label, table) for label, table in runs if table.usable]
    if shown:
        page.add(f"<h2 id=\"{anchor}\">{esc(heading)}</h2>")
        page.note(note)
    for label, table in shown:
        if len(shown) > 1:
            page.add(f"<h3>{esc(label)}</h3>")
        yield label, table


def runs_md(tables, lead, words):
    """The closing lines of a comparison in summary.md: a blank line, then
    '- A<lead><words of A>.' and B's."""
    return [""] + [f"- {name}{lead}{words(t)}." for name, t in zip("AB", tables)]


def step_cells(a, b):
    """Two matched runs' step time (ms) and tokens/s, each A, B and B / A."""
    return [fmt_ms(a["step_seconds"]), fmt_ms(b["step_seconds"]),
            fmt_ratio(ratio_of(b["step_seconds"], a["step_seconds"])),
            fmt_tokens(a["tokens_per_second"]), fmt_tokens(b["tokens_per_second"]),
            fmt_ratio(ratio_of(b["tokens_per_second"], a["tokens_per_second"]))]


def only_notes(page, only, what, describe):
    """Notes listing the keys that only one run has; only: (keys only in A, keys only in B)."""
    for name, keys in zip("AB", only):
        if keys:
            page.note(f"Only in run {name} (no {what} in the other run): "
                      + "; ".join(describe(k) for k in keys) + ".")


# Predicted against measured step times (a benchmark's predicted_* columns, from the run's
# calibration): one table, the same words in every section that has them.
PREDICTED_WORDS = ("Predicted against measured: {what}, costed at the rates the job measured "
                   "(bench calibrate: products over a grid of shapes, each op of a step over "
                   "several lengths; reference/theory/calibration.hpp). The model is held to "
                   "0.8–1.25 of the measured step; where ranks outnumber cores the measured time "
                   "includes waiting for one, and the two are not compared.")


def predicted_table(page, what, label_headers, entries):
    """entries: (labels, predicted seconds, measured seconds, predicted / measured); nothing
    when no entry has a prediction (files from before the columns existed)."""
    entries = [e for e in entries if finite(e[1])]
    if not entries:
        return
    page.p(esc(PREDICTED_WORDS.format(what=what)))
    page.table(list(label_headers) + ["predicted step (ms)", "measured step (ms)", "predicted / measured"],
               [[esc(str(x)) for x in labels] + [fmt_num(pred * 1e3, 2), fmt_num(meas * 1e3, 2),
                                                 fmt_ratio(ratio) if finite(ratio) else "not compared"]
                for labels, pred, meas, ratio in entries],
               numeric=set(range(len(label_headers), len(label_headers) + 3)))
