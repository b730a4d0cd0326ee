"""Tests of the model-benchmark report (parity_reports/tables/model.py): /bench/model alone,
against a second run, empty or malformed, and the series of its figures.

Run with: /usr/bin/python3 reports/run_tests.py
"""

from collections import OrderedDict
import glob
from html import escape as html_escape
import os
import re
import unittest

import h5py
import numpy as np

import make_sample
from report_testing import (CATEGORIES, MODEL_ONLY, RUNS, ReportCase, SeriesCase, after, column,
                            grouped, mean, read_columns, read_rows, run_report, text_col)


def model_means(path, column):
    """{model: mean of column over its ranks}."""
    cols = read_columns(path, "/bench/model")
    sums, counts = {}, {}
    for m, v in zip(cols["model"], cols[column]):
        sums[m] = sums.get(m, 0.0) + v
        counts[m] = counts.get(m, 0) + 1
    return {m: sums[m] / counts[m] for m in sums}


def set_model_column(path, column, per_model):
    """Overwrites a float column of /bench/model: per_model maps a model name to its values,
    one per rank in file order."""
    with h5py.File(path, "a") as f:
        g = f["/bench/model"]
        models = text_col(g["model"])
        values = g[column][()]
        seen = {}
        for i, m in enumerate(models):
            if m in per_model:
                values[i] = per_model[m][seen.get(m, 0)]
                seen[m] = seen.get(m, 0) + 1
        g[column][...] = values


# The figures whose series this module checks, of one run and of a comparison
# (test_page.py checks that every figure drawn is one of some module's).
CHECKED_FIGURES = {"model_tokens", "model_mfu", "model_memory"}
CHECKED_COMPARISON_FIGURES = {"model_compare_tokens"}


