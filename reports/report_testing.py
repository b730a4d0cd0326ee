"""What the report tests share (test_<table>.py, one per table module, and test_page.py): sample
files from make_sample.py, reports drawn from them (parity_report.py's main in a forked copy of
this process, as the command line runs it, or the figures' series drawn in this process), the file's columns read with plain h5py, and the
assertions on drawn pages and series.

Expected numbers are computed from the HDF5 files with h5py, not through the report's reader.
The two reports most tests read (the collective sample, alone and against a second run) and the
series of the full sample are drawn once per process, when a test first asks for them.
Run with: /usr/bin/python3 reports/run_tests.py
"""

import atexit
from collections import OrderedDict
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import parity_reports  # noqa: E402,F401  (numpy's BLAS threads: run_tests.py imports it before any test module)
import h5py  # noqa: E402
import numpy as np  # noqa: E402

os.environ.setdefault("MPLCONFIGDIR", tempfile.gettempdir())

import make_sample  # noqa: E402
from parity_reports.common import fmt_num, fmt_size, ratio_range_words  # noqa: E402,F401

REPORT = os.path.join(HERE, "parity_report.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# A file like `parity bench model` writes (its table alone), and like `parity bench tensor` with
# `parity check` (without the collective benchmark, which is slow to draw).
MODEL_ONLY = ("copy_bandwidth", "point_to_point", "harness", "collectives", "check")
TENSOR_ONLY = ("copy_bandwidth", "point_to_point", "collectives")
RTOL = 1e-12
BYTE_SCALES = (1, 1 << 10, 1 << 20, 1 << 30)
LABELS = ["run_a.h5", "run_b.h5"]
RUNS = [f"{name}: {label}" for name, label in zip("AB", LABELS)]  # the figures' run labels
# The memory categories of /bench/model and /bench/memory, in the order the figures stack them.
CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "communication",
              "workspace"]


# --------------------------------------------------------------------------------------------
# Files: drawing a report, reading and changing a table with plain h5py

def start_report(*args):
    """Starts `python3 parity_report.py ARGS` as a forked copy of this process, which has the
    report's modules and matplotlib imported already (a fresh interpreter spends about 0.4 s on
    them, 55 times a test process): its main runs with ARGS, its output and errors go to files,
    and its exit status is main's, or 1 with the traceback after an exception, as the command
    line's would be. Returns a handle for finish_report. Only from the main thread."""
    import parity_report
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            os.environ.pop("PARITY_REPORT_DEBUG", None)
            sys.argv = [REPORT, *args]
            code = parity_report.main(list(args)) or 0
        except SystemExit as e:  # argparse's refusals: the message is on stderr already
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: B036 (the child reports every failure as the CLI would)
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code if isinstance(code, int) else 1)  # no atexit of the parent's
    return pid, out, err, list(args)


def finish_report(handle, timeout=300):
    """Waits for a report started by start_report: a subprocess.CompletedProcess (text)."""
    pid, out, err, args = handle
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired([REPORT, *args], timeout)
        time.sleep(0.01)
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read().decode("utf-8", "replace"))
        f.close()
    return subprocess.CompletedProcess([REPORT, *args], os.waitstatus_to_exitcode(status), *texts)


def run_report(*args):
    return finish_report(start_report(*args))


def text_col(ds):
    return [v.decode() if isinstance(v, bytes) else str(v) for v in ds[()]]


def read_columns(path, table):
    """A table as {column: list}, read with plain h5py."""
    with h5py.File(path, "r") as f:
        g = f[table]
        out = {}
        for c in g.attrs["columns"]:
            c = c.decode() if isinstance(c, bytes) else c
            ds = g[c]
            out[c] = text_col(ds) if ds.dtype.kind in "OS" else ds[()].tolist()
    return out


def read_rows(path, table):
    """A table as a list of {column: value} rows."""
    cols = read_columns(path, table)
    n = len(next(iter(cols.values()))) if cols else 0
    return [{c: cols[c][i] for c in cols} for i in range(n)]


