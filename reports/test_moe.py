"""Tests of the mixture-of-experts report (parity_reports/tables/moe.py): the three MoE tables
and /check/moe alone, with bytes off the formula, against a second run, minimal, small, cut
short, empty or malformed, and the series of its figures.

Run with: /usr/bin/python3 reports/run_tests.py
"""

from collections import defaultdict
import glob
from html import escape as html_escape
import math
import os
import re
import unittest

import h5py
import numpy as np

import make_sample
from report_testing import (MODEL_ONLY, RUNS, TENSOR_ONLY, ReportCase, SeriesCase, add_column, after, column,
                            drop_column, find_row, grouped, keep_rows, mean, ms, read_rows,
                            set_rows, strip_to, table_at)


MOE_TABLES = ("/bench/moe", "/bench/moe_steps", "/bench/moe_load")
MOE_KEY_COLUMNS = {"/bench/moe": ["run", "ep", "router", "capacity_factor", "step_seconds"],
                   "/bench/moe_steps": ["run", "step", "block"],
                   "/bench/moe_load": ["run", "step", "block", "expert", "load"]}
MOE_FIGURES = ("moe_step", "moe_bytes", "moe_load", "moe_routers", "moe_dropped")


# The figures whose series this module checks, of one run and of a comparison
# (test_page.py checks that every figure drawn is one of some module's).
CHECKED_FIGURES = set(MOE_FIGURES)
CHECKED_COMPARISON_FIGURES = {"moe_compare"}


