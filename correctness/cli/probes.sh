#!/usr/bin/env bash
# One row of correctness/cli/probes.tsv: makes its input, runs parity with its fault, and checks
# the exit status, the stderr lines, the files and the processes left (the columns are
# described at the top of the table).
#   probes.sh PARITY WORKDIR TABLE NAME
set -u
parity=$1 work=$2 table=$3 name=$4
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=wait_rows.sh
. "$here/wait_rows.sh"
row=$(awk -F'\t' -v n="$name" '$1 == n' "$table")
[ -n "$row" ] || { echo "probes.sh: no probe named $name in $table"; exit 1; }
IFS=$'\t' read -r _ command input fault status lines line files processes <<<"$row"
rm -rf "$work" "$work.log" && mkdir -p "$work" "$work.log" && cd "$work" || exit 1
err=$work.log/stderr out=$work.log/stdout

fail() {
  echo "probe $name: $*"
  echo "--- command: parity $command (fault: $fault)"
  echo "--- stderr:"; head -c 4000 "$err" 2>/dev/null
  exit 1
}
# Processes started in the directory or naming it (the ranks start in parity's directory),
# this script and its children aside. An argument names it when it is the directory or a path
# below it (as itself or after an `=`): another probe's directory whose name merely starts with
# this one's (integer_past_its_type_negative beside integer_past_its_type) is not this one's.
ours() {
  /usr/bin/python3 - "$work" "$$" <<'PY'
import os, sys
work, me = sys.argv[1], sys.argv[2]
def names_work(arg):
    for path in (arg, arg.split("=", 1)[-1]):
        if path == work or path.startswith(work + "/"):
            return True
    return False
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        args = [a.decode(errors="replace") for a in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")]
        cwd = os.readlink(f"/proc/{pid}/cwd")
        parent = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
    except OSError:
        continue
    if pid == me or parent == me or pid == str(os.getpid()) or any("probes.sh" in a for a in args):
        continue
    if cwd == work or cwd.startswith(work + "/") or any(names_work(a) for a in args):
        print(pid)
PY
}

input_file=""
if [ "$input" != "-" ]; then
  input_file=${input%%=*}
  text=${input#*=}
  if [[ $text == \** ]]; then  # *N:TEXT
    count=${text%%:*}
    count=${count#\*}
    /usr/bin/python3 -c 'import sys; sys.stdout.write(sys.argv[2] * int(sys.argv[1]))' "$count" "${text#*:}" >"$input_file"
  else
    printf '%b' "$text" >"$input_file"
  fi
fi
eval "args=($command)"

timeout -s KILL 150 "$parity" "${args[@]}" >"$out" 2>"$err" &
pid=$!
if [ "$fault" != "none" ]; then
  signal=${fault%%@*} when=${fault#*@} again=""
  [[ $when == *+* ]] && again=${when#*+} && when=${when%%+*}
  if [ "$when" = rows ] || [[ $when == /* ]]; then
    wait_for_rows "$pid" "$(out_of "${args[@]}").journal" "${when#rows}"
  else
    sleep "$when"
  fi
  # The signal goes to parity, not to the timeout wrapping it.
  target=$(pgrep -P "$pid" | head -1)
  kill -"$signal" "${target:-$pid}" 2>/dev/null
  if [ -n "$again" ]; then
    sleep "$again"
    kill -"$signal" "${target:-$pid}" 2>/dev/null
  fi
fi
wait "$pid"
got=$?
# timeout(1) returns 137 when it had to kill parity; a probe that sends SIGKILL itself expects it.
[ "$got" -eq 137 ] && [[ $fault != KILL@* ]] && fail "no end within 150 s"
[ "$got" -eq "$status" ] || fail "exit status $got, expected $status"

if [ "$lines" != "-" ]; then
  n=$(wc -l <"$err")
  [ "$n" -eq "$lines" ] || fail "$n stderr lines, expected $lines"
fi
grep -Eq -- "$line" "$err" || [ "$lines" = "0" ] || fail "no stderr line matches /$line/"
/usr/bin/python3 - "$err" <<'PY' || fail "stderr holds control bytes or an overlong line"
import sys
data = open(sys.argv[1], "rb").read()
bad = [b for b in data if (b < 0x20 and b != 0x0A) or b == 0x7F]
long = [len(l) for l in data.split(b"\n") if len(l) > 1200]
if bad or long:
    print(f"control bytes {sorted(set(bad))[:8]}, lines over 1200 bytes: {long[:4]}")
    sys.exit(1)
PY

# Each file left matches a name of the column (a shell pattern); each name without a final '?'
# matches a file left.
mapfile -t left < <(ls -A | grep -vxF -- "$input_file")
read -r -a expected <<<"$( [ "$files" = "-" ] || echo "$files")"
for f in "${left[@]}"; do
  matched=0
  for e in "${expected[@]}"; do
    # shellcheck disable=SC2053
    [[ $f == ${e%\?} ]] && matched=1
  done
  [ "$matched" -eq 1 ] || fail "file left that should not be: $f (left: ${left[*]})"
done
for e in "${expected[@]}"; do
  [[ $e == *\? ]] && continue
  matched=0
  for f in "${left[@]}"; do
    # shellcheck disable=SC2053
    [[ $f == $e ]] && matched=1
  done
  [ "$matched" -eq 1 ] || fail "no file left named $e (left: ${left[*]})"
done

cd / || exit 1
if [ "$processes" = "none" ]; then
  for _ in $(seq 100); do
    [ -z "$(ours)" ] && break
    sleep 0.1
  done
  remaining=$(ours)
  [ -z "$remaining" ] || { ps -o pid,args -p $(echo $remaining | tr ' ' ,); kill -KILL $remaining; fail "processes left"; }
fi
exit 0
