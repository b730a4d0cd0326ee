#!/usr/bin/env bash
# Faults thrown at the command line with real processes and signals: a stalled rank at any
# world size, signals to parity and to one rank, a dead rank, launch failures, a device as
# --out, a full disk. Each scenario checks the exit status, the one line that explains it, that
# no temporary result file and no process is left behind.
#   faults.sh PARITY WORKDIR SCENARIO
set -u
parity=$1 work=$2 scenario=$3
# shellcheck source=wait_rows.sh
. "$(dirname "$0")/wait_rows.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
err=$work/stderr out=$work/stdout

fail() {
  echo "faults.sh $scenario: $*"
  echo "--- stderr:"; cat "$err" 2>/dev/null
  echo "--- stdout (tail):"; tail -5 "$out" 2>/dev/null
  exit 1
}
expect_status() { [ "$status" -eq "$1" ] || fail "expected exit status $1, got $status"; }
expect_line() { grep -Eq -- "$1" "$err" || fail "stderr does not match /$1/"; }
expect_lines() { # N: stderr has exactly N lines besides the one naming partial results
  local n
  n=$(grep -vc '^parity: partial results kept in ' "$err")
  [ "$n" -eq "$1" ] || fail "expected $1 stderr line(s), got $n"
}
# When the run had finished some rows, their partial file is valid and says why it stopped.
expect_partial_if_any() { # FILE REASON_REGEX
  if grep -q "^parity: partial results kept in .*$(basename "$1")" "$err"; then
    /usr/bin/python3 "$(dirname "$0")/result_rows.py" partial "$1" "$2" >/dev/null || fail "the partial file $1 is not valid"
  else
    [ ! -e "$1" ] || fail "$1 exists but no line names it"
  fi
  [ ! -e "$1.journal" ] || fail "the journal $1.journal is left"
}
no_leftovers() {
  local partial
  partial=$(find "$work" -name '*.partial-*' 2>/dev/null)
  [ -z "$partial" ] || fail "temporary result files left behind: $partial"
  sleep 0.5
  pgrep -f -- "--out $work/" >/dev/null && fail "processes left behind: $(pgrep -af -- "--out $work/")"
  return 0
}
# Runs parity in the background, waits `delay` seconds (rows: until a row of its --out has
# finished; /TABLE: a row of that table; so that the action lands in the run's work however
# loaded the machine is), then runs `action` (with $pid set).
run_then() { # DELAY ACTION ARGS...
  local delay=$1 action=$2
  shift 2
  "$parity" "$@" >"$out" 2>"$err" &
  pid=$!
  if [ "$delay" = rows ] || [[ $delay == /* ]]; then
    wait_for_rows "$pid" "$(out_of "$@").journal" "${delay#rows}"
  else
    sleep "$delay"
  fi
  eval "$action"
  wait "$pid"
  status=$?
}
run() { # ARGS...: runs parity with a time limit
  timeout 120 "$parity" "$@" >"$out" 2>"$err"
  status=$?
  [ "$status" -eq 124 ] && fail "no end within 120 s"
  return 0
}
# The newest rank process of this scenario (the ranks' command lines hold --out $work/...),
# once all N ranks run beside parity and mpirun, and a second more for MPI to start.
newest_rank() { # N
  for _ in $(seq 300); do
    [ "$(pgrep -c -f -- "--out $work/")" -ge $(($1 + 2)) ] && break
    sleep 0.1
  done
  sleep 1
  pgrep -n -f -- "--out $work/"
}
# Waits until process PID's main thread is asleep in clock_nanosleep (x86_64's syscall 230) at
# three looks 0.2 s apart: a rank in its injected stall, which sleeps a second at a time, and
# not one still starting (whose waits are short), however loaded the machine.
in_stall() { # PID
  local seen=0
  for _ in $(seq 300); do
    if [ "$(cut -d' ' -f1 "/proc/$1/syscall" 2>/dev/null)" = 230 ]; then seen=$((seen + 1)); else seen=0; fi
    [ "$seen" -ge 3 ] && return 0
    sleep 0.2
  done
}
# Runs the test command until it succeeds, TRIES times PERIOD seconds apart; fails saying WHAT
# when it never does.
wait_until() { # TRIES PERIOD WHAT COMMAND...
  local tries=$1 period=$2 what=$3
  shift 3
  for _ in $(seq "$tries"); do
    "$@" && return 0
    sleep "$period"
  done
  fail "$what"
}
running() { pgrep -f -- "$1" >/dev/null; }  # PATTERN: a process whose command line matches
long_bench=(bench collectives -q -e 16M -n 400 --force)

case $scenario in
  stall_one_rank)
    # One rank that stalls: its own watchdog fires (nobody else is there to notice).
    start=$(date +%s)
    run bench collectives -q -e 1K -T 2 --inject-stall 0 --out "$work/s.h5" --force
    expect_status 3
    expect_lines 1
    expect_line "^parity: an injected stall \(--inject-stall 0\) stalled past --timeout 2: rank 0 on [^ ]+ waited 2(\.[0-9]+)? s in it$"
    [ $(($(date +%s) - start)) -lt 30 ] || fail "took over 30 s with --timeout 2"
    run check --np 1 -q -T 3 --inject-stall 0 --filter 'all_reduce/ring/*' --out "$work/c.h5" --force
    expect_status 3
    expect_line "^parity: an injected stall \(--inject-stall 0\) stalled past --timeout 3: rank 0 on [^ ]+ waited 3(\.[0-9]+)? s in it$"
    no_leftovers ;;
  stall_names_ranks)
    # Four ranks, rank 2 stalls: one line names it and the three that waited.
    run bench collectives -q -e 8 -T 2 --np 4 --inject-stall 2 --out "$work/s.h5" --force
    expect_status 3
    expect_lines 1
    expect_line "^parity: .* stalled past --timeout 2: rank 2 on .* was stuck in an injected stall \(--inject-stall 2\); ranks 0, 1, 3 on .* waited [0-9.]+ s in it"
    no_leftovers ;;
  small_timeout)
    # A timeout under the watchdog's 100 ms look-up period is honoured and printed as given.
    run bench collectives -q -e 8 -T 0.001 --np 2 --inject-stall 1 --out "$work/s.h5" --force
    expect_status 3
    expect_line "stalled past --timeout 0.001: .*waited 0\.0[0-9]+ s"
    no_leftovers ;;
  sigint_parent | sigterm_parent)
    signal=${scenario%_parent}
    signal=${signal#sig}
    signal=${signal^^}
    run_then rows "kill -$signal \$pid" "${long_bench[@]}" --np 2 --out "$work/i.h5"
    expect_status 5
    expect_lines 1
    expect_line "^parity: interrupted by SIG$signal( while ranks? [0-9, ]+ on [^ ]+ (was|were) in [^;]+)?; the ranks were stopped$"
    expect_line "^parity: partial results kept in $work/i.h5 \([0-9]+ tables, [0-9]+ rows finished\); continue with --resume"
    expect_partial_if_any "$work/i.h5" "^interrupted by SIG$signal"
    no_leftovers ;;
  sigint_alone)
    run_then /bench/collectives "kill -INT \$pid" bench collectives -q -e 64M -n 400 --force --out "$work/i.h5"
    expect_status 5
    # The operation, and the benchmark point it belongs to (the progress item).
    expect_line "^parity: interrupted by SIGINT while rank 0 on [^ ]+ was in ([a-z_]+ [0-9]+ x [a-z0-9]+ \([a-z_]+\) of )?bench: [a-z_]+ [a-z_]+ [0-9.]+[KMG]?( in-place)?(, between operations)?; the rank was stopped$"
    expect_partial_if_any "$work/i.h5" "^interrupted by SIGINT while rank 0 on [^ ]+ was in .+; the rank was stopped$"
    no_leftovers ;;
  sigkill_rank)
    # mpirun holds the result's lock beside parity (a job whose parent is killed outright keeps
    # the name until mpirun, which outlives its ranks, has gone).
    run_then 0 "victim=\$(newest_rank 3); ls -l /proc/\$(pgrep -n -P \$pid)/fd 2>/dev/null | grep -q 'i\.h5\.lock' && : > $work/lock-held; kill -KILL \$victim" \
      "${long_bench[@]}" --np 3 --out "$work/i.h5"
    [ -e "$work/lock-held" ] || fail "mpirun did not hold the result's lock"
    expect_status 6
    expect_lines 1
    expect_line "^parity: rank 2 on [^ ]+ died \(signal 9, Killed\)( while [^;]+)?; the job was stopped$"
    expect_partial_if_any "$work/i.h5" "^rank 2 on [^ ]+ died"
    no_leftovers ;;
  death_names_operation)
    # Rank 2 stalls before its first operation and is killed there: the line names the
    # operation the other ranks were in when mpirun stopped them (on a loaded machine one of
    # them may not have reached it, or not said so before mpirun stopped it: then the other
    # alone is named).
    run_then 0 "victim=\$(newest_rank 3); in_stall \$victim; kill -KILL \$victim" bench collectives -q -e 8 -T 60 --np 3 --inject-stall 2 --out "$work/d.h5" --force
    expect_status 6
    expect_lines 1
    expect_line "^parity: rank 2 on [^ ]+ died \(signal 9, Killed\) while (ranks 0, 1 on [^ ]+ were|rank [01] on [^ ]+ was) in [a-z_]+ [0-9]+ x [a-z0-9]+ \(native\)( of [^;]+)?; the job was stopped$"
    run_then 0 "victim=\$(newest_rank 3); in_stall \$victim; kill -TERM \$victim" bench collectives -q -e 8 -T 60 --np 3 --inject-stall 2 --out "$work/d.h5" --force
    expect_status 6
    expect_line "^parity: rank 2 on [^ ]+ was stopped by SIGTERM from outside parity during an injected stall; the job was stopped$"
    no_leftovers ;;
  sigterm_rank)
    run_then rows "victim=\$(newest_rank 3); kill -TERM \$victim" "${long_bench[@]}" --np 3 --out "$work/i.h5"
    expect_status 6
    expect_lines 1
    expect_line "^parity: rank 2 on [^ ]+ was stopped by SIGTERM from outside parity( during [^;]+)?; the job was stopped$"
    expect_partial_if_any "$work/i.h5" "^rank 2 on [^ ]+ was stopped by SIGTERM"
    no_leftovers ;;
  deleted_cwd)
    for np in 1 2; do
      mkdir -p "$work/gone" && cd "$work/gone" && rmdir "$work/gone"
      run bench collectives -q -e 8 --np "$np" --out x.h5
      cd "$work" || exit 1
      expect_status 2
      expect_lines 1
      expect_line "working directory no longer exists"
    done ;;
  unreachable_host)
    printf 'no-such-host.invalid slots=2\n' >hosts
    run bench collectives -q -e 8 --np 2 --hostfile hosts --out "$work/u.h5" --force
    expect_status 2
    expect_lines 1
    expect_line "^parity: mpirun could not start the job: "
    no_leftovers ;;
  refusal_agreed)
    # A refusal every rank reaches (a root outside the world) ends the job with status 2 and the
    # one line, the ranks agreeing on it and exiting 0: mpirun (its notices shown) never saw a
    # rank exit non-zero, so it stopped none.
    for np in 2 3; do
      timeout 120 env PARITY_MPIRUN_VERBOSE=1 "$parity" bench collectives -q --np "$np" -r 5 -b 8 -e 8 --out "$work/r.h5" --force >"$out" 2>"$err"
      status=$?
      expect_status 2
      expect_line "^parity: -r/--root 5 is not a rank of $np$"
      if grep -Eiq "non-zero|exit code|mpirun noticed" "$err"; then fail "--np $np: mpirun saw a rank exit non-zero"; fi
    done
    # Without PARITY_MPIRUN_VERBOSE, the one line alone (the agreement is not shown); so too
    # where Open MPI's environment would tag the ranks' lines or send them to files.
    for setting in OMPI_MCA_parity_none=0 OMPI_MCA_orte_tag_output=1 OMPI_MCA_orte_timestamp_output=1 \
      OMPI_MCA_orte_xml_output=1 "OMPI_MCA_orte_output_filename=$work/ranks"; do
      timeout 120 env "$setting" "$parity" bench collectives -q --np 2 -r 5 -b 8 -e 8 --out "$work/r.h5" --force >"$out" 2>"$err"
      status=$?
      expect_status 2
      expect_lines 1
      expect_line "^parity: -r/--root 5 is not a rank of 2$"
      [ ! -e "$work/ranks" ] || fail "$setting: the ranks' output went to files"
    done
    no_leftovers ;;
  mpi_cannot_start)
    # Open MPI's settings name a component this host lacks: MPI_Init fails in the ranks and
    # mpirun stops the rest. One line that says so, status 2, not "stopped by SIGTERM". Open MPI
    # sometimes loses its notice on the way (show_help's "Data unpack would read past end of
    # buffer"): then the MPI_Init abort alone names it, or under load (every notice lost) the
    # lost notice beside ranks that never started (the readings are tested on recorded text in
    # test_supervisor.cpp). One rank (the default) alike: started alone, Open MPI's failed
    # MPI_Init would end the process itself with its pages of text and status 1.
    for np in 1 2; do
      for setting in OMPI_MCA_pml=nosuch OMPI_MCA_btl=nosuch; do
        timeout 120 env "$setting" "$parity" bench collectives -q --np $np -b 8 -e 8 --out "$work/m.h5" --force >"$out" 2>"$err"
        status=$?
        expect_status 2
        expect_lines 1
        expect_line "^parity: MPI could not start on the ranks: (A requested component was not found \(framework ${setting:9:3}, component nosuch\)|MPI_Init failed|a rank ended before MPI had started on all of them \(Open MPI lost its notice of why\)); see Open MPI's settings"
      done
    done
    no_leftovers ;;
  no_mpirun_one_rank)
    timeout 120 env PATH=/nonexistent "$parity" bench collectives -q -e 8 --out "$work/n.h5" --force >"$out" 2>"$err"
    status=$?
    expect_status 2
    expect_lines 1
    expect_line "mpirun not found"
    ;;
  launcher_ran_nothing)
    # A launcher that ends with status 0 but runs no rank (a wrapper that starts nothing): no
    # result file, so no success.
    printf '#!/bin/sh\nexit 0\n' > okmpi.sh && chmod +x okmpi.sh
    timeout 120 env PARITY_MPIRUN=./okmpi.sh "$parity" bench collectives -q --np 2 -b 8 -e 8 --out "$work/l.h5" --force >"$out" 2>"$err"
    status=$?
    expect_status 2
    expect_lines 1
    expect_line "^parity: the launcher ended with status 0 but no rank ran the job"
    [ ! -e "$work/l.h5" ] || fail "a result file appeared" ;;
  device_out)
    # --out naming a FIFO (or /dev/null): refused with and without --force, and left as it was.
    mkfifo fifo
    for force in "" --force; do
      run bench collectives -q -e 8 --out fifo $force
      expect_status 2
      expect_lines 1
      expect_line "fifo exists and is not a regular file"
      [ -p fifo ] || fail "the FIFO was replaced"
    done
    run bench collectives -q -e 8 --np 2 --out fifo --force
    expect_status 2
    expect_line "not a regular file"
    [ -p fifo ] || fail "the FIFO was replaced" ;;
  full_disk)
    mkdir -p disk
    if ! mount -t tmpfs -o size=1m tmpfs disk 2>/dev/null; then
      echo "faults.sh full_disk: skipped: cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)"
      exit 0
    fi
    trap 'umount "$work/disk" 2>/dev/null' EXIT
    # Too little space for the expected file: refused before any work.
    run bench collectives -q -e 8 --out "$work/disk/r.h5" --force
    expect_status 2
    expect_lines 1
    expect_line "only 1.0 MiB free on .*disk but the result file .* needs about"
    # A case for other frameworks too, from the model's size, before its parameters are made.
    run case export --model gpt2-medium --out "$work/disk/c.h5"
    expect_status 2
    expect_lines 1
    expect_line "^parity: case export of gpt2-medium writes about 2\.64 GiB but only 1\.0 MiB is free on .*disk; choose a smaller --model or fewer --steps$"
    [ -z "$(ls disk)" ] || fail "case export left files on the full disk: $(ls disk)"
    umount disk && mount -t tmpfs -o size=12m tmpfs disk || fail "cannot remount"
    # Enough at the start, full by the end: the fault names ENOSPC and leaves nothing behind.
    run_then rows "dd if=/dev/zero of=$work/disk/filler bs=1M count=64 2>/dev/null" \
      bench collectives --np 2 -q -e 16M -n 100 --out "$work/disk/r.h5" --force
    expect_status 4
    expect_line "No space left on device|ENOSPC"
    # What finished stays in the journal, and the line says how to continue from it.
    expect_line "could not keep partial results: .*ENOSPC.*continue with --resume .*r.h5.journal"
    [ -z "$(find disk -name '*.partial-*')" ] || fail "temporary file left on the full disk: $(ls disk)"
    no_leftovers ;;
  concurrent_out)
    # A second run writing the same --out refuses at start, while the first one runs (as one
    # process, and under mpirun); once the first has ended, by any path, the lock is gone.
    for np in 1 2; do
      "$parity" "${long_bench[@]}" --np "$np" --out "$work/w.h5" >/dev/null 2>"$work/first.err" &
      first=$!
      sleep 2
      start=$(date +%s)
      run bench collectives -q -e 8 --out "$work/w.h5" --force
      expect_status 2
      expect_lines 1
      expect_line "^parity: another parity run \(pid [0-9]+\) is writing .*w.h5 \(lock .*w.h5.lock\); wait for it or choose another --out$"
      [ $(($(date +%s) - start)) -lt 10 ] || fail "the second run took over 10 s to refuse"
      kill -KILL "$first"  # no clean-up at all: the kernel releases the lock
      wait "$first" 2>/dev/null
      pkill -KILL -f -- "--out $work/w.h5" 2>/dev/null
      sleep 0.5
      run bench collectives -q -e 8 --np "$np" --out "$work/w.h5" --force
      expect_status 0
      [ -e "$work/w.h5.lock" ] && fail "the lock file stayed after a clean run"
      [ -f "$work/w.h5" ] || fail "no result file"
    done ;;
  closed_stdout)
    # Output piped into a reader that stops at once (| head): the run goes on to its result
    # file, as one process and under mpirun, and leaves no lock, journal or temporary file.
    for np in 1 2; do
      timeout 120 "$parity" bench collectives -e 1K -n 2 -w 0 --np "$np" --out "$work/p.h5" --force 2>"$err" | head -c 1 >/dev/null
      status=${PIPESTATUS[0]}
      expect_status 0
      /usr/bin/python3 -c "import h5py, sys; sys.exit(0 if h5py.File(sys.argv[1])['/'].attrs['complete'] == 1 else 1)" "$work/p.h5" ||
        fail "no complete result file at --np $np"
      left=$(find "$work" -name 'p.h5.*')
      [ -z "$left" ] || fail "left behind at --np $np: $left"
      no_leftovers
    done
    # What a command prints is its result (plan's layouts, list's names): a full stdout fails it
    # in one line, where a reader that stops early does not.
    "$parity" list >/dev/full 2>"$err"
    status=$?
    expect_status 4
    expect_lines 1
    expect_line "^parity: could not write the output to stdout: No space left on device$"
    "$parity" pipeline simulate --name 1f1b -p 8 -m 64 --timeline 2>"$err" | head -c 1 >/dev/null
    status=${PIPESTATUS[0]}
    expect_status 0
    [ ! -s "$err" ] || fail "closed pipe: $(cat "$err")" ;;
  report_script)
    # The report script's outcomes as parity tells them: a "script" that writes nothing is no
    # report (status 4); a Python without numpy, one line naming what to install (status 2); the
    # path it prints lost to a closed pipe or a full device, the report still drawn (status 0).
    "$parity" bench collectives -q -e 8 -n 1 -w 0 --out "$work/s.h5" 2>"$err" || fail "no result file to draw"
    PARITY_PYTHON=/bin/true "$parity" report "$work/s.h5" --out "$work/none" >"$out" 2>"$err"
    status=$?
    expect_status 4
    expect_lines 1
    expect_line "^parity: the report script \(/bin/true\) ended with status 0 but did not write .*/none/index.html$"
    printf '#!/bin/sh\nexec /usr/bin/python3 -S -I "$@"\n' > bare-python && chmod +x bare-python
    PARITY_PYTHON=./bare-python "$parity" report "$work/s.h5" --out "$work/bare" >"$out" 2>"$err"
    status=$?
    expect_status 2
    expect_lines 1
    expect_line "cannot draw reports: No module named .* \(install python3-h5py, python3-numpy and python3-matplotlib"
    "$parity" report "$work/s.h5" -q --no-figures --out "$work/piped" 2>"$err" | true
    status=${PIPESTATUS[0]}
    expect_status 0
    [ ! -s "$err" ] || fail "closed pipe: $(cat "$err")"
    [ -s "$work/piped/index.html" ] || fail "closed pipe: no report"
    "$parity" report "$work/s.h5" -q --no-figures --out "$work/full" >/dev/full 2>"$err"
    status=$?
    expect_status 0
    expect_line "^parity: the report is written, but its path could not be printed"
    [ -s "$work/full/index.html" ] || fail "full stdout: no report"
    # The report's folder is made in one that exists, never a tree of them; a folder of other
    # files is not a report's, --force or not.
    "$parity" report "$work/s.h5" -q --no-figures --out "$work/no/such/report" 2>"$err"
    status=$?
    expect_status 2
    expect_line "its folder '.*/no/such' does not exist$"
    [ ! -e "$work/no" ] || fail "a tree of folders was made"
    mkdir -p "$work/others" && echo notes > "$work/others/notes.txt"
    "$parity" report "$work/s.h5" -q --no-figures --out "$work/others" --force 2>"$err"
    status=$?
    expect_status 2
    expect_line "holds 'notes.txt', which no report writes; choose a new or empty folder$"
    [ ! -e "$work/others/index.html" ] || fail "a report among other files"
    # parity run refuses such a --report-dir before its job, not after it.
    timeout 60 "$parity" run --quick --np 2 -q --out "$work/run.h5" --report-dir "$work/others" 2>"$err"
    status=$?
    expect_status 2
    expect_lines 1
    expect_line "^parity: --report-dir '.*/others' holds 'notes.txt', which no report writes"
    [ ! -e "$work/run.h5" ] || fail "parity run ran its job before refusing the report folder"
    # A report's own files (a draw cut short: figures, no page) are the report's to replace.
    mkdir -p "$work/cut" && : > "$work/cut/fig000_x.png"
    "$parity" report "$work/s.h5" -q --no-figures --out "$work/cut" 2>"$err"
    status=$?
    expect_status 0
    [ -s "$work/cut/index.html" ] || fail "a draw cut short was not drawn again" ;;
  report_interrupted)
    # A signal while the report script draws: parity passes it on, waits for the script and
    # says so (status 5); no script is left drawing after parity has gone.
    "$parity" bench collectives -q -e 8 -n 2 -w 0 --out "$work/r.h5" 2>"$err" || fail "no result file to draw"
    for sig in TERM INT; do
      "$parity" report "$work/r.h5" --out "$work/report-$sig" >"$out" 2>"$err" &
      pid=$!
      wait_until 200 0.05 "the report script never started" running "parity_report.py .*--out $work/report-$sig"
      kill -"$sig" "$pid"
      wait "$pid"
      status=$?
      expect_status 5
      expect_line "^parity: interrupted by SIG$sig while drawing the report; .*report-$sig is incomplete$"
      sleep 0.5
      pgrep -f -- "parity_report.py .*--out $work/report-$sig" >/dev/null &&
        fail "the report script outlived parity: $(pgrep -af -- "parity_report.py")"
    done ;;
  run_report_interrupted)
    # parity run's rank draws the report once the results are written: a signal to parity then
    # cuts the report short, in one line naming the signal sent (parity forwards SIGTERM), the
    # result file whole and no rank said stopped.
    printf '#!/bin/sh\n: > "%s/drawing"\nexec sleep 1000\n' "$work" > "$work/hang-python"
    chmod +x "$work/hang-python"
    PARITY_PYTHON="$work/hang-python" "$parity" run --quick --np 1 -q --out "$work/run.h5" >"$out" 2>"$err" &
    pid=$!
    wait_until 1200 0.05 "the report never started" test -e "$work/drawing"
    kill -INT "$pid"
    wait "$pid"
    status=$?
    expect_status 5
    expect_lines 1
    expect_line "^parity: interrupted by SIGINT while drawing the report; .*run.report is incomplete \(.*run.h5 is complete\)$"
    "$parity" report "$work/run.h5" --no-figures -q --out "$work/again" 2>"$err" || fail "the result file is not whole: $(cat "$err")" ;;
  alone_interrupted)
    # A command that runs alone (no ranks) ended by a signal while it writes its file: one line,
    # status 5, and neither the file nor its temporary left behind.
    for sig in TERM INT; do
      "$parity" case export --model large --steps 1000 --out "$work/case-$sig.h5" >"$out" 2>"$err" &
      pid=$!
      wait_until 400 0.01 "case export never started writing" test -e "$work/case-$sig.h5.tmp"
      kill -"$sig" "$pid"
      wait "$pid"
      status=$?
      expect_status 5
      expect_line "^parity: interrupted by SIG$sig$"
      [ -e "$work/case-$sig.h5.tmp" ] && fail "the temporary file was left behind"
      [ -e "$work/case-$sig.h5" ] && fail "an unfinished case file was left"
    done ;;
  *) echo "faults.sh: unknown scenario $scenario"; exit 2 ;;
esac
exit 0
