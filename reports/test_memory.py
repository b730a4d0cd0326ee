"""Tests of the ZeRO memory report (parity_reports/tables/memory.py) and of the data-parallel
sample as a whole (/bench/memory, /bench/scaling, /bench/overlap): sections, comparison, empty,
minimal and malformed tables, and the series of the memory figures.

Run with: /usr/bin/python3 reports/run_tests.py
"""

from collections import OrderedDict
import glob
import os
import re
import unittest

import h5py
import numpy as np

import make_sample
from report_testing import (CATEGORIES, MODEL_ONLY, ReportCase, SeriesCase, column, drop_column,
                            find_row, fmt_size, grouped, mean, ms, read_rows, scaling_row, set_rows,
                            strip_to)


PARALLEL_TABLES = ("/bench/memory", "/bench/scaling", "/bench/overlap")
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


# The figures whose series this module checks, of one run and of a comparison
# (test_page.py checks that every figure drawn is one of some module's).
CHECKED_FIGURES = {"zero_memory_mixed", "zero_memory_float32", "zero_bytes_sent"}


class MemoryReportTests(ReportCase):
    def parallel_file(self, name, **kwargs):
        """A file like `parity bench memory` and `parity bench scaling` write together."""
        return self.sample(name, omit=MODEL_ONLY, parallel=True, **kwargs)

    def test_parallel_sections(self):
        path = self.parallel_file("parallel.h5")
        out, html, summary = self.report_of("parallel_out", path)
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
        _, html, summary = self.report_of("memory_out", path, figures=False)
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
        _, html, summary = self.report_of("memory_mismatch_out", path, figures=False)
        words = (f"1 of {total} rows differ from the model-state formula: zero2 float32 at 3 "
                 "ranks (rank 1)")
        self.assertIn(words, summary)
        self.assertIn(words, html)
        self.assertIn("<span class=\"bad\">no</span> (rank 1)", html)
        # Without matches_formula the report compares the bytes with the formula itself.
        drop_column(path, "/bench/memory", "matches_formula")
        _, html, summary = self.report_of("memory_mismatch_out2", path, figures=False)
        self.assertIn(words, summary)

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
        out, html, summary = self.report_of("parallel_cmp", a, b)
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
        self.assertIn(f"| 1 MiB | yes | {ms(ea)} | {ms(eb)} | {eb / ea:.3f} |",
                      summary)
        sources = self.assert_pngs(out, html)
        self.assertEqual(len([s for s in sources if s.endswith("_scaling_compare.png")]), 1)

    def test_parallel_comparison_one_side(self):
        a = self.parallel_file("parallel_one.h5")
        out, html, summary = self.report_of("parallel_one_cmp", a, self.bare())
        for table in PARALLEL_TABLES:
            self.assertIn(f"Run B has no {table} table", html)
        self.assertEqual(glob.glob(os.path.join(out, "*_scaling_compare.png")), [])
        self.assertNotIn("## ZeRO memory", summary)

    def test_parallel_sections_absent_without_tables(self):
        self.assert_absent(("memory", "scaling", "overlap"),
                           ("ZeRO memory", "Data-parallel scaling", "Communication overlap"),
                           [f"*_{kind}*.png" for kind in ("zero_memory", "zero_bytes_sent",
                                                          "scaling", "overlap")])

    def test_parallel_empty_tables(self):
        path = self.sample("parallel_empty.h5", omit=MODEL_ONLY)
        for table in PARALLEL_TABLES:
            make_sample.add_empty_table(path, table)
        _, html, summary = self.report_of("parallel_empty_out", path)
        for table in PARALLEL_TABLES:
            self.assertIn(f"{table} is present but has 0 rows", html)
            self.assertIn(f"{table} has 0 rows", summary)

    def test_parallel_key_columns_only(self):
        """The columns the reader requires are enough to draw every section."""
        path = self.parallel_file("parallel_minimal.h5")
        for table in PARALLEL_TABLES:
            strip_to(path, table, KEY_COLUMNS[table])
        out, html, summary = self.report_of("parallel_minimal_out", path)
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
            self.assert_column_required(path, table, column)
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
        self.assert_refused(path, "column /bench/memory/model_state_bytes holds strings")


class MemorySeriesTests(SeriesCase):
    def zero_points(self, path):
        """{(precision, strategy): [rows of one world size] by world size}."""
        out = OrderedDict()
        rows = read_rows(path, "/bench/memory")
        for (precision, strategy), rs in grouped(rows, "precision", "strategy").items():
            out[(precision, strategy)] = [g for _, g in sorted(
                grouped(rs, "world_size").items())]
        return out

    def test_zero_memory(self):
        """Per strategy panel: the largest rank's bytes per category, the formula's model
        state and, where it differs visibly, the paper's."""
        points = self.zero_points(self.a)
        for precision in ("mixed", "float32"):
            figure = f"zero_memory_{precision}"
            pairs = []
            for strategy in ("dp", "zero1", "zero2", "zero3"):
                drawn = self.figure(self.single, figure, strategy)
                pts = points[(precision, strategy)]
                self.assertEqual(set(drawn) - {"paper formula"}, set(CATEGORIES) | {"formula"})
                for c in CATEGORIES:
                    self.assert_values(drawn[c].x, range(len(pts)), c)
                    pairs.append((drawn[c], [max(column(rows, f"{c}_bytes")) for rows in pts]))
                pairs.append((drawn["formula"],
                              [max(column(rows, "formula_model_state_bytes")) for rows in pts]))
                if "paper formula" in drawn:
                    paper = drawn["paper formula"]
                    pairs.append((paper, [max(column(pts[int(x)], "paper_model_state_bytes"))
                                          for x in paper.x]))
            self.assert_bytes(pairs)
        zero2 = points[("float32", "zero2")][1]  # at 2 ranks
        self.assert_distinct(column(zero2, "parameters_bytes"), column(zero2, "gradients_bytes"),
                             "parameter and gradient bytes of zero2")

    def test_zero_bytes_sent(self):
        """Per precision: the mean over ranks of the bytes sent, and of the formula."""
        points = self.zero_points(self.a)
        pairs, sent_all, formula_all = [], [], []
        for precision in ("mixed", "float32"):
            drawn = self.figure(self.single, "zero_bytes_sent", precision)
            for strategy in ("dp", "zero1", "zero2", "zero3"):
                pts = points[(precision, strategy)]
                sent = [mean(column(rows, "bytes_sent")) for rows in pts]
                formula = [mean(column(rows, "formula_bytes_sent")) for rows in pts]
                bars, marks = drawn[f"{strategy} bytes sent"], drawn[f"{strategy} formula"]
                self.assert_values(marks.x, bars.x, "formula marks on their bars")
                pairs += [(bars, sent), (marks, formula)]
                sent_all += sent
                formula_all += formula
        self.assert_bytes(pairs)
        self.assert_distinct(sent_all, formula_all, "bytes sent and their formula")


if __name__ == "__main__":
    unittest.main()
