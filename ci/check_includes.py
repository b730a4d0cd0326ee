#!/usr/bin/python3
"""Checks parity's layering: every #include "..." between the project's folders must be an
edge of the table in reference/layers.txt (see its header), and no two units include each other,
directly or round a longer loop, within a folder or across folders (a unit is a header and its
source: x.hpp, x.cpp, x.cu). Prints one line per offending include (file:line: folder -> folder)
and per cycle (unit -> unit -> ... -> unit), and exits 1; exits 0 when there is none.

It also holds files to a size a reader can take in one sitting: a library or command source (C++
or CUDA under reference/ or bench/) under SOURCE_LINES lines, a test or script (C++ under
correctness/, Python anywhere) under SCRIPT_LINES; one line per file past it, and exit 1.

Usage: check_includes.py [ROOT]   (ROOT: the repository, default: this script's parent)
"""

import os
import re
import sys

SOURCES = ("reference", "bench", "correctness")
EXTENSIONS = (".cpp", ".hpp", ".cu", ".cuh", ".h")
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


def includes(root):
    """(path, line number, included path) of every #include "..." in the sources, paths from
    the repository root, files in sorted order; a file without includes yields (path, 0, None)
    once, so that its folder is still checked."""
    for top in SOURCES:
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/")
                yield path, 0, None
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m:
                            yield path, number, m.group(1)


SOURCE_LINES = 700
SCRIPT_LINES = 1000


def oversized(root):
    """'path: N lines (files here stay under L)' for each file at or past its limit."""
    found = []
    for top in ("reference", "bench", "correctness", "reports", "ci", "hosts"):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                path = os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/")
                if name.endswith(".py") or (top == "correctness" and name.endswith(EXTENSIONS)):
                    limit = SCRIPT_LINES
                elif top in ("reference", "bench") and name.endswith(EXTENSIONS):
                    limit = SOURCE_LINES
                else:
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    lines = sum(1 for _ in f)
                if lines >= limit:
                    found.append(f"{path}: {lines} lines (files here stay under {limit})")
    return sorted(found)


def ours(included):
    return included.startswith(tuple(t + "/" for t in SOURCES))


def violations(root, table):
    """Lines describing every include edge the table does not allow, and every file or
    included path outside the table's folders."""
    out = []
    unplaced = set()
    for path, number, included in includes(root):
        source = folder_of(path, table)
        if source is None:
            if path not in unplaced:
                unplaced.add(path)
                out.append(f"{path}: its folder is not in reference/layers.txt")
            continue
        if included is None:
            continue
        if not ours(included):
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


def unit_of(path):
    """reference/record/journal.cpp -> reference/record/journal."""
    return os.path.splitext(path)[0]


def include_graph(root):
    """{unit: {unit it includes: 'file:line' of the first such include}} over the sources."""
    graph = {}
    for path, number, included in includes(root):
        edges = graph.setdefault(unit_of(path), {})
        if included is not None and ours(included) and unit_of(included) != unit_of(path):
            edges.setdefault(unit_of(included), f"{path}:{number}")
    return graph


def cycles(graph):
    """One line per strongly connected set of two or more units (Tarjan), naming a loop in it."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def connect(start):
        # Iterative Tarjan: (unit, its successors not yet visited).
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            unit, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in graph:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[unit] = min(low[unit], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[unit])
            if low[unit] == index[unit]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == unit:
                        break
                if len(members) > 1:
                    found.append(loop_in(graph, set(members)))

    for unit in sorted(graph):
        if unit not in index:
            connect(unit)
    return found


def loop_in(graph, members):
    """'a -> b (a.cpp:3) -> a (b.hpp:5)': a shortest loop through the smallest member."""
    start = min(members)
    previous, queue = {start: None}, [start]
    while queue:
        unit = queue.pop(0)
        for succ in sorted(graph[unit]):
            if succ == start:
                path, at = [start], unit
                while at is not None:
                    path.append(at)
                    at = previous[at]
                path.reverse()
                return " -> ".join(f"{b} ({graph[a][b]})" if i else b
                                   for i, (a, b) in enumerate(zip([None] + path[:-1], path)))
            if succ in members and succ not in previous:
                previous[succ] = unit
                queue.append(succ)
    return " <-> ".join(sorted(members))


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
    loops = cycles(include_graph(root))
    for line in loops:
        print(f"include cycle: {line}")
    large = oversized(root)
    for line in large:
        print(line)
    if large:
        print(f"check_includes: {len(large)} file(s) too long to read at one sitting: split them",
              file=sys.stderr)
    if found:
        print(f"check_includes: {len(found)} include(s) break the layering of reference/layers.txt",
              file=sys.stderr)
    if loops:
        print(f"check_includes: {len(loops)} include cycle(s) between units", file=sys.stderr)
    return 1 if found or loops or large else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
