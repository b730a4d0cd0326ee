"""Tests of the communication-overlap section (parity_reports/tables/overlap.py): the series of
its figure against /bench/overlap.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import unittest

from report_testing import (SeriesCase, column, read_rows)


CHECKED_FIGURES = {"overlap"}


class OverlapSeriesTests(SeriesCase):
    def test_overlap(self):
        rows = read_rows(self.a, "/bench/overlap")
        drawn = self.figure(self.single, "overlap")
        for flag, label in ((0, "without overlap"), (1, "with overlap")):
            rs = sorted((r for r in rows if r["overlap"] == flag), key=lambda r: r["bucket_bytes"])
            self.assert_series(drawn[label], None, column(rs, "exposed_comm_seconds", 1e3))


if __name__ == "__main__":
    unittest.main()
