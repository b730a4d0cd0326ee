#!/usr/bin/env bash
# Runs a command and checks how it failed (or succeeded):
#   expect.sh STATUS REGEX [--lines N] -- COMMAND...
# STATUS is an exit status, "nonzero", or "any"; REGEX (extended) must match its stderr;
# --lines N requires stderr to have exactly N lines. A status of 128 or more (a signal, a core
# dump) always fails, whatever STATUS says.
set -u
want=$1; pattern=$2; shift 2
lines=""
if [ "${1:-}" = "--lines" ]; then lines=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
err=$(mktemp); out=$(mktemp)
trap 'rm -f "$err" "$out"' EXIT
timeout 120 "$@" >"$out" 2>"$err"
status=$?
fail() { echo "expect.sh: $*"; echo "--- command: $*"; echo "--- stderr:"; cat "$err"; echo "--- stdout (tail):"; tail -5 "$out"; exit 1; }
[ "$status" -ge 124 ] && [ "$status" -ne 0 ] && [ "$status" -ge 128 -o "$status" -eq 124 ] && fail "status $status (signal, core dump or time-out)"
case "$want" in
  any) ;;
  nonzero) [ "$status" -ne 0 ] || fail "expected a non-zero status, got 0" ;;
  *) [ "$status" -eq "$want" ] || fail "expected status $want, got $status" ;;
esac
grep -Eq -- "$pattern" "$err" || fail "stderr does not match /$pattern/"
if [ -n "$lines" ]; then
  n=$(grep -c '' "$err")
  [ "$n" -eq "$lines" ] || fail "expected $lines stderr line(s), got $n"
fi
exit 0
