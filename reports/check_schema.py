#!/usr/bin/python3
"""Checks the written descriptions of the result schema against the one declared in C++ (each
group's columns beside the code that writes them, printed by `parity list --schema`):

  - docs/results-schema.md documents every group, and each group's columns with the same
    names, types and units, and no column or group the C++ does not write;
  - every report module's READS (reports/parity_reports/tables/) names only groups and columns
    the C++ writes, with their types, and requires only columns every file has (required);
  - the recorded files in reports/fixtures/ (made by earlier versions) hold every required
    column of each group they have: a column they lack is one files can lack (required false).

Prints one line per disagreement and exits 1; exits 0 when all agree.

Usage: check_schema.py PARITY [ROOT]   (PARITY: the parity binary; ROOT: the repository)
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOC_TYPES = {"string": "string", "int64": "int64", "float64": "float64"}
READ_TYPES = {"s": "string", "i": "int64", "f": "float64"}


def declared(parity):
    """{group: {column: (type, unit, required)}} from parity list --schema."""
    out = subprocess.run([parity, "list", "--schema"], check=True, capture_output=True, text=True).stdout
    schema = json.loads(out)
    return {g: {c["name"]: (c["type"], c["unit"], c["required"]) for c in spec["columns"]}
            for g, spec in schema["groups"].items()}


def documented(path):
    """{group: {column: (type, unit)}} from the doc's '### `/group`' sections and their column
    tables ('| `name` | type | unit | meaning |')."""
    groups, group = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            heading = re.match(r"^### `(/[^`]+)`", line)
            if heading:
                group = heading.group(1)
                groups[group] = {}
            elif line.startswith("#"):
                group = None
            elif group and line.startswith("| `"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                for name in re.findall(r"`([^`]+)`", cells[0]):
                    groups[group][name] = (DOC_TYPES.get(cells[1], cells[1]), cells[2])
    return groups


def doc_problems(schema, doc):
    out = []
    for group in sorted(set(schema) | set(doc)):
        if group not in doc:
            out.append(f"docs: {group} is written but not documented")
            continue
        if group not in schema:
            out.append(f"docs: {group} is documented but no command writes it")
            continue
        for name in sorted(set(schema[group]) | set(doc[group])):
            if name not in doc[group]:
                out.append(f"docs: {group} column {name} is written but not documented")
            elif name not in schema[group]:
                out.append(f"docs: {group} column {name} is documented but not written")
            elif doc[group][name] != schema[group][name][:2]:
                out.append(f"docs: {group} column {name} is documented as {doc[group][name]}, "
                           f"written as {schema[group][name][:2]} (type, unit)")
    return out


def report_problems(schema, root):
    sys.path.insert(0, os.path.join(root, "reports"))
    from parity_reports import tables  # noqa: E402 (the package of the repository given)
    out = []
    named = tables.schema()
    for module in tables.TABLES:
        for key, (types, required) in module.READS.items():
            where = f"reports: {module.__name__.rsplit('.', 1)[-1]}.READS {key}"
            # "/check/*": every group under /check/ that no module names itself.
            groups = [g for g in schema if g.startswith(key[:-1]) and g not in named] \
                if key.endswith("/*") else [key]
            if not key.endswith("/*") and key not in schema:
                out.append(f"{where}: no command writes the group")
                continue
            for group in groups:
                out += columns_problems(schema, group, types, required, f"{where} ({group})" if group != key else where)
    return out


def columns_problems(schema, group, types, required, where):
    """What a READS entry (types "s:a,b i:c f:d", required columns) gets wrong about a group."""
    out = []
    for part in types.split():
        kind, names = part.split(":")
        for name in names.split(","):
            if name not in schema[group]:
                out.append(f"{where}: column {name} is not written")
            elif READ_TYPES[kind] != schema[group][name][0]:
                out.append(f"{where}: column {name} read as {READ_TYPES[kind]}, written as {schema[group][name][0]}")
    for name in required:
        if name in schema[group] and not schema[group][name][2]:
            out.append(f"{where}: requires column {name}, which files made before it was added lack")
        elif name not in schema[group]:
            out.append(f"{where}: requires column {name}, which is not written")
    return out


def fixture_problems(schema, root):
    import glob
    import h5py
    out = []
    for path in sorted(glob.glob(os.path.join(root, "reports", "fixtures", "*.h5"))):
        with h5py.File(path, "r") as f:
            for group, columns in schema.items():
                if group not in f or not isinstance(f[group], h5py.Group):
                    continue
                held = set(f[group].keys())
                for name, (_, _, required) in columns.items():
                    if required and name not in held:
                        out.append(f"fixtures: {os.path.basename(path)} {group} lacks column {name}, "
                                   "which the schema says every file has (required)")
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[2] if len(argv) > 2 else os.path.dirname(HERE)
    schema = declared(argv[1])
    problems = doc_problems(schema, documented(os.path.join(root, "docs", "results-schema.md")))
    problems += report_problems(schema, root)
    problems += fixture_problems(schema, root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_schema: {len(problems)} disagreement(s) with parity list --schema", file=sys.stderr)
        return 1
    print(f"check_schema: {len(schema)} groups, {sum(len(c) for c in schema.values())} columns agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