class MoeReportTests(ReportCase):
    def moe_file(self, name, **kwargs):
        """A file like `parity bench moe` and `parity check` write: the three MoE tables and the
        conformance tables, without the collective benchmark, which is slow to draw."""
        return self.sample(name, omit=TENSOR_ONLY, moe=True, **kwargs)

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
        out, html, summary = self.report_of("moe_out", path)
        self.assert_section(out, html, summary, "moe", "Mixture of experts", MOE_FIGURES,
                            "Mixture of experts")
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

    def test_moe_predicted_against_measured(self):
        """A file with the predicted columns gets the predicted-against-measured table, one row
        per run with its predicted and measured steps and their ratio; the sample (written before
        the columns) gets none."""
        path = self.moe_file("moe_predicted.h5")
        _, html, _ = self.report_of("moe_unpredicted", path, figures=False)
        self.assertNotIn("predicted step (ms)", after(html, 'id="moe"'))
        add_column(path, "/bench/moe", "predicted_all_to_all_seconds", lambda r: 0.5 * r["all_to_all_seconds"], "s")
        add_column(path, "/bench/moe", "predicted_step_seconds", lambda r: 0.8 * r["step_seconds"], "s")
        # The first run's ratio unknown, as for a run whose ranks outnumber the cores: its row
        # stays, "not compared".
        add_column(path, "/bench/moe", "predicted_over_measured",
                   lambda r: float("nan") if r["run"] == 0 else 0.8)
        _, html, _ = self.report_of("moe_predicted", path, figures=False)
        section = after(html, 'id="moe"')
        self.assertIn("predicted step (ms)", section)
        table = after(section, "predicted step (ms)")
        table = table[:table.index("</table>")]
        runs = read_rows(path, "/bench/moe")
        self.assertEqual(table.count("<tr"), len(runs))  # the rows after the header
        for r in runs:
            self.assertIn(f"{0.8 * r['step_seconds'] * 1e3:.2f}", table)
            self.assertIn(f"{r['step_seconds'] * 1e3:.2f}", table)
        self.assertEqual(table.count("not compared"), 1)
        self.assertEqual(table.count("<td class=\"num\">0.800</td>"), len(runs) - 1)

    def test_moe_mismatch_flagged(self):
        path = self.moe_file("moe_mismatch.h5", moe_mismatch=True)
        _, html, summary = self.report_of("moe_mismatch_out", path, figures=False)
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
        _, html, _ = self.report_of("moe_mismatch_out2", path, figures=False)
        self.assertIn(f"<span class=\"bad\">{words}</span>", html)

    def test_moe_bytes_to_the_whole_byte(self):
        """Without bytes_match the bytes are compared with the formula to the whole byte, as
        parity checks them (llround on both sides): one byte over reads as differing, a
        fraction of a byte that rounds away does not."""
        path = self.moe_file("moe_one_byte.h5")
        drop_column(path, "/bench/moe", "bytes_match")
        off = {(2, "top_k", 1.25): 1.0, (4, "aux_free", 1.25): 0.4}
        set_rows(path, "/bench/moe", "all_to_all_bytes",
                 lambda r: (r["ep"], r["router"], r["capacity_factor"]) in off,
                 lambda r: r["formula_all_to_all_bytes"]
                 + off[(r["ep"], r["router"], r["capacity_factor"])])
        rows = read_rows(path, "/bench/moe")

        def llround(x):
            return math.floor(x + 0.5)  # the counts are positive
        differ = [r for r in rows
                  if llround(r["all_to_all_bytes"]) != llround(r["formula_all_to_all_bytes"])]
        self.assertEqual([(r["ep"], r["router"], r["capacity_factor"]) for r in differ],
                         [(2, "top_k", 1.25)])
        _, html, summary = self.report_of("moe_one_byte_out", path, figures=False)
        words = (f"all-to-all bytes differ from the formula in 1 of {len(rows)} runs: ep = 2 "
                 f"top_k cf = 1.25")
        self.assertIn(f"<span class=\"bad\">{words}</span>", html)
        self.assertIn(f"- Against the formula: {words}.", summary)
        flagged = re.findall(r"<tr class=\"diff\"><td class=\"num\">(\d+)</td>", html)
        self.assertEqual(flagged, [str(r["run"]) for r in differ])

    def test_moe_timed_from_warmup_steps(self):
        """Without /bench/moe_steps' timed column a step is timed from the group's warmup_steps
        on (the first warmup_steps steps, 0 to warmup_steps - 1, are the warm-up), as the
        column the sample has says."""
        path = self.moe_file("moe_untimed.h5")
        with h5py.File(path, "r") as f:
            warmup = int(f["/bench/moe"].attrs["warmup_steps"])
        self.assertGreater(warmup, 0)
        runs = sorted(read_rows(path, "/bench/moe"), key=lambda r: r["run"])
        steps = read_rows(path, "/bench/moe_steps")
        self.assertTrue(all((s["timed"] == 1) == (s["step"] >= warmup) for s in steps))
        self.assertIn(warmup, {s["step"] for s in steps})
        want = [(s["step"], "yes" if s["step"] >= warmup else "no", s["block"])
                for r in runs for s in sorted((s for s in steps if s["run"] == r["run"]),
                                              key=lambda s: (s["step"], s["block"]))]
        drop_column(path, "/bench/moe_steps", "timed")
        _, html, _ = self.report_of("moe_untimed_out", path, figures=False)
        table = after(html, "every MoE layer at every step of every run")
        table = table[:table.index("</table>")]
        got = re.findall(r"<tr><td>[^<]*</td><td class=\"num\">(\d+)</td><td>(yes|no)</td>"
                         r"<td class=\"num\">(\d+)</td>", table)
        self.assertEqual([(int(step), timed, int(block)) for step, timed, block in got], want)

    def test_moe_comparison(self):
        a = self.moe_file("moe_a.h5", seed=1, moe_speed=2.0)
        b = self.moe_file("moe_b.h5", seed=2, moe_run="second")
        out, html, summary = self.report_of("moe_cmp", a, b)
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
        self.assert_one_figure(out, html, "moe", "moe_compare")

    def test_moe_comparison_one_side(self):
        a = self.moe_file("moe_one.h5")
        self.assert_one_side(*self.report_of("moe_one_cmp", a, self.bare()), "/bench/moe",
                             "*_moe*.png", "Mixture of experts")

    def test_moe_absent_without_tables(self):
        """Files from before the MoE benchmark report as they did."""
        self.assert_absent(["moe"], ("Mixture of experts", "MoE", "/bench/moe",
                                     "Mixture-of-experts"), ["*_moe*.png"])

    def test_moe_key_columns_only(self):
        """The columns the reader requires are enough for the section: the step as a whole per
        ep, the tokens per expert of every step, the sweeps as `parity bench moe` plans them;
        the report says what it cannot draw and claims nothing about the bytes."""
        path = self.moe_file("moe_minimal.h5")
        # The sweeps each run serves, as the file's flags say before they are stripped.
        sweeps = [", ".join(s for s in ("ep", "router", "cf") if r[f"in_{s}_sweep"] == 1) or "–"
                  for r in sorted(read_rows(path, "/bench/moe"), key=lambda r: r["run"])]
        for table in MOE_TABLES:
            strip_to(path, table, MOE_KEY_COLUMNS[table])
        out, html, summary = self.report_of("moe_minimal_out", path)
        runs = table_at(html, "<th>sweeps</th>")
        self.assertEqual([re.findall(r"<td[^>]*>([^<]*)</td>", row)[-1]
                          for row in re.findall(r"<tr[^>]*>(.*?)</tr>", runs)], sweeps)
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
        path = self.sample("moe_one_run.h5", omit=MODEL_ONLY, moe=True, moe_run="one-run")
        r, = read_rows(path, "/bench/moe")
        out, html, summary = self.report_of("moe_one_run_out", path)
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
        out, html, summary = self.report_of("moe_partial_out", path)
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
        path = self.sample("moe_empty.h5", omit=MODEL_ONLY)
        for table in MOE_TABLES:
            make_sample.add_empty_table(path, table)
        out, html, summary = self.report_of("moe_empty_out", path)
        self.assertIn("/bench/moe is present but has 0 rows", html)
        self.assertIn("/bench/moe has 0 rows", summary)
        self.assertEqual(glob.glob(os.path.join(out, "*_moe_*.png")), [])
        for table, column in zip(MOE_TABLES + ("/check/moe",),
                                 ("capacity_factor", "block", "load", "passed")):
            path = self.moe_file(f"moe_no_{column}.h5")
            self.assert_column_required(path, table, column)


