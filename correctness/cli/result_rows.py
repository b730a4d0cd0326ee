"""Checks on result files for the interruption and --resume tests (correctness/cli/resume.sh).

  result_rows.py partial FILE REASON_REGEX [GROUP]
                                             a valid partial file: complete = 0, the reason
                                             matches, and its tables are the ones a clean run
                                             starts (printed: rows of every table, or of GROUP)
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
  result_rows.py resumed_like FILE CLEAN PARTIAL GROUP KEYS [TAKEN ...]
                                             FILE, resumed from a copy of PARTIAL, is complete,
                                             same as CLEAN on GROUP and KEYS, has taken every row
                                             of GROUP and of each TAKEN group in PARTIAL, and
                                             says it resumed at least that many rows
Exit status 0 when the check holds, 1 with a line saying why not.
"""
import re
import sys


def fail(message):
    print(f"result_rows.py: {message}", file=sys.stderr)
    sys.exit(1)


def text(value):
    return value.decode() if isinstance(value, bytes) else value


_open = {}


def result_file(path):
    """The parity result file at path, opened once."""
    if path not in _open:
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            fail(f"{path} is not a readable HDF5 file: {e}")
        if text(f.attrs.get("schema", "")) != "parity-results":
            fail(f"{path} is not a parity result file")
        _open[path] = f
    return _open[path]


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


def complete_of(path):
    return int(result_file(path).attrs.get("complete", -1))


def rows(path, group):
    f = result_file(path)
    return int(f[group].attrs["rows"]) if group in f else 0


def check_partial(path, reason_regex, group=None):
    f = result_file(path)
    if complete_of(path) != 0:
        fail(f"{path}: complete = {complete_of(path)}, expected 0")
    reason = text(f.attrs.get("incomplete_reason", ""))
    if not re.search(reason_regex, reason):
        fail(f"{path}: incomplete_reason '{reason}' does not match /{reason_regex}/")
    found = tables(f)
    if not found:
        fail(f"{path}: no table")
    for name in found:
        cols = [text(c) for c in f[name].attrs["columns"]]
        lengths = {len(f[name][c]) for c in cols}
        if lengths != {found[name]}:
            fail(f"{path}: {name} has columns of lengths {lengths}, rows = {found[name]}")
    print(rows(path, group) if group else " ".join(f"{g}={n}" for g, n in sorted(found.items())))


def check_complete(path):
    if complete_of(path) != 1:
        fail(f"{path}: complete = {complete_of(path)}, expected 1")


def check_same(path, clean_path, group, keys):
    a, b = result_file(path)[group], result_file(clean_path)[group]
    columns = [text(c) for c in b.attrs["columns"]]
    if [text(c) for c in a.attrs["columns"]] != columns:
        fail(f"{group}: columns differ from {clean_path}")
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


def check_resumed(path, at_least):
    taken = int(result_file(path).attrs.get("resumed_rows", -1))
    if taken < at_least:
        fail(f"{path}: resumed_rows = {taken}, but the partial file kept {at_least} rows to take")


def check_taken(partial_path, path, group):
    f = result_file(partial_path)
    if group not in f:
        return

    def row_set(g):
        names = [text(c) for c in g.attrs["columns"]]
        cols = [column(g, c) for c in names]
        # repr keeps every bit of a float and makes NaN equal to itself
        return [tuple(repr(c[i]) for c in cols) for i in range(int(g.attrs["rows"]))]
    have = set(row_set(result_file(path)[group]))
    missing = [r for r in row_set(f[group]) if r not in have]
    if missing:
        fail(f"{group}: {len(missing)} row(s) of {partial_path} are not in {path} unchanged (measured again?)")


def check_resumed_like(path, clean_path, partial_path, group, keys, *taken):
    check_complete(path)
    check_same(path, clean_path, group, keys)
    kept = 0
    for name in (group, *taken):
        check_taken(partial_path, path, name)
        kept += rows(partial_path, name)
    check_resumed(path, kept)


COMMANDS = {  # name: (function, arguments at least, at most (None: any))
    "partial": (check_partial, 2, 3),
    "same": (check_same, 4, 4),
    "taken": (check_taken, 3, 3),
    "resumed": (lambda path, n: check_resumed(path, int(n)), 2, 2),
    "complete": (check_complete, 1, 1),
    "rows": (lambda path, group: print(rows(path, group)), 2, 2),
    "resumed_like": (check_resumed_like, 5, None),
}


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        fail(__doc__)
    function, least, most = COMMANDS[argv[0]]
    args = argv[1:]
    if len(args) < least or (most is not None and len(args) > most):
        fail(__doc__)
    global h5py, np
    import h5py
    import numpy as np
    function(*args)


if __name__ == "__main__":
    main(sys.argv[1:])
