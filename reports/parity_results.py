"""Reader for parity result files (docs/results-schema.md, schema version 1).

Opens a file, checks that it is a parity result file of a version this reader knows, and loads
its root attributes and tables into plain Python / numpy values. Every problem with the input
is raised as InputError carrying one line of text meant for the user.
"""

import os
import stat
import pickle
import signal

# Result files are only read; HDF5's file locking fails on some read-only or network file
# systems and buys nothing here.
os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import numpy as np  # noqa: E402
import h5py  # noqa: E402

SCHEMA_NAME = "parity-results"
SCHEMA_VERSION = 1
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _types(spec):
    """'s:a,b i:c f:d' -> {'a': 's', 'b': 's', 'c': 'i', 'd': 'f'}: the schema's type of each
    column (s string, i int64, f float64). Columns not listed are read as they come."""
    out = {}
    for part in spec.split():
        kind, names = part.split(":")
        out.update({n: kind for n in names.split(",")})
    return out


TYPE_WORDS = {"s": "a string", "i": "an integer", "f": "a float"}


class InputError(Exception):
    """A problem with an input file, described in one line."""


def decode(value):
    """Turns h5py attribute/dataset values into plain Python values (str, int, float, lists)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    if isinstance(value, np.ndarray):
        if value.shape == ():
            return decode(value[()])
        return [decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return decode(value.item())
    if isinstance(value, (list, tuple)):
        return [decode(v) for v in value]
    return value


def one_line(text):
    """Collapses whitespace so a message stays on one line."""
    return " ".join(str(text).split())


def looks_like_hdf5(path):
    """True when the HDF5 signature sits at an offset the format allows (0, 512, 1024, ...)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        offset = 0
        while offset + len(HDF5_SIGNATURE) <= size:
            fh.seek(offset)
            if fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                return True
            offset = 512 if offset == 0 else offset * 2
    return False


def _is_cut_signature(path):
    with open(path, "rb") as fh:
        head = fh.read(len(HDF5_SIGNATURE))
    return 0 < len(head) < len(HDF5_SIGNATURE) and HDF5_SIGNATURE.startswith(head)


class Table:
    """One schema table: ordered columns of equal length, with units."""

    def __init__(self, path, description, columns, units, data, rows):
        self.path = path
        self.description = description
        self.columns = columns
        self.units = units
        self.data = data
        self.rows = rows

    def __len__(self):
        return self.rows

    def has(self, *names):
        return all(n in self.data for n in names)

    def missing(self, names):
        return [n for n in names if n not in self.data]

    def __getitem__(self, name):
        return self.data[name]

    def get(self, name, default=None):
        return self.data.get(name, default)


def _require_written(ds, label):
    """A column with no storage at all was never written: it holds HDF5's fill values where a
    result file holds data. Refused before anything is read, so that a file declaring a billion
    rows and storing none costs no memory (partly allocated passes: HDF5 before 1.10.9 reports
    compressed and edge-chunked data so)."""
    if not ds.size or ds.id.get_space_status() != h5py.h5d.SPACE_STATUS_NOT_ALLOCATED:
        return
    raise InputError(f"{label}: column {ds.name} declares {ds.size} values but its data was never "
                     "written (a damaged file)")


def _read_column(ds):
    raw = ds[()]
    if not isinstance(raw, np.ndarray):
        raw = np.asarray(raw)
    if raw.ndim != 1:
        raise InputError(f"column {ds.name} is not one-dimensional (shape {raw.shape})")
    if raw.dtype.kind in ("O", "S", "U"):
        return np.array([decode(v) if not isinstance(v, str) else v for v in raw.tolist()],
                        dtype=object)
    if raw.dtype.kind in ("i", "u", "b"):
        return raw.astype(np.int64)
    if raw.dtype.kind == "f":
        return raw.astype(np.float64)
    raise InputError(f"column {ds.name} has an unsupported type {raw.dtype}")


def _conform(values, expected, table, col, label):
    """Checks a column against the schema's type; ints stored as integral floats are accepted."""
    if expected is None:
        return values
    is_str = values.dtype == object
    problem = None
    if expected == "s" and not is_str:
        problem = "numbers"
    elif expected in ("i", "f") and is_str:
        problem = "strings"
    elif expected == "i" and values.dtype.kind == "f":
        if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
            problem = "non-integer numbers"
        else:
            values = values.astype(np.int64)
    elif expected == "f" and values.dtype.kind == "i":
        values = values.astype(np.float64)
    if problem:
        raise InputError(f"{label}: column {table}/{col} holds {problem}; the schema says it is "
                         f"{TYPE_WORDS[expected]}")
    return values


