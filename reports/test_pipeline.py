"""Tests of the pipeline report (parity_reports/tables/pipeline.py): the three pipeline tables
alone, oversubscribed, against a second run, minimal, empty or malformed, and the series of
its figures.

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
from report_testing import (MODEL_ONLY, RUNS, ReportCase, SeriesCase, column, find_row, grouped,
                            keep_rows, ms, read_rows, set_rows, strip_to)


PIPELINE_TABLES = ("/bench/pipeline", "/bench/pipeline_ranks", "/bench/pipeline_timeline")
PIPELINE_KEY_COLUMNS = ["schedule", "stages", "chunks", "micro_batches", "step_seconds",
                        "measured_bubble"]
PIPELINE_FIGURES = ("pipeline_timeline_gpipe", "pipeline_timeline_1f1b",
                    "pipeline_timeline_interleaved_v2", "pipeline_timeline_zb-h1",
                    "pipeline_bubble", "pipeline_activations")
# The timeline's boxes span rank - BOX to rank + BOX (parity_reports/tables/pipeline.py).
BOX = 0.4


# The figures whose series this module checks, of one run and of a comparison
# (test_page.py checks that every figure drawn is one of some module's).
CHECKED_FIGURES = set(PIPELINE_FIGURES)
CHECKED_COMPARISON_FIGURES = {"pipeline_compare"}


class PipelineReportTests(ReportCase):
    def pipeline_file(self, name, **kwargs):
        """A file like `parity bench pipeline` writes: the three pipeline tables alone."""
        return self.sample(name, omit=MODEL_ONLY, pipeline=True, **kwargs)

    @staticmethod
    def pipeline_run(rows, schedule, p, m):
        return find_row(rows, schedule=schedule, stages=p, micro_batches=m)

    def test_pipeline_section(self):
        path = self.pipeline_file("pipeline.h5")
        out, html, summary = self.report_of("pipeline_out", path)
        self.assert_section(out, html, summary, "pipeline", "Pipeline parallelism",
                            PIPELINE_FIGURES)
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
        _, html, summary = self.report_of("pipeline_over_out", path, figures=False)
        with h5py.File(path, "r") as f:
            note = f["/bench/pipeline"].attrs["note"]
        self.assertTrue(note)
        self.assertIn(f"<span class=\"bad\">Oversubscribed:</span> {html_escape(note)}.</p>",
                      html)
        self.assertIn(f"- **Oversubscribed:** {note}.", summary)
        self.assertIn("(oversubscribed: compare the simulated bubble).</li>", html)
        # A file without the note: the report's own words, with the group's counts.
        with h5py.File(path, "a") as f:
            f["/bench/pipeline"].attrs["note"] = ""
        _, html, _ = self.report_of("pipeline_over_out2", path, figures=False)
        self.assertIn("Oversubscribed:</span> ranks outnumber cores (2 ranks on a host with 1 "
                      "core), so a rank also waits for a core: wall-clock idle means little, and "
                      "the simulated bubble", html)
        # A note on a file that is not oversubscribed is shown as a note.
        with h5py.File(path, "a") as f:
            f["/bench/pipeline"].attrs["oversubscribed"] = np.int64(0)
            f["/bench/pipeline"].attrs["note"] = "one core or more per rank"
        _, html, summary = self.report_of("pipeline_over_out3", path, figures=False)
        self.assertIn("<p class=\"note\">one core or more per rank.</p>", html)
        self.assertNotIn("Oversubscribed", html)
        self.assertNotIn("Oversubscribed", summary)

    def test_pipeline_closed_form_differs(self):
        """A closed_form_bubble other than the closed form of p, m and v is named."""
        path = self.pipeline_file("pipeline_closed.h5")
        set_rows(path, "/bench/pipeline", "closed_form_bubble",
                 lambda r: (r["schedule"], r["stages"], r["micro_batches"]) == ("gpipe", 4, 8),
                 lambda r: 0.5)
        _, html, _ = self.report_of("pipeline_closed_out", path, figures=False)
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
        strip_to(path, "/bench/pipeline", PIPELINE_KEY_COLUMNS)
        out, html, summary = self.report_of("pipeline_minimal_out", path)
        sources = self.assert_pngs(out, html)
        self.assertEqual([s for s in sources if "_pipeline_" in s],
                         [s for s in sources if s.endswith("_pipeline_bubble.png")])
        self.assertEqual(len(sources), 1)
        self.assertIn("The file has no /bench/pipeline_timeline: no timeline figures.", html)
        self.assertIn("The file has no /bench/pipeline_ranks: no per-rank figure.", html)
        self.assertIn("<li>Pipeline: gpipe, 1f1b, interleaved v=2, zb-h1 at p = 2, 4", html)
        self.assertIn("## Pipeline parallelism", summary)

    def test_pipeline_clock_uncertainty_is_the_largest_runs(self):
        """The section bounds the clocks' uncertainty by the largest of the runs'."""
        path = self.pipeline_file("pipeline_clocks.h5")
        _, html, _ = self.report_of("pipeline_clocks_out", path, figures=False)
        values = column(read_rows(path, "/bench/pipeline"), "clock_uncertainty_seconds")
        self.assertLess(min(values), max(values) / 2)
        self.assertIn(f"on clocks aligned across ranks (uncertainty at most "
                      f"{max(values) * 1e6:.3g} us);", html)

    def test_pipeline_drawn_run_on_a_tie(self):
        """The run drawn (and named at a glance) is at the largest p the m closest to 2p, the
        smaller m on a tie: here p = 4 without m = 8, and m = 12 as far from 8 as m = 4."""
        path = self.pipeline_file("pipeline_tie.h5")
        with h5py.File(path, "a") as f:  # their rows name /bench/pipeline's by row index
            del f["/bench/pipeline_ranks"]
            del f["/bench/pipeline_timeline"]
        keep_rows(path, "/bench/pipeline", lambda r: (r["stages"], r["micro_batches"]) != (4, 8))
        set_rows(path, "/bench/pipeline", "micro_batches",
                 lambda r: (r["stages"], r["micro_batches"]) == (4, 16), lambda r: 12)
        rows = read_rows(path, "/bench/pipeline")
        top = max(r["stages"] for r in rows)
        sizes = sorted({r["micro_batches"] for r in rows if r["stages"] == top})
        self.assertEqual((top, sizes), (4, [4, 12]))
        m = min(sizes, key=lambda m: (abs(m - 2 * top), m))
        _, html, summary = self.report_of("pipeline_tie_out", path, figures=False)
        bubbles = "; ".join(
            f"{label} " + " / ".join(f"{r[c]:.3f}" for c in ("measured_bubble",
                                                             "simulated_bubble",
                                                             "closed_form_bubble"))
            for label, r in (("gpipe", self.pipeline_run(rows, "gpipe", top, m)),
                             ("1f1b", self.pipeline_run(rows, "1f1b", top, m)),
                             ("interleaved v=2", self.pipeline_run(rows, "interleaved", top, m)),
                             ("zb-h1", self.pipeline_run(rows, "zb-h1", top, m))))
        words = f"at p = {top}, m = {m}, bubble measured / simulated / closed form: {bubbles}"
        self.assertIn(f"- Drawn rank by rank: {words}.", summary)
        self.assertIn(f"; {words}", html)

    def test_pipeline_empty_and_malformed(self):
        path = self.sample("pipeline_empty.h5", omit=MODEL_ONLY)
        for table in PIPELINE_TABLES:
            make_sample.add_empty_table(path, table)
        out, html, summary = self.report_of("pipeline_empty_out", path)
        self.assertIn("/bench/pipeline is present but has 0 rows", html)
        self.assertIn("/bench/pipeline has 0 rows", summary)
        self.assertEqual(glob.glob(os.path.join(out, "*_pipeline_*.png")), [])
        for table, column in zip(PIPELINE_TABLES, ("micro_batches", "rank", "end_seconds")):
            path = self.pipeline_file(f"pipeline_no_{column}.h5")
            self.assert_column_required(path, table, column)

    def test_pipeline_comparison(self):
        a = self.pipeline_file("pipeline_a.h5", seed=1)
        b = self.pipeline_file("pipeline_b.h5", seed=2, pipeline_speed=1.25,
                               pipeline_oversubscribed=True)
        # A run only B has, in place of one only A has.
        set_rows(b, "/bench/pipeline", "micro_batches",
                 lambda r: (r["schedule"], r["stages"], r["micro_batches"]) == ("zb-h1", 2, 8),
                 lambda r: 6)
        out, html, summary = self.report_of("pipeline_cmp", a, b)
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
        self.assert_one_figure(out, html, "pipeline", "pipeline_compare")

    def test_pipeline_comparison_one_side(self):
        a = self.pipeline_file("pipeline_one.h5")
        self.assert_one_side(*self.report_of("pipeline_one_cmp", a, self.bare()), "/bench/pipeline",
                             "*_pipeline*.png", "Pipeline parallelism")

    def test_pipeline_absent_without_tables(self):
        """Files from before the pipeline benchmark report as they did."""
        self.assert_absent(["pipeline"], ("Pipeline", "/bench/pipeline"), ["*_pipeline*.png"])


class PipelineSeriesTests(SeriesCase):
    @staticmethod
    def pipeline_runs(path):
        """/bench/pipeline's rows, each with its row index (the run of the other two tables),
        grouped by (schedule, chunks) in file order."""
        rows = read_rows(path, "/bench/pipeline")
        for i, r in enumerate(rows):
            r["_row"] = i
        return grouped(rows, "schedule", "chunks")

    @staticmethod
    def pipeline_label(schedule, chunks):
        return f"interleaved v={chunks}" if schedule == "interleaved" else schedule

    def pipeline_drawn_runs(self, path):
        """{(schedule, chunks): the run drawn rank by rank}: the largest p, the m closest to 2p
        (the smaller on a tie)."""
        runs = self.pipeline_runs(path)
        top = max(r["stages"] for rows in runs.values() for r in rows)
        return OrderedDict((key, min((r for r in rows if r["stages"] == top),
                                     key=lambda r: (abs(r["micro_batches"] - 2 * top),
                                                    r["micro_batches"])))
                           for key, rows in runs.items())

    def test_pipeline_timelines(self):
        """Every interval of the drawn run's two timelines, in its rank's row: the box spans
        start to end (ms) and rank - BOX to rank + BOX."""
        timeline = read_rows(self.a, "/bench/pipeline_timeline")
        for (schedule, chunks), run in self.pipeline_drawn_runs(self.a).items():
            name = f"pipeline_timeline_{schedule}" + (f"_v{chunks}" if schedule == "interleaved"
                                                      else "")
            drawn = self.figure(self.single, name)
            self.assertEqual(run["stages"], 4)
            self.assertEqual(run["micro_batches"], 8)
            expected = set()
            for source in ("measured", "simulated"):
                mine = [i for i in timeline if (i["run"], i["source"]) == (run["_row"], source)]
                self.assertTrue(mine, (schedule, source))
                for (work,), intervals in grouped(mine, "work").items():
                    x = [t * 1e3 for i in intervals for t in (i["start_seconds"],
                                                              i["end_seconds"])]
                    ranks = [i["rank"] for i in intervals for _ in range(2)]
                    self.assert_series(drawn[f"{source} {work} bottom"], x,
                                       [k - BOX for k in ranks])
                    self.assert_series(drawn[f"{source} {work} top"], x,
                                       [k + BOX for k in ranks])
                    expected |= {f"{source} {work} bottom", f"{source} {work} top"}
            self.assertEqual(set(drawn), expected, name)
            works = {label.split()[1] for label in expected}
            self.assertIn("wait", works)
            self.assertEqual(works - {"wait"}, {"F", "I", "W"} if schedule == "zb-h1"
                             else {"F", "B"})

    def test_pipeline_bubble(self):
        """Per schedule and p, the measured and simulated bubbles against m, and the closed
        form: the curve of p (and v) for gpipe, 1f1b and interleaved, the file's points for
        zb-h1."""
        def closed(schedule, p, m, v):
            if schedule in ("gpipe", "1f1b"):
                return (p - 1) / (m + p - 1)
            x = (p - 1) / (v * m)
            return x / (1 + x)

        drawn = self.figure(self.single, "pipeline_bubble")
        expected = set()
        for (schedule, chunks), rows in self.pipeline_runs(self.a).items():
            label = self.pipeline_label(schedule, chunks)
            for (p,), at_p in grouped(rows, "stages").items():
                at_p = sorted(at_p, key=lambda r: r["micro_batches"])
                ms = column(at_p, "micro_batches")
                series = {f"{label} p={p} {what}": drawn[f"{label} p={p} {what}"]
                          for what in ("measured", "simulated", "closed form")}
                expected |= set(series)
                self.assert_series(series[f"{label} p={p} measured"], ms,
                                   column(at_p, "measured_bubble"))
                self.assert_series(series[f"{label} p={p} simulated"], ms,
                                   column(at_p, "simulated_bubble"))
                self.assert_distinct(column(at_p, "measured_bubble"),
                                     column(at_p, "simulated_bubble"),
                                     "measured and simulated bubbles")
                curve = series[f"{label} p={p} closed form"]
                if schedule == "zb-h1":
                    self.assert_series(curve, ms, column(at_p, "closed_form_bubble"))
                    continue
                self.assertEqual((curve.x[0], curve.x[-1]), (ms[0], ms[-1]))
                self.assert_series(curve, None, [closed(schedule, p, m, chunks) for m in curve.x])
                # The sample's column is the same closed form.
                self.assert_values(np.array(column(at_p, "closed_form_bubble")),
                                   [closed(schedule, p, m, chunks) for m in ms], label)
        self.assertEqual(set(drawn), expected)

    def test_pipeline_activations(self):
        """Per schedule at its drawn run, each rank's measured peak beside its formula."""
        ranks = read_rows(self.a, "/bench/pipeline_ranks")
        drawn = self.figure(self.single, "pipeline_activations")
        pairs, measured_all, formula_all = [], [], []
        for (schedule, chunks), run in self.pipeline_drawn_runs(self.a).items():
            label = self.pipeline_label(schedule, chunks)
            mine = sorted((x for x in ranks if x["run"] == run["_row"]), key=lambda x: x["rank"])
            self.assertEqual(len(mine), run["stages"])
            measured, formula = drawn[f"{label} measured peak"], drawn[f"{label} formula"]
            self.assert_values(formula.x - measured.x, [0.38] * len(mine), "formula beside")
            self.assertEqual(list(np.round(measured.x + 0.19)), column(mine, "rank"))
            pairs += [(measured, column(mine, "peak_activation_bytes")),
                      (formula, column(mine, "formula_activation_bytes"))]
            measured_all += column(mine, "peak_activation_bytes")
            formula_all += column(mine, "formula_activation_bytes")
        self.assert_bytes(pairs)
        self.assert_distinct(measured_all, formula_all, "activation peaks and their formula")

    def test_pipeline_comparison(self):
        """Per schedule and p, each run's step time against m."""
        drawn = self.figure(self.compared, "pipeline_compare")
        expected = set()
        for run, path in zip(RUNS, (self.a, self.b)):
            for (schedule, chunks), rows in self.pipeline_runs(path).items():
                label = self.pipeline_label(schedule, chunks)
                for (p,), at_p in grouped(rows, "stages").items():
                    at_p = sorted(at_p, key=lambda r: r["micro_batches"])
                    name = f"{label} p={p} {run}"
                    self.assert_series(drawn[name], column(at_p, "micro_batches"),
                                       column(at_p, "step_seconds", 1e3))
                    expected.add(name)
        self.assertEqual(set(drawn), expected)


if __name__ == "__main__":
    unittest.main()
