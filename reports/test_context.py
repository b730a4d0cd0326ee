"""Tests of the context-parallelism section (parity_reports/tables/context.py) against
/bench/context of a recorded `parity bench context` at 4 ranks (fixtures/context-np4.h5): the
curves drawn are the file's step and attention times per (variant, cp) in sequence order; the
ring's hidden share in the table is the file's; bytes or activations off their formulas are shown
in red and named in the summary; a file without the serial columns still reports.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import os
import re
import unittest

from report_testing import HERE, RecordingCase, set_rows

FIXTURE = os.path.join(HERE, "fixtures", "context-np4.h5")
CHECKED_FIGURES = {"context_time"}


def name_of(variant, cp):
    return "cp 1 (no split)" if variant == "none" else f"{variant} cp {cp}"


class ContextReportTests(RecordingCase):
    FIXTURE = FIXTURE
    TABLE = "/bench/context"

    def test_every_configuration_is_recorded_with_its_formulas(self):
        runs = sorted((r["variant"], r["cp"], r["sequence"]) for r in self.rows)
        want = sorted([("none", 1, s) for s in (64, 128)]
                      + [(v, c, s) for v in ("ring", "allgather", "ulysses") for c in (2, 4) for s in (64, 128)])
        self.assertEqual(runs, want)
        for r in self.rows:
            self.assertEqual(r["forward_bytes"], r["formula_forward_bytes"])
            self.assertEqual(r["backward_bytes"], r["formula_backward_bytes"])
            self.assertEqual(r["activation_bytes"], r["formula_activation_bytes"])

    def test_curves_are_the_files_times_in_sequence_order(self):
        drawn = self.series("context_time")
        curves = {}
        for r in self.rows:
            curves.setdefault(name_of(r["variant"], r["cp"]), []).append(r)
        self.assertEqual(set(drawn), {f"{k} {part}" for k in curves for part in ("step", "attention")})
        for name, rows in curves.items():
            rows.sort(key=lambda r: r["sequence"])
            self.assertEqual(list(drawn[f"{name} step"].x), [r["sequence"] for r in rows])
            self.assertEqual(list(drawn[f"{name} step"].y), [r["step_s"] * 1e3 for r in rows])
            self.assertEqual(list(drawn[f"{name} attention"].y), [r["attention_s"] * 1e3 for r in rows])

    def test_the_rings_hidden_share_and_a_row_off_its_formula(self):
        path = self.fixture_copy("context-broken.h5")
        set_rows(path, "/bench/context", "activation_bytes",
                 lambda r: r["variant"] == "allgather" and r["cp"] == 4 and r["sequence"] == 128,
                 lambda r: r["activation_bytes"] + 64)
        _, html, summary = self.fixture_report("broken-report", "--no-figures", path=path)
        self.assertIn("<h2 id=\"context\">Context parallelism</h2>", html)
        rows = re.findall(r"<tr><td>(ring|allgather|ulysses|none)</td>.*?</tr>", html)
        self.assertEqual(len(rows), 14)
        bad = [m.group(0) for m in re.finditer(r"<tr><td>[a-z]+</td>.*?</tr>", html) if "class=\"bad\"" in m.group(0)]
        self.assertEqual(len(bad), 1)
        self.assertIn("<td>allgather</td><td class=\"num\">4</td><td class=\"num\">128</td>", bad[0])
        for r in self.rows:
            if r["variant"] != "ring":
                continue
            row = re.search(rf"<tr><td>ring</td><td class=\"num\">{r['cp']}</td><td class=\"num\">{r['sequence']}</td>.*?</tr>",
                            html).group(0)
            self.assertIn(f">{100 * r['hidden_fraction']:.0f}%<", row)
        self.assertIn("OFF the formulas: allgather cp4 s128", summary)

    def test_a_file_without_the_serial_columns_still_reports(self):
        path = self.fixture_without("context-older.h5", "/bench/context",
                                    ("serial_attention_s", "serial_communication_s", "hidden_fraction"))
        html = self.fixture_report("older-report", path=path)[1]
        ring = re.search(r"<tr><td>ring</td>.*?</tr>", html).group(0)
        self.assertEqual(ring.count("<td class=\"num\">–</td>"), 2)


if __name__ == "__main__":
    unittest.main()