class ModelReportTests(ReportCase):
    def model_file(self, name, **kwargs):
        """A file like `parity bench model` writes: only /bench/model (fast to draw)."""
        return self.sample(name, omit=MODEL_ONLY, model=True, **kwargs)

    def test_model_section(self):
        path = self.model_file("model.h5")
        out = os.path.join(self.tmp, "model_out")
        res = run_report(path, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        html = self.read(out, "index.html")
        self.assertIn("<h2 id=\"model\">Model training step</h2>", html)
        sources = self.assert_pngs(out, html)
        for kind in ("model_tokens", "model_mfu", "model_memory"):
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        # The caption names the MFU denominator, as the file states it.
        with h5py.File(path, "r") as f:
            denominator = f["/bench/model"].attrs["mfu_denominator"]
        denominator = denominator.decode() if isinstance(denominator, bytes) else denominator
        self.assertIn(html_escape(denominator), html)
        self.assertIn("same-run", html)
        # Per-model means over ranks, in the table and in summary.md's one line.
        tokens, mfu = model_means(path, "tokens_per_s"), model_means(path, "mfu")
        summary = self.read(out, "summary.md")
        line = [l for l in summary.splitlines() if "tokens/s, MFU" in l]
        self.assertEqual(len(line), 1, summary)
        for m in ("tiny", "small", "medium"):
            self.assertIn(f"{m} {tokens[m]:.0f} tokens/s, MFU {mfu[m]:.3f}", line[0])
            row = re.search(r"<tr><td><b>%s</b></td>.*?</tr>" % m, html)
            self.assertIsNotNone(row, m)
            self.assertIn(f"{tokens[m]:.0f} (", row.group(0))
            self.assertIn(f"{mfu[m]:.3f} (", row.group(0))

    def test_model_fast_path_on_the_gpus_peak(self):
        """Rows of the fast path (their datasheet peak finite) get a table of MFU and HFU over the
        peak, the step's split and the attention rate, and the summary line names the MFU over
        the peak; files without those columns (the samples) show neither."""
        path = self.model_file("model-fast.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/model"]
            models = text_col(g["model"])
            n = len(models)
            achieved = g["achieved_GFLOPs"][()]
            fast = np.array([m == "small" for m in models])
            columns = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]

            def put(name, values):
                g.create_dataset(name, data=np.where(fast, values, np.nan))
                g[name].attrs["unit"] = ""
                columns.append(name)
            put("peak_GFLOPs", np.full(n, 989400.0))
            put("mfu_of_peak", achieved / 989400.0)
            put("hfu_of_peak", achieved * 1.1 / 989400.0)
            put("products_fraction", np.full(n, 0.52))
            put("attention_fraction", np.full(n, 0.27))
            put("other_fraction", np.full(n, 0.21))
            put("attention_GFLOPs", np.full(n, 114118.6))
            g.attrs["columns"] = np.array(columns, dtype=h5py.string_dtype())
        out = os.path.join(self.tmp, "model_fast_out")
        res = run_report(path, "--out", out, "--no-figures")
        self.assertEqual(res.returncode, 0, res.stderr)
        html = self.read(out, "index.html")
        self.assertIn("On the GPU's datasheet peak", html)
        mfu_peak = model_means(path, "achieved_GFLOPs")["small"] / 989400.0
        row = re.search(r"<tr><td><b>small</b></td><td class=\"num\">989.4</td>.*?</tr>", html)
        self.assertIsNotNone(row, html)
        for text in (f"{mfu_peak:.3f}", f"{mfu_peak * 1.1:.3f}", "0.520", "0.270", "0.210", "114.1"):
            self.assertIn(f">{text}<", row.group(0))
        self.assertNotIn("<tr><td><b>tiny</b></td><td class=\"num\">989.4", html)
        summary = self.read(out, "summary.md")
        self.assertIn(f"MFU {model_means(path, 'mfu')['small']:.3f} ({mfu_peak:.3f} of the GPU's peak)", summary)
        self.assertNotIn("of the GPU's peak", self.read(self.single, "index.html"))

    def test_model_section_absent_without_table(self):
        for out in (self.single, self.compare):
            html = self.read(out, "index.html")
            self.assertNotIn("id=\"model\"", html)
            self.assertNotIn("Model training step", html)
            self.assertNotIn("Model training step", self.read(out, "summary.md"))
            self.assertEqual(glob.glob(os.path.join(out, "*_model_*.png")), [])

    def test_model_comparison_ratio(self):
        a = self.model_file("model_a.h5", seed=1)
        b = self.model_file("model_b.h5", seed=2)
        # Crafted means: tiny tokens/s 1100 -> 1650 (B / A 1.500), MFU 0.2 -> 0.25 (1.250).
        set_model_column(a, "tokens_per_s", {"tiny": [1000, 1000, 1000, 1400]})
        set_model_column(b, "tokens_per_s", {"tiny": [1650] * 4})
        set_model_column(a, "mfu", {"tiny": [0.1, 0.3, 0.2, 0.2]})
        set_model_column(b, "mfu", {"tiny": [0.25] * 4})
        # matmul GFLOP/s 100 -> 80 (B / A 0.800).
        set_model_column(a, "matmul_GFLOPs", {"tiny": [90, 110, 100, 100]})
        set_model_column(b, "matmul_GFLOPs", {"tiny": [80] * 4})
        with h5py.File(b, "a") as f:  # a model only B has: listed, not matched
            g = f["/bench/model"]
            names = ["huge" if m == "medium" else m for m in text_col(g["model"])]
            del g["model"]
            g.create_dataset("model", data=np.array(names, dtype=object),
                             dtype=h5py.string_dtype()).attrs["unit"] = ""
        out = os.path.join(self.tmp, "model_cmp")
        res = run_report(a, b, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        html = self.read(out, "index.html")
        row = re.search(r"<tr><td><b>tiny</b></td>.*?</tr>", html)
        self.assertIsNotNone(row)
        cells = re.findall(r"<td class=\"num\">([^<]*)</td>", row.group(0))
        self.assertEqual(cells, ["1100", "1650", "1.500", "0.200", "0.250", "1.250", "0.800"])
        self.assertIn("<li>Model training step, tokens/s B / A: tiny 1.500; ", html)
        self.assertIn("Only in run A", html)
        self.assertIn("medium (V=1024", html)
        self.assertIn("huge (V=1024", html)
        self.assertIsNone(re.search(r"<tr><td><b>(medium|huge)</b>", html))
        sources = self.assert_pngs(out, html)
        self.assertEqual(len([s for s in sources if s.endswith("_model_compare_tokens.png")]), 1)
        summary = self.read(out, "summary.md")
        self.assertIn("| tiny | V=256 L=2 h=64 a=4 s=64 tied float32 | 1100 | 1650 | 1.500 | "
                      "0.200 | 0.250 | 1.250 |", summary)

    def test_every_rank_table(self):
        """The table of every rank: per (model, rank) its step time in ms and its tokens/s, the
        step's batch x sequence tokens over the step time."""
        path = self.model_file("model-ranks.h5")
        _, html, _ = self.report_of("model_ranks_out", path, figures=False)
        body = after(html, "Table: every rank")
        rows = read_rows(path, "/bench/model")
        for r in rows:
            row = re.search(rf"<tr><td>{r['model']}</td><td class=\"num\">{r['rank']}</td>"
                            r".*?</tr>", body)
            self.assertIsNotNone(row, (r["model"], r["rank"]))
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
            step_ms, tokens = float(cells[3]), float(cells[4])
            self.assertAlmostEqual(step_ms, 1e3 * r["step_time_s"], delta=0.006)
            self.assertAlmostEqual(tokens, r["tokens_per_s"], delta=0.5)
            # tokens/s x seconds a step = the step's tokens.
            self.assertAlmostEqual(tokens * step_ms / 1e3 / (r["batch"] * r["sequence"]), 1.0,
                                   delta=0.01)

    def test_model_comparison_one_side(self):
        a = self.model_file("model_one.h5")
        self.assert_one_side(*self.report_of("model_one_cmp", a, self.bare()), "/bench/model",
                             "*_model_*.png")

    def test_model_empty_table(self):
        path = self.sample("model_empty.h5", omit=MODEL_ONLY)
        make_sample.add_empty_table(path, "/bench/model")
        _, html, _ = self.report_of("model_empty_out", path)
        self.assertIn("/bench/model is present but has 0 rows", html)

    def test_model_malformed(self):
        # mfu gone from the column list and the datasets alike.
        path = self.model_file("model_no_mfu.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/model"]
            cols = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]
            g.attrs.create("columns", np.array([c for c in cols if c != "mfu"], dtype=object),
                           dtype=h5py.string_dtype())
            del g["mfu"]
        self.assert_refused(path, "table /bench/model has no column(s) mfu")
        # Also as the second file of a comparison.
        self.assert_bad_input([self.a, path, "--out", os.path.join(self.tmp, "x")],
                              "/bench/model has no column(s) mfu")
        # Listed but without its dataset.
        path = self.model_file("model_no_mfu_data.h5")
        with h5py.File(path, "a") as f:
            del f["/bench/model/mfu"]
        self.assert_refused(path, "lists column 'mfu' but has no such dataset")
        # A number where the schema has a string.
        path = self.model_file("model_numeric_name.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/model"]
            n = len(g["model"])
            del g["model"]
            g.create_dataset("model", data=np.arange(n, dtype=np.int64)).attrs["unit"] = ""
        self.assert_refused(path, "column /bench/model/model holds numbers")
        # A column declared at a billion rows (the rows attribute says so too) and never
        # written: refused before the 8 GB of fill values are read.
        path = self.model_file("model_unwritten.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/model"]
            del g["mfu"]
            g.create_dataset("mfu", shape=(10**9,), dtype="f8", chunks=(1 << 16,))
            g.attrs["rows"] = 10**9
        self.assert_refused(path, "column /bench/model/mfu declares 1000000000 values but its "
                                  "data was never written")
        # But a column compressed in chunks, the last one partial (a repacked file), is read as
        # written: the same figure as in the file it came from.
        path = self.model_file("model_gzip.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/model"]
            values = g["mfu"][()]
            del g["mfu"]
            g.create_dataset("mfu", data=values, compression="gzip", chunks=(max(1, len(values) - 1),))
        _, html, _ = self.report_of("model_gzip_out", path, figures=False)
        _, plain, _ = self.report_of("model_plain_out", self.model_file("model_plain.h5"), figures=False)
        self.assertEqual(html.replace("model_gzip", "model_plain"), plain)


