#!/usr/bin/env bash
# Runs a command and checks how it failed (or succeeded):
#   expect.sh STATUS REGEX [--lines N] [--anywhere] -- COMMAND...
# STATUS is an exit status, "nonzero", or "any"; REGEX (extended) must match its stderr, or
# with --anywhere its stdout and stderr taken as one text (. matches newlines); --lines N requires stderr to have exactly N lines. A
# status of 128 or more (a signal, a core dump) or a time-out always fails, whatever STATUS
# says. On failure it prints the command, its status, stderr and the end of stdout.
set -u
want=$1; pattern=$2; shift 2
lines=""; anywhere=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --lines) lines=$2; shift 2 ;;
    --anywhere) anywhere=1; shift ;;
    *) echo "expect.sh: unknown option $1"; exit 2 ;;
  esac
done
[ "${1:-}" = "--" ] && shift
command=$(printf '%q ' "$@")
err=$(mktemp); out=$(mktemp)
trap 'rm -f "$err" "$out"' EXIT
timeout 120 "$@" >"$out" 2>"$err"
status=$?
fail() {
  echo "expect.sh: $*"
  echo "--- command: ${command% }"
  echo "--- status: $status"
  echo "--- stderr:"; cat "$err"
  echo "--- stdout (tail):"; tail -5 "$out"
  exit 1
}
{ [ "$status" -ge 128 ] || [ "$status" -eq 124 ]; } && fail "status $status (signal, core dump or time-out)"
case "$want" in
  any) ;;
  nonzero) [ "$status" -ne 0 ] || fail "expected a non-zero status, got 0" ;;
  *) [ "$status" -eq "$want" ] || fail "expected status $want, got $status" ;;
esac
if [ "$anywhere" -eq 1 ]; then
  cat "$out" "$err" | grep -Ezq -- "$pattern" || fail "neither stdout nor stderr matches /$pattern/"
else
  grep -Eq -- "$pattern" "$err" || fail "stderr does not match /$pattern/"
fi
if [ -n "$lines" ]; then
  n=$(grep -c '' "$err")
  [ "$n" -eq "$lines" ] || fail "expected $lines stderr line(s), got $n"
fi
exit 0
