"""Tests of the mixed-precision report (parity_reports/tables/precision.py) and the series of its
figure.

Run with: /usr/bin/python3 reports/run_tests.py
"""

from collections import OrderedDict, defaultdict
import glob
import os
import shutil
import tempfile
import unittest

import numpy as np

import make_sample
from report_testing import (MODEL_ONLY, PRECISION_CHANGED_LOSS, PRECISION_CHANGED_SCALE, DrawnOnce,
                            ReportCase, SeriesCase, column, drop_column, range_words, read_rows,
                            run_report)


PRECISION_REQUIRED = ["precision", "step", "loss"]


def precision_runs(path):
    """/bench/precision as {precision: its rows in step order}, in file order."""
    runs = {}
    for r in read_rows(path, "/bench/precision"):
        runs.setdefault(r["precision"], []).append(r)
    return {p: sorted(rows, key=lambda r: r["step"]) for p, rows in runs.items()}


# The figures whose series this module checks, of one run and of a comparison
# (test_page.py checks that every figure drawn is one of some module's).
CHECKED_FIGURES = {"precision_loss"}


class PrecisionAbsentTests(ReportCase):
    def test_precision_absent_without_tables(self):
        """Files from before the mixed-precision benchmark report as they did (its own tests
        are PrecisionReportTests)."""
        self.assert_absent(["precision"], ("Mixed precision", "/bench/precision", "loss scale"),
                           ["*_precision*.png"])


