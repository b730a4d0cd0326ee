"""The result tables the report draws: one module each, listed in TABLES in the order of the
single-run page. A new table is a new module here and its entry in TABLES.

Every table module defines (INTERFACE and FUNCTIONS below; test_report.py checks them):
  NAME     its key among a run's loaded tables (slow_ranks reads "collectives")
  VERDICT  True for a table that says whether a run is correct rather than how fast: its
           at-a-glance line comes first, and in a comparison its section and summary too
  READS    {table path: (column types, required columns)} for parity_results: the schema's
           type of each column as "s:a,b i:c f:d" (string, int64, float64), and the columns
           without which the reader refuses the file as damaged (the tables from /bench/model
           on; the older ones note a missing column on the page instead)
  load(rf, loaded)             the table of one result file: an object with .present (the file
                               has the table) and .usable (it has something to draw); loaded:
                               {NAME: object} of the modules before it in TABLES
  nav(tables)                  [(anchor, link text)] for the navigation bar; tables: the loaded
                               object of each run, one or two (a comparison)
  section(page, ctx, table)    its section of the single-run page (possibly nothing)
  glance(ctx, table)           its at-a-glance lines (HTML)
  markdown(ctx, table)         its summary.md lines, each block opening with a blank line
  compare(ctx, tables)         what the three below share (the runs' matched rows), or None
  compare_glance(ctx, tables, matches)           as glance, B against A
  compare_section(page, ctx, tables, matches)    as section
  compare_markdown(ctx, tables, matches)         as markdown
ctx is report.Context: the run files, their labels, the Plotter and the command line. A figure
draws its data through the Plotter (plot, bar, band, whiskers, hline, vline, heatmap), which
records each series as it was drawn (plots.Series); test_series.py compares those with the
file's columns.
"""

from . import (checkpoint, collectives, conformance, harness, memory, model, moe, overlap, p2p,
               pipeline, precision, scaling, slow_ranks, tensor)

TABLES = [collectives, slow_ranks, p2p, harness, model, memory, scaling, overlap, tensor, pipeline,
          moe, checkpoint, precision, conformance]

INTERFACE = {"NAME": str, "VERDICT": bool, "READS": dict}
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
