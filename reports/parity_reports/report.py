"""The two reports, page and summary.md: one run, or run B against run A. Both walk the table
modules of tables.TABLES; what is particular to a table is in its module. Each returns the page,
the summary's lines and the series its figures drew (plots.Series, in the order drawn)."""

from collections import OrderedDict

from .common import capitalized, esc
from .page import Page
from .plots import Plotter
from .provenance import (device_words, essentials_md, provenance_comparison, provenance_section,
                         run_words)
from .tables import TABLES


class Context:
    """What a table's section needs besides its own table: the run files (one, or A and B),
    their labels, the plotter and the command line (max_plots, max_failures)."""

    def __init__(self, rfs, labels, plotter, args):
        self.rfs, self.labels, self.plotter, self.args = rfs, labels, plotter, args


def load_tables(rf):
    """{NAME: loaded table} of every table module, in TABLES order."""
    loaded = OrderedDict()
    for module in TABLES:
        loaded[module.NAME] = module.load(rf, loaded)
    return loaded


def verdict_first(modules):
    return [m for m in modules if m.VERDICT] + [m for m in modules if not m.VERDICT]


def nav_html(links):
    return ("<nav><a href=\"#provenance\">Provenance</a>"
            + "".join(f"<a href=\"#{anchor}\">{text}</a>" for anchor, text in links) + "</nav>")


def glance_html(lines):
    return "<ul class=\"glance\">" + "".join(f"<li>{g}</li>" for g in lines) + "</ul>"


def incomplete_html(rf, name=""):
    """The banner of a partial result file (a run cut short), or ""."""
    reason = rf.incomplete_reason
    if reason is None:
        return ""
    return (f"<p class=\"incomplete\"><strong>{name}Incomplete run:</strong> {esc(reason)}. The tables hold "
            f"what finished before it stopped; <code>--resume</code> with the same command continues it.</p>")


def incomplete_md(rf, name=""):
    reason = rf.incomplete_reason
    return [] if reason is None else [f"**{name}Incomplete run:** {reason}.", ""]


def oversubscribed_html(rf, name=""):
    """The banner of a run whose ranks outnumbered a host's cores, or ""."""
    words = rf.oversubscribed_words
    return "" if words is None else (f"<p class=\"incomplete\"><strong>{name}Oversubscribed:</strong> "
                                     f"{esc(words)}.</p>")


def oversubscribed_md(rf, name=""):
    words = rf.oversubscribed_words
    return [] if words is None else [f"**{name}Oversubscribed:** {words}.", ""]


def wall_clock_caveat(rf, module, glance):
    """A wall-clock table's at-a-glance lines, each marked when the run was oversubscribed
    (the pipeline table says it in its own words)."""
    if rf.oversubscribed_words is None or not getattr(module, "WALL_CLOCK", False):
        return glance
    return [line + " <span class=\"note\">(measured oversubscribed)</span>" for line in glance]


def section_with_caveat(page, ctx, module, table, rf):
    """The table's section; a wall-clock one of an oversubscribed run says so under its title."""
    first = len(page.parts)
    module.section(page, ctx, table)
    if rf.oversubscribed_words is not None and getattr(module, "WALL_CLOCK", False) and len(page.parts) > first:
        page.parts.insert(first + 1, f"<p class=\"note\">Measured oversubscribed: "
                                     f"{esc(rf.oversubscribed_words)}.</p>")


def single_report(rf, label, outdir, title, args, render=True):
    ctx = Context([rf], [label], Plotter(outdir, render), args)
    tables = load_tables(rf)
    page = Page(title, figures=render)
    page.add(f"<p class=\"mono\">{esc(label)}</p>")
    page.add(incomplete_html(rf))
    page.add(oversubscribed_html(rf))
    page.add(nav_html(link for m in TABLES for link in m.nav([tables[m.NAME]])))
    glance = [run_words(rf)]
    for m in TABLES:
        if m.VERDICT:
            glance += m.glance(ctx, tables[m.NAME])
    glance += [esc(capitalized(w)) + "." for w in device_words(rf)]
    for m in TABLES:
        if not m.VERDICT:
            glance += wall_clock_caveat(rf, m, m.glance(ctx, tables[m.NAME]))
    page.add(glance_html(glance))
    provenance_section(page, rf)
    for m in TABLES:
        section_with_caveat(page, ctx, m, tables[m.NAME], rf)

    md = [f"# {title}", "", f"File: `{label}`", ""]
    md += incomplete_md(rf)
    md += oversubscribed_md(rf)
    md += essentials_md(rf)
    md += [f"- {w}" for w in device_words(rf)]
    for m in TABLES:
        md += m.markdown(ctx, tables[m.NAME])
    return page, md, ctx.plotter.drawn


def comparison_report(rfs, labels, outdir, title, args, render=True):
    ctx = Context(rfs, labels, Plotter(outdir, render), args)
    runs = [load_tables(rf) for rf in rfs]
    modules = verdict_first(TABLES)
    tables = {m.NAME: [run[m.NAME] for run in runs] for m in modules}
    # Matched before anything is drawn: the glance at the top of the page needs the matches.
    matches = {m.NAME: m.compare(ctx, tables[m.NAME]) for m in modules}
    page = Page(title, figures=render)
    page.add(f"<p>Run A: <span class=\"mono\">{esc(labels[0])}</span><br>Run B: "
             f"<span class=\"mono\">{esc(labels[1])}</span></p>")
    for name, rf in zip("AB", rfs):
        page.add(incomplete_html(rf, f"Run {name}: "))
        page.add(oversubscribed_html(rf, f"Run {name}: "))
    page.add(nav_html(link for m in modules for link in m.nav(tables[m.NAME])))
    page.add(glance_html([line for m in modules
                          for line in m.compare_glance(ctx, tables[m.NAME], matches[m.NAME])]))
    provenance_comparison(page, rfs, labels)
    for m in modules:
        m.compare_section(page, ctx, tables[m.NAME], matches[m.NAME])

    md = [f"# {title}", "", f"- A: `{labels[0]}`", f"- B: `{labels[1]}`"]
    for name, rf in zip("AB", rfs):
        md += ["", f"## Run {name}", ""] + incomplete_md(rf) + oversubscribed_md(rf, f"Run {name}: ") + essentials_md(rf)
    for m in modules:
        md += m.compare_markdown(ctx, tables[m.NAME], matches[m.NAME])
    return page, md, ctx.plotter.drawn
