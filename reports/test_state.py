"""Tests of the training-state section (parity_reports/tables/state.py) against /bench/state of a
recorded `parity bench state` at 4 ranks (fixtures/state-np4.h5): the bandwidths drawn are all
ranks' bytes over the slowest rank's seconds, the median over repeats, computed here from the
file's rows; a restore that missed an element and bytes off the formula are shown in red; a file
without the asynchronous columns still reports.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import os
import re
import unittest

import numpy as np

from report_testing import HERE, RecordingCase, set_rows

FIXTURE = os.path.join(HERE, "fixtures", "state-np4.h5")
CHECKED_FIGURES = {"state_bandwidth"}


def aggregate(rows, bytes_column, seconds_column, floor=0):
    """Per layout, the median over repeats of sum(bytes) / max(seconds) over the ranks."""
    repeats = {}
    for r in rows:
        repeats.setdefault(r["layout"], {}).setdefault(r["repeat"], []).append(r)
    out = {}
    for layout, by_repeat in repeats.items():
        rates = [sum(max(r[bytes_column], floor) for r in ranks) / max(r[seconds_column] for r in ranks)
                 for ranks in by_repeat.values()]
        out[layout] = float(np.median(rates))
    return out


class StateReportTests(RecordingCase):
    FIXTURE = FIXTURE
    TABLE = "/bench/state"

    def test_every_rank_and_repeat_of_each_layout_is_recorded(self):
        layouts = {r["layout"] for r in self.rows}
        self.assertEqual(layouts, {"dp", "zero1", "zero3", "tp2"})
        for layout in layouts:
            rows = [r for r in self.rows if r["layout"] == layout]
            self.assertEqual(sorted((r["repeat"], r["rank"]) for r in rows),
                             [(k, r) for k in range(2) for r in range(4)], layout)
            for r in rows:
                self.assertEqual(r["total_bytes"], r["formula_bytes"])
                self.assertEqual(r["restored_exactly"], 1)
            # Each repeat's ranks wrote all the bytes between them, each its share.
            for k in range(2):
                wrote = [r["bytes"] for r in rows if r["repeat"] == k]
                self.assertEqual(sum(wrote), rows[0]["total_bytes"], layout)
                self.assertLess(max(wrote) - min(wrote), 0.02 * rows[0]["total_bytes"], layout)

    def test_bandwidths_are_all_ranks_bytes_over_the_slowest_rank(self):
        drawn = self.series("state_bandwidth")
        self.assertEqual(set(drawn), {"save", "file system write", "load", "file system read"})
        want = {"save": aggregate(self.rows, "bytes", "save_s"),
                "load": aggregate(self.rows, "load_bytes", "load_s"),
                "file system write": aggregate(self.rows, "bytes", "fs_write_s", floor=1 << 20),
                "file system read": aggregate(self.rows, "bytes", "fs_read_s", floor=1 << 20)}
        order = ["dp", "zero1", "zero3", "tp2"]
        for label, by_layout in want.items():
            self.assertTrue(np.allclose(drawn[label].y, [by_layout[l] / 1e9 for l in order], rtol=1e-12), label)

    def test_a_missed_element_and_bytes_off_the_formula_are_shown(self):
        path = self.fixture_copy("state-broken.h5")
        set_rows(path, "/bench/state", "restored_exactly",
                 lambda r: r["layout"] == "zero3" and r["rank"] == 2, lambda r: 0)
        set_rows(path, "/bench/state", "formula_bytes", lambda r: r["layout"] == "tp2",
                 lambda r: r["formula_bytes"] + 8)
        _, html, summary = self.fixture_report("broken-report", "--no-figures", path=path)
        zero3 = re.search(r"<tr><td>zero3</td>.*?</tr>", html)
        self.assertIn("<span class=\"bad\">no</span>", zero3.group(0))
        tp2 = re.search(r"<tr><td>tp2</td>.*?</tr>", html)
        self.assertIn("<span class=\"bad\">", tp2.group(0))
        dp = re.search(r"<tr><td>dp</td>.*?</tr>", html)
        self.assertNotIn("bad", dp.group(0))
        self.assertIn("zero3", summary)
        self.assertIn("NOT restored exactly", summary)
        self.assertIn("bytes OFF the formula", summary)

    def test_a_file_without_the_asynchronous_columns_still_reports(self):
        path = self.fixture_without("state-older.h5", "/bench/state",
                                    ("async_staged_s", "async_step_s", "async_finish_s"))
        html = self.fixture_report("older-report", path=path)[1]
        self.assertIn("<h2 id=\"state\">Training state</h2>", html)
        dp = re.search(r"<tr><td>dp</td>.*?</tr>", html).group(0)
        self.assertEqual(dp.count("<td class=\"num\">–</td>"), 2)


if __name__ == "__main__":
    unittest.main()
