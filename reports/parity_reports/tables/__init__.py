"""The result tables the report draws: one module each, found here (every module of this
package is a table module) and ordered by its ORDER, the order of the single-run page. A new
table is a new module here; nothing else lists it.

Every table module defines (INTERFACE and FUNCTIONS below; test_page.py checks them):
  NAME     its key among a run's loaded tables (slow_ranks reads "collectives")
  ORDER    its place on the single-run page (and in a comparison after the verdicts): the
           modules run in increasing ORDER, so a module that reads another's loaded table
           (load's `loaded`) comes after it
  VERDICT  True for a table that says whether a run is correct rather than how fast: its
           at-a-glance line comes first, and in a comparison its section and summary too
  READS    {table path: (column types, required columns)} for parity_results: the schema's
           type of each column as "s:a,b i:c f:d" (string, int64, float64), and the columns
           without which the reader refuses the file as damaged (the tables from /bench/model
           on; the older ones note a missing column on the page instead); the one place that
           says which columns the module reads. A path "group/*" stands for every table under
           the group that no module names (conformance reads any new /check/ family this way)
  load(rf, loaded)             the table of one result file: an object with .present (the file
                               has the table) and .usable (it has something to draw); loaded:
                               {NAME: object} of the modules before it in TABLES
  nav(tables)                  [(anchor, link text)] for the navigation bar; tables: the loaded
                               object of each run, one or two (a comparison)
A module that declares TABLE (the class whose TABLE(rf) reads its table) and TITLE may leave
out load and nav: load is then TABLE(rf), and nav the link to #NAME, TITLE when any run has the
table (common.nav_entry).
  section(page, ctx, table)    its section of the single-run page (possibly nothing)
  glance(ctx, table)           its at-a-glance lines (HTML)
  markdown(ctx, table)         its summary.md lines, each block opening with a blank line
  compare(ctx, tables)         what the three below share (the runs' matched rows), or None
  compare_glance(ctx, tables, matches)           as glance, B against A
  compare_section(page, ctx, tables, matches)    as section
  compare_markdown(ctx, tables, matches)         as markdown
ctx is report.Context: the run files, their labels, the Plotter and the command line. A figure
draws its data through the Plotter (plot, bar, band, whiskers, hline, vline, heatmap), which
records each series as it was drawn (plots.Series); the tests compare those with the file's
columns. The openings every section shares (a heading, a note on a table without rows, the
matching of two runs, summary.md's tables) are in common.py.
"""

import importlib
import pkgutil

from ..common import nav_entry


def with_defaults(module):
    """The module, with load and nav made from TABLE and TITLE where it declares them."""
    if not hasattr(module, "load") and hasattr(module, "TABLE"):
        module.load = lambda rf, loaded: module.TABLE(rf)
    if not hasattr(module, "nav") and hasattr(module, "TITLE"):
        module.nav = lambda tables: nav_entry(tables, module.NAME, module.TITLE)
    return module


def discover():
    """Every module of this package, in increasing ORDER."""
    modules = [with_defaults(importlib.import_module(f"{__name__}.{m.name}"))
               for m in pkgutil.iter_modules(__path__)]
    return sorted(modules, key=lambda m: m.ORDER)


TABLES = discover()

INTERFACE = {"NAME": str, "ORDER": int, "VERDICT": bool, "READS": dict}
FUNCTIONS = {
    "load": ("rf", "loaded"),
    "nav": ("tables",),
    "section": ("page", "ctx", "table"),
    "glance": ("ctx", "table"),
    "markdown": ("ctx", "table"),
    "compare": ("ctx", "tables"),
    "compare_glance": ("ctx", "tables", "matches"),
    "compare_section": ("page", "ctx", "tables", "matches"),
    "compare_markdown": ("ctx", "tables", "matches"),
}


def schema():
    """{table path: (column types, required columns)} of every table the modules read."""
    return {path: spec for module in TABLES for path, spec in module.READS.items()}