def _read_table(group, label, spec):
    """spec: (column types as _types reads them, required columns)."""
    name = group.name
    attrs = group.attrs
    types, required = _types(spec[0]), spec[1]
    if "columns" not in attrs:
        raise InputError(f"{label}: table {name} has no 'columns' attribute")
    columns = decode(attrs["columns"])
    if isinstance(columns, str):
        columns = [columns]
    absent = [c for c in required if c not in columns]
    if absent:
        raise InputError(f"{label}: table {name} has no column(s) " + ", ".join(absent)
                         + "; the schema requires them")
    rows_attr = decode(attrs["rows"]) if "rows" in attrs else None
    for col in columns:
        if col not in group or not isinstance(group[col], h5py.Dataset):
            raise InputError(f"{label}: table {name} lists column '{col}' but has no such dataset")
        _require_written(group[col], label)
    data, units = {}, {}
    for col in columns:
        ds = group[col]
        try:
            values = _read_column(ds)
        except InputError as exc:
            raise InputError(f"{label}: {exc}") from None
        data[col] = _conform(values, types.get(col), name, col, label)
        units[col] = decode(ds.attrs["unit"]) if "unit" in ds.attrs else ""
    lengths = {len(v) for v in data.values()}
    if rows_attr is not None:
        try:
            rows = int(rows_attr)
        except (TypeError, ValueError):
            raise InputError(f"{label}: table {name} has a non-integer 'rows' attribute") from None
    else:
        rows = lengths.pop() if len(lengths) == 1 else (0 if not lengths else -1)
    for col, values in data.items():
        if len(values) != rows:
            raise InputError(f"{label}: table {name} column '{col}' has {len(values)} rows, "
                             f"the table says {rows}")
    description = decode(attrs["description"]) if "description" in attrs else ""
    return Table(name, description, list(columns), units, data, rows)


class ResultFile:
    """A loaded result file: root attributes, group attributes and the known tables."""

    def __init__(self, path):
        self.path = path
        self.attrs = {}
        self.group_attrs = {}
        self.tables = {}
        self.other_tables = []

    def table(self, name):
        return self.tables.get(name)

    @property
    def incomplete_reason(self):
        """Why the run stopped early, for a partial file (root attribute complete = 0); else None."""
        try:
            complete = int(self.attrs.get("complete", 1))
        except (TypeError, ValueError):
            complete = 1
        if complete:
            return None
        return str(self.attrs.get("incomplete_reason") or "no reason recorded")

    @property
    def oversubscribed_words(self):
        """When some host ran more ranks than cores (root attribute oversubscribed = 1): the
        caveat every wall-clock figure of the run carries; else None."""
        try:
            if int(self.attrs.get("oversubscribed", 0)) != 1:
                return None
            ranks, cores = int(self.attrs["ranks_per_host"]), int(self.attrs["cores_per_host"])
            counts = f" ({ranks} ranks on a host with {cores} core{'s' if cores != 1 else ''})"
        except (KeyError, TypeError, ValueError):
            counts = ""
        return ("ranks outnumber cores" + counts + ": every time, rate and bandwidth measured in "
                "this run also includes ranks waiting for a core, so compare them only with runs "
                "alike")

    @property
    def world_size(self):
        try:
            return int(self.attrs.get("world_size"))
        except (TypeError, ValueError):
            return None

    @property
    def hosts(self):
        hosts = self.attrs.get("hosts")
        if hosts is None:
            return []
        if isinstance(hosts, str):
            return [hosts]
        return [str(h) for h in hosts]