class PrecisionReportTests(DrawnOnce, unittest.TestCase):
    """/bench/precision. The reports are drawn once for the class, side by side: a file like
    `parity bench precision` writes; that file against a second run; against a file without the
    table; and a file whose table has no rows."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-precision-test-")
        cls.a, cls.b, cls.bare, cls.empty = (
            os.path.join(cls.tmp, name) for name in ("a.h5", "b.h5", "bare.h5", "empty.h5"))
        make_sample.write_sample(cls.a, omit=MODEL_ONLY, precision=True)
        make_sample.write_sample(cls.b, seed=2, omit=MODEL_ONLY, precision=True)
        make_sample.write_sample(cls.bare, omit=MODEL_ONLY)
        make_sample.write_sample(cls.empty, omit=MODEL_ONLY)
        make_sample.add_empty_table(cls.empty, "/bench/precision")
        reports = {"single": [cls.a], "compare": [cls.a, cls.b], "one_side": [cls.a, cls.bare],
                   "empty": [cls.empty]}
        cls.draw(reports)

    def test_section_and_figure(self):
        out, html, summary = self.report("single")
        self.assertIn("<h2 id=\"precision\">Mixed precision</h2>", html)
        self.assertIn("<a href=\"#precision\">Mixed precision</a>", html)
        self.assertIn("## Mixed precision", summary)
        sources = self.assert_pngs(out, html)
        self.assertEqual([s.split("_", 1)[1] for s in sources], ["precision_loss.png"])
        runs = precision_runs(self.a)
        self.assertEqual(list(runs), ["float64", "float32", "bfloat16", "float16"])
        base = runs["float64"][-1]["loss"]
        for precision, rows in runs.items():
            last = rows[-1]
            skipped = sum(r["skipped"] for r in rows)
            scale = f"2^{int(np.log2(last['loss_scale']))}"
            cells = [f"{last['loss']:.4f}", f"{last['loss'] / base:.3f}", str(skipped), scale]
            self.assertIn(f"<tr><td>{precision}</td>"
                          + "".join(f"<td class=\"num\">{c}</td>" for c in cells) + "</tr>",
                          html)
            self.assertIn(f"| {precision} | " + " | ".join(cells) + " |", summary)
        # float16 overflows twice: each skipped step halves the scale.
        f16 = runs["float16"]
        skipped = [r["step"] for r in f16 if r["skipped"]]
        self.assertEqual(len(skipped), 2)
        for step in skipped:
            self.assertEqual(f16[step + 1]["loss_scale"], f16[step]["loss_scale"] / 2)
        f16_last = f16[-1]
        glance = (f"<li>Mixed precision: after 60 steps the loss is float64 {base:.4f}, "
                  f"float32 {runs['float32'][-1]['loss']:.4f} (×"
                  f"{runs['float32'][-1]['loss'] / base:.3f}), ")
        self.assertIn(glance, html)
        self.assertIn(f"float16 {f16_last['loss']:.4f} (×{f16_last['loss'] / base:.3f}; 2 steps "
                      f"skipped, final scale 2^{int(np.log2(f16_last['loss_scale']))}).</li>",
                      html)

    def test_comparison(self):
        out, html, summary = self.report("compare")
        self.assertIn("<h2 id=\"precision\">Mixed precision: B against A</h2>", html)
        ra, rb = precision_runs(self.a), precision_runs(self.b)
        ratios = [rb[p][-1]["loss"] / ra[p][-1]["loss"] for p in ra]
        self.assertIn(f"<li>Mixed precision final loss B / A over 4 precisions: "
                      f"{range_words(ratios)}.</li>", html)
        a, b = ra["bfloat16"][-1], rb["bfloat16"][-1]
        self.assertIn(f"| bfloat16 | {a['loss']:.4f} | {b['loss']:.4f} | "
                      f"{b['loss'] / a['loss']:.3f} | 60 | 60 |", summary)
        self.assertEqual(glob.glob(os.path.join(out, "*_precision*.png")), [])

    def test_comparison_one_side(self):
        self.assert_one_side(*self.report("one_side"), "/bench/precision",
                             heading="Mixed precision")

    def test_empty_table(self):
        self.assert_empty(*self.report("empty"), "/bench/precision", "*_precision*.png")

    def test_missing_required_column(self):
        for column in PRECISION_REQUIRED:
            with self.subTest(column=column):
                path = os.path.join(self.tmp, f"no_{column}.h5")
                shutil.copy(self.a, path)
                self.assert_column_required(path, "/bench/precision", column)

    def test_optional_columns_missing(self):
        """Without loss_scale, skipped and world_size: the loss panel alone, the rest '–'."""
        path = os.path.join(self.tmp, "losses_only.h5")
        shutil.copy(self.a, path)
        for column in ("loss_scale", "skipped", "world_size"):
            drop_column(path, "/bench/precision", column)
        out = os.path.join(self.tmp, "losses_only")
        res = run_report(path, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        with open(os.path.join(out, "index.html"), encoding="utf-8") as fh:
            html = fh.read()
        self.assertEqual(len(glob.glob(os.path.join(out, "*_precision_loss.png"))), 1)
        self.assertIn("<tr><td>float16</td>", html)
        self.assertIn("<td class=\"num\">–</td><td class=\"num\">–</td></tr>", html)


class PrecisionSeriesTests(SeriesCase):
    def precision_columns(self, path):
        """{precision: {column: values in step order}} of /bench/precision."""
        out = OrderedDict()
        for r in sorted(read_rows(path, "/bench/precision"), key=lambda r: r["step"]):
            cols = out.setdefault(r["precision"], defaultdict(list))
            for c, v in r.items():
                cols[c].append(v)
        return out

    def test_precision_loss(self):
        """Above, each precision's loss against the step; below, its loss scale, and a marker at
        each skipped step at the scale it ran with."""
        runs = self.precision_columns(self.a)
        self.assertEqual(list(runs), ["float64", "float32", "bfloat16", "float16"])
        drawn = self.figure(self.single, "precision_loss", "training loss")
        self.assertEqual(set(drawn), set(runs))
        for precision, cols in runs.items():
            self.assert_series(drawn[precision], cols["step"], cols["loss"])
        drawn = self.figure(self.single, "precision_loss", "loss scale")
        self.assertEqual(set(drawn), {f"{p} scale" for p in runs} | {"float16 skipped"})
        for precision, cols in runs.items():
            self.assert_series(drawn[f"{precision} scale"], cols["step"], cols["loss_scale"])
        f16 = runs["float16"]
        skipped = [i for i, k in enumerate(f16["skipped"]) if k == 1]
        self.assertEqual(len(skipped), 2)
        self.assert_series(drawn["float16 skipped"], [f16["step"][i] for i in skipped],
                           [f16["loss_scale"][i] for i in skipped])
        # The changed rows are drawn as the file has them.
        row = find(read_rows(self.a, "/bench/precision"), PRECISION_CHANGED_LOSS)
        self.assertEqual(drawn_at(self.figure(self.single, "precision_loss", "training loss")
                                  ["float32"], 30), row["loss"])
        self.assertGreater(row["loss"], max(runs["float64"]["loss"][25:35]))
        row = find(read_rows(self.a, "/bench/precision"), PRECISION_CHANGED_SCALE)
        self.assertEqual(drawn_at(drawn["float16 scale"], 20), row["loss_scale"])
        self.assertEqual(row["loss_scale"], 8 * runs["float16"]["loss_scale"][19])

    def test_precision_draw_returns_what_it_drew(self):
        """draw_losses returns the series it drew: the file's loss, scale and skipped steps."""
        import parity_results
        from parity_reports.plots import Plotter
        from parity_reports.tables import precision, schema
        bench = precision.load(parity_results.load(self.a, schema()), {})
        outdir = os.path.join(self.tmp, "precision_draw")
        os.makedirs(outdir)
        fname, got = precision.draw_losses(Plotter(outdir), bench)
        self.assertTrue(os.path.exists(os.path.join(outdir, fname)))
        runs = self.precision_columns(self.a)
        self.assertEqual(list(got["loss"]), list(runs))
        for p, cols in runs.items():
            self.assert_values(np.asarray(got["loss"][p][0], float), cols["step"], f"{p} steps")
            self.assert_values(np.asarray(got["loss"][p][1], float), cols["loss"], f"{p} loss")
            self.assert_values(np.asarray(got["scale"][p][1], float), cols["loss_scale"],
                               f"{p} scale")
        self.assertEqual(list(got["skipped"]), ["float16"])
        self.assertEqual(list(got["skipped"]["float16"][0]),
                         [s for s, k in zip(runs["float16"]["step"], runs["float16"]["skipped"])
                          if k == 1])


class LossScaleWordsTests(unittest.TestCase):
    def test_a_power_of_two_as_such_and_any_other_scale_as_a_number(self):
        """A loss scale that is a power of two reads 2^k; any other scale (a file that grew or
        cut its scale by other factors) reads as its value, never as a power of two."""
        from parity_reports.tables.precision import fmt_scale
        self.assertEqual(fmt_scale(32768.0), "2^15")
        self.assertEqual(fmt_scale(1.0), "2^0")
        self.assertEqual(fmt_scale(0.25), "2^-2")
        for scale in (49152.0, 3.0, 1000.0):
            words = fmt_scale(scale)
            self.assertNotIn("^", words)
            self.assertEqual(float(words), scale)
        self.assertEqual(fmt_scale(0.0), "–")
        self.assertEqual(fmt_scale(float("nan")), "–")


def find(rows, match):
    hits = [r for r in rows if match(r)]
    assert len(hits) == 1, len(hits)
    return hits[0]


def drawn_at(series, x):
    """The y a series drew at x (once)."""
    ys = [y for xx, y in zip(series.x, series.y) if xx == x]
    assert len(ys) == 1, ys
    return ys[0]


if __name__ == "__main__":
    unittest.main()
