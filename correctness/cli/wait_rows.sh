#!/usr/bin/env bash
# Sourced by the fault, probe and resume tests, which interrupt a run in the middle of its work:
# a fixed delay lands before the work starts on a loaded machine, a row in the journal does not.
#
# wait_for_rows PID JOURNAL [BYTES | /TABLE]
#   returns once JOURNAL holds BYTES bytes, or a row of /TABLE (its records name their table),
#   or (BYTES 0 or absent) once it has grown past what the run's start writes, i.e. some row
#   finished; or once PID has ended; or after 150 s.
# out_of ARGS...
#   prints the value of --out among parity's arguments (nothing when there is none).

wait_for_rows() {
  local pid=$1 journal=$2 bytes=${3:-0} start=0 size table=
  [[ $bytes == /* ]] && table=$bytes bytes=0
  for _ in $(seq 3000); do
    kill -0 "$pid" 2>/dev/null || return 0
    if [ -n "$table" ]; then
      grep -aqF -- "$table" "$journal" 2>/dev/null && return 0
      sleep 0.05
      continue
    fi
    size=$(stat -c %s "$journal" 2>/dev/null || echo 0)
    if [ "$bytes" -gt 0 ]; then
      [ "$size" -ge "$bytes" ] && return 0
    else
      if [ "$start" -eq 0 ] && [ "$size" -gt 0 ]; then
        sleep 0.3
        start=$(stat -c %s "$journal" 2>/dev/null || echo 0)
      fi
      [ "$start" -gt 0 ] && [ "$size" -gt "$start" ] && return 0
    fi
    sleep 0.05
  done
}

out_of() {
  while [ $# -gt 1 ]; do
    [ "$1" = --out ] && { printf '%s\n' "$2"; return 0; }
    shift
  done
}