def read_collectives(path):
    return read_rows(path, "/bench/collectives")


def find_row(rows, **match):
    hits = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(hits) == 1, (match, len(hits))
    return hits[0]


def conformance_counts(path):
    with h5py.File(path, "r") as f:
        passed = f["/check/collectives/passed"][()]
    return len(passed), int((passed != 1).sum())


def set_rows(path, table, column, match, value):
    """Sets column to value(row) in every row of table that match(row) accepts."""
    rows = read_rows(path, table)
    with h5py.File(path, "a") as f:
        ds = f[table][column]
        values = ds[()]
        for i, r in enumerate(rows):
            if match(r):
                values[i] = value(r)
        ds[...] = values


def keep_rows(path, table, keep):
    """Keeps the rows of a table that keep(row) accepts, in every column and the row count."""
    rows = read_rows(path, table)
    with h5py.File(path, "a") as f:
        g = f[table]
        for c in list(rows[0]) if rows else []:
            values, dtype, unit = g[c][()], g[c].dtype, g[c].attrs["unit"]
            del g[c]
            kept = np.array([v for v, r in zip(values, rows) if keep(r)], dtype=values.dtype)
            g.create_dataset(c, data=kept, dtype=dtype).attrs["unit"] = unit
        g.attrs["rows"] = np.int64(sum(1 for r in rows if keep(r)))


def drop_column(path, table, column):
    """Removes a column from a table's list and its dataset alike."""
    with h5py.File(path, "a") as f:
        g = f[table]
        cols = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]
        g.attrs.create("columns", np.array([c for c in cols if c != column], dtype=object),
                       dtype=h5py.string_dtype())
        del g[column]


def add_column(path, table, column, value, unit=""):
    """Adds a float64 column to a table, value(row) in each row (as a newer parity writes it)."""
    rows = read_rows(path, table)
    with h5py.File(path, "a") as f:
        g = f[table]
        cols = [c.decode() if isinstance(c, bytes) else c for c in g.attrs["columns"]]
        g.attrs.create("columns", np.array(cols + [column], dtype=object), dtype=h5py.string_dtype())
        g.create_dataset(column, data=np.array([value(r) for r in rows], dtype=np.float64)).attrs["unit"] = unit


def strip_to(path, table, keep_columns):
    """Drops every attribute but the table's own and every column not in keep_columns."""
    with h5py.File(path, "a") as f:
        for name in list(f[table].attrs):
            if name not in ("kind", "description", "columns", "rows"):
                del f[table].attrs[name]
    for column in read_columns(path, table):
        if column not in keep_columns:
            drop_column(path, table, column)


def scaling_row(rows, mode, n):
    return find_row(rows, mode=mode, world_size=n)


def group_title(collective, dtype, redop, in_place, root=-1):
    """A collective group's title as the report writes it."""
    parts = [collective, dtype] + ([redop] if redop and redop != "none" else [])
    parts.append("in place" if in_place else "out of place")
    if root >= 0:
        parts.append(f"root {root}")
    return " · ".join(parts)


def collective_rows(path):
    """/bench/collectives rows, each with its row index, grouped by (collective, dtype, redop,
    in_place, root)."""
    rows = read_rows(path, "/bench/collectives")
    for i, r in enumerate(rows):
        r["_row"] = i
    return grouped(rows, "collective", "dtype", "redop", "in_place", "root")


def ms(seconds):
    """Seconds in ms as the report writes them."""
    return fmt_num(seconds * 1e3)


def range_words(ratios):
    return ratio_range_words(ratios)


