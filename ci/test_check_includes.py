#!/usr/bin/python3
"""The layering check itself: it passes the repository and fails each kind of leak."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHECK = os.path.join(HERE, "check_includes.py")


def run(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


class LayeringCheck(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="layers-")
        os.makedirs(os.path.join(self.root, "reference"))
        shutil.copy(os.path.join(ROOT, "reference", "layers.txt"), os.path.join(self.root, "reference"))
        self.write("reference/core/error.hpp", "#pragma once\n#include <string>\n")
        self.write("reference/tensor/tensor.hpp", '#include "reference/core/error.hpp"\n')
        self.write("reference/comm/communicator.hpp", '#include "reference/tensor/tensor.hpp"\n')

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def test_the_repository_keeps_its_layers(self):
        r = run(ROOT)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_clean_tree_passes(self):
        self.write("reference/comm/communicator.hpp", '#include "reference/core/error.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_an_upward_edge_fails_naming_file_line_and_edge(self):
        self.write("reference/core/tolerance.hpp", '#pragma once\n\n#include "reference/tensor/tensor.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("reference/core/tolerance.hpp:3: reference/core -> reference/tensor is not an allowed edge", r.stdout)

    def test_units_that_include_each_other_fail_within_a_folder(self):
        # A header including another whose source includes the first back: the journal and the
        # results file once did this through the table living in the writer's header.
        self.write("reference/record/results_file.hpp", '#pragma once\n')
        self.write("reference/record/results_file.cpp", '#include "reference/record/journal.hpp"\n')
        self.write("reference/record/journal.hpp", '#pragma once\n#include "reference/record/results_file.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("include cycle: reference/record/journal -> reference/record/results_file "
                      "(reference/record/journal.hpp:2) -> reference/record/journal "
                      "(reference/record/results_file.cpp:1)", r.stdout)

    def test_a_longer_loop_fails_once(self):
        self.write("reference/core/a.hpp", '#include "reference/core/b.hpp"\n')
        self.write("reference/core/b.hpp", '#include "reference/core/c.hpp"\n')
        self.write("reference/core/c.cpp", '#include "reference/core/a.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout.count("include cycle:"), 1, r.stdout)
        self.assertIn("reference/core/a -> reference/core/b (reference/core/a.hpp:1) -> reference/core/c", r.stdout)

    def test_tensor_may_not_know_the_communicator(self):
        # The tree's comm -> tensor edge is itself a violation (comm sits beside tensor).
        self.write("reference/tensor/memory.hpp", '#include "reference/comm/communicator.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("reference/tensor -> reference/comm", r.stdout)
        self.assertIn("reference/comm -> reference/tensor", r.stdout)

    def test_theory_may_not_include_an_implementation(self):
        self.write("reference/theory/model.hpp", '#include "reference/model/model.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("reference/theory -> reference/model", r.stdout)

    def test_a_folder_missing_from_the_table_fails(self):
        self.write("reference/gadgets/gadget.hpp", "#pragma once\n")
        self.write("reference/comm/communicator.hpp", '#include "reference/core/error.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("reference/gadgets/gadget.hpp: its folder is not in reference/layers.txt", r.stdout)

    def test_a_relative_include_fails(self):
        self.write("reference/comm/communicator.hpp", '#include "reference/core/error.hpp"\n')
        self.write("reference/comm/ring.cpp", '#include "communicator.hpp"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("relative to itself", r.stdout)

    def test_a_file_at_its_length_limit_fails_and_one_line_less_passes(self):
        self.write("reference/comm/communicator.hpp", '#include "reference/core/error.hpp"\n')
        for path, limit in (("reference/core/long.cu", 700), ("bench/commands/long.cpp", 700),
                            ("correctness/test_long.cpp", 1000), ("reports/tables/long.py", 1000)):
            comment = "# x\n" if path.endswith(".py") else "// x\n"
            self.write(path, comment * (limit - 1))
            r = run(self.root)
            self.assertEqual(r.returncode, 0, path + ": " + r.stdout + r.stderr)
            self.write(path, comment * limit)
            r = run(self.root)
            self.assertEqual(r.returncode, 1, path)
            self.assertIn(f"{path}: {limit} lines (files here stay under {limit})", r.stdout)
            os.remove(os.path.join(self.root, path))

    def test_a_malformed_table_is_refused(self):
        with open(os.path.join(self.root, "reference", "layers.txt"), "a") as f:
            f.write("reference/extra: reference/nowhere\n")
        r = run(self.root)
        self.assertEqual(r.returncode, 2)
        self.assertIn("not in the table", r.stderr)


if __name__ == "__main__":
    unittest.main()
