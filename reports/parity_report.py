#!/usr/bin/python3
"""Draws an HTML report (with PNG plots and a markdown summary) from parity result files.

One file gives a report of that run; two files give a comparison of run B against run A.
The input format is docs/results-schema.md (schema version 1). Exit status: 0 when the report
was written, 2 for bad input or usage (one line on stderr starting with "parity: "), 4 for
an unexpected failure while drawing (parity's status for a fault while running), 130 when
interrupted. The report itself is the parity_reports package
beside this script: one module per result table in parity_reports/tables.
"""

import argparse
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PREFIX = "parity: "


class UsageError(Exception):
    """Bad command line or unusable output directory (exit status 2)."""


# --------------------------------------------------------------------------------------------
# Command line

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{one_line(message)} (see --help)")


def one_line(text):
    """The text on one line, every byte of it that would drive a terminal (escape sequences in a
    path or a file's contents) shown as \\xNN, as parity's own messages show them."""
    words = " ".join(str(text).split())
    return "".join(c if c.isprintable() else escaped(c) for c in words)


def escaped(c):
    """A character one_line does not print: a byte of a path that was not UTF-8 (Python holds it
    as a surrogate, U+DC80-U+DCFF) as that byte, \\xNN; any other as \\xNN or \\uNNNN."""
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:
        code -= 0xDC00
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def build_parser():
    p = Parser(
        prog="parity_report.py",
        description="Write an HTML report (index.html, PNG plots and summary.md) from one parity "
                    "result file, or a comparison of two (run B against run A).",
        epilog="Exit status: 0 report written; 2 bad input or usage (one line on stderr starting "
               "with 'parity: '); 4 unexpected failure while drawing (set "
               "PARITY_REPORT_DEBUG=1 for a traceback). The input format is "
               "docs/results-schema.md, schema version 1.")
    p.add_argument("result", metavar="RESULT.h5",
                   help="parity result file (run A when two are given)")
    p.add_argument("other", metavar="OTHER.h5", nargs="?",
                   help="optional second result file (run B); the report then compares B with A")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="output directory, created if missing; index.html, summary.md and "
                        "fig*.png are written there (existing files of those names are replaced)")
    p.add_argument("--title", metavar="T", help="page title (default: derived from file names)")
    p.add_argument("--max-plots", metavar="N", type=int, default=40,
                   help="at most N benchmark group figures; further groups get tables only "
                        "(default 40)")
    p.add_argument("--max-failures", metavar="N", type=int, default=200,
                   help="list at most N failed conformance cases (default 200)")
    p.add_argument("--no-figures", action="store_true",
                   help="write index.html and summary.md without drawing a figure (the text, "
                        "tables and verdicts alone, in a fraction of the time)")
    return p


def run(argv):
    args = build_parser().parse_args(argv)
    if args.max_plots < 0 or args.max_failures < 0:
        raise UsageError("--max-plots and --max-failures must not be negative")
    import parity_results
    from parity_reports.report import comparison_report, single_report
    from parity_reports.tables import schema
    paths = [args.result] + ([args.other] if args.other else [])
    rfs = [parity_results.load_isolated(p, schema()) for p in paths]
    labels = list(paths)
    if len(paths) == 2:
        short = [os.path.basename(p) for p in paths]
        if short[0] != short[1]:
            labels = short
    else:
        labels = [os.path.basename(paths[0])]
    try:
        os.makedirs(args.out, exist_ok=True)
        probe = os.path.join(args.out, ".parity-report-write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to output directory {args.out}: "
                         f"{exc.strerror or exc}") from None
    try:
        if len(rfs) == 1:
            title = args.title or f"parity report: {labels[0]}"
            page, md, _ = single_report(rfs[0], paths[0], args.out, title, args,
                                        render=not args.no_figures)
        else:
            title = args.title or f"parity comparison: {labels[0]} (A) vs {labels[1]} (B)"
            page, md, _ = comparison_report(rfs, labels, args.out, title, args,
                                            render=not args.no_figures)
        with open(os.path.join(args.out, "index.html"), "w", encoding="utf-8") as fh:
            fh.write(page.render())
        with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(md) + "\n")
    except Exception as exc:
        if os.environ.get("PARITY_REPORT_DEBUG"):
            traceback.print_exc()
        sys.stderr.write(f"{PREFIX}internal error while drawing the report: "
                         f"{one_line(type(exc).__name__ + ': ' + str(exc))}\n")
        return 4
    try:
        print(os.path.join(args.out, "index.html"), flush=True)
    except OSError as exc:
        # Whoever read stdout went away (| head) or it is full: the report is written all the
        # same; a full stdout is said, and nothing is left for Python to flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if not isinstance(exc, BrokenPipeError):
            sys.stderr.write(f"{PREFIX}the report is written, but its path could not be printed: {one_line(exc)}\n")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        import parity_results
        input_error = parity_results.InputError
        import parity_reports.report  # noqa: F401  (numpy and matplotlib)
    except ImportError as exc:  # a Python without h5py, numpy or matplotlib
        sys.stderr.write(f"{PREFIX}{sys.executable} cannot draw reports: {one_line(exc)} (install python3-h5py, "
                         "python3-numpy and python3-matplotlib, or set PARITY_PYTHON to a Python that has them)\n")
        return 2
    try:
        return run(argv)
    except (UsageError, input_error) as exc:
        sys.stderr.write(f"{PREFIX}{one_line(exc)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PREFIX}interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
