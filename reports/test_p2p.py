"""Tests of the point-to-point section (parity_reports/tables/p2p.py): the ping-pong and its
alpha-beta fit as drawn, one run and two.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import os
import shutil
import tempfile
import unittest

import make_sample
from report_testing import (LABELS, SeriesCase, by_size_columns, drawn_report, fmt_num,
                            group_attrs, table_at)


CHECKED_FIGURES = {"point_to_point"}
CHECKED_COMPARISON_FIGURES = {"point_to_point", "harness_overhead"}


class PointToPointSeriesTests(SeriesCase):
    def test_point_to_point(self):
        sizes, times = by_size_columns(self.a, "/bench/point_to_point", "time_us")
        alpha, beta = group_attrs(self.a, "/bench/point_to_point",
                                       "alpha_us", "beta_us_per_byte")
        drawn = self.figure(self.single, "point_to_point")
        self.assert_series(drawn[f"{LABELS[0]} ping-pong"], sizes, times)
        fit = drawn[f"{LABELS[0]} alpha-beta fit"]
        self.assertEqual((fit.x[0], fit.x[-1]), (min(sizes), max(sizes)))
        self.assert_series(fit, None, alpha + beta * fit.x)

    def test_point_to_point_and_harness_comparison(self):
        drawn = self.figure(self.compared, "point_to_point")
        harness = [s for s in self.compared if s.figure == "harness_overhead"
                   and s.label == "overhead"]
        self.assertEqual(len(harness), 2)
        for name, path, overhead in zip("AB", (self.a, self.b), harness):
            self.assert_series(drawn[f"{name} ping-pong"],
                               *by_size_columns(path, "/bench/point_to_point", "time_us"))
            self.assert_series(overhead,
                               *by_size_columns(path, "/bench/harness_overhead", "overhead_us"))


class PointToPointReportTests(unittest.TestCase):
    """The section's words of a file with the ping-pong alone (no collective benchmark, which is
    slow to draw)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-p2p-test-")
        cls.path = os.path.join(cls.tmp, "p2p.h5")
        make_sample.write_sample(cls.path, omit=("copy_bandwidth", "harness", "collectives",
                                                 "check"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_bandwidth_is_one_over_beta(self):
        """beta is in us per byte: 1/beta bytes per us, 1e6/beta B/s, in GB/s (1e9 B/s)."""
        alpha, beta = group_attrs(self.path, "/bench/point_to_point", "alpha_us",
                                  "beta_us_per_byte")
        gbps = 1e6 / beta / 1e9
        _, html, summary = drawn_report(self, os.path.join(self.tmp, "out"), [self.path],
                                        ["--no-figures"])
        words = f"Point-to-point: alpha = {alpha:.3g} us, beta = {beta:.4g} us/B ({gbps:.3g} GB/s)."
        self.assertIn(f"<li>{words}</li>", html)
        self.assertIn(words, summary)
        self.assertIn(f"<td class=\"num\">{beta:.4g}</td><td class=\"num\">{fmt_num(gbps)}</td>",
                      table_at(html, "1/beta (GB/s)</th>"))


if __name__ == "__main__":
    unittest.main()