def text_of(path):
    """A written file's text (a report page, a summary: UTF-8)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


def drawn_report(case, out, paths, options=()):
    """The report of paths drawn into out with the further command-line options, which must
    succeed (asserted by the test case): (out, index.html, summary.md)."""
    res = run_report(*paths, "--out", out, *options)
    case.assertEqual(res.returncode, 0, res.stderr)
    return out, text_of(os.path.join(out, "index.html")), text_of(os.path.join(out, "summary.md"))


def after(text, marker):
    """The text following the first occurrence of marker, up to the next heading."""
    rest = text[text.index(marker) + len(marker):]
    return rest.split("<h3", 1)[0]


# The line a report drawn with --no-figures carries (parity_reports/report.py): a check of its
# figures would hold vacuously there, so the helpers that look at figures refuse such a page.
NO_FIGURES = "Drawn without figures (--no-figures)."


def table_at(page, marker):
    """The page from marker on, up to the end of the table it stands in."""
    table = page[page.index(marker):]
    return table[:table.index("</table>")]


def img_sources(index_html):
    if NO_FIGURES in index_html:
        raise AssertionError("figures looked for on a page drawn with --no-figures")
    return re.findall(r'<img src="([^"]+)"', index_html)


# --------------------------------------------------------------------------------------------
# Reports drawn by parity_report.py

class ReportAsserts:
    """What the report test classes check of a drawn report and of bad input."""

    def assert_pngs(self, outdir, html):
        sources = img_sources(html)
        self.assertTrue(sources, "no figures on the page")
        for src in sources:
            self.assertFalse(os.path.isabs(src), src)
            with open(os.path.join(outdir, src), "rb") as fh:
                self.assertEqual(fh.read(8), PNG_MAGIC, src)
        return sources

    def assert_bad_input(self, args, expected=None):
        res = run_report(*args)
        self.assertEqual(res.returncode, 2, res.stderr)
        lines = res.stderr.strip("\n").split("\n")
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertTrue(lines[0].startswith("parity: "), lines[0])
        self.assertNotIn("Traceback", res.stderr)
        if expected:
            self.assertIn(expected, lines[0])
        return lines[0]

    def assert_refused(self, path, expected):
        """The report of the file at path is refused in one line that says expected."""
        return self.assert_bad_input([path, "--out", os.path.join(self.tmp, "x")], expected)

    def assert_column_required(self, path, table, column):
        """Without the column the file at path is refused as damaged."""
        drop_column(path, table, column)
        self.assert_refused(path, f"table {table} has no column(s) {column}")

    def assert_section(self, out, html, summary, anchor, heading, kinds, link=None):
        """The section of a table: its heading, its link in the navigation bar (with the text
        link when given), its summary.md heading and one figure of each kind; the figures."""
        self.assertIn(f"<h2 id=\"{anchor}\">{heading}</h2>", html)
        self.assertIn(f"<a href=\"#{anchor}\">" + (f"{link}</a>" if link else ""), html)
        self.assertIn(f"## {heading}", summary)
        sources = self.assert_pngs(out, html)
        for kind in kinds:
            self.assertEqual(len([s for s in sources if s.endswith(f"_{kind}.png")]), 1, kind)
        return sources

    def assert_one_figure(self, out, html, prefix, name):
        """Of the figures whose names hold _<prefix>_, the page shows one: <name>.png."""
        sources = self.assert_pngs(out, html)
        mine = [s for s in sources if f"_{prefix}_" in s]
        self.assertEqual(mine, [s for s in sources if s.endswith(f"_{name}.png")])
        self.assertEqual(len(mine), 1)

    def assert_empty(self, out, html, summary, table, pattern):
        """The report of a file whose table has no rows says so and draws none of its
        figures."""
        self.assertIn(f"{table} is present but has 0 rows.", html)
        self.assertIn(f"{table} has 0 rows.", summary)
        self.assertNotIn(NO_FIGURES, html)
        self.assertEqual(glob.glob(os.path.join(out, pattern)), [])

    def assert_one_side(self, out, html, summary, table, pattern=None, heading=None):
        """A comparison of a run with the table against one without it: a note, and no figure
        matching pattern, no summary section under heading."""
        self.assertIn(f"Run B has no {table} table", html)
        if pattern:
            self.assertNotIn(NO_FIGURES, html)
            self.assertEqual(glob.glob(os.path.join(out, pattern)), [])
        if heading:
            self.assertNotIn(f"## {heading}", summary)


_base = {}


def base_reports():
    """The collective sample run_a.h5 (seed 1, 2 failed cases) and run_b.h5 (seed 7, links 1.25
    times as fast, 5 failed cases), and the reports of A ("single", titled "Sample run A") and of
    B against A ("compare"), drawn once per process."""
    if not _base:
        tmp = tempfile.mkdtemp(prefix="parity-report-base-")
        atexit.register(shutil.rmtree, tmp, True)
        a, b = os.path.join(tmp, "run_a.h5"), os.path.join(tmp, "run_b.h5")
        make_sample.write_sample(a, seed=1, failures=2)
        make_sample.write_sample(b, seed=7, bandwidth_scale=1.25, failures=5)
        single, compare = os.path.join(tmp, "single"), os.path.join(tmp, "compare")
        runs = [start_report(a, "--out", single, "--title", "Sample run A"),
                start_report(a, b, "--out", compare)]
        _base.update(a=a, b=b, single=single, compare=compare, single_run=finish_report(runs[0]),
                     compare_run=finish_report(runs[1]))
    return _base


class ReportCase(ReportAsserts, unittest.TestCase):
    """A test class with its own temporary folder (tmp) and the shared collective sample (a, b)
    and its reports (single, compare)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=f"parity-{cls.__name__}-")
        for name, value in base_reports().items():
            setattr(cls, name, value)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def read(self, *parts):
        with open(os.path.join(*parts), encoding="utf-8") as fh:
            return fh.read()

    def sample(self, name, **kwargs):
        """A sample file in tmp (make_sample.write_sample's options)."""
        path = os.path.join(self.tmp, name)
        make_sample.write_sample(path, **kwargs)
        return path

    def bare(self):
        """A file in tmp with no table: run B of a comparison whose run A alone has a table
        (drawn fast, unlike the collective sample)."""
        path = os.path.join(self.tmp, "bare.h5")
        if not os.path.exists(path):
            make_sample.write_sample(path, omit=MODEL_ONLY)
        return path

    def report_of(self, name, *paths, figures=True):
        """(output folder, index.html, summary.md) of the report of paths, drawn into tmp
        (figures False: with --no-figures, for a test of the page's text alone)."""
        return drawn_report(self, os.path.join(self.tmp, name), paths,
                            [] if figures else ["--no-figures"])

    def assert_absent(self, anchors, texts, patterns):
        """The collective sample's reports, one run and two, have no trace of tables it lacks:
        no section or link of anchors, none of texts on the page or in the summary, no figure
        matching patterns."""
        for out in (self.single, self.compare):
            html, summary = self.read(out, "index.html"), self.read(out, "summary.md")
            for anchor in anchors:
                self.assertNotIn(f"id=\"{anchor}\"", html)
                self.assertNotIn(f"href=\"#{anchor}\"", html)
            for text in texts:
                self.assertNotIn(text, html)
                self.assertNotIn(text, summary)
            for pattern in patterns:
                self.assertEqual(glob.glob(os.path.join(out, pattern)), [])


