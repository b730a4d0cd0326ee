"""Tests of the activation-checkpointing report (parity_reports/tables/checkpoint.py) and the
series of its figures.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import os
import re
import shutil
import tempfile
import unittest

import numpy as np

import make_sample
from report_testing import (MODEL_ONLY, RUNS, TENSOR_ONLY, DrawnOnce, ReportCase, SeriesCase, after,
                            column, drop_column, find_row, ms, read_columns, read_rows, set_rows)


CHECKPOINT_REQUIRED = ["policy", "peak_bytes", "formula_peak_bytes", "time_ratio"]
CHECKPOINT_FIGURES = ("checkpoint_tradeoff", "checkpoint_formulas")
# The checkpointing trade-off's panels: {measured column: title}, and the bars' offset from a
# policy's tick (parity_reports/tables/checkpoint.py).
CHECKPOINT_PANELS = {"peak_bytes": "peak: the most the blocks hold at once",
                     "stored_bytes": "stored between forward and backward"}
CHECKPOINT_BAR = 0.19


# The figures whose series this module checks, of one run and of a comparison
# (test_page.py checks that every figure drawn is one of some module's).
CHECKED_FIGURES = set(CHECKPOINT_FIGURES)
CHECKED_COMPARISON_FIGURES = {"checkpoint_compare"}


class CheckpointAbsentTests(ReportCase):
    def test_checkpoint_absent_without_tables(self):
        """Files from before activation checkpointing report as they did (its own tests are
        CheckpointReportTests)."""
        self.assert_absent(["checkpoint"], ("Activation checkpointing",
                                            "Activation-checkpointing", "checkpoint"),
                           ["*_checkpoint*.png"])


class CheckpointReportTests(DrawnOnce, unittest.TestCase):
    """/bench/checkpoint and /check/checkpoint. The reports are drawn once for the class, side by
    side: a file like `parity bench checkpoint` and `parity check` write, whose every3 policy
    peaks above the formula and whose selective policy's losses differ; that file against a
    second run; against a file without the table; one with the required columns alone; and one
    whose table has no rows."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-checkpoint-test-")
        cls.a, cls.b, cls.bare, cls.minimal, cls.empty, cls.below = (
            os.path.join(cls.tmp, name) for name in ("a.h5", "b.h5", "bare.h5", "minimal.h5",
                                                     "empty.h5", "below.h5"))
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
        make_sample.add_empty_table(cls.empty, "/bench/checkpoint")
        # Its every3 policy peaks below the formula (the sample's mismatch is above it).
        policy, extra = make_sample.CHECKPOINT_MISMATCH_POLICY
        make_sample.write_sample(cls.below, omit=MODEL_ONLY, checkpoint=True)
        set_rows(cls.below, "/bench/checkpoint", "peak_bytes", lambda r: r["policy"] == policy,
                 lambda r: r["formula_peak_bytes"] - extra)
        set_rows(cls.below, "/bench/checkpoint", "matches_formula",
                 lambda r: r["policy"] == policy, lambda r: 0)
        reports = {"single": [cls.a], "compare": [cls.a, cls.b], "one_side": [cls.a, cls.bare],
                   "minimal": [cls.minimal], "empty": [cls.empty], "below": [cls.below]}
        cls.draw(reports)

    def section(self, html):
        return after(html, "<h2 id=\"checkpoint\">").split("<h2")[0]

    def test_section_and_figures(self):
        out, html, summary = self.report("single")
        self.assert_section(out, html, summary, "checkpoint", "Activation checkpointing",
                            CHECKPOINT_FIGURES, "Activation checkpointing")
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

    def test_count_below_formula_flagged(self):
        """A count below its formula differs from it as one above does: the policy fails on the
        count that differs (here its peak bytes), not on its verdict alone ("formulas")."""
        _, html, summary = self.report("below")
        rows = read_rows(self.below, "/bench/checkpoint")
        words = {"stored_bytes": "stored bytes", "peak_bytes": "peak bytes",
                 "recompute_flops": "recompute FLOPs"}
        failing = [(r["policy"], [w for c, w in words.items() if r[c] != r[f"formula_{c}"]])
                   for r in rows if r["matches_formula"] != 1 or r["losses_equal"] != 1]
        self.assertEqual(failing, [("every3", ["peak bytes"])])
        r = find_row(rows, policy="every3")
        self.assertLess(r["peak_bytes"], r["formula_peak_bytes"])
        line = f"1 of {len(rows)} policies fail: every3 (peak bytes differ)"
        self.assertIn(f"; <span class=\"bad\">{line}</span>.</li>", html)
        self.assertIn(f"- Against the run without recompute and the formulas: {line}.", summary)
        flagged = re.findall(r"<tr class=\"diff\"><td>([^<]*)</td>(.*?)</tr>", self.section(html))
        self.assertEqual([policy for policy, _ in flagged], ["every3"])
        self.assertIn(f"<span class=\"bad\">{r['peak_bytes']:,}</span>", flagged[0][1])

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

    def test_glance_names_the_full_policy_against_none(self):
        """At a glance: the full policy's peak against the peak without recompute (none's) and
        the full policy's own time ratio."""
        html = self.report("single")[1]
        rows = read_rows(self.a, "/bench/checkpoint")
        full, none = find_row(rows, policy="full"), find_row(rows, policy="none")
        self.assertNotEqual(f"{full['time_ratio']:.3f}", f"{none['time_ratio']:.3f}")
        for r in (full, none):
            self.assertTrue(1 << 20 <= r["peak_bytes"] < 1 << 30, r["peak_bytes"])
        mib = lambda n: f"{n / (1 << 20):.3g} MiB"  # noqa: E731
        self.assertIn(f"<li>Activation checkpointing: {len(rows)} policies; full recompute: peak "
                      f"{mib(full['peak_bytes'])} against {mib(none['peak_bytes'])} without, "
                      f"time × {full['time_ratio']:.3f}; ", html)

    def test_comparison_says_which_run_passes(self):
        """In the comparison's table, 'passes A' and 'passes B' per policy: a policy passes when
        its losses equal the run without recompute and each count equals its formula."""
        html = self.report("compare")[1]
        section = self.section(html)

        def passes(r):
            return (r["losses_equal"] == 1 and r["matches_formula"] == 1
                    and all(r[c] == r[f"formula_{c}"]
                            for c in ("stored_bytes", "peak_bytes", "recompute_flops")))
        runs = [{r["policy"]: passes(r) for r in read_rows(path, "/bench/checkpoint")}
                for path in (self.a, self.b)]
        self.assertEqual(sorted(p for p, ok in runs[0].items() if not ok), ["every3", "selective"])
        self.assertTrue(all(runs[1].values()))
        for policy in runs[0]:
            row = re.search(rf"<tr[^>]*><td>{policy}</td>.*?</tr>", section).group(0)
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
            self.assertEqual(cells[-2:], ["yes" if ok else "<span class=\"bad\">no</span>"
                                          for ok in (runs[0][policy], runs[1][policy])], policy)

    def test_comparison_one_side(self):
        self.assert_one_side(*self.report("one_side"), "/bench/checkpoint", "*_checkpoint*.png",
                             "Activation checkpointing")

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
        self.assert_empty(*self.report("empty"), "/bench/checkpoint", "*_checkpoint*.png")

    def test_missing_required_column(self):
        for table, column in [("/bench/checkpoint", c) for c in CHECKPOINT_REQUIRED] + [
                ("/check/checkpoint", "passed"), ("/check/checkpoint", "case")]:
            with self.subTest(table=table, column=column):
                path = os.path.join(self.tmp, f"no_{column}.h5")
                shutil.copy(self.a, path)
                self.assert_column_required(path, table, column)


