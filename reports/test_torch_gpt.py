"""Tests of the PyTorch GPT baseline (bench/torch_gpt.py) on the CPU: the tiny model trains a few
steps and reports its fields, its parameter count matches parity's formula, bad arguments exit 2
in one line. The training tests are skipped where PyTorch is not installed.

Run with: /usr/bin/python3 reports/run_tests.py
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "bench", "torch_gpt.py")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def run_script(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not installed")
class TinyModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tiny.json")
            cls.proc = run_script("--model", "tiny", "--steps", "3", "--warmup", "1", "--device", "cpu",
                                  "--dtype", "float32", "--json", path)
            cls.result = None
            if cls.proc.returncode == 0:
                with open(path) as f:
                    cls.result = json.load(f)

    def setUp(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)

    def test_fields(self):
        r = self.result
        for key in ("model", "layers", "hidden", "heads", "sequence", "vocabulary", "batch", "dtype", "device",
                    "device_name", "torch_version", "compiled", "sdpa", "parameters", "step_seconds",
                    "median_step_s", "tokens_per_s", "step_flops", "peak_tflops", "mfu", "compile_s", "losses",
                    "peak_memory_bytes"):
            self.assertIn(key, r)
        self.assertEqual((r["model"], r["layers"], r["hidden"], r["heads"], r["sequence"], r["vocabulary"]),
                         ("tiny", 2, 64, 4, 64, 256))
        self.assertEqual((r["device"], r["dtype"]), ("cpu", "float32"))
        self.assertEqual(len(r["step_seconds"]), 3)
        self.assertEqual(len(r["losses"]), 4)  # warmup and timed steps
        self.assertIs(r["compiled"], False)
        self.assertIsNone(r["mfu"])  # CPU without --peak-tflops
        self.assertIsNone(r["peak_memory_bytes"])
        self.assertGreater(r["tokens_per_s"], 0)
        self.assertAlmostEqual(r["tokens_per_s"], r["batch"] * r["sequence"] / r["median_step_s"], delta=1e-6)

    def test_losses_start_near_uniform(self):
        losses = self.result["losses"]
        self.assertTrue(all(math.isfinite(x) for x in losses), losses)
        self.assertLess(abs(losses[0] - math.log(self.result["vocabulary"])), 0.3, losses)

    def test_parameter_count(self):
        # Per block: qkv 3h^2+3h, proj h^2+h, fc1 4h^2+4h, fc2 4h^2+h, two LayerNorms 4h; embeddings
        # V h + T h, final LayerNorm 2h, head tied to the token table.
        r = self.result
        V, T, L, h = r["vocabulary"], r["sequence"], r["layers"], r["hidden"]
        self.assertEqual(r["parameters"], V * h + T * h + L * (12 * h * h + 13 * h) + 2 * h)

    def test_step_flops(self):
        r = self.result
        B, T, L, h, V = r["batch"], r["sequence"], r["layers"], r["hidden"], r["vocabulary"]
        expected = 72 * B * T * L * h * h * (1 + T / (6 * h) + V / (12 * h * L))
        self.assertAlmostEqual(r["step_flops"], expected, delta=expected * 1e-12)


class BadArguments(unittest.TestCase):
    def assert_refused(self, args, words, proc=None):
        """The script run with args (or proc, that run) refuses them in one line with words."""
        proc = proc or run_script(*args)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertIn(words, lines[0])

    def test_unknown_model(self):
        self.assert_refused(["--model", "gpt-9000"], "unknown model 'gpt-9000'")

    def test_batch_zero(self):
        self.assert_refused(["--model", "tiny", "--batch", "0"], "--batch")

    def test_heads_not_dividing_hidden(self):
        self.assert_refused(["--model", "tiny", "--heads", "5"], "does not divide")

    @unittest.skipUnless(HAVE_TORCH, "PyTorch is not installed")
    def test_cuda_unavailable(self):
        args = ["--model", "tiny", "--device", "cuda", "--steps", "1", "--warmup", "0"]
        proc = run_script(*args)
        if proc.returncode == 0:
            self.skipTest("this machine has a CUDA device")
        self.assert_refused(args, "no CUDA device", proc)

    def test_unknown_option(self):
        self.assert_refused(["--frobnicate"], "unrecognized arguments")

    def test_help(self):
        proc = run_script("--help")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for option in ("--model", "--batch", "--steps", "--warmup", "--device", "--dtype", "--compile",
                       "--peak-tflops", "--json"):
            self.assertIn(option, proc.stdout)


if __name__ == "__main__":
    unittest.main()