class DrawnOnce(ReportAsserts):
    """Reports drawn once for the class, side by side: setUpClass makes its files in cls.tmp and
    calls draw({name: [paths]}); each test reads one with report(name)."""

    @classmethod
    def draw(cls, reports):
        runs = {name: start_report(*paths, "--out", os.path.join(cls.tmp, name))
                for name, paths in reports.items()}
        cls.runs = {name: finish_report(run) for name, run in runs.items()}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def report(self, name):
        """(output directory, index.html, summary.md) of a report drawn for the class."""
        res = self.runs[name]
        self.assertEqual(res.returncode, 0, res.stderr)
        out = os.path.join(self.tmp, name)
        pages = []
        for page in ("index.html", "summary.md"):
            with open(os.path.join(out, page), encoding="utf-8") as fh:
                pages.append(fh.read())
        return out, *pages


# --------------------------------------------------------------------------------------------
# The series the figures draw (parity_reports.plots.Series), against the file's columns

def draw_series(paths, outdir, render=True):
    """The series of the report of one file, or of the second against the first (render False:
    the figures' series without their PNGs)."""
    import parity_report
    import parity_results
    from parity_reports.report import comparison_report, single_report
    from parity_reports.tables import schema
    os.makedirs(outdir)
    args = parity_report.build_parser().parse_args(paths + ["--out", outdir])
    rfs = [parity_results.load(p, schema()) for p in paths]
    if len(rfs) == 1:
        return single_report(rfs[0], LABELS[0], outdir, "series", args, render)[2]
    return comparison_report(rfs, LABELS, outdir, "series", args, render)[2]


