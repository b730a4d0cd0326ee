"""Tests of the page and the shared layer: every table of a one-rank run on one page, bad input
and usage, provenance's device words, the table modules' registry and interface, and every
figure's series checked by some test module.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import importlib
import os
import re
import shutil
import tempfile
import unittest

import h5py
import numpy as np

import make_sample
from report_testing import (HERE, MODEL_ONLY, NO_FIGURES, ReportCase, SeriesCase, draw_series,
                            drawn_report, img_sources, read_rows, run_report)


def checked_figures():
    """The figures whose series the test modules check, of one run and of a comparison: the
    union of each test_*.py module's CHECKED_FIGURES and CHECKED_COMPARISON_FIGURES."""
    one, two = set(), set()
    for name in sorted(os.listdir(HERE)):
        if name.startswith("test_") and name.endswith(".py"):
            module = importlib.import_module(name[:-3])
            one |= set(getattr(module, "CHECKED_FIGURES", ()))
            two |= set(getattr(module, "CHECKED_COMPARISON_FIGURES", ()))
    return one, two


class PageReportTests(ReportCase):
    def test_no_figures_leaves_out_the_images_alone(self):
        """--no-figures: no PNG written, and the page and summary those of the report with its
        figures, but for their images and the line that says they were left out."""
        for name, args, drawn in (("no_figures_single", [self.a, "--title", "Sample run A"], self.single),
                                  ("no_figures_compare", [self.a, self.b], self.compare)):
            out = os.path.join(self.tmp, name)
            res = run_report(*args, "--out", out, "--no-figures")
            self.assertEqual(res.returncode, 0, res.stderr)
            self.assertEqual([f for f in os.listdir(out) if f.endswith(".png")], [])
            html, full = self.read(out, "index.html"), self.read(drawn, "index.html")
            self.assertTrue(img_sources(full))
            self.assertEqual(html.count(NO_FIGURES), 1)
            self.assertEqual(html.replace(f"<p class=\"note\">{NO_FIGURES}</p>\n", ""),
                             re.sub(r"<p><img [^>]*></p>\n", "", full))
            self.assertEqual(self.read(out, "summary.md"), self.read(drawn, "summary.md"))
            with self.assertRaises(AssertionError):
                img_sources(html)

    def test_one_rank_every_table(self):
        """The sample writes every table at one rank (no ping-pong) and the report draws
        them."""
        path = os.path.join(self.tmp, "one_rank_all.h5")
        make_sample.write_sample(path, world_size=1, model=True, parallel=True, tensor=True,
                                 pipeline=True, moe=True, checkpoint=True, precision=True)
        for table in ("/bench/memory", "/bench/scaling", "/bench/overlap", "/bench/tensor",
                      "/bench/pipeline", "/bench/moe", "/bench/precision"):
            self.assertEqual({r["world_size"] for r in read_rows(path, table)}, {1}, table)
        out, html, summary = self.report_of("one_rank_all_out", path)
        self.assert_pngs(out, html)
        # The sections, and their links, in increasing ORDER of their table modules: the
        # collectives and the tables that read them first, the conformance verdicts last.
        sections = ["provenance", "collectives", "slow-ranks", "p2p", "harness", "model", "memory",
                    "scaling", "overlap", "tensor", "pipeline", "moe", "checkpoint", "precision",
                    "conformance"]
        self.assertEqual(re.findall(r"<h2 id=\"([^\"]+)\"", html), sections)
        self.assertEqual(re.findall(r"<a href=\"#([^\"]+)\"", html), sections)
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

    def test_oversubscribed_run_marks_every_wall_clock_figure(self):
        """A run whose ranks outnumbered a host's cores: a banner, a note under the title of
        every section of wall-clock figures (not under conformance, memory or precision), and
        each of their at-a-glance lines marked; the same file without the attribute has none."""
        path = os.path.join(self.tmp, "oversubscribed.h5")
        make_sample.write_sample(path, world_size=4, model=True, parallel=True, tensor=True,
                                 moe=True, checkpoint=True, precision=True)
        with h5py.File(path, "a") as f:
            f.attrs["oversubscribed"] = np.int64(1)
            f.attrs["ranks_per_host"] = np.int64(4)
            f.attrs["cores_per_host"] = np.int64(2)
        # The notes are text: drawn without figures, the collectives' groups left out.
        out = os.path.join(self.tmp, "oversubscribed_out")
        res = run_report(path, "--out", out, "--max-plots", "0", "--no-figures")
        self.assertEqual(res.returncode, 0, res.stderr)
        html, summary = self.read(out, "index.html"), self.read(out, "summary.md")
        words = "ranks outnumber cores (4 ranks on a host with 2 cores)"
        self.assertIn(f"<strong>Oversubscribed:</strong> {words}", html)
        self.assertIn(f"**Oversubscribed:** {words}", summary)
        from parity_reports.tables import TABLES
        sections = html.split("<h2 id=\"")[1:]
        marked = {s.split("\"", 1)[0] for s in sections if "<p class=\"note\">Measured oversubscribed: " in s}
        for anchor in ("harness", "overlap", "scaling", "model", "tensor", "moe", "checkpoint"):
            self.assertTrue(any(m.startswith(anchor) for m in marked), (anchor, sorted(marked)))
        for anchor in ("conformance", "memory", "precision"):
            self.assertFalse(any(m.startswith(anchor) for m in marked), (anchor, sorted(marked)))
        self.assertTrue(all(getattr(m, "WALL_CLOCK", False) or m.NAME in ("conformance", "memory", "precision",
                                                                          "pipeline", "plan", "state_train")
                            for m in TABLES), [m.NAME for m in TABLES])
        glance = html.split("<ul class=\"glance\">", 1)[1].split("</ul>", 1)[0]
        for start in ("Harness overhead", "Overlap", "Strong scaling", "Model training step"):
            lines = [g for g in glance.split("<li>") if g.startswith(start)]
            self.assertTrue(lines, (start, glance[:2000]))
            self.assertTrue(all("(measured oversubscribed)" in g for g in lines), lines)
        with h5py.File(path, "a") as f:
            f.attrs["oversubscribed"] = np.int64(0)
        out = os.path.join(self.tmp, "not_oversubscribed_out")
        self.assertEqual(run_report(path, "--out", out, "--max-plots", "0", "--no-figures").returncode, 0)
        plain = self.read(out, "index.html")
        for mark in ("Oversubscribed:", "Measured oversubscribed", "(measured oversubscribed)"):
            self.assertNotIn(mark, plain)

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
        self.assert_refused(path, "is not a parity result file")

    def test_wrong_schema_name(self):
        path = os.path.join(self.tmp, "other_schema.h5")
        make_sample.write_sample(path)
        with h5py.File(path, "a") as f:
            f.attrs["schema"] = "something-else"
        self.assert_refused(path, "is not a parity result file")

    def test_schema_version_99(self):
        path = os.path.join(self.tmp, "v99.h5")
        make_sample.write_sample(path)
        with h5py.File(path, "a") as f:
            f.attrs["schema_version"] = np.int64(99)
        line = self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")])
        self.assertEqual(line, f"parity: {path} has schema version 99; "
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

    def test_comparison_labels_runs_by_file_name_unless_the_names_are_the_same(self):
        """Two files of different names are labelled by their names alone; two of the same name
        (in different folders) by their whole paths, which tell them apart."""
        paths = [os.path.join(self.tmp, folder, name)
                 for folder, name in (("one", "run.h5"), ("two", "other.h5"), ("three", "run.h5"))]
        for path in paths:
            os.makedirs(os.path.dirname(path))
            make_sample.write_sample(path, omit=MODEL_ONLY)
        for (a, b), (label_a, label_b) in (((paths[0], paths[1]), ("run.h5", "other.h5")),
                                           ((paths[0], paths[2]), (paths[0], paths[2]))):
            out = os.path.join(self.tmp, f"labels-{os.path.basename(os.path.dirname(b))}")
            _, html, summary = drawn_report(self, out, [a, b], ["--no-figures"])
            title = f"parity comparison: {label_a} (A) vs {label_b} (B)"
            self.assertIn(f"<h1>{title}</h1>", html)
            self.assertIn(f"<th>A: {label_a}</th><th>B: {label_b}</th>", html)
            head = f"# {title}\n\n- A: `{label_a}`\n- B: `{label_b}`\n"
            self.assertTrue(summary.startswith(head), summary[:200])

    def test_usage_errors(self):
        self.assert_bad_input([self.a])  # no --out
        # A path that would drive the terminal is shown escaped, on its one line.
        line = self.assert_bad_input([self.a, "--out", "/proc/\x1b[31mX\x07\x08\r"],
                                     "cannot write to output directory /proc/\\x1b[31mX\\x07\\x08")
        self.assertTrue(line.isprintable(), line)
        res = run_report("--help")
        self.assertEqual(res.returncode, 0)
        for option in ("--out", "--title", "--max-plots", "--max-failures", "OTHER.h5"):
            self.assertIn(option, res.stdout)


class OneLineTest(unittest.TestCase):
    """parity_report.one_line: a message on one line, each character that is not printable
    written as its code."""

    def test_bytes_of_a_path_that_is_not_utf8_are_written_as_those_bytes(self):
        import parity_report
        # Python holds a byte 0xNN of such a path as the surrogate U+DCNN: shown \xNN, for every
        # byte from 0x80 to 0xff.
        for byte in (0x80, 0x9b, 0xfe, 0xff):
            name = os.fsdecode(b"run-" + bytes([byte]) + b".h5")
            self.assertEqual(parity_report.one_line(name), f"run-\\x{byte:02x}.h5")
        self.assertEqual(parity_report.one_line("a\x1bb\x7fc"), "a\\x1bb\\x7fc")
        # Above a byte's range: four hex digits.
        self.assertEqual(parity_report.one_line("a\u200bb"), "a\\u200bb")
        self.assertEqual(parity_report.one_line(" two\n lines "), "two lines")
        self.assertEqual(parity_report.one_line("caf\u00e9 \u00ff"), "caf\u00e9 \u00ff")


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


class ByteUnitTest(unittest.TestCase):
    def test_axis_unit_is_the_tables_unit(self):
        """A figure's byte axis takes the unit the page's sizes take (fmt_size): a power of 1024
        reaches its own unit, one byte less stays in the one below."""
        from parity_reports.common import fmt_size
        from parity_reports.plots import Plotter
        units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
        for scale in (1 << 10, 1 << 20, 1 << 30):
            for n in (scale - 1, scale, scale + 1, 3 * scale):
                with self.subTest(n=n):
                    unit = fmt_size(n).split()[1]
                    self.assertEqual(Plotter.byte_unit(n), (unit, units[unit]))
        self.assertEqual(Plotter.byte_unit(1 << 20), ("MiB", 1 << 20))
        self.assertEqual(Plotter.byte_unit(0), ("B", 1))


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
                                     pipeline=True, moe=True, checkpoint=True, precision=True,
                                     recordings=["plan", "calibrate", "state", "state-train", "context"])
            make_sample.write_sample(bare, omit=MODEL_ONLY)
            for path, expected in ((full, True), (bare, False)):
                for name, table in load_tables(parity_results.load(path, schema())).items():
                    with self.subTest(path=os.path.basename(path), table=name):
                        self.assertEqual(bool(table.present), expected)
                        self.assertEqual(bool(table.usable), expected)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class PageSeriesTests(SeriesCase):
    def test_every_figure_is_checked(self):
        # Every PNG written has its series recorded, and the same series as without PNGs: no
        # figure draws past the Plotter. Rendered here only, in folders of this test's own.
        for i, (paths, drawn) in enumerate((([self.a], self.single), ([self.a, self.b], self.compared))):
            outdir = os.path.join(self.tmp, f"rendered-{i}")
            rendered = draw_series(paths, outdir)
            self.assertEqual({s.file for s in rendered},
                             {f for f in os.listdir(outdir) if f.endswith(".png")})
            self.assertEqual([(s.file, s.figure, s.axes, s.label) for s in rendered],
                             [(s.file, s.figure, s.axes, s.label) for s in drawn])
            for r, d in zip(rendered, drawn):
                self.assertTrue(np.array_equal(r.x, d.x, equal_nan=True) and
                                np.array_equal(r.y, d.y, equal_nan=True), (r.figure, r.label))
        # And a test module checks each figure's series (the collective groups' all of them).
        checked, compared = checked_figures()
        drawn = {s.figure for s in self.single if not s.figure.startswith("coll_")}
        self.assertEqual(drawn, checked)
        drawn = {s.figure for s in self.compared if not s.figure.startswith("cmp_")}
        self.assertEqual(drawn, compared)


if __name__ == "__main__":
    unittest.main()
