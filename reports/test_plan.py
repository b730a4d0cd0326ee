"""Tests of the plan section (parity_reports/tables/plan.py): the predicted step parts and memory
categories as drawn against /plan/layouts of a recorded `parity plan --out` (fixtures/
plan-np4.h5: Llama 3 8B on 64 GPUs of h100-sxm-dgx, global batch 512, the 8 fastest).

Run with: /usr/bin/python3 reports/run_tests.py
"""

import os
import re
import shutil
import unittest

import h5py
import numpy as np

from report_testing import HERE, RecordingCase, draw_series, drawn_report, read_rows, set_rows

FIXTURE = os.path.join(HERE, "fixtures", "plan-np4.h5")
CHECKED_FIGURES = {"plan_time", "plan_memory", "plan_scaling"}
# A comparison draws each run's as one run's (side by side): the same series, checked here.
CHECKED_COMPARISON_FIGURES = {"plan_time", "plan_memory", "plan_scaling"}


class PlanReportTests(RecordingCase):
    FIXTURE = FIXTURE
    TABLE = "/plan/layouts"

    def test_time_parts_are_the_files_columns(self):
        drawn = self.series("plan_time")
        want = {"compute": [r["compute_s"] - r["recompute_s"] for r in self.rows],
                "recompute": [r["recompute_s"] for r in self.rows],
                "tensor-parallel": [r["tp_comm_s"] for r in self.rows],
                "point-to-point": [r["pp_comm_s"] for r in self.rows],
                "expert all-to-all": [r["ep_comm_s"] for r in self.rows],
                "ring attention": [r["cp_comm_s"] for r in self.rows],
                "bubble": [r["bubble_s"] for r in self.rows],
                "data-parallel": [r["dp_comm_s"] for r in self.rows],
                "optimizer": [r["optimizer_s"] for r in self.rows]}
        self.assertEqual(set(drawn), set(want))
        for name, values in want.items():
            self.assertTrue(np.allclose(drawn[name].y, values, rtol=1e-12, atol=0), name)
        # Stacked, the parts are the step.
        total = sum(np.asarray(drawn[name].y) for name in want)
        self.assertTrue(np.allclose(total, [r["step_time_s"] for r in self.rows], rtol=1e-9))
        self.assertFalse(np.allclose(drawn["compute"].y, drawn["data-parallel"].y))

    def test_memory_categories_and_what_a_gpu_holds(self):
        drawn = self.series("plan_memory")
        for name, column in [("parameters", "params_bytes"), ("gradients", "grads_bytes"),
                             ("optimizer", "optimizer_bytes"), ("activations", "activation_bytes")]:
            self.assertTrue(np.allclose(drawn[name].y * 1e9, [r[column] for r in self.rows], rtol=1e-12), name)
        with h5py.File(FIXTURE, "r") as f:
            usable = float(f["/plan/layouts"].attrs["usable_memory_bytes"])
        self.assertTrue(np.allclose(drawn["usable memory"].y * 1e9, [usable]))

    def test_scaling_curves_are_the_files_rows(self):
        drawn = self.series("plan_scaling")
        rows = read_rows(FIXTURE, "/plan/scaling")
        for mode in ("strong", "weak"):
            points = sorted((r["gpus"], r["tokens_per_s"]) for r in rows if r["mode"] == mode and r["fits"])
            self.assertGreater(len(points), 2, mode)
            self.assertTrue(np.allclose(drawn[mode].x, [g for g, _ in points]), mode)
            self.assertTrue(np.allclose(drawn[mode].y, [t for _, t in points], rtol=1e-12), mode)
            ideal = [points[0][1] * g / points[0][0] for g, _ in points]
            self.assertTrue(np.allclose(drawn[f"{mode} ideal"].y, ideal, rtol=1e-12), mode)
        self.assertFalse(np.allclose(drawn["strong"].y[-1], drawn["weak"].y[-1]))

    def test_comparison_draws_each_runs_own(self):
        drawn = draw_series([FIXTURE, FIXTURE], os.path.join(self.tmp, "compared"))
        steps = [s for s in drawn if s.figure == "plan_time" and s.label == "compute"]
        memory = [s for s in drawn if s.figure == "plan_memory" and s.label == "activations"]
        self.assertEqual(len(steps), 2)
        self.assertEqual(len(memory), 2)
        for s in steps:
            self.assertTrue(np.allclose(s.y, [r["compute_s"] - r["recompute_s"] for r in self.rows], rtol=1e-12))
        for s in memory:
            self.assertTrue(np.allclose(s.y * 1e9, [r["activation_bytes"] for r in self.rows], rtol=1e-12))

    def test_page_names_the_fastest_layout_that_fits(self):
        html = self.fixture_report("page")[1]
        fitting = [r for r in self.rows if r["fits"]]
        best = max(fitting, key=lambda r: r["tokens_per_s"])
        layout = (f"tp{best['tp']} pp{best['pp']} dp{best['dp']} v{best['v']} mb{best['micro_batch']} "
                  f"zero{best['zero']} {best['recompute']}")
        self.assertIn(f"<li>Plan: llama3-8b on 64 GPUs of h100-sxm-dgx, global batch 512: fastest that fits {layout}",
                      html)
        self.assertIn("<a href=\"#plan\">Plan</a>", html)
        self.assertEqual(html.count("<tr><td>tp"), len(self.rows))

    def test_fastest_layout_that_fits_when_the_fastest_do_not(self):
        """The two fastest layouts marked as not fitting: the page names the fastest layout that
        fits, with its step time, tokens/s, MFU and memory per GPU in GB (1e9 bytes), and shows
        the two as not fitting."""
        path = os.path.join(self.tmp, "plan-unfit.h5")
        shutil.copy(FIXTURE, path)
        fastest = max(r["tokens_per_s"] for r in self.rows)
        self.assertEqual(sum(r["tokens_per_s"] == fastest for r in self.rows), 2)
        set_rows(path, "/plan/layouts", "fits", lambda r: r["tokens_per_s"] == fastest,
                 lambda r: 0)
        fitting = [r for r in self.rows if r["tokens_per_s"] != fastest and r["fits"]]
        best = max(fitting, key=lambda r: r["tokens_per_s"])
        self.assertEqual((best["ep"], best["cp"]), (1, 1))
        layout = (f"tp{best['tp']} pp{best['pp']} dp{best['dp']} v{best['v']} "
                  f"mb{best['micro_batch']} zero{best['zero']} {best['recompute']}"
                  + (" sp" if best["sp"] else ""))
        html = drawn_report(self, os.path.join(self.tmp, "unfit"), [path], ["--no-figures"])[1]
        self.assertIn(f"fastest that fits {layout}, {best['step_time_s']:.3g} s a step, "
                      f"{best['tokens_per_s']:.4g} tokens/s, MFU {best['mfu']:.3f}, "
                      f"{best['memory_bytes'] / 1e9:.1f} GB per GPU.", html)
        self.assertEqual(html.count("<td><span class=\"bad\">no</span></td>"), 2)

    def test_table_shows_each_layouts_mfu_and_hfu(self):
        """Per layout, MFU and HFU in their own columns: HFU here set to 1.25 times the MFU (the
        recompute's FLOPs counted)."""
        path = os.path.join(self.tmp, "plan-hfu.h5")
        shutil.copy(FIXTURE, path)
        set_rows(path, "/plan/layouts", "hfu", lambda r: True, lambda r: 1.25 * r["mfu"])
        html = drawn_report(self, os.path.join(self.tmp, "hfu"), [path], ["--no-figures"])[1]
        rows = re.findall(r"<tr><td>tp.*?</tr>", html)
        self.assertEqual(len(rows), len(self.rows))
        for row, r in zip(rows, self.rows):
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
            self.assertEqual(cells[5:7], [f"{r['mfu']:.3f}", f"{1.25 * r['mfu']:.3f}"], cells[0])


if __name__ == "__main__":
    unittest.main()
