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

from report_testing import HERE, RecordingCase, drawn_report, set_rows

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


def slowest_median(rows, layout, column):
    """The median over a layout's repeats of the slowest rank's value of column."""
    by_repeat = {}
    for r in rows:
        if r["layout"] == layout:
            by_repeat.setdefault(r["repeat"], []).append(r[column])
    return float(np.median([max(values) for values in by_repeat.values()]))


def md_row(summary, key):
    """The cells of summary.md's table row whose first cell is key."""
    lines = [l for l in summary.splitlines() if l.startswith(f"| {key} |")]
    assert len(lines) == 1, (key, lines)
    return [c.strip() for c in lines[0].strip("|").split("|")]


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

    def test_the_asynchronous_save_against_the_step_alone(self):
        """Per layout: how long the asynchronous save held the step (the slowest rank's staging,
        median over repeats) and the step with the save running over the step alone."""
        html = self.fixture_report("async-report", "--no-figures")[1]
        for layout in ("dp", "zero1", "zero3", "tp2"):
            staged = slowest_median(self.rows, layout, "async_staged_s")
            during = slowest_median(self.rows, layout, "async_step_s")
            alone = slowest_median(self.rows, layout, "step_s")
            # The save slows the step in this recording: the ratio is well away from 1.
            self.assertGreater(during / alone, 1.5, layout)
            row = re.search(rf"<tr><td>{layout}</td>.*?</tr>", html).group(0)
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
            self.assertEqual(len(cells), 13, layout)
            self.assertAlmostEqual(float(cells[10]), staged * 1e3, delta=0.006, msg=layout)
            self.assertAlmostEqual(float(cells[11]), during / alone, delta=0.0006, msg=layout)

    def test_comparison_ratios_are_b_over_a(self):
        """Run B saves in 0.8 of A's time and loads in twice A's time: per layout, save
        bandwidth B / A 1.250 and load bandwidth B / A 0.500."""
        a, b = self.fixture_copy("state-a.h5"), self.fixture_copy("state-b.h5")
        set_rows(b, "/bench/state", "save_s", lambda r: True, lambda r: 0.8 * r["save_s"])
        set_rows(b, "/bench/state", "load_s", lambda r: True, lambda r: 2 * r["load_s"])
        _, html, summary = drawn_report(self, os.path.join(self.tmp, "compared"), [a, b],
                                        ["--no-figures"])
        self.assertIn("<h2 id=\"state\">Training state: B against A</h2>", html)
        for layout in ("dp", "zero1", "zero3", "tp2"):
            cells = md_row(summary, layout)
            self.assertEqual(len(cells), 7, cells)
            self.assertEqual((cells[3], cells[6]), ("1.250", "0.500"), layout)
        self.assertIn("Training-state save bandwidth B / A over 4 layouts: 1.250.", html)


if __name__ == "__main__":
    unittest.main()
