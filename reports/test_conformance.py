"""Tests of the conformance section (parity_reports/tables/conformance.py): the collective cases'
totals and failures, and the training and tensor-parallel cases.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import re
import unittest

import h5py
import numpy as np

from report_testing import (TENSOR_ONLY, ReportCase, after, conformance_counts, read_rows, set_rows,
                            text_col)


class ConformanceReportTests(ReportCase):
    def test_single_conformance_totals(self):
        total, failed = conformance_counts(self.a)
        words = f"{total} cases, {failed} failed"
        self.assertIn(words, self.read(self.single, "index.html"))
        self.assertIn(words, self.read(self.single, "summary.md"))
        html = self.read(self.single, "index.html")
        self.assertIn("rank 2 index 17: got 5 expected 7", html)
        self.assertIn("guard region after the output buffer was overwritten", html)

    def test_training_and_tensor_conformance(self):
        path = self.sample("tensor_checks.h5", omit=TENSOR_ONLY, tensor=True,
                           tensor_mismatch=True)
        # One training case fails as well, with its message.
        message = "parameters differ beyond 1e-12 (largest at blocks.0.mlp.fc.weight)"
        target = "training/zero2/adamw/float64/gpt"
        set_rows(path, "/check/training", "passed", lambda r: r["case"] == target, lambda r: 0)
        with h5py.File(path, "a") as f:
            ds = f["/check/training/message"]
            values = [message if c == target else m
                      for c, m in zip(text_col(f["/check/training/case"]), text_col(ds))]
            ds[...] = np.array(values, dtype=object)
        _, html, summary = self.report_of("tensor_checks_out", path, figures=False)
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

    def test_a_family_without_a_kind_is_reported_from_its_table(self):
        # A case family added to parity after this module: /check/widgets, its cases and
        # verdicts and its description, with no edit here (READS "/check/*").
        path = self.sample("widgets.h5", omit=TENSOR_ONLY, tensor=True)
        with h5py.File(path, "a") as f:
            f.copy(f["/check/training"], "/check/widgets")
            f["/check/widgets"].attrs["description"] = "widgets trained on every rank against one device"
        cases = [r["case"] for r in read_rows(path, "/check/widgets")]
        set_rows(path, "/check/widgets", "passed", lambda r: r["case"] == cases[1], lambda r: 0)
        with h5py.File(path, "a") as f:
            ds = f["/check/widgets/message"]
            ds[...] = np.array(["widget 3 wobbles" if c == cases[1] else m
                                for c, m in zip(text_col(f["/check/widgets/case"]), text_col(ds))],
                               dtype=object)
        n = len(cases)
        words = f"{n} cases, 1 failed ({n - 1} passed)"
        out, html, summary = self.report_of("widgets_out", path, figures=False)
        self.assertIn("<h3>Widgets cases</h3>", html)
        self.assertIn(f"{words}.</span> Widgets trained on every rank against one device.", html)
        self.assertIn(f"; widgets {words}.</li>", html)
        failed = after(html, "<h3>Failed widgets cases</h3>")
        self.assertIn(cases[1], failed)
        self.assertIn("widget 3 wobbles", failed)
        self.assertIn(f"Widgets cases: {words}.", summary)
        self.assertNotIn("Other tables in the file", html)
        # Beside a run without the table: B's side says so.
        plain = self.sample("plain.h5", omit=TENSOR_ONLY, tensor=True)
        _, html, summary = self.report_of("widgets_compare", path, plain, figures=False)
        section = after(html, "<h3>Widgets cases</h3>")
        self.assertIn(words, section)
        self.assertIn("no /check/widgets table", section)
        self.assertIn(f"- A widgets: {words}", summary)
        self.assertIn("- B widgets: no /check/widgets table", summary)

    def test_restore_cases_show_what_was_restored_exactly(self):
        # /check/restore rows as correctness/cases/restore.cpp writes them: one case whose
        # restored state differs from the saved one.
        path = self.sample("restore.h5", omit=TENSOR_ONLY, tensor=True)
        rows = [("restore/dp2-to-dp2/float32", "dp2", "dp2", 1, 1, 1),
                ("restore/dp2.zero1-to-tp2.sp/bfloat16", "dp2.zero1", "tp2.sp", 1, -1, 1),
                ("restore/tp2-to-one/float64", "tp2", "one", 0, -1, 0)]
        message = "the restored state differs from the saved one (first at embedding.wte); "
        with h5py.File(path, "a") as f:
            g = f.create_group("/check/restore")
            g.attrs["description"] = "conformance cases of the training state"
            strings = {"case": 0, "before": 1, "after": 2}
            for column, index in strings.items():
                g[column] = np.array([r[index] for r in rows], dtype=h5py.string_dtype())
            g["precision"] = np.array([r[0].rsplit("/", 1)[1] for r in rows], dtype=h5py.string_dtype())
            g["message"] = np.array([message if r[5] == 0 else "" for r in rows], dtype=h5py.string_dtype())
            g["restored_exactly"] = np.array([r[3] for r in rows], dtype=np.int64)
            g["bit_identical"] = np.array([r[4] for r in rows], dtype=np.int64)
            g["passed"] = np.array([r[5] for r in rows], dtype=np.int64)
            g["error"] = np.array([1e-5, 2e-2, 3e-3])
            g["bound"] = np.array([4e-4, 1.5, 7e-13])
            g.attrs["kind"] = "table"
            g.attrs["columns"] = np.array(list(g.keys()), dtype=h5py.string_dtype())
            g.attrs["rows"] = len(rows)
        _, html, summary = self.report_of("restore_out", path, figures=False)
        self.assertIn("<h3>Training-state restore cases</h3>", html)
        self.assertIn("Training-state restore cases: 3 cases, 1 failed (2 passed).", summary)
        table = after(after(html, "<h3>Failed training-state restore cases</h3>"), "Table: every case (3)")
        row = re.search(r"<tr class=\"diff\"><td><span class=\"mono\">restore/tp2-to-one/float64</span></td>.*?</tr>", table)
        self.assertIsNotNone(row)
        self.assertIn("<td class=\"num\">tp2</td><td class=\"num\">one</td>", row.group(0))
        self.assertEqual(row.group(0).count("<span class=\"bad\">no</span>"), 1)
        self.assertIn("tp2-to-one/float64", after(html, "<h3>Failed training-state restore cases</h3>"))
        self.assertIn(message.strip(), summary)


if __name__ == "__main__":
    unittest.main()
