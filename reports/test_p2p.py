"""Tests of the point-to-point section (parity_reports/tables/p2p.py): the ping-pong and its
alpha-beta fit as drawn, one run and two.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import unittest

from report_testing import (LABELS, SeriesCase, by_size_columns, group_attrs)


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


if __name__ == "__main__":
    unittest.main()
