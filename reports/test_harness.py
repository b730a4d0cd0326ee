"""Tests of the harness-overhead section (parity_reports/tables/harness.py): the overheads as
drawn against /bench/harness_overhead.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import unittest

from report_testing import (SeriesCase, by_size_columns, group_attrs)


CHECKED_FIGURES = {"harness_overhead"}


class HarnessSeriesTests(SeriesCase):
    def test_harness_overhead(self):
        sizes, overhead = by_size_columns(self.a, "/bench/harness_overhead", "overhead_us")
        _, direct = by_size_columns(self.a, "/bench/harness_overhead", "direct_us")
        drawn = self.figure(self.single, "harness_overhead")
        self.assert_series(drawn["overhead"], sizes, overhead)
        _, own = by_size_columns(self.a, "/bench/harness_overhead", "own_overhead_us")
        self.assert_series(drawn["own"], sizes, own)
        self.assert_distinct(overhead, own, "overheads on the world and on one rank")
        self.assert_distinct(overhead, direct, "overhead and direct times")
        target, = group_attrs(self.a, "/bench/harness_overhead", "target_us")
        self.assert_series(drawn["target"], [], [target])


if __name__ == "__main__":
    unittest.main()
