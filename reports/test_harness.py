"""Tests of the harness-overhead section (parity_reports/tables/harness.py): the overheads as
drawn against /bench/harness_overhead.

Run with: /usr/bin/python3 reports/run_tests.py
"""

from html import escape as html_escape
import os
import re
import shutil
import tempfile
import unittest

import h5py
import numpy as np

import make_sample
from report_testing import (SeriesCase, by_size_columns, drawn_report, group_attrs,
                            read_columns)


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


class HarnessReportTests(unittest.TestCase):
    """The section's words of a file with the harness overhead alone."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-harness-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_overhead_at_the_target_misses_it(self):
        """The target is strict ("target < T us"): the worst overhead equal to it is missed, the
        wrapper's own cost below it met."""
        path = os.path.join(self.tmp, "harness.h5")
        make_sample.write_sample(path, omit=("copy_bandwidth", "point_to_point", "collectives",
                                             "check"))
        cols = read_columns(path, "/bench/harness_overhead")
        worst, own = max(cols["overhead_us"]), max(cols["own_overhead_us"])
        self.assertLess(own, worst)
        with h5py.File(path, "a") as f:
            f["/bench/harness_overhead"].attrs["target_us"] = np.float64(worst)
        _, html, summary = drawn_report(self, os.path.join(self.tmp, "out"), [path],
                                        ["--no-figures"])
        words = (f"at most {worst:.3f} us per call over {min(cols['size_bytes'])} B - "
                 f"{max(cols['size_bytes'])} B (target < {worst:g} us: missed); the wrapper's own "
                 f"cost (one rank) at most {own:.3f} us (target < {worst:g} us: met).")
        self.assertIn(words, summary)
        self.assertIn(html_escape(words), html)

    def test_rows_in_size_order_whatever_the_files_order(self):
        """A file that lists its sizes largest first: the words span the smallest to the largest
        size, and the table lists the sizes in increasing order."""
        path = os.path.join(self.tmp, "harness-reversed.h5")
        make_sample.write_sample(path, omit=("copy_bandwidth", "point_to_point", "collectives",
                                             "check"))
        cols = read_columns(path, "/bench/harness_overhead")
        sizes = cols["size_bytes"]
        self.assertEqual(sizes, sorted(sizes))
        self.assertGreater(len(sizes), 2)
        with h5py.File(path, "a") as f:
            g = f["/bench/harness_overhead"]
            for name in cols:
                g[name][...] = g[name][()][::-1]
        self.assertEqual(read_columns(path, "/bench/harness_overhead")["size_bytes"],
                         sizes[::-1])
        _, html, summary = drawn_report(self, os.path.join(self.tmp, "reversed"), [path],
                                        ["--no-figures"])
        worst = max(cols["overhead_us"])
        self.assertIn(f"at most {worst:.3f} us per call over {sizes[0]} B - {sizes[-1]} B", summary)
        table = html[html.index("<th class=\"num\">size (B)</th>"):]
        table = table[:table.index("</table>")]
        shown = [int(x) for x in re.findall(r"<tr><td class=\"num\">(\d+)</td>", table)]
        self.assertEqual(shown, sizes)


if __name__ == "__main__":
    unittest.main()