class CheckpointSeriesTests(SeriesCase):
    def test_checkpoint_tradeoff(self):
        """Per byte count, each policy's measured point (time_ratio, its bytes) and where the
        formulas put it: x = 1 + formula_recompute_flops / baseline_step_flops (the FLOP
        overhead), y = the formula's bytes; and x = 1, the step without recompute."""
        rows = read_rows(self.a, "/bench/checkpoint")
        formula_x = [1 + r["formula_recompute_flops"] / r["baseline_step_flops"] for r in rows]
        for col, title in CHECKPOINT_PANELS.items():
            drawn = self.figure(self.single, "checkpoint_tradeoff", title)
            self.assertEqual(set(drawn), {"measured", "formula", "no recompute"})
            self.assert_values(drawn["measured"].x, column(rows, "time_ratio"),
                               f"{col} measured x")
            self.assert_values(drawn["formula"].x, formula_x, f"{col} formula x")
            self.assert_bytes([(drawn["measured"], column(rows, col)),
                               (drawn["formula"], column(rows, f"formula_{col}"))])
            self.assert_series(drawn["no recompute"], [1.0], [])
        self.assert_distinct(column(rows, "time_ratio"), formula_x,
                             "time ratios and the formulas' FLOP overheads")
        self.assert_distinct(column(rows, "recompute_flops"),
                             column(rows, "formula_recompute_flops"),
                             "recompute FLOPs and their formula")
        self.assert_distinct(column(rows, "peak_bytes"), column(rows, "formula_peak_bytes"),
                             "peak bytes and their formula")
        self.assert_distinct(column(rows, "peak_bytes"), column(rows, "stored_bytes"),
                             "peak and stored bytes")

    def test_checkpoint_formulas(self):
        """Per policy, the stored and peak bytes side by side beside their formulas; the
        recompute FLOPs counted and by the formula, and the time overhead, in percent of the
        step without recompute."""
        rows = read_rows(self.a, "/bench/checkpoint")
        ticks = np.arange(len(rows))
        drawn = self.figure(self.single, "checkpoint_formulas", "activation bytes of the blocks")
        pairs = []
        for label, col, dx in (("stored", "stored_bytes", -CHECKPOINT_BAR),
                               ("peak", "peak_bytes", CHECKPOINT_BAR)):
            for what, name in ((label, col), (f"{label} formula", f"formula_{col}")):
                self.assert_values(drawn[what].x, ticks + dx, f"{what} x")
                pairs.append((drawn[what], column(rows, name)))
        self.assert_bytes(pairs)
        self.assertEqual(len(drawn), 4)
        drawn = self.figure(self.single, "checkpoint_formulas",
                            "recompute FLOPs and time overhead")
        base = column(rows, "baseline_step_flops")
        for label, values in (
                ("recompute FLOPs", [100 * r["recompute_flops"] / b for r, b in zip(rows, base)]),
                ("recompute FLOPs formula",
                 [100 * r["formula_recompute_flops"] / b for r, b in zip(rows, base)]),
                ("time overhead", [100 * (r["time_ratio"] - 1) for r in rows])):
            self.assert_series(drawn[label], ticks, values)
        self.assertEqual(len(drawn), 3)

    def test_checkpoint_comparison(self):
        """Per policy both runs have, each run's time ratio; the step without recompute at 1."""
        drawn = self.figure(self.compared, "checkpoint_compare")
        runs = [read_rows(path, "/bench/checkpoint") for path in (self.a, self.b)]
        policies = [r["policy"] for r in runs[0]]
        self.assertEqual(policies, [r["policy"] for r in runs[1]])
        for j, (run, rows) in enumerate(zip(RUNS, runs)):
            self.assert_series(drawn[f"{run} time ratio"],
                               np.arange(len(policies)) + (j - 0.5) * 0.3,
                               column(rows, "time_ratio"))
        self.assert_series(drawn["no recompute"], [], [1.0])
        self.assertEqual(len(drawn), 3)


if __name__ == "__main__":
    unittest.main()
