"""Tests of the slow-rank section (parity_reports/tables/slow_ranks.py): the series of its figures
against /bench/collectives_rank_times.

Run with: /usr/bin/python3 reports/run_tests.py
"""

from collections import OrderedDict, defaultdict
import statistics
import unittest

from report_testing import (SeriesCase, collective_rows, fmt_size, group_title, mean, read_columns)


CHECKED_FIGURES = {"slow_ranks", "slow_rank_detail"}


class SlowRanksSeriesTests(SeriesCase):
    def largest_size_rows(self):
        """{panel title: {algorithm: {rank: time}}} of every group's rows at its largest size,
        from /bench/collectives_rank_times."""
        times = defaultdict(dict)
        rt = read_columns(self.a, "/bench/collectives_rank_times")
        for row, rank, t in zip(rt["row"], rt["rank"], rt["time_us"]):
            times[row][rank] = t
        out = OrderedDict()
        for key, rows in collective_rows(self.a).items():
            largest = max(r["size_bytes"] for r in rows)
            out[f"{group_title(*key)} at {fmt_size(largest)}"] = {
                r["algorithm"]: times[r["_row"]] for r in rows if r["size_bytes"] == largest}
        return out

    def test_slow_ranks(self):
        """The mean over rows of rank time / the row's median rank time, and per panel each
        algorithm's rank times against their median."""
        panels = self.largest_size_rows()
        ratios = defaultdict(list)
        for algos in panels.values():
            for times in algos.values():
                med = statistics.median(times.values())
                for rank, t in times.items():
                    ratios[rank].append(t / med)
        ranks = sorted(ratios)
        summary = self.figure(self.single, "slow_ranks")
        self.assert_series(summary["rank time / median"], range(len(ranks)),
                           [mean(ratios[r]) for r in ranks])
        detail = [s for s in self.single if s.figure == "slow_rank_detail"]
        # One panel per collective: its group with the most algorithms.
        self.assertEqual(len({s.axes for s in detail}), 6)
        self.assertIn("all_reduce · float32 · sum · out of place at 64 MiB",
                      {s.axes for s in detail})
        for s in detail:
            algo = s.label.split(" ")[0]
            times = panels[s.axes][algo]
            med = statistics.median(times.values())
            self.assert_series(s, None, [times[r] / med - 1 for r in sorted(times)])


class SlowestCountTests(unittest.TestCase):
    def test_counts_the_rank_slowest_in_each_row(self):
        """relative(): each rank's mean time over its row's median, and how many rows each rank
        was the slowest in (the page's "slowest rank in K of N rows")."""
        from parity_reports.tables.slow_ranks import SlowRanks
        sr = SlowRanks.__new__(SlowRanks)
        rows = [{0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.0, 1: 1.0, 2: 9.0}, {0: 7.0, 1: 1.0, 2: 1.0}]
        sr.entries = [(("all_reduce",), {}, times, {}) for times in rows]
        rel, slowest = sr.relative()
        self.assertEqual(dict(slowest), {2: 2, 0: 1})
        medians = [statistics.median(t.values()) for t in rows]
        for rank in range(3):
            self.assertAlmostEqual(rel[rank], mean(t[rank] / m for t, m in zip(rows, medians)))


if __name__ == "__main__":
    unittest.main()
