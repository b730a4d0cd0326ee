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

from report_testing import HERE, RecordingCase, drawn_report, ms, set_rows

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

    def test_summary_names_each_curve_at_the_longest_sequence(self):
        """The summary line gives each (variant, cp) at the longest sequence of the file (128
        tokens here): its step time and, for the ring, the hidden share of its transfers."""
        summary = self.fixture_report("summary-report", "--no-figures")[2]
        self.assertEqual(sorted({r["sequence"] for r in self.rows}), [64, 128])
        line = next(l for l in summary.splitlines() if l.startswith("- ") and "tokens:" in l)
        self.assertNotIn("at 64 tokens", line)
        for r in self.rows:
            if r["sequence"] != 128:
                continue
            words = f"{name_of(r['variant'], r['cp'])} at 128 tokens: {ms(r['step_s'])} ms a step"
            if r["variant"] == "ring":
                words += f", {100 * r['hidden_fraction']:.0f}% of the ring's transfers hidden"
            self.assertIn(words, line)

    def test_bytes_off_their_formulas_are_named(self):
        """A configuration whose forward bytes, or whose backward bytes, differ from their
        formula is named in the summary, as one whose activations differ is."""
        path = self.fixture_copy("context-bytes.h5")
        set_rows(path, "/bench/context", "forward_bytes",
                 lambda r: (r["variant"], r["cp"], r["sequence"]) == ("ring", 2, 64),
                 lambda r: r["forward_bytes"] + 64)
        set_rows(path, "/bench/context", "backward_bytes",
                 lambda r: (r["variant"], r["cp"], r["sequence"]) == ("ulysses", 4, 128),
                 lambda r: r["backward_bytes"] - 64)
        summary = self.fixture_report("bytes-report", "--no-figures", path=path)[2]
        off = summary.split("OFF the formulas: ", 1)[1].split(".", 1)[0]
        self.assertEqual(sorted(off.split(", ")), ["ring cp2 s64", "ulysses cp4 s128"])

    def test_comparison_tokens_per_second_is_b_over_a(self):
        """Run B with 1.25 times A's tokens/s in every configuration: B / A 1.250 in each row."""
        a, b = self.fixture_copy("context-a.h5"), self.fixture_copy("context-b.h5")
        set_rows(b, "/bench/context", "tokens_per_s", lambda r: True,
                 lambda r: 1.25 * r["tokens_per_s"])
        _, html, summary = drawn_report(self, os.path.join(self.tmp, "compared"), [a, b],
                                        ["--no-figures"])
        self.assertIn("<h2 id=\"context\">Context parallelism: B against A</h2>", html)
        for r in self.rows:
            key = f"{r['variant']} cp{r['cp']} s{r['sequence']}"
            lines = [l for l in summary.splitlines() if l.startswith(f"| {key} |")]
            self.assertEqual(len(lines), 1, key)
            self.assertTrue(lines[0].endswith(" | 1.250 |"), lines[0])
        self.assertIn(f"Context-parallel tokens/s B / A over {len(self.rows)} configurations: "
                      "1.250.", html)


if __name__ == "__main__":
    unittest.main()