# The rows of /bench/precision whose loss, and whose loss scale, the series sample changes.
PRECISION_CHANGED_LOSS = lambda r: (r["precision"], r["step"]) == ("float32", 30)  # noqa: E731
PRECISION_CHANGED_SCALE = lambda r: (r["precision"], r["step"]) == ("float16", 20)  # noqa: E731
_series = {}


def series_sample():
    """Run A (every table, every mismatch) and run B (seed 7, faster links, other speeds), and
    the series of A's report ("single") and of B against A ("compared"), drawn once per
    process."""
    if not _series:
        tmp = tempfile.mkdtemp(prefix="parity-series-")
        atexit.register(shutil.rmtree, tmp, True)
        a, b = os.path.join(tmp, LABELS[0]), os.path.join(tmp, LABELS[1])
        make_sample.write_sample(a, seed=1, model=True, parallel=True, tensor=True,
                                 tensor_mismatch=True, pipeline=True, moe=True,
                                 moe_mismatch=True, checkpoint=True, checkpoint_mismatch=True,
                                 precision=True, recordings=["plan", "calibrate", "state", "state-train", "context"])
        make_sample.write_sample(b, seed=7, bandwidth_scale=1.25, model=True,
                                 model_speed=1.1, parallel=True, parallel_speed=1.2,
                                 tensor=True, tensor_speed=0.9, pipeline=True,
                                 pipeline_speed=1.1, moe=True, moe_speed=0.9, checkpoint=True,
                                 checkpoint_speed=0.9, precision=True, recordings=["plan", "calibrate", "state", "state-train", "context"])
        # The sample's measured counts equal their formulas; one of each differs here, so that
        # a figure showing the formula in place of the measurement is told apart.
        set_rows(a, "/bench/tensor", "activation_bytes_per_block",
                 lambda r: (r["tp"], r["sequence_parallel"]) == (2, 0),
                 lambda r: r["activation_bytes_per_block"] + 256)
        set_rows(a, "/bench/memory", "bytes_sent",
                 lambda r: (r["strategy"], r["precision"], r["world_size"]) ==
                 ("zero1", "float32", 2), lambda r: r["bytes_sent"] + 512)
        set_rows(a, "/bench/checkpoint", "recompute_flops", lambda r: r["policy"] == "sqrt",
                 lambda r: r["recompute_flops"] + (1 << 20))
        # A loss off float32's recorded curve, and a scale its dynamic scaling did not give: a
        # figure drawing other values than the file's is told apart.
        set_rows(a, "/bench/precision", "loss", PRECISION_CHANGED_LOSS,
                 lambda r: r["loss"] + 0.5)
        set_rows(a, "/bench/precision", "loss_scale", PRECISION_CHANGED_SCALE,
                 lambda r: r["loss_scale"] * 8)
        outdirs = [os.path.join(tmp, name) for name in ("single", "compare")]
        # Series only: rendering the PNGs is left to the one test that needs them
        # (test_page.PageSeriesTests), so that every test process does not pay for it.
        _series.update(tmp=tmp, a=a, b=b, outdirs=outdirs, single=draw_series([a], outdirs[0], render=False),
                       compared=draw_series([a, b], outdirs[1], render=False))
    return _series


def grouped(rows, *columns):
    """{tuple of columns: rows} in file order."""
    out = OrderedDict()
    for r in rows:
        out.setdefault(tuple(r[c] for c in columns), []).append(r)
    return out


