"""Tests of the collective benchmark's report (parity_reports/tables/collectives.py) on the
collective sample, alone and against a second run, and of the series its figures draw.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import glob
import os
import re
import unittest

import h5py
import numpy as np

import make_sample
from report_testing import (ReportCase, SeriesCase, after, collective_rows, column,
                            conformance_counts, find_row, fmt_num, group_title, grouped,
                            read_collectives, read_columns, run_report, table_at, text_col)


def by_size(rows):
    return sorted(rows, key=lambda r: r["size_bytes"])


class CollectivesReportTests(ReportCase):
    def test_single_outputs_exist(self):
        self.assertEqual(self.single_run.returncode, 0, self.single_run.stderr)
        html = self.read(self.single, "index.html")
        self.assertTrue(os.path.getsize(os.path.join(self.single, "summary.md")) > 0)
        self.assertIn("<title>Sample run A</title>", html)
        sources = self.assert_pngs(self.single, html)
        # 8 benchmark groups with >= 2 sizes, 2 slow-rank figures, 1 ping-pong figure, 1 harness
        # overhead figure.
        self.assertEqual(len(sources), 12)
        self.assertEqual(len(glob.glob(os.path.join(self.single, "*.png"))), 12)

    def test_single_native_ratio_in_table(self):
        rows = read_collectives(self.a)
        largest = max(r["size_bytes"] for r in rows if r["collective"] == "all_reduce")
        key = dict(collective="all_reduce", dtype="float32", redop="sum", in_place=0,
                   size_bytes=largest)
        ring = find_row(rows, algorithm="ring", **key)
        native = find_row(rows, algorithm="native", **key)
        ratio = ring["busbw_GBps"] / native["busbw_GBps"]
        html = self.read(self.single, "index.html")
        row = re.search(r"<tr><td class=\"num\">%d</td>.*?<td>ring</td>.*?</tr>" % largest,
                        after(html, "all_reduce · float32 · sum · out of place</h3>"))
        self.assertIsNotNone(row)
        self.assertIn(f"{ratio:.3f}", row.group(0))
        self.assertIn(fmt_num(ring["busbw_GBps"]), row.group(0))

    def test_single_summary_best_busbw(self):
        rows = read_collectives(self.a)
        summary = self.read(self.single, "summary.md")
        for coll, algo in (("all_reduce", "ring"), ("all_gather", "ring"),
                           ("broadcast", "binomial_tree")):
            mine = [r for r in rows if r["collective"] == coll and r["algorithm"] == algo]
            largest = max(r["size_bytes"] for r in mine)
            best = max((r for r in mine if r["size_bytes"] == largest),
                       key=lambda r: r["busbw_GBps"])
            native = find_row(rows, algorithm="native", collective=coll, dtype=best["dtype"],
                              redop=best["redop"], in_place=best["in_place"],
                              size_bytes=largest)
            ratio = best["busbw_GBps"] / native["busbw_GBps"]
            line = [l for l in summary.splitlines() if l.startswith(f"| {coll} | {algo} |")]
            self.assertEqual(len(line), 1, summary)
            self.assertIn(fmt_num(best["busbw_GBps"]), line[0])
            self.assertIn(f"{ratio:.3f}", line[0])
        self.assertIn("git_commit: 0123456789abcdef", summary)
        self.assertIn("node0: ranks 0-1; node1: ranks 2-3", summary)

    def test_single_other_sections(self):
        html = self.read(self.single, "index.html")
        self.assertIn("node0: ranks 0-1; node1: ranks 2-3", html)  # hosts -> ranks
        self.assertIn("Only one size (1 MiB): table only, no plot.", html)  # int32 max group
        self.assertIn("rank 3</b> (host <b>node1</b>)", html)  # slow rank of the sample
        with h5py.File(self.a, "r") as f:
            alpha = float(f["/bench/point_to_point"].attrs["alpha_us"])
            beta = float(f["/bench/point_to_point"].attrs["beta_us_per_byte"])
            copy_bw = float(np.max(f["/host/copy_bandwidth/bandwidth_GBps"][()]))
        self.assertIn(f"alpha = {alpha:.3g} us", html)
        self.assertIn(f"beta = {beta:.4g} us/B", html)
        self.assertIn(f"host memcpy bandwidth ({copy_bw:.3g} GB/s)", html)
        for col in ("size (B)", "count", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong",
                    "p50 (us)", "p95 (us)", "busbw / native"):
            self.assertIn(f">{col}</th>", html)

    def test_comparison(self):
        self.assertEqual(self.compare_run.returncode, 0, self.compare_run.stderr)
        html = self.read(self.compare, "index.html")
        summary = self.read(self.compare, "summary.md")
        self.assert_pngs(self.compare, html)
        for path in (self.a, self.b):
            total, failed = conformance_counts(path)
            self.assertIn(f"{total} cases, {failed} failed", html)
            self.assertIn(f"{total} cases, {failed} failed", summary)
        rows_a, rows_b = read_collectives(self.a), read_collectives(self.b)
        key = dict(collective="all_reduce", algorithm="ring", dtype="float32", redop="sum",
                   in_place=0, size_bytes=1 << 26)
        ratio = find_row(rows_b, **key)["busbw_GBps"] / find_row(rows_a, **key)["busbw_GBps"]
        row = re.search(r"<tr><td class=\"num\">%d</td><td>ring</td>.*?</tr>" % (1 << 26),
                        after(html, "<h3>all_reduce · float32 · sum · out of place</h3>"))
        self.assertIsNotNone(row)
        self.assertIn(f"{ratio:.3f}", row.group(0))
        self.assertIn("run_a.h5", html)
        self.assertIn("run_b.h5", html)

    def test_comparison_at_the_largest_size(self):
        """Per (collective, algorithm), the rows of A and B matched on (collective, algorithm,
        dtype, redop, placement, size), the first of a repeated key: the geometric mean of busbw
        B / A over every matching size, not the largest size's alone, and their count."""
        maps = []
        for path in (self.a, self.b):
            m = {}
            for r in read_collectives(path):
                m.setdefault((r["collective"], r["algorithm"], r["dtype"], r["redop"],
                              r["in_place"], r["size_bytes"]), r)
            maps.append(m)
        pairs = grouped([k for k in maps[0] if k in maps[1]], 0, 1)
        table = table_at(self.read(self.compare, "index.html"), "B / A geo. mean, all sizes")
        cells = [re.findall(r"<td[^>]*>(.*?)</td>", row)
                 for row in re.findall(r"<tr>(.*?)</tr>", table)]
        rows = {tuple(c[:2]): c for c in cells}
        self.assertEqual(set(rows), set(pairs))
        for pair, keys in pairs.items():
            busbw = [(maps[0][k]["busbw_GBps"], maps[1][k]["busbw_GBps"]) for k in keys]
            ratios = [b / a for a, b in busbw if a > 0 and b > 0 and np.isfinite(b / a)]
            largest = max(k[5] for k in keys)
            self.assertTrue(any(k[5] < largest for k in keys), pair)
            gmean = float(np.exp(np.mean(np.log(ratios))))
            self.assertEqual(rows[pair][7:], [f"{gmean:.3f}", str(len(keys))], pair)

    def test_empty_collectives(self):
        path = os.path.join(self.tmp, "empty.h5")
        make_sample.write_sample(path, empty_collectives=True)
        out = os.path.join(self.tmp, "empty_out")
        res = run_report(path, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        html = self.read(out, "index.html")
        self.assertIn("/bench/collectives is present but has 0 rows", html)
        self.assertTrue(os.path.exists(os.path.join(out, "summary.md")))
        res = run_report(path, self.a, "--out", os.path.join(self.tmp, "empty_cmp"))
        self.assertEqual(res.returncode, 0, res.stderr)

    def test_absent_groups(self):
        path = os.path.join(self.tmp, "bare.h5")
        make_sample.write_sample(path, omit=("copy_bandwidth", "point_to_point", "collectives",
                                              "check"))
        out = os.path.join(self.tmp, "bare_out")
        res = run_report(path, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        html = self.read(out, "index.html")
        self.assertIn("no /bench/collectives table", html)
        self.assertIn("no /check/collectives table", html)
        self.assertIn("no /bench/point_to_point table", html)

    def test_max_plots_bounds_figures(self):
        out = os.path.join(self.tmp, "bounded")
        res = run_report(self.a, "--out", out, "--max-plots", "2")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(len(glob.glob(os.path.join(out, "*_coll_*.png"))), 2)

    def test_fixed_length_strings_are_decoded(self):
        path = os.path.join(self.tmp, "fixed.h5")
        make_sample.write_sample(path)
        with h5py.File(path, "a") as f:
            g = f["/bench/collectives"]
            values = np.array([v.encode() for v in text_col(g["algorithm"])], dtype="S32")
            del g["algorithm"]
            g.create_dataset("algorithm", data=values).attrs["unit"] = ""
        out = os.path.join(self.tmp, "fixed_out")
        res = run_report(path, "--out", out, "--no-figures")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("<td>recursive_doubling</td>", self.read(out, "index.html"))

    def test_one_rank_collectives(self):
        """At one rank busbw is 0 throughout (the bus factor (n-1)/n is 0): a busbw panel has
        nothing for a log axis (without the host memcpy line there is nothing else on it)."""
        path = os.path.join(self.tmp, "one_rank.h5")
        make_sample.write_sample(path, world_size=1, omit=("copy_bandwidth",))
        rows = read_collectives(path)
        self.assertTrue(all(r["busbw_GBps"] == 0 for r in rows
                            if r["collective"] in ("all_reduce", "all_gather")))
        self.assertTrue(all(np.isfinite(r["time_us"]) and r["time_us"] > 0 for r in rows))
        out, html, _ = self.report_of("one_rank_out", path)
        sources = self.assert_pngs(out, html)
        self.assertEqual(len([s for s in sources if "_coll_" in s]), 8)
        note = ("No row of this group has a positive busbw (at one rank the bus factor is 0: "
                "nothing crosses a link), so its panel has a linear axis instead of a log one.")
        self.assertIn(note, after(html, "all_reduce · float32 · sum · out of place</h3>"))
        # Broadcast's busbw is its algbw at any size: a log axis and no note.
        self.assertNotIn(note, after(html, "broadcast · float32 · out of place · root 0</h3>"))
        out, html, _ = self.report_of("one_rank_cmp", path, path)
        self.assertIn("Collective benchmark: busbw of B against A", html)
        self.assert_pngs(out, html)

    def test_column_of_wrong_type(self):
        path = os.path.join(self.tmp, "wrong_type.h5")
        make_sample.write_sample(path)
        with h5py.File(path, "a") as f:
            g = f["/bench/collectives"]
            sizes = [str(v) for v in g["size_bytes"][()]]
            del g["size_bytes"]
            g.create_dataset("size_bytes", data=np.array(sizes, dtype=object),
                             dtype=h5py.string_dtype())
        self.assert_refused(path, "/bench/collectives/size_bytes holds strings")


class CollectivesSeriesTests(SeriesCase):
    def test_collective_groups(self):
        """busbw, time, p50 and p95, the predictions and the memcpy line of every group."""
        host_bw = max(read_columns(self.a, "/host/copy_bandwidth")["bandwidth_GBps"])
        figures = set()
        for (coll, dtype, redop, in_place, root), rows in collective_rows(self.a).items():
            if len({r["size_bytes"] for r in rows}) < 2:
                continue  # a table, no figure
            name = "coll_" + group_title(coll, dtype, redop, in_place, root)
            figures.add(name)
            drawn = self.figure(self.single, name)
            expected = {"host memcpy"}
            for algo, algo_rows in grouped(rows, "algorithm").items():
                algo, rs = algo[0], by_size(algo_rows)
                sizes = column(rs, "size_bytes")
                # Every value is positive at 4 ranks: the log axes leave none out.
                self.assertTrue(all(r[c] > 0 for r in rs for c in (
                    "busbw_GBps", "time_us", "predicted_busbw_GBps", "predicted_time_us")))
                for label, col in (("busbw", "busbw_GBps"), ("time", "time_us"),
                                   ("predicted busbw", "predicted_busbw_GBps"),
                                   ("predicted time", "predicted_time_us"),
                                   ("p50 time", "time_p50_us"), ("p95 time", "time_p95_us")):
                    self.assert_series(drawn[f"{algo} {label}"], sizes, column(rs, col))
                    expected.add(f"{algo} {label}")
                self.assert_distinct(column(rs, "time_p50_us"), column(rs, "time_p95_us"),
                                     "p50 and p95 times")
                if coll == "all_reduce":
                    self.assert_distinct(column(rs, "busbw_GBps"), column(rs, "algbw_GBps"),
                                         "busbw and algbw")
            self.assertEqual(set(drawn), expected, name)
            self.assert_series(drawn["host memcpy"], [], [host_bw])
        self.assertEqual(figures, {s.figure for s in self.single
                                   if s.figure.startswith("coll_")})
        self.assertEqual(len(figures), 8)

    def test_collectives_comparison(self):
        """busbw of each run per group and algorithm, and B / A at the sizes both have."""
        host_bws = [max(read_columns(p, "/host/copy_bandwidth")["bandwidth_GBps"])
                    for p in (self.a, self.b)]
        runs = [collective_rows(p) for p in (self.a, self.b)]
        for key, rows_a in runs[0].items():
            if len({r["size_bytes"] for r in rows_a}) < 2:
                continue
            drawn = self.figure(self.compared, "cmp_" + group_title(*key[:4]))
            for name, hb in zip("AB", host_bws):
                self.assert_series(drawn[f"host memcpy {name}"], [], [hb])
            algos = [grouped(rows, "algorithm") for rows in (rows_a, runs[1][key])]
            for (algo,), algo_a in algos[0].items():
                ra, rb = by_size(algo_a), by_size(algos[1][(algo,)])
                for name, rs in (("A", ra), ("B", rb)):
                    self.assert_series(drawn[f"{algo} busbw {name}"], column(rs, "size_bytes"),
                                       column(rs, "busbw_GBps"))
                b_at = {r["size_bytes"]: r["busbw_GBps"] for r in rb}
                both = [r for r in ra if r["size_bytes"] in b_at]
                self.assert_series(drawn[f"{algo} busbw B / A"], column(both, "size_bytes"),
                                   [b_at[r["size_bytes"]] / r["busbw_GBps"] for r in both])


if __name__ == "__main__":
    unittest.main()
