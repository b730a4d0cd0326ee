"""/check/collectives, /check/training, /check/tensor, /check/pipeline, /check/moe,
/check/checkpoint and /check/restore: the conformance cases, passed and failed per collective and
algorithm, per training technique, per tensor-parallel setting, per pipeline schedule, per router
and expert-parallel size, per composition of activation checkpointing and per precision of a
training-state restore, and the failed cases with their messages."""

import math
from collections import OrderedDict, defaultdict

from ..common import (ALGORITHM_ORDER, COLLECTIVE_ORDER, esc, finite, fmt_bytes, fmt_num,
                      fmt_wrong, order_key, table_rows)

NAME = "conformance"
ORDER = 140
# Whether the runs are correct comes before how fast they were: its line leads the
# at-a-glance list, and its section the comparison.
VERDICT = True
READS = {
    "/check/collectives": (
        "s:case,collective,algorithm,dtype,redop,input,message "
        "i:count,in_place,world_size,wrong,guard_ok,passed "
        "f:max_abs_error,max_rel_error,tolerance", []),
    "/check/training": (
        "s:case,technique,optimizer,precision,model,device,message "
        "i:world_size,steps,global_batch,micro_batches,passed "
        "f:error,bound,bytes_sent,formula_bytes_sent,max_staleness,float64_error,float64_bound",
        ["case", "passed"]),
    "/check/tensor": (
        "s:case,technique,data_parallel,precision,device,message "
        "i:tp,dp,sequence_parallel,world_size,steps,micro_batches,passed "
        "f:error,bound,gradient_error,gradient_bound,loss_error,tp_bytes_sent,"
        "formula_tp_bytes_sent", ["case", "passed"]),
    "/check/pipeline": (
        "s:case,schedule,precision,device,message "
        "i:chunks,data_parallel,micro_batches,world_size,steps,passed "
        "f:error,bound,first_loss,last_loss", ["case", "passed"]),
    "/check/moe": (
        "s:case,router,all_to_all,precision,device,message "
        "i:ep,tp,dp,experts,top_k,world_size,steps,decisions,dropped,passed "
        "f:capacity_factor,error,bound,loss_error,loss_bound,gradient_error,dispatch_bytes,"
        "formula_dispatch_bytes", ["case", "passed"]),
    "/check/checkpoint": (
        "s:case,policy,composition,schedule,precision,device,message "
        "i:world_size,steps,recomputed_blocks,differing,stored_bytes,formula_stored_bytes,"
        "peak_bytes,formula_peak_bytes,recompute_flops,formula_recompute_flops,passed",
        ["case", "passed"]),
    "/check/restore": (
        "s:case,before,after,precision,device,message "
        "i:world_size,steps,saved_at,restored_exactly,bit_identical,passed "
        "f:error,bound,loss_error,saved_bytes", ["case", "passed"]),
    # A family this module has no kind for: its cases and verdicts (other_kind).
    "/check/*": ("s:case,message i:passed", ["case", "passed"]),
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
        # False when the file has other conformance tables: then a missing /check/collectives
        # is no longer a missing conformance run.
        self.alone = True
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
            return ("no conformance results in this file" if self.alone else
                    "no /check/collectives table")
        if self.missing:
            return "conformance table unusable (missing column 'passed')"
        if self.total == 0:
            return "0 conformance cases"
        if self.failed == 0:
            return f"{self.total} cases, all passed"
        return f"{self.total} cases, {self.failed} failed ({self.passed} passed)"


def error_cell(value, bound):
    """An error against its bound, in red where it exceeds it."""
    text = fmt_num(value, 3)
    if finite(value) and finite(bound) and value > bound:
        return f"<span class=\"bad\">{text}</span>"
    return text


def error_columns(header="error", error="error", bound="bound", bound_header="bound"):
    """An error's column, in red where it exceeds its bound, and the bound's (the case's error
    and bound unless given)."""
    return [(header, lambda r: error_cell(r[error], r[bound])),
            (bound_header, lambda r: fmt_num(r[bound], 3))]


def bytes_columns(header, column):
    """A count of bytes' column and its formula_ column's."""
    return [(header, lambda r: fmt_bytes(r[column])),
            ("formula", lambda r: fmt_bytes(r[f"formula_{column}"]))]


class CaseKind:
    """What tells the tables of training cases (/check/training, /check/tensor) apart: their
    path and names, how their cases are grouped in the counts, and the columns that explain a
    case beside its message."""

    def __init__(self, path, title, short, about, groups, defaults, columns):
        self.path, self.title, self.short, self.about = path, title, short, about
        self.groups = groups            # [(column, order of its values)]
        self.defaults = defaults
        self.columns = columns          # [(header, cell(row))]


TRAINING_TECHNIQUES = ["dp", "dp_accumulation", "zero1", "zero2", "zero3", "ps_one_worker",
                       "ps_async"]
TRAINING = CaseKind(
    "/check/training", "Training cases", "training",
    "Each case trains a small model for a few optimizer steps with the technique on every rank "
    "and compares it with the same model trained on one device (for ZeRO also with plain data "
    "parallelism): error against bound, and the bytes a rank sent against the formula. The "
    "16-bit cases are also held to float64 training of the same model from the same start.",
    [("technique", TRAINING_TECHNIQUES)],
    {"technique": "", "optimizer": "", "precision": "", "model": "", "error": math.nan,
     "bound": math.nan, "bytes_sent": math.nan, "formula_bytes_sent": math.nan,
     "float64_error": math.nan, "float64_bound": math.nan, "message": ""},
    error_columns()
    + error_columns("against float64", "float64_error", "float64_bound")
    + bytes_columns("bytes sent", "bytes_sent"))
TENSOR = CaseKind(
    "/check/tensor", "Tensor-parallel cases", "tensor",
    "Each case trains the case GPT with tensor parallelism of size tp (with sequence "
    "parallelism for tp_sp) and the data-parallel technique over dp ranks, and compares the "
    "loss, the gradients gathered from the shards, the parameters and AdamW's moments with the "
    "same model trained on one device; the bytes each rank sends in its tensor-parallel group "
    "must equal the formula.",
    [("tp", []), ("technique", ["tp", "tp_sp"]),
     ("data_parallel", ["dp", "zero1", "zero2", "zero3"])],
    {"technique": "", "data_parallel": "", "tp": -1, "precision": "", "error": math.nan,
     "bound": math.nan, "gradient_error": math.nan, "gradient_bound": math.nan,
     "loss_error": math.nan, "tp_bytes_sent": math.nan, "formula_tp_bytes_sent": math.nan,
     "message": ""},
    error_columns()
    + error_columns("gradient error", "gradient_error", "gradient_bound", "gradient bound")
    + [("loss error", lambda r: error_cell(r["loss_error"], r["gradient_bound"]))]
    + bytes_columns("tp bytes sent", "tp_bytes_sent"))
PIPELINE = CaseKind(
    "/check/pipeline", "Pipeline cases", "pipeline",
    "Each case splits the case GPT into stages balanced by parameter count, one per rank (two "
    "per rank for interleaved), trains it with the schedule over m micro-batches, and compares "
    "every rank's parameters, AdamW's moments and the loss with the same model trained on one "
    "device.",
    [("schedule", ["gpipe", "1f1b", "interleaved"])],
    {"schedule": "", "chunks": 1, "micro_batches": -1, "precision": "", "error": math.nan,
     "bound": math.nan, "message": ""},
    error_columns()
    + [("micro-batches", lambda r: str(r["micro_batches"]))])
MOE = CaseKind(
    "/check/moe", "Mixture-of-experts cases", "moe",
    "Each case trains the case GPT, whose second block is an MoE layer, with its E experts "
    "spread over ep ranks (split over tp inside each expert) and the batch over dp x ep, and "
    "compares the routing decisions and dropped tokens (exactly), the first step's gradients, the "
    "loss, the parameters and "
    "AdamW's moments with the same model on one device running each data rank's rows as its "
    "own pass; the dispatch all-to-all's bytes must equal the formula from the routing counts.",
    [("router", ["top_k", "expert_choice", "aux_free"]), ("ep", []), ("tp", [])],
    {"router": "", "ep": -1, "tp": 1, "experts": -1, "top_k": 0, "capacity_factor": math.nan,
     "precision": "", "error": math.nan, "bound": math.nan, "loss_error": math.nan,
     "loss_bound": math.nan, "gradient_error": math.nan, "decisions": -1, "dropped": -1, "dispatch_bytes": math.nan,
     "formula_dispatch_bytes": math.nan, "message": ""},
    error_columns()
    + [("loss error", lambda r: error_cell(r["loss_error"], r["loss_bound"])),
       ("gradient error", lambda r: error_cell(r["gradient_error"], r["loss_bound"])),
       ("dropped", lambda r: str(r["dropped"]))]
    + bytes_columns("dispatch bytes", "dispatch_bytes"))


def count_cell(x):
    """An integer count whose -1 stands for not measured (a case that is not alone)."""
    return fmt_bytes(x) if finite(x) and x >= 0 else "–"


def formula_cell(r, column):
    """A measured count beside its formula_ column, in red where the two differ."""
    measured, formula = r[column], r[f"formula_{column}"]
    text = count_cell(measured)
    if finite(measured) and finite(formula) and min(measured, formula) >= 0 \
            and measured != formula:
        return f"<span class=\"bad\">{text}</span>"
    return text


def formula_columns(header, column):
    """A measured count's column beside its formula (formula_cell) and the formula's."""
    return [(header, lambda r: formula_cell(r, column)),
            ("formula", lambda r: count_cell(r[f"formula_{column}"]))]


def flag_cell(x):
    """A 1/0 verdict column's cell: yes, a red no, or – (not checked)."""
    return {1: "yes", 0: "<span class=\"bad\">no</span>"}.get(x, "–")


CHECKPOINT = CaseKind(
    "/check/checkpoint", "Activation-checkpointing cases", "checkpoint",
    "Each case trains the case GPT twice on the same ranks, without recomputation and with the "
    "policy, alone, with ZeRO-3, with tp 2 and sequence parallelism, or as a pipeline with the "
    "schedule, and compares the parameters, optimizer state, gradients and losses bit for bit "
    "(differing: the elements whose bits differ, which must be none); alone, the blocks' "
    "stored and peak activation bytes and the FLOPs recomputation adds must equal their "
    "formulas.",
    [("composition", ["alone", "zero3", "tp_sp", "pp"]),
     ("schedule", ["", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"])],
    {"policy": "", "composition": "", "schedule": "", "precision": "", "recomputed_blocks": -1,
     "differing": -1, "stored_bytes": -1, "formula_stored_bytes": -1, "peak_bytes": -1,
     "formula_peak_bytes": -1, "recompute_flops": -1, "formula_recompute_flops": -1,
     "message": ""},
    [("recomputed blocks", lambda r: count_cell(r["recomputed_blocks"])),
     ("differing", lambda r: (f"<span class=\"bad\">{fmt_bytes(r['differing'])}</span>"
                              if r["differing"] > 0 else count_cell(r["differing"])))]
    + formula_columns("stored bytes", "stored_bytes")
    + formula_columns("peak bytes", "peak_bytes")
    + formula_columns("recompute FLOPs", "recompute_flops"))
RESTORE = CaseKind(
    "/check/restore", "Training-state restore cases", "restore",
    "Each case trains the case GPT for a few steps under one layout, saves its training state, "
    "restores it into a fresh trainer under another layout (data parallelism, ZeRO, "
    "accumulation, tensor and sequence parallelism, another world size) and trains on; what the "
    "new layout holds right after the restore must equal what the old one saved bit for bit, "
    "the run must end within the bound of single-device training, and restoring into the same "
    "layout must equal uninterrupted training bit for bit.",
    [("precision", ["float64", "float32", "bfloat16", "float16"])],
    {"before": "", "after": "", "precision": "", "error": math.nan, "bound": math.nan,
     "loss_error": math.nan, "restored_exactly": -1, "bit_identical": -1,
     "saved_bytes": math.nan, "message": ""},
    [("before", lambda r: esc(r["before"])),
     ("after", lambda r: esc(r["after"]))]
    + error_columns()
    + [("loss error", lambda r: error_cell(r["loss_error"], r["bound"])),
       ("restored exactly", lambda r: flag_cell(r["restored_exactly"])),
       ("bit for bit", lambda r: flag_cell(r["bit_identical"])),
       ("saved bytes", lambda r: fmt_bytes(r["saved_bytes"]))])
CASE_KINDS = [TRAINING, TENSOR, PIPELINE, MOE, CHECKPOINT, RESTORE]


def other_kind(rf, path):
    """The kind of a /check/ table no kind above describes (a family added to parity after this
    module): its cases, verdicts and messages, explained by the table's own description."""
    name = path.rsplit("/", 1)[1]
    about = str(rf.group_attrs.get(path, {}).get("description", ""))
    return CaseKind(path, f"{name.replace('_', ' ').capitalize()} cases", name,
                    about[:1].upper() + about[1:] + ("." if about and not about.endswith(".") else ""),
                    [], {"message": ""}, [])


def kinds_of(rf):
    """CASE_KINDS, then a kind for each other /check/ table of the file, by path."""
    known = {kind.path for kind in CASE_KINDS} | {"/check/collectives"}
    return CASE_KINDS + [other_kind(rf, path) for path in sorted(rf.tables)
                         if path.startswith("/check/") and path not in known]


def group_key(value, order):
    """order_key, with numbers (tp sizes) in numeric order."""
    rank = order.index(value) if value in order else len(order)
    return (rank, value if isinstance(value, (int, float)) else 0, str(value))


class Cases:
    """/check/training or /check/tensor: one row per case, counted per group of cases."""

    def __init__(self, rf, kind):
        self.kind = kind
        self.table = rf.table(kind.path)
        self.present = self.table is not None
        # The reader refuses these tables without case or passed.
        self.rows = table_rows(self.table, kind.defaults) if self.present else []
        self.total = len(self.rows)
        self.failures = [r for r in self.rows if int(r["passed"]) != 1]
        self.failed = len(self.failures)
        self.passed = self.total - self.failed
        cells = defaultdict(lambda: [0, 0, 0])
        for r in self.rows:
            c = cells[tuple(r[column] for column, _ in kind.groups)]
            c[0] += 1
            c[1 if int(r["passed"]) == 1 else 2] += 1
        self.cells = OrderedDict(sorted(cells.items(), key=lambda kv: tuple(
            group_key(value, order) for value, (_, order) in zip(kv[0], kind.groups))))

    @property
    def usable(self):
        return self.present

    def words(self):
        if not self.present:
            return f"no {self.kind.path} table"
        if self.total == 0:
            return "0 cases"
        if self.failed == 0:
            return f"{self.total} cases, all passed"
        return f"{self.total} cases, {self.failed} failed ({self.passed} passed)"


class Conformance:
    """Every conformance table of a run: the collectives' (Check) and the training and
    tensor-parallel cases' (Cases, whether the file has them or not)."""

    def __init__(self, rf):
        self.rf = rf
        self.collectives = Check(rf)
        self.cases = [Cases(rf, kind) for kind in kinds_of(rf)]
        self.collectives.alone = not self.extra()

    def cases_of(self, kind):
        """This run's cases of a kind (absent when the file lacks its table)."""
        return next((c for c in self.cases if c.kind.path == kind.path), None) or Cases(self.rf, kind)

    @property
    def present(self):
        return self.collectives.present or any(c.present for c in self.cases)

    @property
    def usable(self):
        return self.collectives.usable or any(c.usable for c in self.cases)

    def extra(self):
        """The training and tensor-parallel tables the file has."""
        return [c for c in self.cases if c.present]


# --------------------------------------------------------------------------------------------
# One run

def load(rf, loaded):
    return Conformance(rf)


def nav(conformances):
    return [("conformance", "Conformance")]


def collectives_section(page, ctx, check, alone):
    """The collectives' cases; alone: the file has no other conformance table, and the section
    reads as it did before there were others."""
    max_failures = ctx.args.max_failures
    if not alone:
        page.add("<h3>Collective cases</h3>")
    if not check.present:
        page.note("This file has no /check/collectives table" +
                  (" (no conformance run)." if alone else "."))
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
        page.add("<h3>Failed cases</h3>" if alone else "<h3>Failed collective cases</h3>")
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


def case_rows(cases, rows):
    """Table rows of cases: name, the kind's columns, message."""
    return [[f"<span class=\"mono\">{esc(r['case'])}</span>"]
            + [cell(r) for _, cell in cases.kind.columns]
            + [esc(r["message"]) if r["message"] else "<span class=\"note\">–</span>"]
            for r in rows]


def counts_table(page, cases):
    """Cases, passed and failed per group of the kind's group columns, and the total."""
    kind = cases.kind
    rows = []
    for group, (n, ok, bad) in cases.cells.items():
        rows.append([esc(value) for value in group]
                    + [str(n), str(ok), f"<span class=\"bad\">{bad}</span>" if bad else "0"])
    width = len(kind.groups)
    rows.append(["<b>total</b>"] + [""] * (width - 1)
                + [f"<b>{cases.total}</b>", f"<b>{cases.passed}</b>", f"<b>{cases.failed}</b>"])
    page.table([column.replace("_", " ") for column, _ in kind.groups]
               + ["cases", "passed", "failed"], rows, numeric=set(range(width, width + 3)))


def cases_section(page, ctx, cases):
    """A table of training or tensor-parallel cases: counts per group, failed cases with their
    message, every case in a fold."""
    max_failures = ctx.args.max_failures
    kind = cases.kind
    page.add(f"<h3>{esc(kind.title)}</h3>")
    cls = "good" if cases.failed == 0 else "bad"
    page.p(f"<span class=\"{cls}\">{esc(cases.words())}.</span> {esc(kind.about)}")
    if not cases.total:
        return
    if kind.groups:
        counts_table(page, cases)
    headers = ["case"] + [h for h, _ in kind.columns] + ["message"]
    numeric = set(range(1, len(kind.columns) + 1))
    if cases.failures:
        page.add(f"<h3>Failed {esc(kind.title[0].lower() + kind.title[1:])}</h3>")
        shown = cases.failures[:max_failures]
        page.table(headers, case_rows(cases, shown), numeric=numeric)
        if len(cases.failures) > len(shown):
            page.note(f"{len(cases.failures) - len(shown)} more failed cases not listed "
                      f"(--max-failures {max_failures}).")
    page.details(f"Table: every case ({cases.total})",
                 lambda: page.table(headers, case_rows(cases, cases.rows), numeric=numeric,
                                    row_classes=["" if int(r["passed"]) == 1 else "diff"
                                                 for r in cases.rows]))


def section(page, ctx, conformance):
    page.add("<h2 id=\"conformance\">Conformance</h2>")
    extra = conformance.extra()
    collectives_section(page, ctx, conformance.collectives, alone=not extra)
    for cases in extra:
        cases_section(page, ctx, cases)


def glance(ctx, conformance):
    extra = conformance.extra()
    if not extra:
        return [f"Conformance: {esc(conformance.collectives.words())}."]
    parts = ([f"collectives {conformance.collectives.words()}"]
             if conformance.collectives.present else [])
    parts += [f"{cases.kind.short} {cases.words()}" for cases in extra]
    return [esc("Conformance: " + "; ".join(parts) + ".")]


def failure_md(failures):
    md = []
    if failures:
        md.append("")
        for r in failures[:20]:
            md.append(f"- `{r['case']}`: {r['message'] or 'failed'}")
        if len(failures) > 20:
            md.append(f"- … {len(failures) - 20} more")
    return md


def markdown(ctx, conformance):
    md = ["", "## Conformance", "", conformance.collectives.words() + "."]
    md += failure_md(conformance.collectives.failures)
    for cases in conformance.extra():
        md += ["", f"{cases.kind.title}: {cases.words()}."] + failure_md(cases.failures)
    return md


# --------------------------------------------------------------------------------------------
# Two runs

def compare(ctx, conformances):
    return None


def kinds_in_either(conformances):
    """[(kind, (A's Cases, B's Cases))] of the case tables (all but the collectives') either run
    has, A's kinds first."""
    kinds = {}
    for conformance in conformances:
        for cases in conformance.cases:
            kinds.setdefault(cases.kind.path, cases.kind)
    pairs = [(kind, tuple(c.cases_of(kind) for c in conformances)) for kind in kinds.values()]
    return [(kind, pair) for kind, pair in pairs if any(cases.present for cases in pair)]


def compare_glance(ctx, conformances, matches):
    kinds = kinds_in_either(conformances)
    lines = [f"Conformance{', collective cases' if kinds else ''}: "
             f"A {esc(conformances[0].collectives.words())}; "
             f"B {esc(conformances[1].collectives.words())}."]
    for kind, pair in kinds:
        lines.append(esc(f"{kind.title}: A {pair[0].words()}; B {pair[1].words()}."))
    return lines


def compare_checks(page, ctx, checks, what):
    """Both runs' counts, the cases failing in only one, and each run's failed cases; what:
    the kind of case in the fold's title ("" for the collectives)."""
    labels = ctx.labels
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
                page.details(f"Failed {what}cases of {label} ({check.failed})", body)


def compare_section(page, ctx, conformances, matches):
    page.add("<h2 id=\"conformance\">Conformance</h2>")
    kinds = kinds_in_either(conformances)
    if kinds:
        page.add("<h3>Collective cases</h3>")
    compare_checks(page, ctx, [c.collectives for c in conformances], "")
    for kind, pair in kinds:
        page.add(f"<h3>{esc(kind.title)}</h3>")
        compare_checks(page, ctx, pair, f"{kind.short} ")


def compare_markdown(ctx, conformances, matches):
    md = ["", "## Conformance", "", f"- A: {conformances[0].collectives.words()}",
          f"- B: {conformances[1].collectives.words()}"]
    for kind, pair in kinds_in_either(conformances):
        md += [f"- A {kind.short}: {pair[0].words()}", f"- B {kind.short}: {pair[1].words()}"]
    return md
