"""Tests of the tensor-parallelism report (parity_reports/tables/tensor.py): /bench/tensor alone,
with a count off its formula, against a second run, minimal, empty or malformed, and the series
of its figures.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import math
import re
import unittest

import make_sample
from report_testing import (MODEL_ONLY, RUNS, TENSOR_ONLY, ReportCase, SeriesCase, after, column,
                            conformance_counts, drop_column, find_row, read_rows, set_rows,
                            strip_to)


TENSOR_KEY_COLUMNS = ["model", "tp", "dp", "sequence_parallel", "step_seconds", "bytes_total",
                      "formula_bytes_total"]
# The byte figure's panels: the parts of a step, "block" titled "one block".
PARTS = ["embedding", "block", "head", "loss"]
PART_TITLES = {"block": "one block"}


# The figures whose series this module checks, of one run and of a comparison
# (test_page.py checks that every figure drawn is one of some module's).
CHECKED_FIGURES = {"tensor_activations", "tensor_bytes", "tensor_step"}
CHECKED_COMPARISON_FIGURES = {"tensor_compare"}


class TensorReportTests(ReportCase):
    def tensor_file(self, name, **kwargs):
        """A file like `parity bench tensor` and `parity check` write: /bench/tensor and the
        conformance tables (collectives, training, tensor), without the collective benchmark,
        which is slow to draw."""
        return self.sample(name, omit=TENSOR_ONLY, tensor=True, **kwargs)

    def test_tensor_section(self):
        path = self.tensor_file("tensor.h5")
        out, html, summary = self.report_of("tensor_out", path)
        self.assert_section(out, html, summary, "tensor", "Tensor parallelism",
                            ("tensor_activations", "tensor_bytes", "tensor_step"))
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
        _, html, summary = self.report_of("tensor_mismatch_out", path, figures=False)
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
        _, html, summary = self.report_of("tensor_mismatch_out2", path, figures=False)
        self.assertIn(f"2 of {len(rows)} rows differ from the formulas: t = 2 with SP (block "
                      "bytes); t = 4 (activations)", summary)

    def test_tensor_bytes_to_the_whole_byte(self):
        """Without bytes_match a part's bytes are compared with its formula to the whole byte,
        as parity checks them (llround on both sides): 0.4 B under the formula is the same
        count, 0.6 B over it is one byte more."""
        path = self.tensor_file("tensor_rounding.h5")
        drop_column(path, "/bench/tensor", "bytes_match")
        off = {(2, 1): -0.4, (4, 0): 0.6}
        set_rows(path, "/bench/tensor", "formula_bytes_block",
                 lambda r: (r["tp"], r["sequence_parallel"]) in off,
                 lambda r: r["bytes_block"] + off[(r["tp"], r["sequence_parallel"])])
        rows = read_rows(path, "/bench/tensor")

        def llround(x):
            return math.floor(x + 0.5)  # the counts are positive
        differ = [(r["tp"], r["sequence_parallel"], [p for p in PARTS if llround(r[f"bytes_{p}"])
                                                     != llround(r[f"formula_bytes_{p}"])])
                  for r in rows]
        differ = [d for d in differ if d[2]]
        self.assertEqual(differ, [(4, 0, ["block"])])
        _, html, summary = self.report_of("tensor_rounding_out", path, figures=False)
        words = (f"1 of {len(rows)} rows differ from the formulas: "
                 + "; ".join(f"t = {t}{' with SP' if sp else ''} ({' and '.join(parts)} bytes)"
                             for t, sp, parts in differ))
        self.assertIn(f"<li>Tensor parallelism: t = 1, 2, 4; {words}.</li>", html)
        self.assertIn(words, summary)

    def test_tensor_comparison(self):
        a = self.tensor_file("tensor_a.h5", seed=1)
        b = self.tensor_file("tensor_b.h5", seed=2, tensor_speed=1.25, tensor_mismatch=True)
        out, html, summary = self.report_of("tensor_cmp", a, b)
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
        out, html, summary = self.report_of("tensor_one_cmp", a, self.bare())
        self.assert_one_side(out, html, summary, "/bench/tensor", "*_tensor*.png")
        n = len(read_rows(a, "/check/tensor"))
        self.assertIn(f"Tensor-parallel cases: A {n} cases, all passed; B no /check/tensor "
                      "table.", html)
        self.assertIn("- B training: no /check/training table", summary)
        self.assertNotIn("## Tensor parallelism", summary)

    def test_tensor_absent_without_tables(self):
        """Files from before tensor parallelism report as they did."""
        self.assert_absent(["tensor"], ("Tensor parallelism", "Training cases",
                                        "Tensor-parallel cases", "Collective cases",
                                        "/check/tensor", "/check/training"), ["*_tensor*.png"])
        total, failed = conformance_counts(self.a)
        self.assertIn(f"<li>Conformance: {total} cases, {failed} failed ({total - failed} "
                      "passed).</li>", self.read(self.single, "index.html"))
        self.assertIn("<h3>Failed cases</h3>", self.read(self.single, "index.html"))

    def test_tensor_key_columns_only(self):
        """The columns the reader requires are enough to draw the section."""
        path = self.tensor_file("tensor_minimal.h5")
        strip_to(path, "/bench/tensor", TENSOR_KEY_COLUMNS)
        out, html, summary = self.report_of("tensor_minimal_out", path)
        sources = self.assert_pngs(out, html)
        for kind in ("tensor_bytes", "tensor_step"):
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        self.assertIn("no activation_bytes_per_block column", html)
        self.assertIn("equal the formulas in all 5 rows", summary)

    def test_tensor_empty_and_malformed(self):
        path = self.sample("tensor_empty.h5", omit=MODEL_ONLY)
        make_sample.add_empty_table(path, "/bench/tensor")
        _, html, summary = self.report_of("tensor_empty_out", path)
        self.assertIn("/bench/tensor is present but has 0 rows", html)
        self.assertIn("/bench/tensor has 0 rows", summary)
        for table, column in (("/bench/tensor", "formula_bytes_total"),
                              ("/check/tensor", "passed"), ("/check/training", "case")):
            path = self.tensor_file(f"tensor_no_{column}.h5")
            self.assert_column_required(path, table, column)


class TensorSeriesTests(SeriesCase):
    def tensor_rows(self, path):
        """/bench/tensor in the figures' order: t, dp, then SP off before on."""
        return sorted(read_rows(path, "/bench/tensor"),
                      key=lambda r: (r["tp"], r["dp"], r["sequence_parallel"]))

    def test_tensor(self):
        rows = self.tensor_rows(self.a)
        drawn = self.figure(self.single, "tensor_activations")
        self.assert_values(drawn["formula"].x, drawn["measured"].x, "diamonds on their bars")
        self.assert_bytes([(drawn["measured"], column(rows, "activation_bytes_per_block")),
                           (drawn["formula"], column(rows, "formula_activation_bytes_per_block")),
                           (drawn["Korthikanti"],
                            column(rows, "korthikanti_activation_bytes_per_block"))])
        self.assert_distinct(column(rows, "activation_bytes_per_block"),
                             column(rows, "formula_activation_bytes_per_block"),
                             "activations and their formula")

        sending = [r for r in rows if r["tp"] > 1]
        for part in PARTS:
            drawn = self.figure(self.single, "tensor_bytes", PART_TITLES.get(part, part))
            self.assert_bytes([(drawn["measured"], column(sending, f"bytes_{part}")),
                               (drawn["formula"], column(sending, f"formula_bytes_{part}"))])
        self.assert_distinct(column(sending, "bytes_block"),
                             column(sending, "formula_bytes_block"), "block bytes and formula")

        drawn = self.figure(self.single, "tensor_step")
        self.assert_series(drawn["compute"], range(len(rows)), column(rows, "compute_seconds", 1e3))
        self.assert_series(drawn["tp comm"], range(len(rows)), column(rows, "tp_comm_seconds", 1e3))
        self.assert_series(drawn["compute + predicted comm"],
                           [i for i, r in enumerate(rows) if r["tp"] > 1],
                           [r["compute_seconds"] * 1e3 + r["predicted_comm_seconds"] * 1e3
                            for r in sending])

    def test_tensor_comparison(self):
        """Per matched run: compute (step - tensor-parallel communication) and that
        communication on top, of each run."""
        drawn = self.figure(self.compared, "tensor_compare")
        for run, path in zip(RUNS, (self.a, self.b)):
            rows = self.tensor_rows(path)
            self.assert_series(drawn[f"{run} compute"], None,
                               [r["step_seconds"] * 1e3 - r["tp_comm_seconds"] * 1e3
                                for r in rows])
            self.assert_series(drawn[f"{run} tp comm"], None,
                               [r["tp_comm_seconds"] * 1e3 for r in rows
                                if r["tp_comm_seconds"] > 0])


if __name__ == "__main__":
    unittest.main()
