"""Tests of the data-parallel scaling report (parity_reports/tables/scaling.py): the summary of
strong and weak scaling, and the series of its figures.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import unittest

import numpy as np

from report_testing import (MODEL_ONLY, RUNS, ReportCase, SeriesCase, column, fmt_num, fmt_size,
                            grouped, read_rows, scaling_row)


CHECKED_FIGURES = {"scaling"}
CHECKED_COMPARISON_FIGURES = {"scaling_compare"}


class ScalingReportTests(ReportCase):
    def test_scaling_and_overlap_summary(self):
        path = self.sample("scaling.h5", omit=MODEL_ONLY, parallel=True)
        _, html, summary = self.report_of("scaling_out", path, figures=False)
        rows = read_rows(path, "/bench/scaling")
        t1 = scaling_row(rows, "strong", 1)["step_seconds"]
        last = scaling_row(rows, "strong", 4)
        t4 = last["step_seconds"]
        s = last["amdahl_serial_fraction"]
        line = (f"Strong scaling to 4 ranks: speedup {fmt_num(t1 / t4)} (efficiency "
                f"{t1 / (4 * t4):.3f}), Amdahl serial fraction {s:.3g}.")
        self.assertIn(f"- {line}", summary)
        self.assertIn(f"Strong scaling to 4 ranks: speedup {fmt_num(t1 / t4)}", html)
        self.assertIn(f"Amdahl serial fraction {s:.3g}", html)
        w1 = scaling_row(rows, "weak", 1)["step_seconds"]
        w4 = scaling_row(rows, "weak", 4)["step_seconds"]
        # Amdahl's law is fitted to strong scaling only: no serial fraction for weak.
        self.assertIn(f"- Weak scaling to 4 ranks: scaled speedup {fmt_num(4 * w1 / w4)} "
                      f"(efficiency {w1 / w4:.3f}).", summary)
        overlap = read_rows(path, "/bench/overlap")
        best = max((r for r in overlap if r["overlap"] == 1), key=lambda r: r["hidden_fraction"])
        self.assertIn(f"best hidden fraction {best['hidden_fraction']:.3f} with "
                      f"{fmt_size(best['bucket_bytes'])} buckets", summary)
        self.assertIn(f"Best hidden fraction {best['hidden_fraction']:.3f}", html)


class ScalingSeriesTests(SeriesCase):
    def test_scaling(self):
        """Speedup, efficiency and communication per mode; the ideal; Amdahl's law with the
        file's serial fraction where it has one."""
        modes = grouped(read_rows(self.a, "/bench/scaling"), "mode")
        drawn = self.figure(self.single, "scaling")
        sizes = []
        for (mode,), rows in modes.items():
            rows = sorted(rows, key=lambda r: r["world_size"])
            ns = column(rows, "world_size")
            sizes += ns
            for label, col, scale in (("speedup", "speedup", 1), ("efficiency", "efficiency", 1),
                                      ("exposed comm", "exposed_comm_seconds", 1e3),
                                      ("predicted comm", "predicted_comm_seconds", 1e3)):
                self.assert_series(drawn[f"{mode} {label}"], ns, column(rows, col, scale))
            s = rows[0]["amdahl_serial_fraction"]
            fit = drawn.get(f"{mode} Amdahl fit")
            if np.isnan(s):
                self.assertIsNone(fit, mode)
                continue
            self.assertEqual((fit.x[0], fit.x[-1]), (ns[0], ns[-1]))
            self.assert_series(fit, None, 1 / (s + (1 - s) / fit.x))
            self.assert_distinct(column(rows, "speedup"), column(rows, "efficiency"),
                                 "speedup and efficiency")
            self.assert_distinct(column(rows, "exposed_comm_seconds"),
                                 column(rows, "predicted_comm_seconds"),
                                 "exposed and predicted communication")
        self.assert_series(drawn["ideal"], [min(sizes), max(sizes)], [min(sizes), max(sizes)])

    def test_scaling_comparison(self):
        drawn = self.figure(self.compared, "scaling_compare")
        for run, path in zip(RUNS, (self.a, self.b)):
            for (mode,), rows in grouped(read_rows(path, "/bench/scaling"), "mode").items():
                rows = sorted(rows, key=lambda r: r["world_size"])
                self.assert_series(drawn[f"{mode} step time {run}"], column(rows, "world_size"),
                                   column(rows, "step_seconds", 1e3))


if __name__ == "__main__":
    unittest.main()
