"""/check/collectives: the conformance cases, passed and failed per collective and algorithm,
and the failed cases with their first mismatches."""

import math
from collections import OrderedDict, defaultdict

from ..common import (ALGORITHM_ORDER, COLLECTIVE_ORDER, esc, fmt_num, fmt_wrong, order_key,
                      table_rows)

NAME = "conformance"
# Whether the runs are correct comes before how fast they were: its line leads the
# at-a-glance list, and its section the comparison.
VERDICT = True
READS = {
    "/check/collectives": (
        "s:case,collective,algorithm,dtype,redop,input,message "
        "i:count,in_place,world_size,wrong,guard_ok,passed "
        "f:max_abs_error,max_rel_error,tolerance", []),
}


class Check:
    """Conformance cases summarised per collective x algorithm."""

    def __init__(self, rf):
        self.table = rf.table("/check/collectives")
        self.present = self.table is not None
        self.missing = self.table.missing(["passed"]) if self.present else []
        self.rows = []
        if self.present and not self.missing:
            self.rows = table_rows(self.table, {"case": "", "collective": "", "algorithm": "",
                                                "dtype": "", "redop": "", "count": -1,
                                                "in_place": 0, "input": "", "wrong": -1,
                                                "guard_ok": 1, "max_abs_error": math.nan,
                                                "tolerance": math.nan, "message": ""})
        self.total = len(self.rows)
        self.failures = [r for r in self.rows if int(r["passed"]) != 1]
        self.failed = len(self.failures)
        self.passed = self.total - self.failed
        cells = defaultdict(lambda: [0, 0, 0])
        for r in self.rows:
            c = cells[(r["collective"], r["algorithm"])]
            c[0] += 1
            c[1 if int(r["passed"]) == 1 else 2] += 1
        self.cells = OrderedDict(sorted(cells.items(), key=lambda kv: (
            order_key(kv[0][0], COLLECTIVE_ORDER), order_key(kv[0][1], ALGORITHM_ORDER))))

    @property
    def usable(self):
        return self.present and not self.missing

    def words(self):
        if not self.present:
            return "no conformance results in this file"
        if self.missing:
            return "conformance table unusable (missing column 'passed')"
        if self.total == 0:
            return "0 conformance cases"
        if self.failed == 0:
            return f"{self.total} cases, all passed"
        return f"{self.total} cases, {self.failed} failed ({self.passed} passed)"


# --------------------------------------------------------------------------------------------
# One run

def load(rf, loaded):
    return Check(rf)


def nav(checks):
    return [("conformance", "Conformance")]


def section(page, ctx, check):
    max_failures = ctx.args.max_failures
    page.add("<h2 id=\"conformance\">Conformance</h2>")
    if not check.present:
        page.note("This file has no /check/collectives table (no conformance run).")
        return
    if check.missing:
        page.note("/check/collectives lacks the 'passed' column; it cannot be summarised.")
        return
    cls = "good" if check.failed == 0 else "bad"
    page.p(f"<span class=\"{cls}\">{esc(check.words())}.</span>")
    if not check.total:
        return
    rows = []
    for (coll, algo), (n, ok, bad) in check.cells.items():
        rows.append([esc(coll), esc(algo), str(n), str(ok),
                     f"<span class=\"bad\">{bad}</span>" if bad else "0"])
    rows.append(["<b>total</b>", "", f"<b>{check.total}</b>", f"<b>{check.passed}</b>",
                 f"<b>{check.failed}</b>"])
    page.table(["collective", "algorithm", "cases", "passed", "failed"], rows, numeric={2, 3, 4})
    if check.failures:
        page.add("<h3>Failed cases</h3>")
        shown = check.failures[:max_failures]
        frows = []
        for r in shown:
            guard = "ok" if int(r["guard_ok"]) == 1 else "<span class=\"bad\">clobbered</span>"
            frows.append([f"<span class=\"mono\">{esc(r['case'])}</span>", fmt_wrong(r["wrong"]),
                          guard, fmt_num(r["max_abs_error"], 3), fmt_num(r["tolerance"], 3),
                          esc(r["message"]) if r["message"] else "<span class=\"note\">–</span>"])
        page.table(["case", "wrong", "guard", "max abs error", "tolerance", "message"], frows,
                   numeric={1, 3, 4})
        if len(check.failures) > len(shown):
            page.note(f"{len(check.failures) - len(shown)} more failed cases not listed "
                      f"(--max-failures {max_failures}).")


def glance(ctx, check):
    return [f"Conformance: {esc(check.words())}."]


def markdown(ctx, check):
    md = ["", "## Conformance", "", check.words() + "."]
    if check.failures:
        md.append("")
        for r in check.failures[:20]:
            md.append(f"- `{r['case']}`: {r['message'] or 'failed'}")
        if len(check.failures) > 20:
            md.append(f"- … {len(check.failures) - 20} more")
    return md


# --------------------------------------------------------------------------------------------
# Two runs

def compare(ctx, checks):
    return None


def compare_glance(ctx, checks, matches):
    return [f"Conformance: A {esc(checks[0].words())}; B {esc(checks[1].words())}."]


def compare_section(page, ctx, checks, matches):
    labels = ctx.labels
    page.add("<h2 id=\"conformance\">Conformance</h2>")
    crows = []
    for label, name, check in zip(labels, ("A", "B"), checks):
        if check.usable:
            crows.append([f"{name}: {esc(label)}", str(check.total), str(check.passed),
                          f"<span class=\"bad\">{check.failed}</span>" if check.failed else "0",
                          esc(check.words())])
        else:
            crows.append([f"{name}: {esc(label)}", "–", "–", "–", esc(check.words())])
    page.table(["run", "cases", "passed", "failed", "in words"], crows, numeric={1, 2, 3})
    if all(c.usable for c in checks):
        fa = {r["case"] for r in checks[0].failures}
        fb = {r["case"] for r in checks[1].failures}
        cases_a = {r["case"] for r in checks[0].rows}
        new = sorted(c for c in fb - fa if c in cases_a)
        fixed = sorted(fa - fb)
        if new:
            page.p("<span class=\"bad\">Failing in B but passing in A:</span> " +
                   ", ".join(f"<span class=\"mono\">{esc(c)}</span>" for c in new[:50]) +
                   (f" … and {len(new) - 50} more" if len(new) > 50 else ""))
        if fixed:
            page.p("Failing in A but passing (or absent) in B: " +
                   ", ".join(f"<span class=\"mono\">{esc(c)}</span>" for c in fixed[:50]) +
                   (f" … and {len(fixed) - 50} more" if len(fixed) > 50 else ""))
        for label, check in zip(labels, checks):
            if check.failures:
                def body(check=check):
                    page.table(["case", "message"],
                               [[f"<span class=\"mono\">{esc(r['case'])}</span>", esc(r["message"])]
                                for r in check.failures[:ctx.args.max_failures]])
                page.details(f"Failed cases of {label} ({check.failed})", body)


def compare_markdown(ctx, checks, matches):
    return ["", "## Conformance", "", f"- A: {checks[0].words()}", f"- B: {checks[1].words()}"]
