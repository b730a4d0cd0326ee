"""Runs the report scripts' tests, or one shard of them, so that CTest can run the shards side
by side (most tests draw a whole report, a few seconds each).

usage: run_tests.py [--shard I/N]   (I from 1 to N; default: every test)
"""
import argparse
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import parity_reports  # noqa: E402,F401  (before any test module loads numpy: one BLAS thread)


def flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from flatten(test)
        else:
            yield test


def parse_shard(text):
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not I/N")
    if count < 1 or not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"'{text}': I must be between 1 and N")
    return index, count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shard", type=parse_shard, default=(1, 1), help="run the I-th of N shards (I/N)")
    args = parser.parse_args(argv)
    index, count = args.shard
    tests = sorted(flatten(unittest.defaultTestLoader.discover(HERE, pattern="test_*.py")), key=lambda t: t.id())
    # A loader error (a module that does not import) is a test too: it lands in some shard.
    chosen = unittest.TestSuite(t for i, t in enumerate(tests) if i % count == index - 1)
    print(f"shard {index}/{count}: {chosen.countTestCases()} of {len(tests)} tests", flush=True)
    result = unittest.TextTestRunner(verbosity=1).run(chosen)
    return 0 if result.wasSuccessful() and chosen.countTestCases() > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