def column(rows, name, scale=1.0):
    return [r[name] * scale for r in rows]


def mean(values):
    values = list(values)
    return sum(values) / len(values)


def by_size_columns(path, table, col):
    """(sizes, col) of a table with a size_bytes column, in order of size."""
    cols = read_columns(path, table)
    return tuple(zip(*sorted(zip(cols["size_bytes"], cols[col]))))


def group_attrs(path, group, *names):
    with h5py.File(path, "r") as f:
        return [float(f[group].attrs[n]) for n in names]


class SeriesCase(unittest.TestCase):
    """A test class reading the series of the full sample (series_sample): a, b, the series
    drawn of A alone (single) and of B against A (compared), the figures' folders (outdirs, left
    empty: the series are drawn without their PNGs)."""

    @classmethod
    def setUpClass(cls):
        for name, value in series_sample().items():
            setattr(cls, name, value)

    def figure(self, drawn, figure, axes=None):
        """{label: Series} of one figure (and panel); the figure must exist."""
        found = [s for s in drawn if s.figure == figure and (axes is None or s.axes == axes)]
        self.assertTrue(found, f"no series drawn in {figure!r} {axes or ''}")
        out = {s.label: s for s in found}
        self.assertEqual(len(out), len(found), f"a label drawn twice in {figure!r}")
        return out

    def assert_values(self, got, want, what):
        want = np.asarray(want, dtype=float)
        self.assertEqual(got.shape, want.shape, f"{what}: drew {got}, file {want}")
        self.assertTrue(np.allclose(got, want, rtol=RTOL, atol=0),
                        f"{what}: drew {got}, file {want}")

    def assert_series(self, series, x, y):
        what = f"{series.figure} / {series.axes} / {series.label}"
        if x is not None:
            self.assert_values(series.x, x, what + " x")
        self.assert_values(series.y, y, what + " y")

    def assert_bytes(self, pairs):
        """pairs: [(Series, expected bytes)] of one figure, drawn in one unit: y times that
        unit (a power of 1024) must be the bytes."""
        for scale in BYTE_SCALES:
            if all(s.y.shape == np.shape(want) and
                   np.allclose(s.y * scale, want, rtol=RTOL, atol=0) for s, want in pairs):
                return
        self.fail("no unit makes the drawn bars the file's bytes: "
                  + "; ".join(f"{s.axes}/{s.label} {s.y} vs {list(want)}" for s, want in pairs))

    def assert_distinct(self, a, b, what):
        self.assertFalse(np.allclose(a, b, rtol=RTOL, atol=0),
                         f"the sample's {what} are equal: a swap would go unseen")


class RecordingCase(unittest.TestCase):
    """A test of one recorded fixture's section: FIXTURE and TABLE (the table its rows come from)
    set by the subclass; rows, drawn (the series of its single-run report) and series(figure)."""
    FIXTURE = None
    TABLE = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-recording-")
        cls.rows = read_rows(cls.FIXTURE, cls.TABLE)
        # The series alone: the figures themselves are written and checked by the series sample
        # (test_page) and the end-to-end runs.
        cls.drawn = draw_series([cls.FIXTURE], os.path.join(cls.tmp, "series"), render=False)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def series(self, figure):
        return {s.label: s for s in self.drawn if s.figure == figure}

    def fixture_copy(self, name):
        """A copy of the fixture in tmp, for a test to change."""
        path = os.path.join(self.tmp, name)
        shutil.copy(self.FIXTURE, path)
        return path

    def fixture_without(self, name, table, columns):
        """A copy of the fixture in tmp without table's columns (a file from before they
        existed)."""
        path = self.fixture_copy(name)
        for column in columns:
            drop_column(path, table, column)
        return path

    def fixture_report(self, name, *options, path=None):
        """(output folder, index.html, summary.md) of the single-run report of path (the fixture
        unless given) with the further command-line options, drawn into tmp."""
        return drawn_report(self, os.path.join(self.tmp, name), [path or self.FIXTURE], options)
