"""Tests of the report generator (parity_report.py) on synthetic result files from make_sample.py.

Run with: /usr/bin/python3 -m unittest discover -s reports -p 'test_*.py'
Expected numbers are computed here straight from the HDF5 files with h5py, not through the
report's own reader.
"""

from concurrent.futures import ThreadPoolExecutor
import glob
from html import escape as html_escape
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_sample  # noqa: E402

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
REPORT = os.path.join(HERE, "parity_report.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_report(*args):
    env = dict(os.environ)
    env.pop("PARITY_REPORT_DEBUG", None)
    env.setdefault("MPLCONFIGDIR", tempfile.gettempdir())
    return subprocess.run([PYTHON, REPORT, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def text_col(ds):
    return [v.decode() if isinstance(v, bytes) else str(v) for v in ds[()]]


def read_collectives(path):
    with h5py.File(path, "r") as f:
        g = f["/bench/collectives"]
        cols = {}
        for c in g.attrs["columns"]:
            c = c.decode() if isinstance(c, bytes) else c
            ds = g[c]
            cols[c] = text_col(ds) if ds.dtype.kind in "OS" else ds[()].tolist()
    n = len(cols["collective"])
    return [{c: cols[c][i] for c in cols} for i in range(n)]


def find_row(rows, **match):
    hits = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(hits) == 1, (match, len(hits))
    return hits[0]


def conformance_counts(path):
    with h5py.File(path, "r") as f:
        passed = f["/check/collectives/passed"][()]
    return len(passed), int((passed != 1).sum())


def read_columns(path, table):
    """A table as {column: list}, read with plain h5py."""
    with h5py.File(path, "r") as f:
        g = f[table]
        out = {}
        for c in g.attrs["columns"]:
            c = c.decode() if isinstance(c, bytes) else c
            ds = g[c]
            out[c] = text_col(ds) if ds.dtype.kind in "OS" else ds[()].tolist()
    return out


def read_rows(path, table):
    """A table as a list of {column: value} rows."""
    cols = read_columns(path, table)
    n = len(next(iter(cols.values()))) if cols else 0
    return [{c: cols[c][i] for c in cols} for i in range(n)]


def read_model(path):
    """/bench/model as {column: list}, read with plain h5py."""
    return read_columns(path, "/bench/model")


def set_rows(path, table, column, match, value):
    """Sets column to value(row) in every row of table that match(row) accepts."""
    rows = read_rows(path, table)
    with h5py.File(path, "a") as f:
        ds = f[table][column]
        values = ds[()]
        for i, r in enumerate(rows):
            if match(r):
                values[i] = value(r)
        ds[...] = values


def keep_rows(path, table, keep):
    """Keeps the rows of a table that keep(row) accepts, in every column and the row count."""
    rows = read_rows(path, table)
    with h5py.File(path, "a") as f:
        g = f[table]
        for c in list(rows[0]) if rows else []:
            values, dtype, unit = g[c][()], g[c].dtype, g[c].attrs["unit"]
            del g[c]
            kept = np.array([v for v, r in zip(values, rows) if keep(r)], dtype=values.dtype)
            g.create_dataset(c, data=kept, dtype=dtype).attrs["unit"] = unit
        g.attrs["rows"] = np.int64(sum(1 for r in rows if keep(r)))


def drop_column(path, table, column):
    """Removes a column from a table's list and its dataset alike."""
    with h5py.File(path, "a") as f:
        g = f[table]
        cols = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]
        g.attrs.create("columns", np.array([c for c in cols if c != column], dtype=object),
                       dtype=h5py.string_dtype())
        del g[column]


def model_means(path, column):
    """{model: mean of column over its ranks}."""
    cols = read_model(path)
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


MODEL_ONLY = ("copy_bandwidth", "point_to_point", "harness", "collectives", "check")
PARALLEL_TABLES = ("/bench/memory", "/bench/scaling", "/bench/overlap")
# What `parity bench tensor` and `parity check` write, without the collective benchmark.
TENSOR_ONLY = ("copy_bandwidth", "point_to_point", "collectives")
PIPELINE_TABLES = ("/bench/pipeline", "/bench/pipeline_ranks", "/bench/pipeline_timeline")
PIPELINE_KEY_COLUMNS = ["schedule", "stages", "chunks", "micro_batches", "step_seconds",
                        "measured_bubble"]
PIPELINE_FIGURES = ("pipeline_timeline_gpipe", "pipeline_timeline_1f1b",
                    "pipeline_timeline_interleaved_v2", "pipeline_timeline_zb-h1",
                    "pipeline_bubble", "pipeline_activations")
TENSOR_KEY_COLUMNS = ["model", "tp", "dp", "sequence_parallel", "step_seconds", "bytes_total",
                      "formula_bytes_total"]
MOE_TABLES = ("/bench/moe", "/bench/moe_steps", "/bench/moe_load")
MOE_KEY_COLUMNS = {"/bench/moe": ["run", "ep", "router", "capacity_factor", "step_seconds"],
                   "/bench/moe_steps": ["run", "step", "block"],
                   "/bench/moe_load": ["run", "step", "block", "expert", "load"]}
MOE_FIGURES = ("moe_step", "moe_bytes", "moe_load", "moe_routers", "moe_dropped")
KEY_COLUMNS = {
    "/bench/memory": ["strategy", "world_size", "rank", "model_state_bytes",
                      "formula_model_state_bytes"],
    "/bench/scaling": ["mode", "world_size", "step_seconds", "speedup", "efficiency"],
    "/bench/overlap": ["bucket_bytes", "overlap", "exposed_comm_seconds"],
}


def memory_point(rows, strategy, precision, n):
    """The rows of one (strategy, precision, world size) of /bench/memory."""
    return [r for r in rows if (r["strategy"], r["precision"], r["world_size"])
            == (strategy, precision, n)]


def scaling_row(rows, mode, n):
    return find_row(rows, mode=mode, world_size=n)


def fmt_size(n):
    """The report's size format (reports/parity_reports/common.py fmt_size), restated."""
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def ms(seconds):
    """Seconds in ms as the report writes them (common.py fmt_num): two decimals from 1 on,
    three significant digits below."""
    v = seconds * 1e3
    return f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}"


def after(text, marker):
    """The text following the first occurrence of marker, up to the next heading."""
    rest = text[text.index(marker) + len(marker):]
    return rest.split("<h3", 1)[0]


def img_sources(index_html):
    return re.findall(r'<img src="([^"]+)"', index_html)


class ReportAsserts:
    """What the report test classes check of a drawn report and of bad input."""

    def assert_pngs(self, outdir, html):
        sources = img_sources(html)
        self.assertTrue(sources, "no figures on the page")
        for src in sources:
            self.assertFalse(os.path.isabs(src), src)
            with open(os.path.join(outdir, src), "rb") as fh:
                self.assertEqual(fh.read(8), PNG_MAGIC, src)
        return sources

    def assert_bad_input(self, args, expected=None):
        res = run_report(*args)
        self.assertEqual(res.returncode, 2, res.stderr)
        lines = res.stderr.strip("\n").split("\n")
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertTrue(lines[0].startswith("parity report: "), lines[0])
        self.assertNotIn("Traceback", res.stderr)
        if expected:
            self.assertIn(expected, lines[0])
        return lines[0]


class ReportTests(ReportAsserts, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-report-test-")
        cls.a = os.path.join(cls.tmp, "run_a.h5")
        cls.b = os.path.join(cls.tmp, "run_b.h5")
        make_sample.write_sample(cls.a, seed=1, failures=2)
        make_sample.write_sample(cls.b, seed=7, bandwidth_scale=1.25, failures=5)
        cls.single = os.path.join(cls.tmp, "single")
        cls.single_run = run_report(cls.a, "--out", cls.single, "--title", "Sample run A")
        cls.compare = os.path.join(cls.tmp, "compare")
        cls.compare_run = run_report(cls.a, cls.b, "--out", cls.compare)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def read(self, *parts):
        with open(os.path.join(*parts), encoding="utf-8") as fh:
            return fh.read()

    # -- one file ------------------------------------------------------------------------------

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

    def test_single_conformance_totals(self):
        total, failed = conformance_counts(self.a)
        words = f"{total} cases, {failed} failed"
        self.assertIn(words, self.read(self.single, "index.html"))
        self.assertIn(words, self.read(self.single, "summary.md"))
        html = self.read(self.single, "index.html")
        self.assertIn("rank 2 index 17: got 5 expected 7", html)
        self.assertIn("guard region after the output buffer was overwritten", html)

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
        self.assertIn(f"{ring['busbw_GBps']:.2f}", row.group(0))

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
            self.assertIn(f"{best['busbw_GBps']:.2f}", line[0])
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

    # -- two files -----------------------------------------------------------------------------

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

    # -- degenerate but valid files ------------------------------------------------------------

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
        res = run_report(path, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("<td>recursive_doubling</td>", self.read(out, "index.html"))

    # -- model benchmark -----------------------------------------------------------------------

    def model_file(self, name, **kwargs):
        """A file like `parity bench model` writes: only /bench/model (fast to draw)."""
        path = os.path.join(self.tmp, name)
        make_sample.write_sample(path, omit=MODEL_ONLY, model=True, **kwargs)
        return path

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
        self.assertEqual(cells[:6], ["1100", "1650", "1.500", "0.200", "0.250", "1.250"])
        self.assertIn("Only in run A", html)
        self.assertIn("medium (V=1024", html)
        self.assertIn("huge (V=1024", html)
        self.assertIsNone(re.search(r"<tr><td><b>(medium|huge)</b>", html))
        sources = self.assert_pngs(out, html)
        self.assertEqual(len([s for s in sources if s.endswith("_model_compare_tokens.png")]), 1)
        summary = self.read(out, "summary.md")
        self.assertIn("| tiny | V=256 L=2 h=64 a=4 s=64 tied float32 | 1100 | 1650 | 1.500 | "
                      "0.200 | 0.250 | 1.250 |", summary)

    def test_model_comparison_one_side(self):
        a = self.model_file("model_one.h5")
        out = os.path.join(self.tmp, "model_one_cmp")
        res = run_report(a, self.a, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        html = self.read(out, "index.html")
        self.assertIn("Run B has no /bench/model table", html)
        self.assertEqual(glob.glob(os.path.join(out, "*_model_*.png")), [])

    def test_model_empty_table(self):
        path = os.path.join(self.tmp, "model_empty.h5")
        make_sample.write_sample(path, omit=MODEL_ONLY)
        with h5py.File(path, "a") as f:
            make_sample.write_table(f, "/bench/model", "no models", make_sample.MODEL_COLUMNS,
                                    {c[0]: [] for c in make_sample.MODEL_COLUMNS})
        out = os.path.join(self.tmp, "model_empty_out")
        res = run_report(path, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("/bench/model is present but has 0 rows", self.read(out, "index.html"))

    def test_model_malformed(self):
        # mfu gone from the column list and the datasets alike.
        path = self.model_file("model_no_mfu.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/model"]
            cols = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]
            g.attrs.create("columns", np.array([c for c in cols if c != "mfu"], dtype=object),
                           dtype=h5py.string_dtype())
            del g["mfu"]
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                              "table /bench/model has no column(s) mfu")
        # Also as the second file of a comparison.
        self.assert_bad_input([self.a, path, "--out", os.path.join(self.tmp, "x")],
                              "/bench/model has no column(s) mfu")
        # Listed but without its dataset.
        path = self.model_file("model_no_mfu_data.h5")
        with h5py.File(path, "a") as f:
            del f["/bench/model/mfu"]
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                              "lists column 'mfu' but has no such dataset")
        # A number where the schema has a string.
        path = self.model_file("model_numeric_name.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/model"]
            n = len(g["model"])
            del g["model"]
            g.create_dataset("model", data=np.arange(n, dtype=np.int64)).attrs["unit"] = ""
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                              "column /bench/model/model holds numbers")

    # -- data parallelism and ZeRO: /bench/memory, /bench/scaling, /bench/overlap -------------

    def parallel_file(self, name, **kwargs):
        """A file like `parity bench memory` and `parity bench scaling` write together."""
        path = os.path.join(self.tmp, name)
        make_sample.write_sample(path, omit=MODEL_ONLY, parallel=True, **kwargs)
        return path

    def parallel_report(self, name, *paths):
        out = os.path.join(self.tmp, name)
        res = run_report(*paths, "--out", out)
        self.assertEqual(res.returncode, 0, res.stderr)
        return out, self.read(out, "index.html"), self.read(out, "summary.md")

    def test_parallel_sections(self):
        path = self.parallel_file("parallel.h5")
        out, html, summary = self.parallel_report("parallel_out", path)
        for anchor, heading in (("memory", "ZeRO memory and communication"),
                                ("scaling", "Data-parallel scaling"),
                                ("overlap", "Communication overlap")):
            self.assertIn(f"<h2 id=\"{anchor}\">{heading}</h2>", html)
            self.assertIn(f"<a href=\"#{anchor}\">", html)
            self.assertIn(f"## {heading}", summary)
        sources = self.assert_pngs(out, html)
        for kind in ("zero_memory_mixed", "zero_memory_float32", "zero_bytes_sent", "scaling",
                     "overlap"):
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        self.assertIn("not model state", html)

    def test_memory_table_and_summary(self):
        path = self.parallel_file("memory.h5")
        _, html, summary = self.parallel_report("memory_out", path)
        rows = read_rows(path, "/bench/memory")
        # Table row of ZeRO-3, mixed precision, 4 ranks: Psi, P, bytes and the verdict.
        point = memory_point(rows, "zero3", "mixed", 4)
        self.assertEqual(len(point), 4)
        state = max(r["model_state_bytes"] for r in point)
        padded = point[0]["padded_parameters"]
        self.assertEqual(state, 16 * padded // 4)  # (p+g+K) P/N with 2 + 2 + 12
        row = re.search(r"<tr><td>mixed</td><td>zero3</td><td class=\"num\">4</td>.*?</tr>",
                        html)
        self.assertIsNotNone(row)
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(0))
        formula = round(point[0]["formula_model_state_bytes"])
        self.assertEqual(cells[3:7], [f"{point[0]['parameters']:,}", f"{padded:,}",
                                      f"{state:,}", f"{formula:,}"])
        self.assertEqual(cells[-1], "yes")
        # summary.md: model state at the largest world size, the check, bytes sent.
        line = [l for l in summary.splitlines()
                if l.startswith("- Model-state bytes per rank at 4 ranks (mixed):")]
        self.assertEqual(len(line), 1, summary)
        for strategy in ("dp", "zero1", "zero2", "zero3"):
            mine = max(r["model_state_bytes"] for r in memory_point(rows, strategy, "mixed", 4))
            self.assertIn(f"{strategy} {fmt_size(mine)}", line[0])
        self.assertIn(f"all {len(rows)} rows match the model-state formula", summary)
        self.assertIn(f"All {len(rows)} rows match the model-state formula", html)
        line = [l for l in summary.splitlines()
                if l.startswith("- Bytes sent per rank per step at 4 ranks (float32):")]
        self.assertEqual(len(line), 1, summary)
        for strategy in ("dp", "zero3"):
            point = memory_point(rows, strategy, "float32", 4)
            sent = sum(r["bytes_sent"] for r in point) / len(point)
            self.assertIn(f"{strategy} {round(sent):,} B (formula "
                          f"{round(point[0]['formula_bytes_sent']):,} B)", line[0])

    def test_memory_mismatch_named(self):
        path = self.parallel_file("memory_mismatch.h5")
        def wrong(r):
            return (r["strategy"], r["precision"], r["world_size"], r["rank"]) \
                == ("zero2", "float32", 3, 1)
        set_rows(path, "/bench/memory", "model_state_bytes", wrong,
                 lambda r: r["model_state_bytes"] + 64)
        set_rows(path, "/bench/memory", "matches_formula", wrong, lambda r: 0)
        total = len(read_rows(path, "/bench/memory"))
        _, html, summary = self.parallel_report("memory_mismatch_out", path)
        words = (f"1 of {total} rows differ from the model-state formula: zero2 float32 at 3 "
                 "ranks (rank 1)")
        self.assertIn(words, summary)
        self.assertIn(words, html)
        self.assertIn("<span class=\"bad\">no</span> (rank 1)", html)
        # Without matches_formula the report compares the bytes with the formula itself.
        drop_column(path, "/bench/memory", "matches_formula")
        _, html, summary = self.parallel_report("memory_mismatch_out2", path)
        self.assertIn(words, summary)

    def test_scaling_and_overlap_summary(self):
        path = self.parallel_file("scaling.h5")
        _, html, summary = self.parallel_report("scaling_out", path)
        rows = read_rows(path, "/bench/scaling")
        t1 = scaling_row(rows, "strong", 1)["step_seconds"]
        last = scaling_row(rows, "strong", 4)
        t4 = last["step_seconds"]
        s = last["amdahl_serial_fraction"]
        line = (f"Strong scaling to 4 ranks: speedup {t1 / t4:.2f} (efficiency "
                f"{t1 / (4 * t4):.3f}), Amdahl serial fraction {s:.3g}.")
        self.assertIn(f"- {line}", summary)
        self.assertIn(f"Strong scaling to 4 ranks: speedup {t1 / t4:.2f}", html)
        self.assertIn(f"Amdahl serial fraction {s:.3g}", html)
        w1 = scaling_row(rows, "weak", 1)["step_seconds"]
        w4 = scaling_row(rows, "weak", 4)["step_seconds"]
        # Amdahl's law is fitted to strong scaling only: no serial fraction for weak.
        self.assertIn(f"- Weak scaling to 4 ranks: scaled speedup {4 * w1 / w4:.2f} (efficiency "
                      f"{w1 / w4:.3f}).", summary)
        overlap = read_rows(path, "/bench/overlap")
        best = max((r for r in overlap if r["overlap"] == 1), key=lambda r: r["hidden_fraction"])
        self.assertIn(f"best hidden fraction {best['hidden_fraction']:.3f} with "
                      f"{fmt_size(best['bucket_bytes'])} buckets", summary)
        self.assertIn(f"Best hidden fraction {best['hidden_fraction']:.3f}", html)

    def test_parallel_comparison_ratios(self):
        a = self.parallel_file("parallel_a.h5", seed=1)
        b = self.parallel_file("parallel_b.h5", seed=2, parallel_speed=1.25)
        # Crafted: ZeRO-1 mixed at 2 ranks holds twice the model state in B; dp float32 at 4
        # ranks sends 1.5 times the bytes.
        def at(strategy, precision, n):
            return lambda r: (r["strategy"], r["precision"], r["world_size"]) == \
                (strategy, precision, n)
        set_rows(b, "/bench/memory", "model_state_bytes", at("zero1", "mixed", 2),
                 lambda r: 2 * r["model_state_bytes"])
        set_rows(b, "/bench/memory", "bytes_sent", at("dp", "float32", 4),
                 lambda r: int(1.5 * r["bytes_sent"]))
        out, html, summary = self.parallel_report("parallel_cmp", a, b)
        for heading in ("ZeRO memory and communication: B against A",
                        "Data-parallel scaling: B against A", "Communication overlap: B against A"):
            self.assertIn(heading, html)
        rows_a, rows_b = read_rows(a, "/bench/memory"), read_rows(b, "/bench/memory")
        state_a = max(r["model_state_bytes"] for r in memory_point(rows_a, "zero1", "mixed", 2))
        state_b = max(r["model_state_bytes"] for r in memory_point(rows_b, "zero1", "mixed", 2))
        self.assertEqual(state_b, 2 * state_a)
        self.assertIn(f"| mixed | zero1 | 2 | {state_a:,} | {state_b:,} | 2.000 |", summary)
        row = re.search(r"<tr[^>]*><td>float32</td><td>dp</td><td class=\"num\">4</td>.*?</tr>",
                        html)
        self.assertIsNotNone(row)
        cells = re.findall(r"<td class=\"num\">([^<]*)</td>", row.group(0))
        self.assertEqual(cells[3], "1.000")  # model state unchanged
        self.assertEqual(cells[-1], "1.500")  # bytes sent
        self.assertIn("ZeRO model-state bytes B / A over 32 matching", html)
        # Step time B / A per (mode, world size), computed from the files.
        sa, sb = read_rows(a, "/bench/scaling"), read_rows(b, "/bench/scaling")
        for mode, n in (("strong", 4), ("weak", 2)):
            ta = scaling_row(sa, mode, n)["step_seconds"]
            tb = scaling_row(sb, mode, n)["step_seconds"]
            self.assertIn(f"| {mode} | {n} | {ta * 1e3:.2f} | {tb * 1e3:.2f} | {tb / ta:.3f} |",
                          summary)
        ta, tb = (scaling_row(x, "strong", 4)["step_seconds"] for x in (sa, sb))
        self.assertIn(f"strong at 4 ranks {tb / ta:.3f}", html)
        oa, ob = read_rows(a, "/bench/overlap"), read_rows(b, "/bench/overlap")
        ea = find_row(oa, bucket_bytes=1 << 20, overlap=1)["exposed_comm_seconds"]
        eb = find_row(ob, bucket_bytes=1 << 20, overlap=1)["exposed_comm_seconds"]
        self.assertIn(f"| 1 MiB | yes | {ea * 1e3:.3g} | {eb * 1e3:.3g} | {eb / ea:.3f} |",
                      summary)
        sources = self.assert_pngs(out, html)
        self.assertEqual(len([s for s in sources if s.endswith("_scaling_compare.png")]), 1)

    def test_parallel_comparison_one_side(self):
        a = self.parallel_file("parallel_one.h5")
        out, html, summary = self.parallel_report("parallel_one_cmp", a, self.a)
        for table in PARALLEL_TABLES:
            self.assertIn(f"Run B has no {table} table", html)
        self.assertEqual(glob.glob(os.path.join(out, "*_scaling_compare.png")), [])
        self.assertNotIn("## ZeRO memory", summary)

    def test_parallel_sections_absent_without_tables(self):
        for out in (self.single, self.compare):
            html = self.read(out, "index.html")
            for anchor in ("memory", "scaling", "overlap"):
                self.assertNotIn(f"id=\"{anchor}\"", html)
                self.assertNotIn(f"href=\"#{anchor}\"", html)
            summary = self.read(out, "summary.md")
            for heading in ("ZeRO memory", "Data-parallel scaling", "Communication overlap"):
                self.assertNotIn(heading, html)
                self.assertNotIn(heading, summary)
            for kind in ("zero_memory", "zero_bytes_sent", "scaling", "overlap"):
                self.assertEqual(glob.glob(os.path.join(out, f"*_{kind}*.png")), [])

    def test_parallel_empty_tables(self):
        path = os.path.join(self.tmp, "parallel_empty.h5")
        make_sample.write_sample(path, omit=MODEL_ONLY)
        with h5py.File(path, "a") as f:
            for table, columns in (("/bench/memory", make_sample.MEMORY_COLUMNS),
                                   ("/bench/scaling", make_sample.SCALING_COLUMNS),
                                   ("/bench/overlap", make_sample.OVERLAP_COLUMNS)):
                make_sample.write_table(f, table, "no rows", columns,
                                        {c[0]: [] for c in columns})
        _, html, summary = self.parallel_report("parallel_empty_out", path)
        for table in PARALLEL_TABLES:
            self.assertIn(f"{table} is present but has 0 rows", html)
            self.assertIn(f"{table} has 0 rows", summary)

    def test_parallel_key_columns_only(self):
        """The columns the reader requires are enough to draw every section."""
        path = self.parallel_file("parallel_minimal.h5")
        with h5py.File(path, "a") as f:
            for table in PARALLEL_TABLES:
                for name in list(f[table].attrs):
                    if name not in ("kind", "description", "columns", "rows"):
                        del f[table].attrs[name]
        for table in PARALLEL_TABLES:
            for column in read_columns(path, table):
                if column not in KEY_COLUMNS[table]:
                    drop_column(path, table, column)
        out, html, summary = self.parallel_report("parallel_minimal_out", path)
        sources = self.assert_pngs(out, html)
        for kind in ("zero_memory_all", "scaling", "overlap"):
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        self.assertIn("rows match the model-state formula", summary)
        self.assertIn("Strong scaling to 4 ranks", summary)
        self.assertIn("best hidden fraction", summary)

    def test_parallel_malformed(self):
        for table, column in (("/bench/memory", "formula_model_state_bytes"),
                              ("/bench/scaling", "efficiency"),
                              ("/bench/overlap", "exposed_comm_seconds")):
            path = self.parallel_file(f"no_{column}.h5")
            drop_column(path, table, column)
            self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                                  f"table {table} has no column(s) {column}")
        # Also as the second file of a comparison.
        self.assert_bad_input([self.a, path, "--out", os.path.join(self.tmp, "x")],
                              "/bench/overlap has no column(s) exposed_comm_seconds")
        # A string where the schema has a number.
        path = self.parallel_file("memory_text_bytes.h5")
        with h5py.File(path, "a") as f:
            g = f["/bench/memory"]
            values = [str(v) for v in g["model_state_bytes"][()]]
            del g["model_state_bytes"]
            g.create_dataset("model_state_bytes", data=np.array(values, dtype=object),
                             dtype=h5py.string_dtype()).attrs["unit"] = "B"
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                              "column /bench/memory/model_state_bytes holds strings")

    # -- tensor parallelism: /bench/tensor, /check/tensor, /check/training -------------------

    def tensor_file(self, name, **kwargs):
        """A file like `parity bench tensor` and `parity check` write: /bench/tensor and the
        conformance tables (collectives, training, tensor), without the collective benchmark,
        which is slow to draw."""
        path = os.path.join(self.tmp, name)
        make_sample.write_sample(path, omit=TENSOR_ONLY, tensor=True, **kwargs)
        return path

    def test_tensor_section(self):
        path = self.tensor_file("tensor.h5")
        out, html, summary = self.parallel_report("tensor_out", path)
        self.assertIn("<h2 id=\"tensor\">Tensor parallelism</h2>", html)
        self.assertIn("<a href=\"#tensor\">", html)
        self.assertIn("## Tensor parallelism", summary)
        sources = self.assert_pngs(out, html)
        for kind in ("tensor_activations", "tensor_bytes", "tensor_step"):
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        self.assertIn("Korthikanti et al. (2022)", html)
        rows = read_rows(path, "/bench/tensor")
        sizes = ", ".join(str(t) for t in sorted({r["tp"] for r in rows}))
        self.assertEqual(sizes, "1, 2, 4")
        line = (f"Tensor parallelism: t = {sizes}; bytes, activations and parameters equal the "
                f"formulas in all {len(rows)} rows.")
        self.assertIn(f"<li>{line}</li>", html)
        self.assertIn(f"all {len(rows)} rows.", summary)
        # The row of t = 4 with SP: step time, bytes and activations beside their formulas.
        r = find_row(rows, tp=4, sequence_parallel=1)
        row = re.search(r"<tr><td class=\"num\">4</td><td class=\"num\">1</td><td>yes</td>.*?"
                        r"</tr>", html)
        self.assertIsNotNone(row)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
        self.assertEqual(cells[3], f"{r['step_seconds'] * 1e3:.2f}")
        self.assertEqual(cells[8:12], [f"{round(r['bytes_total']):,}",
                                       f"{round(r['formula_bytes_total']):,}",
                                       f"{r['activation_bytes_per_block']:,}",
                                       f"{r['formula_activation_bytes_per_block']:,}"])
        self.assertEqual(cells[-2:], ["yes", "yes"])
        self.assertIn(f"| 4 | 1 | yes | {r['step_seconds'] * 1e3:.2f} | "
                      f"{r['tokens_per_second']:.0f} | {r['comm_share']:.3f} | "
                      f"{round(r['bytes_total']):,} | {round(r['formula_bytes_total']):,} |",
                      summary)

    def test_tensor_mismatch_named(self):
        path = self.tensor_file("tensor_mismatch.h5", tensor_mismatch=True)
        _, html, summary = self.parallel_report("tensor_mismatch_out", path)
        rows = read_rows(path, "/bench/tensor")
        self.assertEqual([(r["tp"], r["sequence_parallel"]) for r in rows
                          if r["bytes_match"] == 0], [(2, 1)])
        words = (f"1 of {len(rows)} rows differ from the formulas: t = 2 with SP (block bytes)")
        self.assertIn(f"<li>Tensor parallelism: t = 1, 2, 4; {words}.</li>", html)
        self.assertIn(words, summary)
        row = re.search(r"<tr class=\"diff\"><td class=\"num\">2</td><td class=\"num\">1</td>"
                        r"<td>yes</td>.*?</tr>", html)
        self.assertIsNotNone(row)
        self.assertIn("<span class=\"bad\">no</span></td><td>yes</td></tr>", row.group(0))
        # Without bytes_match the report finds the part itself; a memory count is named too.
        drop_column(path, "/bench/tensor", "bytes_match")
        set_rows(path, "/bench/tensor", "activation_bytes_per_block",
                 lambda r: (r["tp"], r["sequence_parallel"]) == (4, 0),
                 lambda r: r["activation_bytes_per_block"] + 8)
        set_rows(path, "/bench/tensor", "memory_match",
                 lambda r: (r["tp"], r["sequence_parallel"]) == (4, 0), lambda r: 0)
        _, html, summary = self.parallel_report("tensor_mismatch_out2", path)
        self.assertIn(f"2 of {len(rows)} rows differ from the formulas: t = 2 with SP (block "
                      "bytes); t = 4 (activations)", summary)

    def test_training_and_tensor_conformance(self):
        path = self.tensor_file("tensor_checks.h5", tensor_mismatch=True)
        # One training case fails as well, with its message.
        message = "parameters differ beyond 1e-12 (largest at blocks.0.mlp.fc.weight)"
        target = "training/zero2/adamw/float64/gpt"
        set_rows(path, "/check/training", "passed", lambda r: r["case"] == target, lambda r: 0)
        with h5py.File(path, "a") as f:
            ds = f["/check/training/message"]
            values = [message if c == target else m
                      for c, m in zip(text_col(f["/check/training/case"]), text_col(ds))]
            ds[...] = np.array(values, dtype=object)
        _, html, summary = self.parallel_report("tensor_checks_out", path)
        counts = {}
        for table in ("/check/collectives", "/check/training", "/check/tensor"):
            passed = [r["passed"] for r in read_rows(path, table)]
            counts[table] = (len(passed), passed.count(0))
        words = {t: (f"{n} cases, all passed" if not bad else
                     f"{n} cases, {bad} failed ({n - bad} passed)")
                 for t, (n, bad) in counts.items()}
        self.assertEqual(counts["/check/training"][1], 1)
        self.assertEqual(counts["/check/tensor"][1], 1)
        self.assertIn(f"<li>Conformance: collectives {words['/check/collectives']}; training "
                      f"{words['/check/training']}; tensor {words['/check/tensor']}.</li>", html)
        self.assertIn(f"Training cases: {words['/check/training']}.", summary)
        self.assertIn(f"Tensor-parallel cases: {words['/check/tensor']}.", summary)
        for heading in ("Training cases", "Failed training cases", "Tensor-parallel cases",
                        "Failed tensor-parallel cases", "Failed collective cases"):
            self.assertIn(f"<h3>{heading}</h3>", html)
        failed = after(html, "<h3>Failed training cases</h3>")
        self.assertIn(target, failed)
        self.assertIn(message, failed)
        failed = after(html, "<h3>Failed tensor-parallel cases</h3>")
        self.assertIn("tensor/tp2/sp/zero1/float32", failed)
        self.assertIn("tensor-parallel bytes differ from the formula", failed)
        self.assertIn(f"- `{target}`: {message}", summary)
        self.assertIn("- `tensor/tp2/sp/zero1/float32`: tensor-parallel bytes differ", summary)
        # Counts per tensor-parallel setting: t = 2 with SP over ZeRO-1, one of two failed.
        row = re.search(r"<tr><td>2</td><td>tp_sp</td><td>zero1</td>.*?</tr>", html)
        self.assertIsNotNone(row)
        self.assertIn("<span class=\"bad\">1</span>", row.group(0))
        # Those tables are drawn, no longer listed as tables the report does not show.
        self.assertNotIn("Other tables in the file", html)

    def test_tensor_comparison(self):
        a = self.tensor_file("tensor_a.h5", seed=1)
        b = self.tensor_file("tensor_b.h5", seed=2, tensor_speed=1.25, tensor_mismatch=True)
        out, html, summary = self.parallel_report("tensor_cmp", a, b)
        self.assertIn("Tensor parallelism: B against A", html)
        ra, rb = read_rows(a, "/bench/tensor"), read_rows(b, "/bench/tensor")
        for t, sp in ((1, 0), (4, 1)):
            ta = find_row(ra, tp=t, sequence_parallel=sp)
            tb = find_row(rb, tp=t, sequence_parallel=sp)
            step_a, step_b = ta["step_seconds"], tb["step_seconds"]
            tok_a, tok_b = ta["tokens_per_second"], tb["tokens_per_second"]
            self.assertIn(f"| {t} | 1 | {'yes' if sp else 'no'} | {step_a * 1e3:.2f} | "
                          f"{step_b * 1e3:.2f} | {step_b / step_a:.3f} | {tok_a:.0f} | "
                          f"{tok_b:.0f} | {tok_b / tok_a:.3f} |", summary)
        ratios = [find_row(rb, tp=r["tp"], sequence_parallel=r["sequence_parallel"])
                  ["step_seconds"] / r["step_seconds"] for r in ra]
        self.assertIn(f"Tensor-parallel step time B / A over {len(ra)} matching runs: from "
                      f"{min(ratios):.3f} to {max(ratios):.3f}.", html)
        self.assertIn("B 1 of 5 rows differ from the formulas: t = 2 with SP (block bytes)", html)
        sources = self.assert_pngs(out, html)
        self.assertEqual(len([s for s in sources if s.endswith("_tensor_compare.png")]), 1)
        # Both runs' conformance counts, and the case that fails in B only.
        tensor_b = [r["passed"] for r in read_rows(b, "/check/tensor")]
        n = len(tensor_b)
        self.assertIn(f"Tensor-parallel cases: A {n} cases, all passed; B {n} cases, 1 failed "
                      f"({n - 1} passed).", html)
        self.assertIn(f"- B tensor: {n} cases, 1 failed ({n - 1} passed)", summary)
        new = after(html, "<h3>Tensor-parallel cases</h3>")
        self.assertIn("Failing in B but passing in A:</span> <span class=\"mono\">"
                      "tensor/tp2/sp/zero1/float32</span>", new)

    def test_tensor_comparison_one_side(self):
        a = self.tensor_file("tensor_one.h5")
        out, html, summary = self.parallel_report("tensor_one_cmp", a, self.a)
        self.assertIn("Run B has no /bench/tensor table", html)
        self.assertEqual(glob.glob(os.path.join(out, "*_tensor*.png")), [])
        self.assertIn("Tensor-parallel cases: A 22 cases, all passed; B no /check/tensor table.",
                      html)
        self.assertIn("- B training: no /check/training table", summary)
        self.assertNotIn("## Tensor parallelism", summary)

    def test_tensor_absent_without_tables(self):
        """Files from before tensor parallelism report as they did."""
        for out in (self.single, self.compare):
            html = self.read(out, "index.html")
            summary = self.read(out, "summary.md")
            self.assertNotIn("id=\"tensor\"", html)
            self.assertNotIn("href=\"#tensor\"", html)
            for text in ("Tensor parallelism", "Training cases", "Tensor-parallel cases",
                         "Collective cases", "/check/tensor", "/check/training"):
                self.assertNotIn(text, html)
                self.assertNotIn(text, summary)
            self.assertEqual(glob.glob(os.path.join(out, "*_tensor*.png")), [])
        total, failed = conformance_counts(self.a)
        self.assertIn(f"<li>Conformance: {total} cases, {failed} failed ({total - failed} "
                      "passed).</li>", self.read(self.single, "index.html"))
        self.assertIn("<h3>Failed cases</h3>", self.read(self.single, "index.html"))

    def test_tensor_key_columns_only(self):
        """The columns the reader requires are enough to draw the section."""
        path = self.tensor_file("tensor_minimal.h5")
        with h5py.File(path, "a") as f:
            for name in list(f["/bench/tensor"].attrs):
                if name not in ("kind", "description", "columns", "rows"):
                    del f["/bench/tensor"].attrs[name]
        for column in read_columns(path, "/bench/tensor"):
            if column not in TENSOR_KEY_COLUMNS:
                drop_column(path, "/bench/tensor", column)
        out, html, summary = self.parallel_report("tensor_minimal_out", path)
        sources = self.assert_pngs(out, html)
        for kind in ("tensor_bytes", "tensor_step"):
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        self.assertIn("no activation_bytes_per_block column", html)
        self.assertIn("equal the formulas in all 5 rows", summary)

    def test_tensor_empty_and_malformed(self):
        path = os.path.join(self.tmp, "tensor_empty.h5")
        make_sample.write_sample(path, omit=MODEL_ONLY)
        with h5py.File(path, "a") as f:
            make_sample.write_table(f, "/bench/tensor", "no rows", make_sample.TENSOR_COLUMNS,
                                    {c[0]: [] for c in make_sample.TENSOR_COLUMNS})
        _, html, summary = self.parallel_report("tensor_empty_out", path)
        self.assertIn("/bench/tensor is present but has 0 rows", html)
        self.assertIn("/bench/tensor has 0 rows", summary)
        for table, column in (("/bench/tensor", "formula_bytes_total"),
                              ("/check/tensor", "passed"), ("/check/training", "case")):
            path = self.tensor_file(f"tensor_no_{column}.h5")
            drop_column(path, table, column)
            self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                                  f"table {table} has no column(s) {column}")

    # -- pipeline parallelism: /bench/pipeline, /bench/pipeline_ranks, /bench/pipeline_timeline

    def pipeline_file(self, name, **kwargs):
        """A file like `parity bench pipeline` writes: the three pipeline tables alone."""
        path = os.path.join(self.tmp, name)
        make_sample.write_sample(path, omit=MODEL_ONLY, pipeline=True, **kwargs)
        return path

    @staticmethod
    def pipeline_run(rows, schedule, p, m):
        return find_row(rows, schedule=schedule, stages=p, micro_batches=m)

    def test_pipeline_section(self):
        path = self.pipeline_file("pipeline.h5")
        out, html, summary = self.parallel_report("pipeline_out", path)
        self.assertIn("<h2 id=\"pipeline\">Pipeline parallelism</h2>", html)
        self.assertIn("<a href=\"#pipeline\">", html)
        self.assertIn("## Pipeline parallelism", summary)
        sources = self.assert_pngs(out, html)
        for kind in PIPELINE_FIGURES:
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        rows = read_rows(path, "/bench/pipeline")
        # The glance line: the three bubbles of each schedule's drawn run, p = 4 and m = 8.
        bubbles = "; ".join(
            f"{label} " + " / ".join(f"{r[c]:.3f}" for c in ("measured_bubble",
                                                             "simulated_bubble",
                                                             "closed_form_bubble"))
            for label, r in (("gpipe", self.pipeline_run(rows, "gpipe", 4, 8)),
                             ("1f1b", self.pipeline_run(rows, "1f1b", 4, 8)),
                             ("interleaved v=2", self.pipeline_run(rows, "interleaved", 4, 8)),
                             ("zb-h1", self.pipeline_run(rows, "zb-h1", 4, 8))))
        words = f"at p = 4, m = 8, bubble measured / simulated / closed form: {bubbles}"
        self.assertIn(f"<li>Pipeline: gpipe, 1f1b, interleaved v=2, zb-h1 at p = 2, 4 and "
                      f"m = 2 to 16; {words}.</li>", html)
        self.assertIn(f"- Drawn rank by rank: {words}.", summary)
        # The row of zb-h1 at p = 4, m = 8: times, bubbles, activations beside the formula.
        r = self.pipeline_run(rows, "zb-h1", 4, 8)
        row = re.search(r"<tr><td>zb-h1</td><td class=\"num\">4</td><td class=\"num\">1</td>"
                        r"<td class=\"num\">8</td>.*?</tr>", html)
        self.assertIsNotNone(row)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
        self.assertEqual(cells[4:], [
            f"{r['step_seconds'] * 1e3:.2f}", f"{r['makespan_seconds'] * 1e3:.2f}",
            f"{r['simulated_makespan_seconds'] * 1e3:.2f}", f"{r['measured_bubble']:.3f}",
            f"{r['simulated_bubble']:.3f}", f"{r['closed_form_bubble']:.3f}",
            f"{r['peak_activation_bytes']:,}", f"{r['formula_activation_bytes']:,}",
            f"{r['peak_activation_bytes'] / r['formula_activation_bytes']:.3f}"])
        self.assertIn(f"| zb-h1 | 4 | 1 | 8 | {r['step_seconds'] * 1e3:.2f} | "
                      f"{r['makespan_seconds'] * 1e3:.2f} | "
                      f"{r['simulated_makespan_seconds'] * 1e3:.2f} | "
                      f"{r['measured_bubble']:.3f} | {r['simulated_bubble']:.3f} | "
                      f"{r['closed_form_bubble']:.3f} | {r['peak_activation_bytes']:,} | "
                      f"{r['formula_activation_bytes']:,} |", summary)
        ranks = read_rows(path, "/bench/pipeline_ranks")
        self.assertIn(f"Table: every rank of every run ({len(ranks)} rows)", html)
        for text in ("Oversubscribed", "oversubscribed", "by the closed form computed here"):
            self.assertNotIn(text, html)
            self.assertNotIn(text, summary)

    def test_pipeline_oversubscribed(self):
        """The section says that wall-clock idle means little, in the file's words."""
        path = self.pipeline_file("pipeline_over.h5", pipeline_oversubscribed=True)
        _, html, summary = self.parallel_report("pipeline_over_out", path)
        note = make_sample.PIPELINE_NOTE
        self.assertIn(f"<span class=\"bad\">Oversubscribed:</span> {html_escape(note)}.</p>",
                      html)
        self.assertIn(f"- **Oversubscribed:** {note}.", summary)
        self.assertIn("(oversubscribed: compare the simulated bubble).</li>", html)
        # A file without the note: the report's own words, with the group's counts.
        with h5py.File(path, "a") as f:
            f["/bench/pipeline"].attrs["note"] = ""
        _, html, _ = self.parallel_report("pipeline_over_out2", path)
        self.assertIn("Oversubscribed:</span> ranks outnumber cores (2 ranks on a host with 1 "
                      "core), so a rank also waits for a core: wall-clock idle means little, and "
                      "the simulated bubble", html)
        # A note on a file that is not oversubscribed is shown as a note.
        with h5py.File(path, "a") as f:
            f["/bench/pipeline"].attrs["oversubscribed"] = np.int64(0)
            f["/bench/pipeline"].attrs["note"] = "one core or more per rank"
        _, html, summary = self.parallel_report("pipeline_over_out3", path)
        self.assertIn("<p class=\"note\">one core or more per rank.</p>", html)
        self.assertNotIn("Oversubscribed", html)
        self.assertNotIn("Oversubscribed", summary)

    def test_pipeline_closed_form_differs(self):
        """A closed_form_bubble other than the closed form of p, m and v is named."""
        path = self.pipeline_file("pipeline_closed.h5")
        set_rows(path, "/bench/pipeline", "closed_form_bubble",
                 lambda r: (r["schedule"], r["stages"], r["micro_batches"]) == ("gpipe", 4, 8),
                 lambda r: 0.5)
        _, html, _ = self.parallel_report("pipeline_closed_out", path)
        self.assertIn("gpipe p = 4, m = 8: closed_form_bubble 0.500 in the file, 0.273 by the "
                      "closed form computed here.", html)
        self.assertEqual(html.count("by the closed form computed here"), 1)

    def test_pipeline_key_columns_only(self):
        """The columns the reader requires are enough for the section; without the ranks and
        timeline tables it draws the bubble figure alone and says why."""
        path = self.pipeline_file("pipeline_minimal.h5")
        with h5py.File(path, "a") as f:
            del f["/bench/pipeline_ranks"]
            del f["/bench/pipeline_timeline"]
            for name in list(f["/bench/pipeline"].attrs):
                if name not in ("kind", "description", "columns", "rows"):
                    del f["/bench/pipeline"].attrs[name]
        for column in read_columns(path, "/bench/pipeline"):
            if column not in PIPELINE_KEY_COLUMNS:
                drop_column(path, "/bench/pipeline", column)
        out, html, summary = self.parallel_report("pipeline_minimal_out", path)
        sources = self.assert_pngs(out, html)
        self.assertEqual([s for s in sources if "_pipeline_" in s],
                         [s for s in sources if s.endswith("_pipeline_bubble.png")])
        self.assertEqual(len(sources), 1)
        self.assertIn("The file has no /bench/pipeline_timeline: no timeline figures.", html)
        self.assertIn("The file has no /bench/pipeline_ranks: no per-rank figure.", html)
        self.assertIn("<li>Pipeline: gpipe, 1f1b, interleaved v=2, zb-h1 at p = 2, 4", html)
        self.assertIn("## Pipeline parallelism", summary)

    def test_pipeline_empty_and_malformed(self):
        path = os.path.join(self.tmp, "pipeline_empty.h5")
        make_sample.write_sample(path, omit=MODEL_ONLY)
        with h5py.File(path, "a") as f:
            for table, columns in zip(PIPELINE_TABLES, (make_sample.PIPELINE_COLUMNS,
                                                        make_sample.PIPELINE_RANK_COLUMNS,
                                                        make_sample.PIPELINE_TIMELINE_COLUMNS)):
                make_sample.write_table(f, table, "no rows", columns,
                                        {c[0]: [] for c in columns})
        out, html, summary = self.parallel_report("pipeline_empty_out", path)
        self.assertIn("/bench/pipeline is present but has 0 rows", html)
        self.assertIn("/bench/pipeline has 0 rows", summary)
        self.assertEqual(glob.glob(os.path.join(out, "*_pipeline_*.png")), [])
        for table, column in zip(PIPELINE_TABLES, ("micro_batches", "rank", "end_seconds")):
            path = self.pipeline_file(f"pipeline_no_{column}.h5")
            drop_column(path, table, column)
            self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                                  f"table {table} has no column(s) {column}")

    def test_pipeline_comparison(self):
        a = self.pipeline_file("pipeline_a.h5", seed=1)
        b = self.pipeline_file("pipeline_b.h5", seed=2, pipeline_speed=1.25,
                               pipeline_oversubscribed=True)
        # A run only B has, in place of one only A has.
        set_rows(b, "/bench/pipeline", "micro_batches",
                 lambda r: (r["schedule"], r["stages"], r["micro_batches"]) == ("zb-h1", 2, 8),
                 lambda r: 6)
        out, html, summary = self.parallel_report("pipeline_cmp", a, b)
        self.assertIn("Pipeline parallelism: B against A", html)
        ra, rb = read_rows(a, "/bench/pipeline"), read_rows(b, "/bench/pipeline")
        for schedule, chunks, p, m in (("gpipe", 1, 2, 4), ("interleaved", 2, 4, 16)):
            ta, tb = (self.pipeline_run(rows, schedule, p, m) for rows in (ra, rb))
            self.assertIn(f"| {schedule} | {p} | {chunks} | {m} | {ta['step_seconds'] * 1e3:.2f} "
                          f"| {tb['step_seconds'] * 1e3:.2f} | "
                          f"{tb['step_seconds'] / ta['step_seconds']:.3f} | "
                          f"{ta['measured_bubble']:.3f} | {tb['measured_bubble']:.3f} |", summary)
        ratios = [self.pipeline_run(rb, r["schedule"], r["stages"], r["micro_batches"])
                  ["step_seconds"] / r["step_seconds"] for r in ra
                  if (r["schedule"], r["stages"], r["micro_batches"]) != ("zb-h1", 2, 8)]
        self.assertIn(f"Pipeline step time B / A over {len(ratios)} matching runs: from "
                      f"{min(ratios):.3f} to {max(ratios):.3f}.", html)
        self.assertIn("Pipeline: run B oversubscribed; compare the simulated bubbles.", html)
        self.assertIn("Run B Oversubscribed:</span>", html)
        self.assertIn("Only in run A (no run of the same schedule, p, v and m in the other run): "
                      "zb-h1 p = 2, v = 1, m = 8.", html)
        self.assertIn("Only in run B (no run of the same schedule, p, v and m in the other run): "
                      "zb-h1 p = 2, v = 1, m = 6.", html)
        self.assertIn("- **B oversubscribed:**", summary)
        sources = self.assert_pngs(out, html)
        self.assertEqual([s for s in sources if "_pipeline_" in s],
                         [s for s in sources if s.endswith("_pipeline_compare.png")])
        self.assertEqual(len([s for s in sources if "_pipeline_" in s]), 1)

    def test_pipeline_comparison_one_side(self):
        a = self.pipeline_file("pipeline_one.h5")
        out, html, summary = self.parallel_report("pipeline_one_cmp", a, self.a)
        self.assertIn("Run B has no /bench/pipeline table", html)
        self.assertEqual(glob.glob(os.path.join(out, "*_pipeline*.png")), [])
        self.assertNotIn("## Pipeline parallelism", summary)

    def test_pipeline_absent_without_tables(self):
        """Files from before the pipeline benchmark report as they did."""
        for out in (self.single, self.compare):
            html = self.read(out, "index.html")
            summary = self.read(out, "summary.md")
            self.assertNotIn("id=\"pipeline\"", html)
            self.assertNotIn("href=\"#pipeline\"", html)
            for text in ("Pipeline", "/bench/pipeline"):
                self.assertNotIn(text, html)
                self.assertNotIn(text, summary)
            self.assertEqual(glob.glob(os.path.join(out, "*_pipeline*.png")), [])

    # -- mixture of experts: /bench/moe, /bench/moe_steps, /bench/moe_load, /check/moe ---------

    def moe_file(self, name, **kwargs):
        """A file like `parity bench moe` and `parity check` write: the three MoE tables and the
        conformance tables, without the collective benchmark, which is slow to draw."""
        path = os.path.join(self.tmp, name)
        make_sample.write_sample(path, omit=TENSOR_ONLY, moe=True, **kwargs)
        return path

    @staticmethod
    def moe_glance(path):
        """The report's MoE line, worked out here from the file: the runs' ep sizes, the
        router sweep's mean load imbalance, the cf sweep's mean dropped fraction at its
        smallest and largest cf."""
        runs = sorted(read_rows(path, "/bench/moe"), key=lambda r: r["run"])
        sizes = ", ".join(str(ep) for ep in sorted({r["ep"] for r in runs}))
        routers = [r for r in runs if r["in_router_sweep"] == 1]
        cfs = sorted((r for r in runs if r["in_cf_sweep"] == 1),
                     key=lambda r: r["capacity_factor"])

        def cf(r):
            return "inf" if r["capacity_factor"] == float("inf") else f"{r['capacity_factor']:g}"
        return (f"{len(runs)} runs at ep = {sizes}", "load imbalance " + ", ".join(
                    f"{r['router']} {r['mean_load_imbalance']:.2f}" for r in routers),
                f"dropped {100 * cfs[0]['mean_dropped_fraction']:.3g}% at cf {cf(cfs[0])} -&gt; "
                f"{100 * cfs[-1]['mean_dropped_fraction']:.3g}% at {cf(cfs[-1])}")

    def test_moe_sample_is_consistent(self):
        """The sample's numbers hold together as parity's do: k x tokens choices per layer and
        step, expert choice balanced exactly, fewer drops with a larger cf, /bench/moe's means
        those of its timed steps."""
        path = self.moe_file("moe_consistent.h5")
        runs = {r["run"]: r for r in read_rows(path, "/bench/moe")}
        steps = read_rows(path, "/bench/moe_steps")
        chosen = {}
        for x in read_rows(path, "/bench/moe_load"):
            key = (x["run"], x["step"], x["block"])
            chosen[key] = chosen.get(key, 0) + x["load"]
            self.assertLessEqual(x["admitted"], x["load"])
        for s in steps:
            r = runs[s["run"]]
            k = r["top_k"] if r["router"] != "expert_choice" else 0
            if k:
                self.assertEqual(chosen[(s["run"], s["step"], s["block"])], k * s["tokens"])
            else:
                self.assertEqual(s["load_imbalance"], 1.0)
        for run, r in runs.items():
            timed = [s for s in steps if s["run"] == run and s["timed"] == 1]
            for column in ("load_imbalance", "dropped_fraction"):
                self.assertAlmostEqual(r[f"mean_{column}"],
                                       sum(s[column] for s in timed) / len(timed), places=12)
        dropped = [r["mean_dropped_fraction"] for r in sorted(
            (r for r in runs.values() if r["in_cf_sweep"] == 1),
            key=lambda r: r["capacity_factor"])]
        self.assertEqual(dropped, sorted(dropped, reverse=True))
        self.assertEqual(dropped[-1], 0.0)
        self.assertTrue(all(r["bytes_match"] == 1 for r in runs.values()))

    def test_moe_section(self):
        path = self.moe_file("moe.h5")
        out, html, summary = self.parallel_report("moe_out", path)
        self.assertIn("<h2 id=\"moe\">Mixture of experts</h2>", html)
        self.assertIn("<a href=\"#moe\">Mixture of experts</a>", html)
        self.assertIn("## Mixture of experts", summary)
        sources = self.assert_pngs(out, html)
        for kind in MOE_FIGURES:
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        runs_words, imbalance, dropped = self.moe_glance(path)
        self.assertEqual(runs_words, "9 runs at ep = 1, 2, 4")
        self.assertIn("expert_choice 1.00", imbalance)
        self.assertIn(f"<li>MoE: {runs_words}; all-to-all bytes equal the formula in every run; "
                      f"{imbalance}; {dropped}.</li>", html)
        self.assertIn(f"- Per router (timed steps' mean): {imbalance}.", summary)
        self.assertIn(f"- Capacity-factor sweep (timed steps' mean): "
                      f"{dropped.replace('-&gt;', '->')}.", summary)
        self.assertNotIn("class=\"bad\"", after(html, "<h2 id=\"moe\">"))
        # The row of the aux_free run: step time, bytes beside the formula, the means.
        r = find_row(read_rows(path, "/bench/moe"), router="aux_free")
        row = re.search(r"<tr><td class=\"num\">\d+</td><td class=\"num\">4</td>"
                        r"<td class=\"num\">1</td><td>aux_free</td>.*?</tr>", html)
        self.assertIsNotNone(row)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
        self.assertEqual(cells[4:], [
            "1.25", ms(r["step_seconds"]), f"{r['tokens_per_second']:.0f}",
            ms(r["all_to_all_seconds"]), ms(r["gradient_reduction_seconds"]),
            f"{r['all_to_all_share']:.3f}", f"{round(r['all_to_all_bytes']):,}",
            f"{round(r['formula_all_to_all_bytes']):,}", "yes", f"{r['mean_load_imbalance']:.3f}",
            f"{r['mean_dropped_fraction']:.3f}", "router"])
        self.assertIn(f"| 4 | 1 | aux_free | 1.25 | {r['step_seconds'] * 1e3:.2f} | "
                      f"{r['tokens_per_second']:.0f} | {r['all_to_all_share']:.3f} | "
                      f"{round(r['all_to_all_bytes']):,} | "
                      f"{round(r['formula_all_to_all_bytes']):,} |", summary)
        steps = read_rows(path, "/bench/moe_steps")
        self.assertIn(f"Table: every MoE layer at every step of every run ({len(steps)} rows)",
                      html)
        # /check/moe is drawn by the conformance section.
        n = len(read_rows(path, "/check/moe"))
        self.assertIn(f"; moe {n} cases, all passed.</li>", html)
        self.assertIn("<h3>Mixture-of-experts cases</h3>", html)

    def test_moe_mismatch_flagged(self):
        path = self.moe_file("moe_mismatch.h5", moe_mismatch=True)
        _, html, summary = self.parallel_report("moe_mismatch_out", path)
        rows = read_rows(path, "/bench/moe")
        self.assertEqual([(r["ep"], r["router"], r["capacity_factor"]) for r in rows
                          if r["bytes_match"] == 0], [(2, "top_k", 1.25)])
        words = "all-to-all bytes differ from the formula in 1 of 9 runs: ep = 2 top_k cf = 1.25"
        self.assertIn(f"<li>MoE: 9 runs at ep = 1, 2, 4; <span class=\"bad\">{words}</span>; ",
                      html)
        self.assertIn(f"- Against the formula: {words}.", summary)
        row = re.search(r"<tr class=\"diff\"><td class=\"num\">1</td><td class=\"num\">2</td>"
                        r".*?</tr>", html)
        self.assertIsNotNone(row)
        self.assertIn("<span class=\"bad\">no</span>", row.group(0))
        n = len(read_rows(path, "/check/moe"))
        self.assertIn(f"moe {n} cases, 1 failed ({n - 1} passed).</li>", html)
        self.assertIn(make_sample.MOE_MISMATCH_CASE,
                      after(html, "<h3>Failed mixture-of-experts cases</h3>"))
        # Without bytes_match the report compares the bytes with the formula itself.
        drop_column(path, "/bench/moe", "bytes_match")
        _, html, _ = self.parallel_report("moe_mismatch_out2", path)
        self.assertIn(f"<span class=\"bad\">{words}</span>", html)

    def test_moe_comparison(self):
        a = self.moe_file("moe_a.h5", seed=1, moe_speed=2.0)
        b = self.moe_file("moe_b.h5", seed=2)
        out, html, summary = self.parallel_report("moe_cmp", a, b)
        self.assertIn("<h2 id=\"moe\">Mixture of experts: B against A</h2>", html)
        ra, rb = read_rows(a, "/bench/moe"), read_rows(b, "/bench/moe")

        def twin(r):
            return find_row(rb, ep=r["ep"], router=r["router"],
                            capacity_factor=r["capacity_factor"])
        ratios = [twin(r)["step_seconds"] / r["step_seconds"] for r in ra]
        self.assertTrue(all(1.8 < x < 2.2 for x in ratios), ratios)  # B half as fast
        self.assertIn(f"<li>MoE step time B / A over {len(ra)} matching runs: from "
                      f"{min(ratios):.3f} to {max(ratios):.3f}.</li>", html)
        changes = [round(twin(r)["all_to_all_bytes"] - r["all_to_all_bytes"]) for r in ra]
        differ = [d for d in changes if d]
        self.assertTrue(differ, "the two samples route alike: no bytes differ")
        self.assertIn(f"MoE all-to-all bytes: B - A differs in {len(differ)} of {len(ra)} "
                      f"matching runs, from {min(differ):+,} to {max(differ):+,} B.", html)
        r = find_row(ra, ep=4, router="top_k", capacity_factor=2.0)
        t = twin(r)
        change = round(t["all_to_all_bytes"] - r["all_to_all_bytes"])
        self.assertIn(f"| 4 | top_k | 2 | 8 | 2 | {r['step_seconds'] * 1e3:.2f} | "
                      f"{t['step_seconds'] * 1e3:.2f} | "
                      f"{t['step_seconds'] / r['step_seconds']:.3f} | "
                      f"{r['tokens_per_second']:.0f} | {t['tokens_per_second']:.0f} | "
                      f"{t['tokens_per_second'] / r['tokens_per_second']:.3f} | "
                      f"{round(r['all_to_all_bytes']):,} | {round(t['all_to_all_bytes']):,} | "
                      f"{f'{change:+,}' if change else '0'} |", summary)
        sources = self.assert_pngs(out, html)
        self.assertEqual([s for s in sources if "_moe_" in s],
                         [s for s in sources if s.endswith("_moe_compare.png")])
        self.assertEqual(len([s for s in sources if "_moe_" in s]), 1)

    def test_moe_comparison_one_side(self):
        a = self.moe_file("moe_one.h5")
        out, html, summary = self.parallel_report("moe_one_cmp", a, self.a)
        self.assertIn("Run B has no /bench/moe table", html)
        self.assertEqual(glob.glob(os.path.join(out, "*_moe*.png")), [])
        self.assertNotIn("## Mixture of experts", summary)

    def test_moe_absent_without_tables(self):
        """Files from before the MoE benchmark report as they did."""
        for out in (self.single, self.compare):
            html = self.read(out, "index.html")
            summary = self.read(out, "summary.md")
            self.assertNotIn("id=\"moe\"", html)
            self.assertNotIn("href=\"#moe\"", html)
            for text in ("Mixture of experts", "MoE", "/bench/moe", "Mixture-of-experts"):
                self.assertNotIn(text, html)
                self.assertNotIn(text, summary)
            self.assertEqual(glob.glob(os.path.join(out, "*_moe*.png")), [])

    def test_checkpoint_absent_without_tables(self):
        """Files from before activation checkpointing report as they did (its own tests are
        CheckpointReportTests)."""
        for out in (self.single, self.compare):
            html = self.read(out, "index.html")
            summary = self.read(out, "summary.md")
            self.assertNotIn("id=\"checkpoint\"", html)
            self.assertNotIn("href=\"#checkpoint\"", html)
            for text in ("Activation checkpointing", "Activation-checkpointing", "checkpoint"):
                self.assertNotIn(text, html)
                self.assertNotIn(text, summary)
            self.assertEqual(glob.glob(os.path.join(out, "*_checkpoint*.png")), [])

    def test_precision_absent_without_tables(self):
        """Files from before the mixed-precision benchmark report as they did (its own tests
        are PrecisionReportTests)."""
        for out in (self.single, self.compare):
            html = self.read(out, "index.html")
            summary = self.read(out, "summary.md")
            self.assertNotIn("id=\"precision\"", html)
            self.assertNotIn("href=\"#precision\"", html)
            for text in ("Mixed precision", "/bench/precision", "loss scale"):
                self.assertNotIn(text, html)
                self.assertNotIn(text, summary)
            self.assertEqual(glob.glob(os.path.join(out, "*_precision*.png")), [])

    def test_moe_key_columns_only(self):
        """The columns the reader requires are enough for the section: the step as a whole per
        ep, the tokens per expert of every step, the sweeps as `parity bench moe` plans them;
        the report says what it cannot draw and claims nothing about the bytes."""
        path = self.moe_file("moe_minimal.h5")
        for table in MOE_TABLES:
            with h5py.File(path, "a") as f:
                for name in list(f[table].attrs):
                    if name not in ("kind", "description", "columns", "rows"):
                        del f[table].attrs[name]
            for column in read_columns(path, table):
                if column not in MOE_KEY_COLUMNS[table]:
                    drop_column(path, table, column)
        out, html, summary = self.parallel_report("moe_minimal_out", path)
        sources = self.assert_pngs(out, html)
        self.assertEqual([s.split("_", 1)[1] for s in sources if "_moe_" in s],
                         ["moe_step.png", "moe_load.png"])
        for note in ("/bench/moe has no all_to_all_bytes column: no bytes figure.",
                     "/bench/moe_steps has no load imbalance of the router sweep's runs",
                     "The file has no dropped fraction of the capacity-factor sweep's runs"):
            self.assertIn(html_escape(note), html)
        self.assertIn("<li>MoE: 9 runs at ep = 1, 2, 4; no all-to-all bytes in the file.</li>",
                      html)
        self.assertIn("- Against the formula: no all-to-all bytes in the file.", summary)

    def test_moe_small_sweeps(self):
        """One dropless run at ep = 1: every sweep has that run alone, so there is no curve
        against cf. And a job cut short after its ep sweep, the next run's steps journaled but
        not its row (and, as in an older file, no tokens per expert): the finished runs alone
        are drawn."""
        path = os.path.join(self.tmp, "moe_one_run.h5")
        make_sample.write_sample(path, omit=MODEL_ONLY)
        with h5py.File(path, "a") as f:
            make_sample.write_moe(f, np.random.default_rng(3), 4, ep_sizes=[1],
                                  routers=("top_k",), capacity_factor=float("inf"),
                                  capacity_factors=(float("inf"),))
        r, = read_rows(path, "/bench/moe")
        out, html, summary = self.parallel_report("moe_one_run_out", path)
        self.assertEqual([s.split("_", 1)[1] for s in self.assert_pngs(out, html)],
                         ["moe_step.png", "moe_load.png", "moe_routers.png"])
        self.assertIn("Every run has ep = 1: every expert is local and nothing is sent", html)
        self.assertIn(f"<li>MoE: 1 run at ep = 1; all-to-all bytes equal the formula in the one "
                      f"run; load imbalance top_k {r['mean_load_imbalance']:.2f}; dropped 0% at "
                      f"cf inf.</li>", html)
        self.assertIn("The capacity-factor sweep has one cf (inf, dropped 0%): no "
                      "dropped-fraction figure.", html)

        path = self.moe_file("moe_partial.h5")
        with h5py.File(path, "a") as f:
            del f["/bench/moe_load"]
            f.attrs["complete"] = np.int64(0)
            f.attrs["incomplete_reason"] = "interrupted by SIGINT"
        keep_rows(path, "/bench/moe", lambda r: r["in_ep_sweep"] == 1)
        rows = read_rows(path, "/bench/moe")
        self.assertEqual([r["run"] for r in rows], [0, 1, 2])
        keep_rows(path, "/bench/moe_steps", lambda s: s["run"] <= 3)
        steps = [s for s in read_rows(path, "/bench/moe_steps") if s["run"] <= 2]
        top = find_row(rows, ep=4)
        out, html, summary = self.parallel_report("moe_partial_out", path)
        self.assertIn("Incomplete run:</strong> interrupted by SIGINT", html)
        self.assertEqual([s.split("_", 1)[1] for s in self.assert_pngs(out, html)
                          if "_moe_" in s], ["moe_step.png", "moe_bytes.png", "moe_routers.png"])
        self.assertIn("The file has no /bench/moe_load: no tokens-per-expert figure.", html)
        self.assertIn(f"Table: every MoE layer at every step of every run ({len(steps)} rows)",
                      html)
        self.assertNotIn("expert_choice", after(html, "<h2 id=\"moe\">").split("<h2")[0])
        self.assertIn(f"<li>MoE: 3 runs at ep = 1, 2, 4; all-to-all bytes equal the formula in "
                      f"every run; load imbalance top_k {top['mean_load_imbalance']:.2f}; dropped "
                      f"{100 * top['mean_dropped_fraction']:.3g}% at cf 1.25.</li>", html)

    def test_moe_empty_and_malformed(self):
        path = os.path.join(self.tmp, "moe_empty.h5")
        make_sample.write_sample(path, omit=MODEL_ONLY)
        with h5py.File(path, "a") as f:
            for table, columns in zip(MOE_TABLES, (make_sample.MOE_COLUMNS,
                                                   make_sample.MOE_STEP_COLUMNS,
                                                   make_sample.MOE_LOAD_COLUMNS)):
                make_sample.write_table(f, table, "no rows", columns,
                                        {c[0]: [] for c in columns})
        out, html, summary = self.parallel_report("moe_empty_out", path)
        self.assertIn("/bench/moe is present but has 0 rows", html)
        self.assertIn("/bench/moe has 0 rows", summary)
        self.assertEqual(glob.glob(os.path.join(out, "*_moe_*.png")), [])
        for table, column in zip(MOE_TABLES + ("/check/moe",),
                                 ("capacity_factor", "block", "load", "passed")):
            path = self.moe_file(f"moe_no_{column}.h5")
            drop_column(path, table, column)
            self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                                  f"table {table} has no column(s) {column}")

    # -- one rank ------------------------------------------------------------------------------

    def test_one_rank_collectives(self):
        """At one rank busbw is 0 throughout (the bus factor (n-1)/n is 0): a busbw panel has
        nothing for a log axis (without the host memcpy line there is nothing else on it)."""
        path = os.path.join(self.tmp, "one_rank.h5")
        make_sample.write_sample(path, world_size=1, omit=("copy_bandwidth",))
        rows = read_collectives(path)
        self.assertTrue(all(r["busbw_GBps"] == 0 for r in rows
                            if r["collective"] in ("all_reduce", "all_gather")))
        self.assertTrue(all(np.isfinite(r["time_us"]) and r["time_us"] > 0 for r in rows))
        out, html, _ = self.parallel_report("one_rank_out", path)
        sources = self.assert_pngs(out, html)
        self.assertEqual(len([s for s in sources if "_coll_" in s]), 8)
        note = ("No row of this group has a positive busbw (at one rank the bus factor is 0: "
                "nothing crosses a link), so its panel has a linear axis instead of a log one.")
        self.assertIn(note, after(html, "all_reduce · float32 · sum · out of place</h3>"))
        # Broadcast's busbw is its algbw at any size: a log axis and no note.
        self.assertNotIn(note, after(html, "broadcast · float32 · out of place · root 0</h3>"))
        out, html, _ = self.parallel_report("one_rank_cmp", path, path)
        self.assertIn("Collective benchmark: busbw of B against A", html)
        self.assert_pngs(out, html)

    def test_one_rank_every_table(self):
        """The sample writes every table at one rank (nothing to hide, no ping-pong) and the
        report draws them."""
        path = os.path.join(self.tmp, "one_rank_all.h5")
        make_sample.write_sample(path, world_size=1, model=True, parallel=True, tensor=True,
                                 pipeline=True, moe=True, checkpoint=True, precision=True)
        overlap = read_rows(path, "/bench/overlap")
        self.assertTrue(all(r["hidden_fraction"] == 0 for r in overlap))
        out, html, summary = self.parallel_report("one_rank_all_out", path)
        self.assert_pngs(out, html)
        self.assertIn("<li>Tensor parallelism: t = 1; bytes, activations and parameters equal "
                      "the formulas in the one row.</li>", html)
        self.assertIn("Every run has t = 1", html)
        self.assertIn("training 36 cases, all passed; tensor 2 cases, all passed", html)
        # One pipeline rank: every schedule at p = 1, nothing idle.
        self.assertIn("<li>Pipeline: gpipe, 1f1b, interleaved v=2, zb-h1 at p = 1 and m = 1 to 4; "
                      "at p = 1, m = 2, bubble measured / simulated / closed form: gpipe 0.000 / "
                      "0.000 / 0.000;", html)
        self.assertEqual(len([s for s in img_sources(html) if "_pipeline_" in s]), 6)
        # One rank: every MoE run at ep = 1, where every expert is local and nothing is sent.
        moe = read_rows(path, "/bench/moe")
        self.assertEqual({r["all_to_all_bytes"] for r in moe}, {0.0})
        self.assertIn(f"<li>MoE: {len(moe)} runs at ep = 1; all-to-all bytes equal the formula "
                      "in every run; load imbalance top_k", html)
        self.assertEqual(len([s for s in img_sources(html) if "_moe_" in s]), 4)
        self.assertIn("Every run has ep = 1: every expert is local and nothing is sent", html)
        # One rank: the checkpointing cases alone, the benchmark as on more.
        self.assertIn("; checkpoint 10 cases, all passed.</li>", html)
        self.assertIn("<li>Activation checkpointing: 9 policies; full recompute: peak ", html)
        self.assertEqual(len([s for s in img_sources(html) if "_checkpoint_" in s]), 2)
        # Mixed precision: the losses of every precision, float16's skipped steps.
        self.assertIn("<li>Mixed precision: after 60 steps the loss is float64 ", html)
        self.assertIn("<tr><td>float16</td>", html)
        self.assertEqual(len([s for s in img_sources(html) if "_precision_" in s]), 1)

    # -- bad input -----------------------------------------------------------------------------

    def test_missing_file(self):
        missing = os.path.join(self.tmp, "does-not-exist.h5")
        self.assert_bad_input([missing, "--out", os.path.join(self.tmp, "x")], "no such file")

    def test_text_file(self):
        path = os.path.join(self.tmp, "notes.txt")
        with open(path, "w") as fh:
            fh.write("this is not HDF5\n" * 100)
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")], "not an HDF5 file")

    def test_hdf5_without_schema(self):
        path = os.path.join(self.tmp, "foreign.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=np.arange(10))
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                              "is not a parity result file")

    def test_wrong_schema_name(self):
        path = os.path.join(self.tmp, "other_schema.h5")
        make_sample.write_sample(path)
        with h5py.File(path, "a") as f:
            f.attrs["schema"] = "something-else"
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                              "is not a parity result file")

    def test_schema_version_99(self):
        path = os.path.join(self.tmp, "v99.h5")
        make_sample.write_sample(path)
        with h5py.File(path, "a") as f:
            f.attrs["schema_version"] = np.int64(99)
        line = self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")])
        self.assertEqual(line, f"parity report: {path} has schema version 99; "
                               "this report reads version 1")
        # The second file of a comparison is checked just as well.
        self.assert_bad_input([self.a, path, "--out", os.path.join(self.tmp, "x")],
                              "has schema version 99")

    def test_truncated_file(self):
        path = os.path.join(self.tmp, "truncated.h5")
        with open(self.a, "rb") as src, open(path, "wb") as dst:
            data = src.read()
            dst.write(data[: len(data) // 2])
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")], "truncated")

    def test_column_of_wrong_type(self):
        path = os.path.join(self.tmp, "wrong_type.h5")
        make_sample.write_sample(path)
        with h5py.File(path, "a") as f:
            g = f["/bench/collectives"]
            sizes = [str(v) for v in g["size_bytes"][()]]
            del g["size_bytes"]
            g.create_dataset("size_bytes", data=np.array(sizes, dtype=object),
                             dtype=h5py.string_dtype())
        self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                              "/bench/collectives/size_bytes holds strings")

    def test_usage_errors(self):
        self.assert_bad_input([self.a])  # no --out
        res = run_report("--help")
        self.assertEqual(res.returncode, 0)
        for option in ("--out", "--title", "--max-plots", "--max-failures", "OTHER.h5"):
            self.assertIn(option, res.stdout)


CHECKPOINT_REQUIRED = ["policy", "peak_bytes", "formula_peak_bytes", "time_ratio"]
CHECKPOINT_FIGURES = ("checkpoint_tradeoff", "checkpoint_formulas")


def add_empty_table(path, group, columns):
    """Writes `group` with its columns and no rows into the file at `path`."""
    with h5py.File(path, "a") as f:
        make_sample.write_table(f, group, "no rows", columns, {c[0]: [] for c in columns})


class DrawnOnce(ReportAsserts):
    """Reports drawn once for the class, side by side: setUpClass makes its files in cls.tmp and
    calls draw({name: [paths]}); each test reads one with report(name)."""

    @classmethod
    def draw(cls, reports):
        with ThreadPoolExecutor(len(reports)) as pool:
            runs = {name: pool.submit(run_report, *paths, "--out", os.path.join(cls.tmp, name))
                    for name, paths in reports.items()}
            cls.runs = {name: run.result() for name, run in runs.items()}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def report(self, name):
        """(output directory, index.html, summary.md) of a report drawn for the class."""
        res = self.runs[name]
        self.assertEqual(res.returncode, 0, res.stderr)
        out = os.path.join(self.tmp, name)
        pages = []
        for page in ("index.html", "summary.md"):
            with open(os.path.join(out, page), encoding="utf-8") as fh:
                pages.append(fh.read())
        return out, *pages


class CheckpointReportTests(DrawnOnce, unittest.TestCase):
    """/bench/checkpoint and /check/checkpoint. The reports are drawn once for the class, side by
    side: a file like `parity bench checkpoint` and `parity check` write, whose every3 policy
    peaks above the formula and whose selective policy's losses differ; that file against a
    second run; against a file without the table; one with the required columns alone; and one
    whose table has no rows."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-checkpoint-test-")
        cls.a, cls.b, cls.bare, cls.minimal, cls.empty = (
            os.path.join(cls.tmp, name) for name in ("a.h5", "b.h5", "bare.h5", "minimal.h5",
                                                     "empty.h5"))
        make_sample.write_sample(cls.a, omit=TENSOR_ONLY, checkpoint=True,
                                 checkpoint_mismatch=True)
        set_rows(cls.a, "/bench/checkpoint", "losses_equal",
                 lambda r: r["policy"] == "selective", lambda r: 0)
        make_sample.write_sample(cls.b, seed=2, omit=TENSOR_ONLY, checkpoint=True,
                                 checkpoint_speed=0.8)
        make_sample.write_sample(cls.bare, omit=MODEL_ONLY)
        make_sample.write_sample(cls.minimal, omit=MODEL_ONLY, checkpoint=True)
        for column in read_columns(cls.minimal, "/bench/checkpoint"):
            if column not in CHECKPOINT_REQUIRED:
                drop_column(cls.minimal, "/bench/checkpoint", column)
        make_sample.write_sample(cls.empty, omit=MODEL_ONLY)
        add_empty_table(cls.empty, "/bench/checkpoint", make_sample.CHECKPOINT_COLUMNS)
        reports = {"single": [cls.a], "compare": [cls.a, cls.b], "one_side": [cls.a, cls.bare],
                   "minimal": [cls.minimal], "empty": [cls.empty]}
        cls.draw(reports)

    def section(self, html):
        return after(html, "<h2 id=\"checkpoint\">").split("<h2")[0]

    def test_section_and_figures(self):
        out, html, summary = self.report("single")
        self.assertIn("<h2 id=\"checkpoint\">Activation checkpointing</h2>", html)
        self.assertIn("<a href=\"#checkpoint\">Activation checkpointing</a>", html)
        self.assertIn("## Activation checkpointing", summary)
        sources = self.assert_pngs(out, html)
        for kind in CHECKPOINT_FIGURES:
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        rows = read_rows(self.a, "/bench/checkpoint")
        self.assertEqual([r["policy"] for r in rows][:7], ["none", "full", "every2", "every3",
                                                          "every4", "sqrt", "selective"])
        self.assertEqual(len([r for r in rows if r["policy"].startswith("budget")]), 2)
        # The full policy's row: bytes beside the formulas, FLOPs with their share of the step,
        # the time ratio with its ranks' least and largest.
        r = find_row(rows, policy="full")
        share = f"{100 * r['recompute_flops'] / r['baseline_step_flops']:+.1f}%"
        row = re.search(r"<tr><td>full</td>.*?</tr>", html)
        self.assertIsNotNone(row)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
        self.assertEqual(cells[2:7], [str(r["recomputed_blocks"])] + [
            f"{r[c]:,}" for c in ("stored_bytes", "formula_stored_bytes", "peak_bytes",
                                  "formula_peak_bytes")])
        self.assertTrue(cells[7].endswith(f" ({share})") and cells[8] == cells[7], cells[7:9])
        self.assertEqual(cells[9:], [ms(r["step_time_s"]),
                                     f"{r['time_ratio']:.3f} ({r['time_ratio_rank_min']:.3f}–"
                                     f"{r['time_ratio_rank_max']:.3f})", "yes", "yes"])
        self.assertIn(f"| full | 0 1 2 3 | 4 | {r['stored_bytes']:,} | "
                      f"{r['formula_stored_bytes']:,} | {r['peak_bytes']:,} | "
                      f"{r['formula_peak_bytes']:,} |", summary)
        # /check/checkpoint is drawn by the conformance section.
        n = len(read_rows(self.a, "/check/checkpoint"))
        self.assertIn(f"; checkpoint {n} cases, 1 failed ({n - 1} passed).</li>", html)
        self.assertIn("<h3>Activation-checkpointing cases</h3>", html)
        self.assertIn(make_sample.CHECKPOINT_MISMATCH_CASE,
                      after(html, "<h3>Failed activation-checkpointing cases</h3>"))
        self.assertIn(f"Activation-checkpointing cases: {n} cases, 1 failed", summary)

    def test_failing_rows_flagged(self):
        """A policy whose peak differs from the formula, and one whose losses differ from the run
        without recompute: both rows marked, their verdicts in red, named at a glance."""
        _, html, summary = self.report("single")
        words = ("2 of 9 policies fail: every3 (peak bytes differ); selective (losses "
                 "differ)")
        self.assertIn(f"; <span class=\"bad\">{words}</span>.</li>", html)
        self.assertIn(f"<span class=\"bad\">{words}.</span>", self.section(html))
        self.assertIn(f"- Against the run without recompute and the formulas: {words}.",
                      summary)
        flagged = re.findall(r"<tr class=\"diff\"><td>([^<]*)</td>(.*?)</tr>", self.section(html))
        self.assertEqual([policy for policy, _ in flagged], ["every3", "selective"])
        every3, selective = (cells for _, cells in flagged)
        r = find_row(read_rows(self.a, "/bench/checkpoint"), policy="every3")
        self.assertIn(f"<span class=\"bad\">{r['peak_bytes']:,}</span>", every3)
        self.assertTrue(every3.endswith("<td>yes</td><td><span class=\"bad\">no</span></td>"))
        self.assertTrue(selective.endswith("<td><span class=\"bad\">no</span></td><td>yes</td>"))

    def test_comparison(self):
        out, html, summary = self.report("compare")
        self.assertIn("<h2 id=\"checkpoint\">Activation checkpointing: B against A</h2>", html)
        ra, rb = read_rows(self.a, "/bench/checkpoint"), read_rows(self.b, "/bench/checkpoint")
        self.assertEqual([r["policy"] for r in ra], [r["policy"] for r in rb])
        ratios = [b["time_ratio"] / a["time_ratio"] for a, b in zip(ra, rb)]
        self.assertIn(f"<li>Activation checkpointing time ratio B / A over {len(ra)} matching "
                      f"policies: from {min(ratios):.3f} to {max(ratios):.3f}.</li>", html)
        a, b = find_row(ra, policy="sqrt"), find_row(rb, policy="sqrt")
        self.assertIn(f"| sqrt | {a['time_ratio']:.3f} | {b['time_ratio']:.3f} | "
                      f"{b['time_ratio'] / a['time_ratio']:.3f} | {a['peak_bytes']:,} | "
                      f"{b['peak_bytes']:,} |", summary)
        sources = self.assert_pngs(out, html)
        self.assertEqual([s.split("_", 1)[1] for s in sources if "_checkpoint" in s],
                         ["checkpoint_compare.png"])

    def test_comparison_one_side(self):
        out, html, summary = self.report("one_side")
        self.assertIn("Run B has no /bench/checkpoint table", html)
        self.assertEqual(glob.glob(os.path.join(out, "*_checkpoint*.png")), [])
        self.assertNotIn("## Activation checkpointing", summary)

    def test_required_columns_only(self):
        """policy, peak_bytes, formula_peak_bytes and time_ratio are enough: the peak panel
        alone, no formula diamonds (no FLOPs to place them), the rest read as unknown."""
        out, html, summary = self.report("minimal")
        sources = self.assert_pngs(out, html)
        for kind in CHECKPOINT_FIGURES:
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        self.assertIn("<tr><td>none</td><td>–</td><td class=\"num\">–</td>", html)
        self.assertIn("<li>Activation checkpointing: 9 policies; full recompute: peak ", html)
        self.assertIn("- Against the run without recompute and the formulas: every policy's "
                      "peak bytes equal the formula.", summary)

    def test_empty_table(self):
        out, html, summary = self.report("empty")
        self.assertIn("/bench/checkpoint is present but has 0 rows.", html)
        self.assertIn("/bench/checkpoint has 0 rows.", summary)
        self.assertEqual(glob.glob(os.path.join(out, "*_checkpoint*.png")), [])

    def test_missing_required_column(self):
        for table, column in [("/bench/checkpoint", c) for c in CHECKPOINT_REQUIRED] + [
                ("/check/checkpoint", "passed"), ("/check/checkpoint", "case")]:
            with self.subTest(table=table, column=column):
                path = os.path.join(self.tmp, f"no_{column}.h5")
                shutil.copy(self.a, path)
                drop_column(path, table, column)
                self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                                      f"table {table} has no column(s) {column}")


PRECISION_REQUIRED = ["precision", "step", "loss"]


def precision_runs(path):
    """/bench/precision as {precision: its rows in step order}, in file order."""
    runs = {}
    for r in read_rows(path, "/bench/precision"):
        runs.setdefault(r["precision"], []).append(r)
    return {p: sorted(rows, key=lambda r: r["step"]) for p, rows in runs.items()}


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
        add_empty_table(cls.empty, "/bench/precision", make_sample.PRECISION_COLUMNS)
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
        self.assertEqual([r["step"] for r in f16 if r["skipped"]], [7, 45])
        self.assertEqual(f16[8]["loss_scale"], f16[7]["loss_scale"] / 2)
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
        out, html, summary = self.report("one_side")
        self.assertIn("Run B has no /bench/precision table", html)
        self.assertNotIn("## Mixed precision", summary)

    def test_empty_table(self):
        out, html, summary = self.report("empty")
        self.assertIn("/bench/precision is present but has 0 rows.", html)
        self.assertIn("/bench/precision has 0 rows.", summary)
        self.assertEqual(glob.glob(os.path.join(out, "*_precision*.png")), [])

    def test_missing_required_column(self):
        for column in PRECISION_REQUIRED:
            with self.subTest(column=column):
                path = os.path.join(self.tmp, f"no_{column}.h5")
                shutil.copy(self.a, path)
                drop_column(path, "/bench/precision", column)
                self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")],
                                      f"table /bench/precision has no column(s) {column}")

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


def range_words(ratios):
    """ratio_range_words, restated: one ratio when they agree to three decimals."""
    lo, hi = f"{min(ratios):.3f}", f"{max(ratios):.3f}"
    return lo if lo == hi else f"from {lo} to {hi}"


class DeviceWordsTest(unittest.TestCase):
    """The report says where a GPU run ran and what its collective figures mean there."""

    class FakeRun:
        def __init__(self, attrs, world_size, tables=None):
            self.attrs, self.world_size, self.tables = attrs, world_size, tables or {}

        def table(self, name):
            return self.tables.get(name)

    def words(self, *args, **kwargs):
        from parity_reports.provenance import device_words
        return device_words(self.FakeRun(*args, **kwargs))

    def test_cpu_runs_say_nothing(self):
        self.assertEqual(self.words({"device": "cpu"}, 4), [])

    def test_shared_gpu_and_single_rank_are_explained(self):
        shared = self.words({"device": "cuda", "gpu": "NVIDIA H200", "ranks_per_gpu": 4,
                             "backend": "mpi"}, 4)
        self.assertEqual(shared[0], "GPU: NVIDIA H200")
        self.assertIn("4 ranks share one GPU", shared[1])
        self.assertIn("pinned host memory", shared[1])
        single = self.words({"device": "cuda", "gpu": "NVIDIA H100", "ranks_per_gpu": 1,
                             "backend": "nccl"}, 1)
        self.assertIn("not a network", single[1])

    def test_reduction_kernel_ratio_is_reported(self):
        import parity_results
        cols = {"kernel": np.array(["copy", "reduce_sum"]), "dtype": np.array(["float32"] * 2),
                "rank": np.array([0, 0]), "size_bytes": np.array([1 << 28] * 2),
                "bandwidth_GBps": np.array([3000.0, 2850.0]),
                "ratio_vs_copy": np.array([1.0, 0.95])}
        table = parity_results.Table("/bench/device_kernels", "", list(cols), {}, cols, 2)
        words = self.words({"device": "cuda", "gpu": "G", "ranks_per_gpu": 1, "backend": "nccl"},
                           2, {"/bench/device_kernels": table})
        self.assertTrue(any("0.950× the device copy" in w for w in words), words)


class TableModulesTest(unittest.TestCase):
    """Every result table is a module in parity_reports.tables.TABLES with the same interface:
    a module that leaves out a function, or takes other arguments, fails here rather than in
    the middle of drawing a report."""

    def test_registry_lists_every_table_module(self):
        import pkgutil
        from parity_reports import tables
        on_disk = {m.name for m in pkgutil.iter_modules(tables.__path__)}
        registered = [m.__name__.rsplit(".", 1)[-1] for m in tables.TABLES]
        self.assertEqual(len(registered), len(set(registered)), registered)
        self.assertEqual(set(registered), on_disk)
        for name in ("collectives", "slow_ranks", "p2p", "conformance", "model", "memory",
                     "scaling", "overlap", "tensor", "pipeline", "moe", "checkpoint",
                     "precision"):
            self.assertIn(name, registered)

    def test_modules_implement_the_interface(self):
        import inspect
        from parity_reports import tables
        names, paths = set(), set()
        for module in tables.TABLES:
            with self.subTest(module=module.__name__):
                for attr, kind in tables.INTERFACE.items():
                    self.assertTrue(hasattr(module, attr), f"{module.__name__} has no {attr}")
                    self.assertIsInstance(getattr(module, attr), kind, attr)
                for func, params in tables.FUNCTIONS.items():
                    self.assertTrue(callable(getattr(module, func, None)),
                                    f"{module.__name__} has no function {func}")
                    got = list(inspect.signature(getattr(module, func)).parameters)
                    self.assertEqual(len(got), len(params),
                                     f"{module.__name__}.{func}{tuple(got)}, want {params}")
                for path, (types, required) in module.READS.items():
                    self.assertTrue(path.startswith("/"), path)
                    self.assertIsInstance(types, str)
                    self.assertIsInstance(required, list)
                    self.assertNotIn(path, paths, "two modules read the same table")
                    paths.add(path)
                self.assertNotIn(module.NAME, names)
                names.add(module.NAME)
        # A table needs its module before it: slow ranks refer to the collective rows.
        order = [m.NAME for m in tables.TABLES]
        self.assertLess(order.index("collectives"), order.index("slow_ranks"))

    def test_load_reports_presence(self):
        import parity_results
        from parity_reports.report import load_tables
        from parity_reports.tables import schema
        tmp = tempfile.mkdtemp(prefix="parity-report-tables-")
        try:
            full, bare = os.path.join(tmp, "full.h5"), os.path.join(tmp, "bare.h5")
            make_sample.write_sample(full, model=True, parallel=True, tensor=True,
                                     pipeline=True, moe=True, checkpoint=True, precision=True)
            make_sample.write_sample(bare, omit=MODEL_ONLY)
            for path, expected in ((full, True), (bare, False)):
                for name, table in load_tables(parity_results.load(path, schema())).items():
                    with self.subTest(path=os.path.basename(path), table=name):
                        self.assertEqual(bool(table.present), expected)
                        self.assertEqual(bool(table.usable), expected)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
