"""Tests of the calibration section (parity_reports/tables/calibrate.py): the product and op
rates as drawn against /bench/calibrate of a recorded `parity bench calibrate` at 4 ranks
(fixtures/calibrate-np4.h5), each the median over ranks computed here from the file's rows.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import os
import unittest
import warnings

import h5py

import numpy as np

from parity_reports.common import fmt_num
from report_testing import HERE, RecordingCase, draw_series, drop_column, keep_rows, read_rows, table_at

FIXTURE = os.path.join(HERE, "fixtures", "calibrate-np4.h5")
CHECKED_FIGURES = {"calibrate_products_float32", "calibrate_ops_float32", "calibrate_ceilings_float32"}
# A comparison draws each run's as one run's (side by side): the same series.
CHECKED_COMPARISON_FIGURES = {"calibrate_products_float32", "calibrate_ops_float32", "calibrate_ceilings_float32"}


class CalibrateReportTests(RecordingCase):
    FIXTURE = FIXTURE
    TABLE = "/bench/calibrate"

    def test_products_are_the_median_rank_of_each_shape(self):
        drawn = self.series("calibrate_products_float32")
        shapes = {}
        for r in self.rows:
            if r["kind"] == "gemm":
                shapes.setdefault((r["m"], r["n"], r["k"]), []).append(r["seconds"])
        self.assertEqual(len(shapes), 64)
        self.assertTrue(all(len(v) == 4 for v in shapes.values()))  # every rank measured each
        self.assertEqual(set(drawn), {f"k = {k}" for k in (16, 64, 256, 1024)})
        for k in (16, 64, 256, 1024):
            want = sorted((2.0 * m * n * kk, 2.0 * m * n * kk / np.median(s) / 1e9)
                          for (m, n, kk), s in shapes.items() if kk == k)
            got = drawn[f"k = {k}"]
            self.assertTrue(np.allclose(got.x, [x for x, _ in want], rtol=0, atol=0), k)
            self.assertTrue(np.allclose(got.y, [y for _, y in want], rtol=1e-12), k)

    def test_products_table_has_the_median_and_the_slowest_rank(self):
        """The products' table: per shape, 2 m n k FLOPs over the median of the ranks' times and
        over the slowest rank's (the longest time)."""
        shapes = {}
        for r in self.rows:
            if r["kind"] == "gemm" and r["dtype"] == "float32":
                shapes.setdefault((r["m"], r["n"], r["k"]), []).append(r["seconds"])
        self.assertEqual(len(shapes), 64)
        self.assertTrue(any(min(s) < max(s) for s in shapes.values()))
        page = self.fixture_report("products_table", "--no-figures")[1]
        table = table_at(page, "GFLOP/s (slowest rank)</th>")
        self.assertEqual(table.count("<tr>"), len(shapes))
        for (m, n, k), seconds in shapes.items():
            flops = 2.0 * m * n * k
            cells = [str(m), str(n), str(k), fmt_num(flops / np.median(seconds) / 1e9, 1),
                     fmt_num(flops / max(seconds) / 1e9, 1)]
            self.assertIn("<tr>" + "".join(f"<td class=\"num\">{c}</td>" for c in cells)
                          + "</tr>", table)

    def test_ops_are_the_median_rank_per_element(self):
        drawn = self.series("calibrate_ops_float32")
        ops = {}
        for r in self.rows:
            if r["kind"] == "op":
                ops.setdefault(r["op"], {}).setdefault(r["elements"], []).append(r["seconds"])
        self.assertEqual(len(ops), 13)
        self.assertEqual(set(drawn), set(ops) | {"stream (add, operands from farther)"})
        for op, sizes in ops.items():
            elements = sorted(sizes)
            self.assertEqual(list(drawn[op].x), elements, op)
            want = [np.median(sizes[e]) / e * 1e9 for e in elements]
            self.assertTrue(np.allclose(drawn[op].y, want, rtol=1e-12), op)

    def test_stream_is_drawn_and_tabled_apart_from_the_ops(self):
        """The stream's adds (kind stream) are their own line and table, the median over ranks of
        each length; the op add's line holds only the op's rows."""
        drawn = self.series("calibrate_ops_float32")
        stream, add = {}, {}
        for r in self.rows:
            if r["kind"] == "stream":
                stream.setdefault(r["elements"], []).append(r["seconds"])
            elif r["kind"] == "op" and r["op"] == "add":
                add.setdefault(r["elements"], []).append(r["seconds"])
        self.assertEqual(len(stream), 5)
        self.assertTrue(all(len(v) == 4 for v in stream.values()))
        got = drawn["stream (add, operands from farther)"]
        elements = sorted(stream)
        self.assertEqual(list(got.x), elements)
        self.assertTrue(np.allclose(got.y, [np.median(stream[e]) / e * 1e9 for e in elements], rtol=1e-12))
        self.assertTrue(all(len(v) == 4 for v in add.values()))
        self.assertTrue(np.allclose(drawn["add"].y, [np.median(add[e]) / e * 1e9 for e in sorted(add)], rtol=1e-12))
        page = self.fixture_report("stream_report", "--no-figures")[1]  # the table alone: the line is drawn above
        table = table_at(page, "footprint (MiB)</th>")
        for e in elements:
            row = (f"<tr><td class=\"num\">{fmt_num(3 * e * 4 / 2**20, 2)}</td>"
                   f"<td class=\"num\">{fmt_num(3 * e * 4 / np.median(stream[e]) / 1e9, 1)}</td></tr>")
            self.assertIn(row, table)

    def test_ceilings_are_each_ops_bytes_per_second_over_memcpys(self):
        """Each op's bytes (the file's column) per second over memcpy's at the same length, and the
        exp-heavy ops' elements per second over the exp's, all medians over ranks, as drawn and
        tabled; the ceilings are rows of their own kinds, every rank at every op length."""
        drawn = self.series("calibrate_ceilings_float32")
        seconds, moved = {}, {}
        for r in self.rows:
            key = (r["kind"] if r["kind"] in ("copy", "exp") else r["op"], r["elements"])
            if r["kind"] in ("op", "copy", "exp"):
                seconds.setdefault(key, []).append(r["seconds"])
                moved.setdefault(key, set()).add(r["bytes"])
        self.assertTrue(all(len(v) == 1 for v in moved.values()))  # every rank moves the same bytes
        copies = sorted(e for kind, e in seconds if kind == "copy")
        self.assertEqual(copies, sorted(e for kind, e in seconds if kind == "exp"))
        self.assertEqual(len(copies), 4)
        self.assertTrue(all(len(seconds[("copy", e)]) == 4 for e in copies))
        ops = sorted({op for op, _ in seconds if op not in ("copy", "exp")})
        self.assertEqual(len(ops), 13)
        exp_ops = {"gelu_forward", "gelu_backward", "softmax_forward", "cross_entropy_forward", "cross_entropy_backward"}
        self.assertEqual(set(drawn), set(ops) | {"exp: " + op for op in exp_ops})

        def rate(key):
            return next(iter(moved[key])) / np.median(seconds[key])
        for op in ops:
            want = [rate((op, e)) / rate(("copy", e)) for e in copies]
            self.assertEqual(list(drawn[op].x), copies, op)
            self.assertTrue(np.allclose(drawn[op].y, want, rtol=1e-12), op)
            if op in exp_ops:
                want = [np.median(seconds[("exp", e)]) / np.median(seconds[(op, e)]) for e in copies]
                self.assertTrue(np.allclose(drawn["exp: " + op].y, want, rtol=1e-12), op)
        # A memcpy's bytes are its two arrays; the add's three.
        self.assertEqual(next(iter(moved[("copy", copies[0])])), 2 * copies[0] * 4)
        self.assertEqual(next(iter(moved[("add", copies[0])])), 3 * copies[0] * 4)
        page = self.fixture_report("ceilings_report", "--max-plots", "0", "--no-figures")[1]
        table = table_at(page, "memcpy, 4096</th>")
        largest = rate(("gelu_forward", copies[-1])) / rate(("copy", copies[-1]))
        self.assertIn(f"{largest:.3f}", table)

    def test_ceilings_without_the_exp_draw_memcpys_panel_alone(self):
        """A calibration without the exp's rows (a GPU's: the exp is timed on CPUs only) draws the
        ops against memcpy and no empty exp panel, with no warning from the drawing."""
        path = self.fixture_copy("no-exp.h5")
        keep_rows(path, "/bench/calibrate", lambda r: r["kind"] != "exp")
        with warnings.catch_warnings(record=True) as caught, self.assertNoLogs("matplotlib", "WARNING"):
            warnings.simplefilter("always")
            drawn = draw_series([path], os.path.join(self.tmp, "no-exp"))
        # matplotlib warns when placing a legend "best" took over a second of wall time (a loaded
        # machine's, not the drawing's fault): that one is not counted.
        self.assertEqual([str(w.message) for w in caught if "can be slow" not in str(w.message)], [])
        ceilings = {s.label for s in drawn if s.figure == "calibrate_ceilings_float32"}
        ops = {r["op"] for r in self.rows if r["kind"] == "op"}
        self.assertEqual(ceilings, ops)

    def test_fits_are_each_collectives_sweep(self):
        """Each collective's alpha and beta: its smallest size's time and the slope from there
        to its largest, from the links' rows; tabled on the page."""
        links = read_rows(FIXTURE, "/bench/calibrate_links")
        fits = read_rows(FIXTURE, "/bench/calibrate_collectives")
        self.assertEqual(sorted(r["collective"] for r in fits),
                         ["all_gather", "all_reduce", "all_to_all", "reduce_scatter"])
        for f in fits:
            rows = sorted((r["size_bytes"], r["time_s"]) for r in links
                          if r["collective"] == f["collective"] and r["level"] == f["level"])
            (b0, t0), (b1, t1) = rows[0], rows[-1]
            slope = (t1 - t0) / (b1 - b0)
            beta = slope if slope > 0 else t1 / b1
            self.assertAlmostEqual(f["alpha_us"], t0 * 1e6, delta=1e-9 * t0 * 1e6)
            self.assertAlmostEqual(f["beta_us_per_byte"], beta * 1e6, delta=1e-9 * beta * 1e6)
            self.assertAlmostEqual(f["bandwidth_GBps"], 1e-9 / beta, delta=1e-9 / beta * 1e-9)
        page = self.fixture_report("fits_report", "--max-plots", "0", "--no-figures")[1]
        table = table_at(page, "own alpha and beta at each level")
        for f in fits:
            self.assertIn(f"<td>{f['collective']}</td>", table)

    def test_page_has_the_section_and_the_links(self):
        page = self.fixture_report("report", "--no-figures")[1]
        self.assertIn('<h2 id="calibrate">Calibration</h2>', page)
        links = read_rows(FIXTURE, "/bench/calibrate_links")
        self.assertEqual(len(links), 24)  # four collectives at six sizes
        self.assertEqual({r["level"] for r in links}, {"world"})  # one host
        self.assertEqual(sorted({r["collective"] for r in links}),
                         ["all_gather", "all_reduce", "all_to_all", "reduce_scatter"])
        table = table_at(page, "<th>collective</th>")
        for r in links:
            self.assertIn(f"<td>{r['collective']}</td>", table)
            self.assertIn(f"{r['efficiency']:.3f}", table)

    def test_levels_table(self):
        """The levels' rows (one host: the node's alone) appear with their peer, latency and
        bandwidth."""
        page = self.fixture_report("levels", "--no-figures")[1]
        levels = read_rows(FIXTURE, "/bench/calibrate_levels")
        self.assertEqual([r["level"] for r in levels], ["node"])
        table = table_at(page, "peer rank</th>")
        for r in levels:
            self.assertIn(f"<td>{r['level']}</td>", table)
            self.assertIn(f"{r['alpha_us']:.3f}", table)

    def test_links_from_before_the_other_collectives(self):
        """A file whose /bench/calibrate_links has the all-reduce's rows alone and no collective
        column (as written before the others were measured) names them all-reduces."""
        path = self.fixture_copy("old-links.h5")
        keep_rows(path, "/bench/calibrate_links", lambda r: r["collective"] == "all_reduce")
        drop_column(path, "/bench/calibrate_links", "collective")
        drop_column(path, "/bench/calibrate_links", "level")
        with h5py.File(path, "a") as f:
            del f["/bench/calibrate_collectives"]
        reduces = len(read_rows(path, "/bench/calibrate_links"))
        page = self.fixture_report("old-links", "--no-figures", path=path)[1]
        table = table_at(page, "<th>collective</th>")
        self.assertEqual(table.count("<td>all_reduce</td>"), reduces)
        self.assertEqual(table.count("<td>world</td>"), reduces)
        self.assertNotIn("all_gather", table)
        self.assertNotIn("own alpha and beta", page)


if __name__ == "__main__":
    unittest.main()
