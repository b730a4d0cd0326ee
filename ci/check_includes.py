#!/usr/bin/python3
"""Checks parity's layering: every #include "..." between the project's folders must be an
edge of the table in reference/layers.txt (see its header). Prints one line per offending
include (file:line: folder -> folder) and exits 1; exits 0 when every edge is allowed.

Usage: check_includes.py [ROOT]   (ROOT: the repository, default: this script's parent)
"""

import os
import re
import sys

SOURCES = ("reference", "bench", "correctness")
EXTENSIONS = (".cpp", ".hpp", ".cu", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(path):
    """{folder: set of folders it may include}; raises ValueError on a malformed line."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            folder, sep, allowed = line.partition(":")
            if not sep or not folder.strip():
                raise ValueError(f"{path}:{number}: expected 'folder: allowed folders'")
            folder = folder.strip()
            if folder in table:
                raise ValueError(f"{path}:{number}: {folder} is listed twice")
            table[folder] = set(allowed.split())
    # x/** stands for every folder of the table under x.
    for folder, allowed in table.items():
        for pattern in [a for a in allowed if a.endswith("/**")]:
            allowed.discard(pattern)
            under = [f for f in table if f.startswith(pattern[:-2])]
            if not under:
                raise ValueError(f"{path}: {folder} may include {pattern}, which matches no folder of the table")
            allowed.update(under)
    for folder, allowed in table.items():
        for target in allowed:
            if target not in table:
                raise ValueError(f"{path}: {folder} may include {target}, which is not in the table")
    return table


def folder_of(path, table):
    """The longest folder of the table that prefixes path (a/b/c.hpp), or None."""
    best = None
    for folder in table:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def violations(root, table):
    """Lines describing every include edge the table does not allow, and every file or
    included path outside the table's folders."""
    out = []
    for top in SOURCES:
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/")
                source = folder_of(path, table)
                if source is None:
                    out.append(f"{path}: its folder is not in reference/layers.txt")
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        included = m.group(1)
                        if not included.startswith(tuple(t + "/" for t in SOURCES)):
                            if "/" not in included and os.path.exists(os.path.join(root, os.path.dirname(path), included)):
                                out.append(f"{path}:{number}: includes \"{included}\" relative to itself; "
                                           "write the path from the repository root")
                            continue
                        target = folder_of(included, table)
                        if target is None:
                            out.append(f"{path}:{number}: {included} is in no folder of reference/layers.txt")
                        elif target != source and target not in table[source]:
                            out.append(f"{path}:{number}: {source} -> {target} is not an allowed edge "
                                       f"(#include \"{included}\")")
    return out


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        table = read_table(os.path.join(root, "reference", "layers.txt"))
    except (OSError, ValueError) as e:
        print(f"check_includes: {e}", file=sys.stderr)
        return 2
    found = violations(root, table)
    for line in found:
        print(line)
    if found:
        print(f"check_includes: {len(found)} include(s) break the layering of reference/layers.txt",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
