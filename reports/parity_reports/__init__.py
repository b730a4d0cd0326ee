"""The report drawn by parity_report.py: one module per result table (tables/) on a shared
layer of formatting (common), the HTML page (page), figure basics (plots), the run's own
description (provenance) and the two reports that loop over the tables (report)."""

import os

# Drawing a report does no linear algebra worth a second thread, but numpy's OpenBLAS starts one
# per core when it loads and leaves them spinning (sched_yield) after the small products of
# matplotlib's transforms: about 7% of a report's CPU time. One thread unless the caller chose
# otherwise; this runs before any module of the package imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
