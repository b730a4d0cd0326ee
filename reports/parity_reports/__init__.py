"""The report drawn by parity_report.py: one module per result table (tables/) on a shared
layer of formatting (common), the HTML page (page), figure basics (plots), the run's own
description (provenance) and the two reports that loop over the tables (report)."""
