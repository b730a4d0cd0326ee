"""Tests of the training-with-saves section (parity_reports/tables/state_train.py) against
/state/train of a recorded `parity state train --restart` at 4 ranks (fixtures/state-train-np4.h5,
going on from step 4 of a ZeRO-1 run on 2 ranks): the loss drawn is the file's, the saves are
the steps whose state was saved, the restart is the step it went on from; a run beyond its bound
is shown as failed.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import os

import h5py
import numpy as np

from report_testing import HERE, RecordingCase

FIXTURE = os.path.join(HERE, "fixtures", "state-train-np4.h5")
CHECKED_FIGURES = {"state_train_loss"}


class StateTrainReportTests(RecordingCase):
    FIXTURE = FIXTURE
    TABLE = "/state/train"

    def test_the_recorded_run_went_on_from_its_save(self):
        self.assertEqual([r["step"] for r in self.rows], [4, 5, 6, 7])
        self.assertEqual([r["saved"] for r in self.rows], [0, 1, 0, 1])
        with h5py.File(FIXTURE) as f:
            attrs = f["/state/train"].attrs
            self.assertEqual(attrs["restarted_from"], 4)
            self.assertEqual(attrs["passed"], 1)
            self.assertLessEqual(attrs["error"], attrs["bound"])

    def test_loss_saves_and_restart_are_the_files(self):
        drawn = self.series("state_train_loss")
        self.assertEqual(set(drawn), {"loss", "saved", "restart"})
        self.assertEqual(list(drawn["loss"].x), [r["step"] for r in self.rows])
        self.assertTrue(np.array_equal(drawn["loss"].y, [r["loss"] for r in self.rows]))
        saved = [r for r in self.rows if r["saved"] == 1]
        self.assertEqual(list(drawn["saved"].x), [r["step"] for r in saved])
        self.assertEqual(drawn["restart"].x, 4)

    def test_a_run_beyond_its_bound_is_shown_failed(self):
        path = self.fixture_copy("beyond.h5")
        with h5py.File(path, "a") as f:
            attrs = f["/state/train"].attrs
            attrs["error"] = attrs["bound"] * 2
            attrs["passed"] = np.int64(0)
        _, html, summary = self.fixture_report("beyond-report", "--no-figures", path=path)
        self.assertIn("<span class=\"bad\">4 steps (4 to 7) under dp on 4 ranks, restarted from the save at step 4;",
                      html)
        self.assertIn("beyond the bound", summary)