class ModelSeriesTests(SeriesCase):
    def model_ranks(self, path):
        """{model: its rows over ranks}, models in file order."""
        return OrderedDict((m[0], rows) for m, rows in
                           grouped(read_rows(path, "/bench/model"), "model").items())

    def assert_model_bars(self, drawn, models, col, run=""):
        """A bar per model at the mean over ranks of col, its whisker from the smallest to the
        largest rank's; run: the label's prefix in a comparison ("A: ... ")."""
        bars = drawn[run + "mean"]
        for label, over_ranks in (("mean", mean), ("rank min", min), ("rank max", max)):
            self.assert_series(drawn[run + label], bars.x,
                               [over_ranks(column(rows, col)) for rows in models.values()])

    def test_model(self):
        """tokens/s and MFU: the mean over ranks, whiskers at the slowest and fastest rank;
        peak memory: the largest rank per category."""
        models = self.model_ranks(self.a)
        for figure, col in (("model_tokens", "tokens_per_s"), ("model_mfu", "mfu")):
            drawn = self.figure(self.single, figure)
            self.assert_model_bars(drawn, models, col)
            self.assert_values(drawn["mean"].x, range(len(models)), figure)
        self.assert_distinct([mean(column(r, "tokens_per_s")) for r in models.values()],
                             [max(column(r, "tokens_per_s")) for r in models.values()],
                             "mean and largest tokens/s")
        drawn = self.figure(self.single, "model_memory")
        # communication is 0 on every rank (replicas send nothing), so it is left out.
        shown = [c for c in CATEGORIES if c != "communication"]
        self.assertEqual(list(drawn), shown)
        self.assert_bytes([(drawn[c], [max(column(rows, f"peak_{c}_bytes"))
                                       for rows in models.values()]) for c in shown])

    def test_model_comparison(self):
        drawn = self.figure(self.compared, "model_compare_tokens")
        for run, path in zip(RUNS, (self.a, self.b)):
            self.assert_model_bars(drawn, self.model_ranks(path), "tokens_per_s", f"{run} ")


if __name__ == "__main__":
    unittest.main()
