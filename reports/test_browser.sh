#!/usr/bin/env bash
# The reports in a browser: draws the report of a sample result file and the comparison of two,
# then opens both in headless Chromium with browser_check.py (missing images, broken links,
# console errors). The reports and their screenshot.png stay under WORKDIR.
#
# usage: test_browser.sh WORKDIR [PYTHON]
# Exit status: 0 pass, 1 fail, 2 usage, 77 skip (no Chromium; ci/setup.sh installs it).
set -euo pipefail

usage() { sed -n '2,7s/^# \{0,1\}//p' "$0"; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage >&2; exit 2; fi
here=$(cd -- "$(dirname -- "$0")" && pwd)
work=$1
python=${2:-/usr/bin/python3}

# Skip before drawing anything when there is no browser.
"$python" "$here/browser_check.py" --which >/dev/null || exit $?

rm -rf -- "$work"
mkdir -p -- "$work"
"$python" "$here/make_sample.py" "$work/a.h5" --model --parallel --tensor --pipeline --moe \
  --checkpoint --precision --failures 3
"$python" "$here/make_sample.py" "$work/b.h5" --model --parallel --tensor --pipeline --moe \
  --checkpoint --precision --failures 5 --seed 7 --bandwidth-scale 1.2 --model-speed 0.9 \
  --parallel-speed 1.1 --tensor-speed 1.1 --moe-speed 1.1 --checkpoint-speed 1.1
# The two reports are drawn side by side: each takes a few seconds of matplotlib.
"$python" "$here/parity_report.py" "$work/a.h5" --out "$work/a.report" >/dev/null &
single=$!
"$python" "$here/parity_report.py" "$work/a.h5" "$work/b.h5" --out "$work/ab.report" >/dev/null &
comparison=$!
status=0
wait "$single" || status=1
wait "$comparison" || status=1
if [ "$status" -ne 0 ]; then
  echo "test_browser.sh: drawing a report failed" >&2
  exit 1
fi
exec "$python" "$here/browser_check.py" "$work/a.report" "$work/ab.report"