def _check_schema(f, label):
    if "schema" not in f.attrs:
        raise InputError(f"{label} is not a parity result file (no 'schema' attribute)")
    schema = decode(f.attrs["schema"])
    if isinstance(schema, list) and len(schema) == 1:
        schema = schema[0]
    if schema != SCHEMA_NAME:
        raise InputError(f"{label} is not a parity result file "
                         f"(schema is {schema!r}, expected {SCHEMA_NAME!r})")
    if "schema_version" not in f.attrs:
        raise InputError(f"{label} has no schema_version attribute; this report reads version "
                         f"{SCHEMA_VERSION}")
    version = decode(f.attrs["schema_version"])
    if isinstance(version, list) and len(version) == 1:
        version = version[0]
    try:
        number = int(version)
        exact = float(version) == number
    except (TypeError, ValueError):
        number, exact = None, False
    if not exact or number != SCHEMA_VERSION:
        shown = number if exact else repr(version)
        raise InputError(f"{label} has schema version {shown}; this report reads version "
                         f"{SCHEMA_VERSION}")


def spec_for(tables, name):
    """The spec of table `name`: its own, or that of a "group/*" entry naming every table under
    the group (a conformance family the report has no module for); None when not read."""
    if name in tables:
        return tables[name]
    group = name.rsplit("/", 1)[0]
    return tables.get(group + "/*")


def load(path, tables):
    """Opens, validates and loads one result file. Raises InputError for bad input.
    tables: {table path: (column types, required columns)}, the tables to read (the report's
    are parity_reports.tables.schema()), "group/*" for every other table under a group; any
    other table is only named in other_tables."""
    label = str(path)
    if not os.path.exists(path):
        raise InputError(f"{label}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{label} is a directory, not a result file")
    mode = os.stat(path).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        # Opening a pipe would wait for a writer; HDF5 needs a file it can seek in.
        raise InputError(f"{label} is a pipe or socket, not an HDF5 file")
    try:
        hdf5 = looks_like_hdf5(path)
    except OSError as exc:
        raise InputError(f"cannot read {label}: {one_line(exc.strerror or exc)}") from None
    if not hdf5:
        if _is_cut_signature(path):
            raise InputError(f"{label} is truncated (it ends inside the HDF5 signature)")
        raise InputError(f"{label} is not an HDF5 file")
    try:
        f = h5py.File(path, "r")
    except Exception as exc:  # h5py reports a damaged file as OSError with HDF5's text
        raise InputError(f"{label} is truncated or corrupt "
                         f"(cannot open: {one_line(exc)})") from None
    result = ResultFile(label)
    try:
        with f:
            _check_schema(f, label)
            result.attrs = {k: decode(f.attrs[k]) for k in f.attrs.keys()}
            found = []

            def visit(name, obj):
                if isinstance(obj, h5py.Group) and decode(obj.attrs.get("kind", "")) == "table":
                    found.append("/" + name)

            f.visititems(visit)
            for name in found:
                spec = spec_for(tables, name)
                if spec is not None:
                    result.tables[name] = _read_table(f[name], label, spec)
                    result.group_attrs[name] = {k: decode(f[name].attrs[k])
                                                for k in f[name].attrs.keys()}
                else:
                    result.other_tables.append(name)
            # A known group that is present but not marked as a table is still read when it
            # carries the table attributes, so a missing 'kind' does not hide data.
            for name in tables:
                if name not in result.tables and name in f and isinstance(f[name], h5py.Group) \
                        and "columns" in f[name].attrs:
                    result.tables[name] = _read_table(f[name], label, tables[name])
                    result.group_attrs[name] = {k: decode(f[name].attrs[k])
                                                for k in f[name].attrs.keys()}
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"{label} is truncated or corrupt "
                         f"(while reading: {one_line(exc)})") from None
    return result


def load_isolated(path, tables):
    """load() in a forked child, so that a crash inside the HDF5 library on a damaged file
    (it can segfault on some corruptions) becomes an InputError instead of killing the caller."""
    if not hasattr(os, "fork"):
        return load(path, tables)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        status = 0
        try:
            os.close(read_fd)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            try:
                payload = ("ok", load(path, tables))
            except InputError as exc:
                payload = ("error", str(exc))
            except BaseException as exc:  # MemoryError on absurd sizes, and the like
                payload = ("error", f"{path} is truncated or corrupt "
                                    f"({type(exc).__name__}: {one_line(exc)})")
            with os.fdopen(write_fd, "wb") as fh:
                pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        raise InputError(f"{path} is corrupt (the HDF5 library crashed reading it: {name})")
    try:
        kind, value = pickle.loads(data)
    except Exception:
        raise InputError(f"{path} could not be read (reader exited with status "
                         f"{os.WEXITSTATUS(status)})") from None
    if kind == "error":
        raise InputError(value)
    return value
