"""Checks on result files for the interruption and --resume tests (correctness/cli/resume.sh).

  result_rows.py partial FILE REASON_REGEX   a valid partial file: complete = 0, the reason
                                             matches, and its tables are the ones a clean run
                                             starts (printed: rows of every table)
  result_rows.py same FILE CLEAN GROUP KEYS  GROUP holds the same rows as in CLEAN, in the same
                                             order, compared on the comma-separated KEYS columns
                                             ('*' compares every column but timings)
  result_rows.py taken PARTIAL FILE GROUP    every row of GROUP in PARTIAL is in FILE unchanged,
                                             timings included: --resume took it, it did not
                                             measure it again
  result_rows.py resumed FILE ROWS           --resume took at least ROWS rows (root attribute
                                             resumed_rows): rows a table holds unchanged may also
                                             have been measured again, where nothing varies
  result_rows.py complete FILE               complete = 1
  result_rows.py rows FILE GROUP             prints the rows of GROUP (0 when absent)
Exit status 0 when the check holds, 1 with a line saying why not.
"""
import re
import sys


def fail(message):
    print(f"result_rows.py: {message}", file=sys.stderr)
    sys.exit(1)


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def tables(f):
    found = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Group) and text(obj.attrs.get("kind", "")) == "table":
            found[name] = int(obj.attrs["rows"])
    f.visititems(visit)
    return found


def column(group, name):
    values = group[name][:]
    return [text(v) for v in values] if values.dtype.kind in "OS" else values


def main(argv):
    if len(argv) < 2:
        fail(__doc__)
    what, path = argv[0], argv[1]
    global h5py, np
    import h5py
    import numpy as np
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        fail(f"{path} is not a readable HDF5 file: {e}")
    if text(f.attrs.get("schema", "")) != "parity-results":
        fail(f"{path} is not a parity result file")
    complete = int(f.attrs.get("complete", -1))
    if what == "partial":
        if complete != 0:
            fail(f"{path}: complete = {complete}, expected 0")
        reason = text(f.attrs.get("incomplete_reason", ""))
        if not re.search(argv[2], reason):
            fail(f"{path}: incomplete_reason '{reason}' does not match /{argv[2]}/")
        found = tables(f)
        if not found:
            fail(f"{path}: no table")
        for group in found:
            cols = [text(c) for c in f[group].attrs["columns"]]
            lengths = {len(f[group][c]) for c in cols}
            if lengths != {found[group]}:
                fail(f"{path}: {group} has columns of lengths {lengths}, rows = {found[group]}")
        print(" ".join(f"{g}={n}" for g, n in sorted(found.items())))
    elif what == "complete":
        if complete != 1:
            fail(f"{path}: complete = {complete}, expected 1")
    elif what == "rows":
        group = argv[2]
        print(int(f[group].attrs["rows"]) if group in f else 0)
    elif what == "same":
        clean = h5py.File(argv[2], "r")
        group, keys = argv[3], argv[4]
        a, b = f[group], clean[group]
        columns = [text(c) for c in b.attrs["columns"]]
        if [text(c) for c in a.attrs["columns"]] != columns:
            fail(f"{group}: columns differ from {argv[2]}")
        if keys != "*":
            columns = keys.split(",")
        else:
            columns = [c for c in columns if not c.startswith("time")]
        if int(a.attrs["rows"]) != int(b.attrs["rows"]):
            fail(f"{group}: {int(a.attrs['rows'])} rows, the clean run has {int(b.attrs['rows'])}")
        for c in columns:
            x, y = column(a, c), column(b, c)
            same = (x == y) if isinstance(x, list) else np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
            if not same:
                fail(f"{group}: column {c} differs from the clean run")
    elif what == "resumed":
        taken = int(f.attrs.get("resumed_rows", -1))
        if taken < int(argv[2]):
            fail(f"{path}: resumed_rows = {taken}, but the partial file kept {argv[2]} rows to take")
    elif what == "taken":
        final = h5py.File(argv[2], "r")
        group = argv[3]
        if group not in f:
            return
        def row_set(g):
            names = [text(c) for c in g.attrs["columns"]]
            cols = [column(g, c) for c in names]
            # repr keeps every bit of a float and makes NaN equal to itself
            return [tuple(repr(c[i]) for c in cols) for i in range(int(g.attrs["rows"]))]
        have = set(row_set(final[group]))
        missing = [r for r in row_set(f[group]) if r not in have]
        if missing:
            fail(f"{group}: {len(missing)} row(s) of {path} are not in {argv[2]} unchanged (measured again?)")
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
