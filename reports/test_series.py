"""The series the report's figures draw (parity_reports.plots.Series) against the columns of the
file they were drawn from, read here with plain h5py: each figure must show the column it says
it shows (busbw, not algbw; p95, not p50; measured, not formula) for the rows it says it shows.
Values the report derives (means over ranks, ratios, fits) are checked against their formula
computed here from the file's columns.

Run with: /usr/bin/python3 -m unittest discover -s reports -p 'test_*.py'
"""

import os
import shutil
import statistics
import sys
import tempfile
import unittest
from collections import OrderedDict, defaultdict

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("MPLCONFIGDIR", tempfile.gettempdir())

import make_sample  # noqa: E402
import parity_report  # noqa: E402
import parity_results  # noqa: E402
from parity_reports.report import comparison_report, single_report  # noqa: E402
from parity_reports.tables import schema  # noqa: E402
from test_report import fmt_size, read_columns, read_rows, set_rows  # noqa: E402

RTOL = 1e-12
BYTE_SCALES = (1, 1 << 10, 1 << 20, 1 << 30)
LABELS = ["run_a.h5", "run_b.h5"]
RUNS = [f"{name}: {label}" for name, label in zip("AB", LABELS)]  # the figures' run labels
PARTS = ["embedding", "block", "head", "loss"]
PART_TITLES = {"block": "one block"}
CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "communication",
              "workspace"]
# The timeline's boxes span rank - BOX to rank + BOX (parity_reports/tables/pipeline.py).
BOX = 0.4
# The checkpointing trade-off's panels: {measured column: title}, and the bars' offset from a
# policy's tick (parity_reports/tables/checkpoint.py).
CHECKPOINT_PANELS = {"peak_bytes": "peak: the most the blocks hold at once",
                     "stored_bytes": "stored between forward and backward"}
CHECKPOINT_BAR = 0.19
# The rows of /bench/precision whose loss, and whose loss scale, the series test changes.
PRECISION_CHANGED_LOSS = lambda r: (r["precision"], r["step"]) == ("float32", 30)  # noqa: E731
PRECISION_CHANGED_SCALE = lambda r: (r["precision"], r["step"]) == ("float16", 20)  # noqa: E731


def draw(paths, outdir):
    """The series of the report of one file, or of the second against the first."""
    os.makedirs(outdir)
    args = parity_report.build_parser().parse_args(paths + ["--out", outdir])
    rfs = [parity_results.load(p, schema()) for p in paths]
    if len(rfs) == 1:
        return single_report(rfs[0], LABELS[0], outdir, "series", args)[2]
    return comparison_report(rfs, LABELS, outdir, "series", args)[2]


def group_title(collective, dtype, redop, in_place, root=-1):
    """A collective group's title as the report writes it."""
    parts = [collective, dtype] + ([redop] if redop and redop != "none" else [])
    parts.append("in place" if in_place else "out of place")
    if root >= 0:
        parts.append(f"root {root}")
    return " · ".join(parts)


def grouped(rows, *columns):
    """{tuple of columns: rows} in file order."""
    out = OrderedDict()
    for r in rows:
        out.setdefault(tuple(r[c] for c in columns), []).append(r)
    return out


def by_size(rows):
    return sorted(rows, key=lambda r: r["size_bytes"])


def column(rows, name, scale=1.0):
    return [r[name] * scale for r in rows]


def by_size_columns(path, table, col):
    """(sizes, col) of a table with a size_bytes column, in order of size."""
    cols = read_columns(path, table)
    return tuple(zip(*sorted(zip(cols["size_bytes"], cols[col]))))


def mean(values):
    values = list(values)
    return sum(values) / len(values)


def collective_rows(path):
    """/bench/collectives rows, each with its row index, grouped by (collective, dtype, redop,
    in_place, root)."""
    rows = read_rows(path, "/bench/collectives")
    for i, r in enumerate(rows):
        r["_row"] = i
    return grouped(rows, "collective", "dtype", "redop", "in_place", "root")


class SeriesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="parity-series-test-")
        cls.a = os.path.join(cls.tmp, LABELS[0])
        cls.b = os.path.join(cls.tmp, LABELS[1])
        make_sample.write_sample(cls.a, seed=1, model=True, parallel=True, tensor=True,
                                 tensor_mismatch=True, pipeline=True, moe=True,
                                 moe_mismatch=True, checkpoint=True, checkpoint_mismatch=True,
                                 precision=True)
        make_sample.write_sample(cls.b, seed=7, bandwidth_scale=1.25, model=True,
                                 model_speed=1.1, parallel=True, parallel_speed=1.2,
                                 tensor=True, tensor_speed=0.9, pipeline=True,
                                 pipeline_speed=1.1, moe=True, moe_speed=0.9, checkpoint=True,
                                 checkpoint_speed=0.9, precision=True)
        # The sample's measured counts equal their formulas; one of each differs here, so that
        # a figure showing the formula in place of the measurement is told apart.
        set_rows(cls.a, "/bench/tensor", "activation_bytes_per_block",
                 lambda r: (r["tp"], r["sequence_parallel"]) == (2, 0),
                 lambda r: r["activation_bytes_per_block"] + 256)
        set_rows(cls.a, "/bench/memory", "bytes_sent",
                 lambda r: (r["strategy"], r["precision"], r["world_size"]) ==
                 ("zero1", "float32", 2), lambda r: r["bytes_sent"] + 512)
        set_rows(cls.a, "/bench/checkpoint", "recompute_flops", lambda r: r["policy"] == "sqrt",
                 lambda r: r["recompute_flops"] + (1 << 20))
        # A loss off float32's sample curve, and a scale the sample's dynamic scaling would not
        # give: a figure drawing the sample's values in place of the file's is told apart.
        set_rows(cls.a, "/bench/precision", "loss", PRECISION_CHANGED_LOSS,
                 lambda r: r["loss"] + 0.5)
        set_rows(cls.a, "/bench/precision", "loss_scale", PRECISION_CHANGED_SCALE,
                 lambda r: r["loss_scale"] * 8)
        cls.outdirs = [os.path.join(cls.tmp, name) for name in ("single", "compare")]
        cls.single = draw([cls.a], cls.outdirs[0])
        cls.compared = draw([cls.a, cls.b], cls.outdirs[1])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------------

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

    # -- one run --------------------------------------------------------------------------------

    def test_every_figure_is_checked(self):
        # Every PNG written has its series recorded: no figure draws past the Plotter.
        for outdir, drawn in zip(self.outdirs, (self.single, self.compared)):
            self.assertEqual({s.file for s in drawn},
                             {f for f in os.listdir(outdir) if f.endswith(".png")})
        checked = {"slow_ranks", "slow_rank_detail", "point_to_point", "harness_overhead",
                   "model_tokens", "model_mfu", "model_memory", "zero_memory_mixed",
                   "zero_memory_float32", "zero_bytes_sent", "scaling", "overlap",
                   "tensor_activations", "tensor_bytes", "tensor_step",
                   "pipeline_timeline_gpipe", "pipeline_timeline_1f1b",
                   "pipeline_timeline_interleaved_v2", "pipeline_timeline_zb-h1",
                   "pipeline_bubble", "pipeline_activations", "moe_step", "moe_bytes",
                   "moe_load", "moe_routers", "moe_dropped", "checkpoint_tradeoff",
                   "checkpoint_formulas", "precision_loss"}
        drawn = {s.figure for s in self.single if not s.figure.startswith("coll_")}
        self.assertEqual(drawn, checked)
        checked = {"point_to_point", "harness_overhead", "model_compare_tokens",
                   "scaling_compare", "tensor_compare", "pipeline_compare", "moe_compare",
                   "checkpoint_compare"}
        drawn = {s.figure for s in self.compared if not s.figure.startswith("cmp_")}
        self.assertEqual(drawn, checked)

    def test_collective_groups(self):
        """busbw, time, p50 and p95, the predictions and the memcpy line of every group."""
        host_bw = max(read_columns(self.a, "/host/copy_bandwidth")["bandwidth_GBps"])
        figures = set()
        for (coll, dtype, redop, in_place, root), rows in collective_rows(self.a).items():
            if len({r["size_bytes"] for r in rows}) < 2:
                continue  # a table, no figure
            name = "coll_" + group_title(coll, dtype, redop, in_place, root)
            figures.add(name)
            drawn = self.figure(self.single, name)
            expected = {"host memcpy"}
            for algo, algo_rows in grouped(rows, "algorithm").items():
                algo, rs = algo[0], by_size(algo_rows)
                sizes = column(rs, "size_bytes")
                # Every value is positive at 4 ranks: the log axes leave none out.
                self.assertTrue(all(r[c] > 0 for r in rs for c in (
                    "busbw_GBps", "time_us", "predicted_busbw_GBps", "predicted_time_us")))
                for label, col in (("busbw", "busbw_GBps"), ("time", "time_us"),
                                   ("predicted busbw", "predicted_busbw_GBps"),
                                   ("predicted time", "predicted_time_us"),
                                   ("p50 time", "time_p50_us"), ("p95 time", "time_p95_us")):
                    self.assert_series(drawn[f"{algo} {label}"], sizes, column(rs, col))
                    expected.add(f"{algo} {label}")
                self.assert_distinct(column(rs, "time_p50_us"), column(rs, "time_p95_us"),
                                     "p50 and p95 times")
                if coll == "all_reduce":
                    self.assert_distinct(column(rs, "busbw_GBps"), column(rs, "algbw_GBps"),
                                         "busbw and algbw")
            self.assertEqual(set(drawn), expected, name)
            self.assert_series(drawn["host memcpy"], [], [host_bw])
        self.assertEqual(figures, {s.figure for s in self.single
                                   if s.figure.startswith("coll_")})
        self.assertEqual(len(figures), 8)

    def largest_size_rows(self):
        """{panel title: {algorithm: {rank: time}}} of every group's rows at its largest size,
        from /bench/collectives_rank_times."""
        times = defaultdict(dict)
        rt = read_columns(self.a, "/bench/collectives_rank_times")
        for row, rank, t in zip(rt["row"], rt["rank"], rt["time_us"]):
            times[row][rank] = t
        out = OrderedDict()
        for key, rows in collective_rows(self.a).items():
            largest = max(r["size_bytes"] for r in rows)
            out[f"{group_title(*key)} at {fmt_size(largest)}"] = {
                r["algorithm"]: times[r["_row"]] for r in rows if r["size_bytes"] == largest}
        return out

    def test_slow_ranks(self):
        """The mean over rows of rank time / the row's median rank time, and per panel each
        algorithm's rank times against their median."""
        panels = self.largest_size_rows()
        ratios = defaultdict(list)
        for algos in panels.values():
            for times in algos.values():
                med = statistics.median(times.values())
                for rank, t in times.items():
                    ratios[rank].append(t / med)
        ranks = sorted(ratios)
        summary = self.figure(self.single, "slow_ranks")
        self.assert_series(summary["rank time / median"], range(len(ranks)),
                           [mean(ratios[r]) for r in ranks])
        detail = [s for s in self.single if s.figure == "slow_rank_detail"]
        # One panel per collective: its group with the most algorithms.
        self.assertEqual(len({s.axes for s in detail}), 6)
        self.assertIn("all_reduce · float32 · sum · out of place at 64 MiB",
                      {s.axes for s in detail})
        for s in detail:
            algo = s.label.split(" ")[0]
            times = panels[s.axes][algo]
            med = statistics.median(times.values())
            self.assert_series(s, None, [times[r] / med - 1 for r in sorted(times)])

    def test_point_to_point(self):
        sizes, times = by_size_columns(self.a, "/bench/point_to_point", "time_us")
        alpha, beta = self.group_attrs(self.a, "/bench/point_to_point",
                                       "alpha_us", "beta_us_per_byte")
        drawn = self.figure(self.single, "point_to_point")
        self.assert_series(drawn[f"{LABELS[0]} ping-pong"], sizes, times)
        fit = drawn[f"{LABELS[0]} alpha-beta fit"]
        self.assertEqual((fit.x[0], fit.x[-1]), (min(sizes), max(sizes)))
        self.assert_series(fit, None, alpha + beta * fit.x)

    @staticmethod
    def group_attrs(path, group, *names):
        with h5py.File(path, "r") as f:
            return [float(f[group].attrs[n]) for n in names]

    def test_harness_overhead(self):
        sizes, overhead = by_size_columns(self.a, "/bench/harness_overhead", "overhead_us")
        _, direct = by_size_columns(self.a, "/bench/harness_overhead", "direct_us")
        drawn = self.figure(self.single, "harness_overhead")
        self.assert_series(drawn["overhead"], sizes, overhead)
        _, own = by_size_columns(self.a, "/bench/harness_overhead", "own_overhead_us")
        self.assert_series(drawn["own"], sizes, own)
        self.assert_distinct(overhead, own, "overheads on the world and on one rank")
        self.assert_distinct(overhead, direct, "overhead and direct times")
        target, = self.group_attrs(self.a, "/bench/harness_overhead", "target_us")
        self.assert_series(drawn["target"], [], [target])

    def model_ranks(self, path):
        """{model: its rows over ranks}, models in file order."""
        return OrderedDict((m[0], rows) for m, rows in
                           grouped(read_rows(path, "/bench/model"), "model").items())

    def assert_model_bars(self, drawn, models, col, run=""):
        """A bar per model at the mean over ranks of col, its whisker from the smallest to the
        largest rank's; run: the label's prefix in a comparison ("A: ... ")."""
        bars = drawn[run + "mean"]
        for label, over_ranks in (("mean", mean), ("rank min", min), ("rank max", max)):
            self.assert_series(drawn[run + label], bars.x,
                               [over_ranks(column(rows, col)) for rows in models.values()])

    def test_model(self):
        """tokens/s and MFU: the mean over ranks, whiskers at the slowest and fastest rank;
        peak memory: the largest rank per category."""
        models = self.model_ranks(self.a)
        for figure, col in (("model_tokens", "tokens_per_s"), ("model_mfu", "mfu")):
            drawn = self.figure(self.single, figure)
            self.assert_model_bars(drawn, models, col)
            self.assert_values(drawn["mean"].x, range(len(models)), figure)
        self.assert_distinct([mean(column(r, "tokens_per_s")) for r in models.values()],
                             [max(column(r, "tokens_per_s")) for r in models.values()],
                             "mean and largest tokens/s")
        drawn = self.figure(self.single, "model_memory")
        # communication is 0 on every rank (replicas send nothing), so it is left out.
        shown = [c for c in CATEGORIES if c != "communication"]
        self.assertEqual(list(drawn), shown)
        self.assert_bytes([(drawn[c], [max(column(rows, f"peak_{c}_bytes"))
                                       for rows in models.values()]) for c in shown])

    def zero_points(self, path):
        """{(precision, strategy): [rows of one world size] by world size}."""
        out = OrderedDict()
        rows = read_rows(path, "/bench/memory")
        for (precision, strategy), rs in grouped(rows, "precision", "strategy").items():
            out[(precision, strategy)] = [g for _, g in sorted(
                grouped(rs, "world_size").items())]
        return out

    def test_zero_memory(self):
        """Per strategy panel: the largest rank's bytes per category, the formula's model
        state and, where it differs visibly, the paper's."""
        points = self.zero_points(self.a)
        for precision in ("mixed", "float32"):
            figure = f"zero_memory_{precision}"
            pairs = []
            for strategy in ("dp", "zero1", "zero2", "zero3"):
                drawn = self.figure(self.single, figure, strategy)
                pts = points[(precision, strategy)]
                self.assertEqual(set(drawn) - {"paper formula"}, set(CATEGORIES) | {"formula"})
                for c in CATEGORIES:
                    self.assert_values(drawn[c].x, range(len(pts)), c)
                    pairs.append((drawn[c], [max(column(rows, f"{c}_bytes")) for rows in pts]))
                pairs.append((drawn["formula"],
                              [max(column(rows, "formula_model_state_bytes")) for rows in pts]))
                if "paper formula" in drawn:
                    paper = drawn["paper formula"]
                    pairs.append((paper, [max(column(pts[int(x)], "paper_model_state_bytes"))
                                          for x in paper.x]))
            self.assert_bytes(pairs)
        zero2 = points[("float32", "zero2")][1]  # at 2 ranks
        self.assert_distinct(column(zero2, "parameters_bytes"), column(zero2, "gradients_bytes"),
                             "parameter and gradient bytes of zero2")

    def test_zero_bytes_sent(self):
        """Per precision: the mean over ranks of the bytes sent, and of the formula."""
        points = self.zero_points(self.a)
        pairs, sent_all, formula_all = [], [], []
        for precision in ("mixed", "float32"):
            drawn = self.figure(self.single, "zero_bytes_sent", precision)
            for strategy in ("dp", "zero1", "zero2", "zero3"):
                pts = points[(precision, strategy)]
                sent = [mean(column(rows, "bytes_sent")) for rows in pts]
                formula = [mean(column(rows, "formula_bytes_sent")) for rows in pts]
                bars, marks = drawn[f"{strategy} bytes sent"], drawn[f"{strategy} formula"]
                self.assert_values(marks.x, bars.x, "formula marks on their bars")
                pairs += [(bars, sent), (marks, formula)]
                sent_all += sent
                formula_all += formula
        self.assert_bytes(pairs)
        self.assert_distinct(sent_all, formula_all, "bytes sent and their formula")

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

    def test_overlap(self):
        rows = read_rows(self.a, "/bench/overlap")
        drawn = self.figure(self.single, "overlap")
        for flag, label in ((0, "without overlap"), (1, "with overlap")):
            rs = sorted((r for r in rows if r["overlap"] == flag), key=lambda r: r["bucket_bytes"])
            self.assert_series(drawn[label], None, column(rs, "exposed_comm_seconds", 1e3))

    def tensor_rows(self, path):
        """/bench/tensor in the figures' order: t, dp, then SP off before on."""
        return sorted(read_rows(path, "/bench/tensor"),
                      key=lambda r: (r["tp"], r["dp"], r["sequence_parallel"]))

    def test_tensor(self):
        rows = self.tensor_rows(self.a)
        drawn = self.figure(self.single, "tensor_activations")
        self.assert_values(drawn["formula"].x, drawn["measured"].x, "diamonds on their bars")
        self.assert_bytes([(drawn["measured"], column(rows, "activation_bytes_per_block")),
                           (drawn["formula"], column(rows, "formula_activation_bytes_per_block")),
                           (drawn["Korthikanti"],
                            column(rows, "korthikanti_activation_bytes_per_block"))])
        self.assert_distinct(column(rows, "activation_bytes_per_block"),
                             column(rows, "formula_activation_bytes_per_block"),
                             "activations and their formula")

        sending = [r for r in rows if r["tp"] > 1]
        for part in PARTS:
            drawn = self.figure(self.single, "tensor_bytes", PART_TITLES.get(part, part))
            self.assert_bytes([(drawn["measured"], column(sending, f"bytes_{part}")),
                               (drawn["formula"], column(sending, f"formula_bytes_{part}"))])
        self.assert_distinct(column(sending, "bytes_block"),
                             column(sending, "formula_bytes_block"), "block bytes and formula")

        drawn = self.figure(self.single, "tensor_step")
        self.assert_series(drawn["compute"], range(len(rows)), column(rows, "compute_seconds", 1e3))
        self.assert_series(drawn["tp comm"], range(len(rows)), column(rows, "tp_comm_seconds", 1e3))
        self.assert_series(drawn["compute + predicted comm"],
                           [i for i, r in enumerate(rows) if r["tp"] > 1],
                           [r["compute_seconds"] * 1e3 + r["predicted_comm_seconds"] * 1e3
                            for r in sending])

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

    def precision_columns(self, path):
        """{precision: {column: values in step order}} of /bench/precision."""
        out = OrderedDict()
        for r in sorted(read_rows(path, "/bench/precision"), key=lambda r: r["step"]):
            cols = out.setdefault(r["precision"], defaultdict(list))
            for c, v in r.items():
                cols[c].append(v)
        return out

    def test_precision_loss(self):
        """Above, each precision's loss against the step; below, its loss scale, and a marker at
        each skipped step at the scale it ran with."""
        runs = self.precision_columns(self.a)
        self.assertEqual(list(runs), ["float64", "float32", "bfloat16", "float16"])
        drawn = self.figure(self.single, "precision_loss", "training loss")
        self.assertEqual(set(drawn), set(runs))
        for precision, cols in runs.items():
            self.assert_series(drawn[precision], cols["step"], cols["loss"])
        drawn = self.figure(self.single, "precision_loss", "loss scale")
        self.assertEqual(set(drawn), {f"{p} scale" for p in runs} | {"float16 skipped"})
        for precision, cols in runs.items():
            self.assert_series(drawn[f"{precision} scale"], cols["step"], cols["loss_scale"])
        f16 = runs["float16"]
        skipped = [i for i, k in enumerate(f16["skipped"]) if k == 1]
        self.assertEqual(len(skipped), 2)
        self.assert_series(drawn["float16 skipped"], [f16["step"][i] for i in skipped],
                           [f16["loss_scale"][i] for i in skipped])
        # The changed rows are drawn as the file has them.
        row = find(read_rows(self.a, "/bench/precision"), PRECISION_CHANGED_LOSS)
        self.assertEqual(drawn_at(self.figure(self.single, "precision_loss", "training loss")
                                  ["float32"], 30), row["loss"])
        self.assertGreater(row["loss"], max(runs["float64"]["loss"][25:35]))
        row = find(read_rows(self.a, "/bench/precision"), PRECISION_CHANGED_SCALE)
        self.assertEqual(drawn_at(drawn["float16 scale"], 20), row["loss_scale"])
        self.assertEqual(row["loss_scale"], 8 * runs["float16"]["loss_scale"][19])

    def test_precision_draw_returns_what_it_drew(self):
        """draw_losses returns the series it drew: the file's loss, scale and skipped steps."""
        from parity_reports.plots import Plotter
        from parity_reports.tables import precision
        bench = precision.load(parity_results.load(self.a, schema()), {})
        outdir = os.path.join(self.tmp, "precision_draw")
        os.makedirs(outdir)
        fname, got = precision.draw_losses(Plotter(outdir), bench)
        self.assertTrue(os.path.exists(os.path.join(outdir, fname)))
        runs = self.precision_columns(self.a)
        self.assertEqual(list(got["loss"]), list(runs))
        for p, cols in runs.items():
            self.assert_values(np.asarray(got["loss"][p][0], float), cols["step"], f"{p} steps")
            self.assert_values(np.asarray(got["loss"][p][1], float), cols["loss"], f"{p} loss")
            self.assert_values(np.asarray(got["scale"][p][1], float), cols["loss_scale"],
                               f"{p} scale")
        self.assertEqual(list(got["skipped"]), ["float16"])
        self.assertEqual(list(got["skipped"]["float16"][0]),
                         [s for s, k in zip(runs["float16"]["step"], runs["float16"]["skipped"])
                          if k == 1])

    # -- run B against run A --------------------------------------------------------------------

    def test_collectives_comparison(self):
        """busbw of each run per group and algorithm, and B / A at the sizes both have."""
        host_bws = [max(read_columns(p, "/host/copy_bandwidth")["bandwidth_GBps"])
                    for p in (self.a, self.b)]
        runs = [collective_rows(p) for p in (self.a, self.b)]
        for key, rows_a in runs[0].items():
            if len({r["size_bytes"] for r in rows_a}) < 2:
                continue
            drawn = self.figure(self.compared, "cmp_" + group_title(*key[:4]))
            for name, hb in zip("AB", host_bws):
                self.assert_series(drawn[f"host memcpy {name}"], [], [hb])
            algos = [grouped(rows, "algorithm") for rows in (rows_a, runs[1][key])]
            for (algo,), algo_a in algos[0].items():
                ra, rb = by_size(algo_a), by_size(algos[1][(algo,)])
                for name, rs in (("A", ra), ("B", rb)):
                    self.assert_series(drawn[f"{algo} busbw {name}"], column(rs, "size_bytes"),
                                       column(rs, "busbw_GBps"))
                b_at = {r["size_bytes"]: r["busbw_GBps"] for r in rb}
                both = [r for r in ra if r["size_bytes"] in b_at]
                self.assert_series(drawn[f"{algo} busbw B / A"], column(both, "size_bytes"),
                                   [b_at[r["size_bytes"]] / r["busbw_GBps"] for r in both])

    def test_point_to_point_and_harness_comparison(self):
        drawn = self.figure(self.compared, "point_to_point")
        harness = [s for s in self.compared if s.figure == "harness_overhead"
                   and s.label == "overhead"]
        self.assertEqual(len(harness), 2)
        for name, path, overhead in zip("AB", (self.a, self.b), harness):
            self.assert_series(drawn[f"{name} ping-pong"],
                               *by_size_columns(path, "/bench/point_to_point", "time_us"))
            self.assert_series(overhead,
                               *by_size_columns(path, "/bench/harness_overhead", "overhead_us"))

    def test_model_comparison(self):
        drawn = self.figure(self.compared, "model_compare_tokens")
        for run, path in zip(RUNS, (self.a, self.b)):
            self.assert_model_bars(drawn, self.model_ranks(path), "tokens_per_s", f"{run} ")

    def test_scaling_comparison(self):
        drawn = self.figure(self.compared, "scaling_compare")
        for run, path in zip(RUNS, (self.a, self.b)):
            for (mode,), rows in grouped(read_rows(path, "/bench/scaling"), "mode").items():
                rows = sorted(rows, key=lambda r: r["world_size"])
                self.assert_series(drawn[f"{mode} step time {run}"], column(rows, "world_size"),
                                   column(rows, "step_seconds", 1e3))

    def test_tensor_comparison(self):
        """Per matched run: compute (step - tensor-parallel communication) and that
        communication on top, of each run."""
        drawn = self.figure(self.compared, "tensor_compare")
        for run, path in zip(RUNS, (self.a, self.b)):
            rows = self.tensor_rows(path)
            self.assert_series(drawn[f"{run} compute"], None,
                               [r["step_seconds"] * 1e3 - r["tp_comm_seconds"] * 1e3
                                for r in rows])
            self.assert_series(drawn[f"{run} tp comm"], None,
                               [r["tp_comm_seconds"] * 1e3 for r in rows
                                if r["tp_comm_seconds"] > 0])

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


def find(rows, match):
    hits = [r for r in rows if match(r)]
    assert len(hits) == 1, len(hits)
    return hits[0]


def drawn_at(series, x):
    """The y a series drew at x (once)."""
    ys = [y for xx, y in zip(series.x, series.y) if xx == x]
    assert len(ys) == 1, ys
    return ys[0]


if __name__ == "__main__":
    unittest.main()