class MoeSeriesTests(SeriesCase):
    def moe_tables(self, path):
        """/bench/moe's rows in run order, /bench/moe_steps' rows, and {(run, step): timed}."""
        runs = sorted(read_rows(path, "/bench/moe"), key=lambda r: r["run"])
        steps = read_rows(path, "/bench/moe_steps")
        return runs, steps, {(s["run"], s["step"]): s["timed"] == 1 for s in steps}

    @staticmethod
    def moe_per_step(steps, run, col):
        """(steps, the mean over the MoE layers of col at each) of a run."""
        by_step = grouped(sorted((s for s in steps if s["run"] == run),
                                 key=lambda s: (s["step"], s["block"])), "step")
        return [k[0] for k in by_step], [mean(column(v, col)) for v in by_step.values()]

    def test_moe_step_and_bytes(self):
        """The ep sweep's step split, by ep; the all-to-all bytes beside the formula of every run
        above ep = 1 (below it nothing is sent)."""
        runs, _, _ = self.moe_tables(self.a)
        drawn = self.figure(self.single, "moe_step")
        ep_runs = sorted((r for r in runs if r["in_ep_sweep"] == 1), key=lambda r: r["ep"])
        self.assertEqual(column(ep_runs, "ep"), [1, 2, 4])
        for label, col in (("compute", "compute_seconds"),
                           ("gradient reduction", "gradient_reduction_seconds"),
                           ("all-to-all", "all_to_all_seconds")):
            self.assert_series(drawn[label], range(len(ep_runs)), column(ep_runs, col, 1e3))
        self.assertEqual(set(drawn), {"compute", "gradient reduction", "all-to-all"})
        drawn = self.figure(self.single, "moe_bytes")
        sending = [r for r in runs if r["ep"] > 1]
        self.assertEqual(len(sending), len(runs) - 1)
        self.assert_bytes([(drawn["measured"], column(sending, "all_to_all_bytes")),
                           (drawn["formula"], column(sending, "formula_all_to_all_bytes"))])
        self.assert_distinct(column(sending, "all_to_all_bytes"),
                             column(sending, "formula_all_to_all_bytes"),
                             "all-to-all bytes and their formula")

    def test_moe_tokens_per_expert(self):
        """Per router at the largest ep, the tokens each expert was chosen for in each MoE layer
        summed over the timed steps: k x tokens choices per layer and timed step for the token
        choice routers, the same for every expert with expert choice."""
        runs, steps, timed = self.moe_tables(self.a)
        load = read_rows(self.a, "/bench/moe_load")
        drawn = self.figure(self.single, "moe_load")
        routers = [r for r in runs if r["in_router_sweep"] == 1]
        self.assertEqual([r["router"] for r in routers], ["top_k", "expert_choice", "aux_free"])
        for r in routers:
            mine = [x for x in load if x["run"] == r["run"]]
            blocks = sorted({x["block"] for x in mine})
            experts = sorted({x["expert"] for x in mine})
            sums = defaultdict(int)
            for x in mine:
                if timed[(r["run"], x["step"])]:
                    sums[(x["block"], x["expert"])] += x["load"]
            heat = drawn[f"{r['router']} tokens"]
            self.assert_series(heat, experts, blocks)
            self.assert_values(heat.z, [[sums[(b, e)] for e in experts] for b in blocks],
                               f"{r['router']} tokens per expert")
            n_timed = sum(1 for (run, _), t in timed.items() if run == r["run"] and t)
            tokens = {s["tokens"] for s in steps if s["run"] == r["run"]}
            self.assertEqual(len(tokens), 1)
            if r["router"] == "expert_choice":
                self.assertEqual(len(set(heat.z.ravel())), 1)
            else:
                self.assert_values(heat.z.sum(axis=1),
                                   [r["top_k"] * tokens.pop() * n_timed] * len(blocks),
                                   f"{r['router']} choices per layer")
        self.assertEqual(set(drawn), {f"{r['router']} tokens" for r in routers})

    def test_moe_routers_and_dropped(self):
        """Per router, the load imbalance at every step (mean over the MoE layers) and the
        balancing loss of top_k, the one router with one; against cf, the dropped fraction at
        the first step and the timed steps' mean, inf past the largest cf."""
        runs, steps, _ = self.moe_tables(self.a)
        drawn = self.figure(self.single, "moe_routers")
        expected = {"balanced"}
        for r in (r for r in runs if r["in_router_sweep"] == 1):
            for what, col in (("load imbalance", "load_imbalance"),
                              ("balancing loss", "balancing_loss")):
                xs, ys = self.moe_per_step(steps, r["run"], col)
                if col == "balancing_loss" and not any(ys):
                    continue
                self.assert_series(drawn[f"{r['router']} {what}"], xs, ys)
                expected.add(f"{r['router']} {what}")
        self.assertIn("top_k balancing loss", expected)
        self.assertEqual(set(drawn), expected)
        self.assert_series(drawn["balanced"], [], [1.0])

        drawn = self.figure(self.single, "moe_dropped")
        cf_runs = sorted((r for r in runs if r["in_cf_sweep"] == 1),
                         key=lambda r: r["capacity_factor"])
        cfs = column(cf_runs, "capacity_factor")
        self.assertEqual(cfs, [0.5, 1.0, 1.25, 2.0, float("inf")])
        xs = cfs[:-1] + [2.5]  # inf: half a unit past 2
        first = [self.moe_per_step(steps, r["run"], "dropped_fraction")[1][0] for r in cf_runs]
        self.assert_series(drawn["top_k timed mean"], xs,
                           column(cf_runs, "mean_dropped_fraction"))
        self.assert_series(drawn["top_k first step"], xs, first)
        self.assert_distinct(first, column(cf_runs, "mean_dropped_fraction"),
                             "dropped fractions at the first step and over the timed steps")
        self.assertEqual(set(drawn), {"top_k timed mean", "top_k first step"})

    def test_moe_comparison(self):
        """Per matched run, each run's step without the all-to-alls and the all-to-alls on
        top."""
        drawn = self.figure(self.compared, "moe_compare")
        for run, path in zip(RUNS, (self.a, self.b)):
            rows, _, _ = self.moe_tables(path)
            self.assert_series(drawn[f"{run} rest of the step"], None,
                               [r["step_seconds"] * 1e3 - r["all_to_all_seconds"] * 1e3
                                for r in rows])
            self.assert_series(drawn[f"{run} all-to-all"], None,
                               column(rows, "all_to_all_seconds", 1e3))


if __name__ == "__main__":
    unittest.main()
