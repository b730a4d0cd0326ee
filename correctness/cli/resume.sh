#!/usr/bin/env bash
# Nothing lost on interruption: a run cut short at several points (SIGINT, SIGTERM, a stall, a
# dead rank) leaves a valid partial result file (complete = 0, the reason, every row finished),
# and --resume then yields the rows a clean run gives, in its order.
#   resume.sh PARITY WORKDIR SCENARIO
#   resume.sh PARITY WORKDIR probe COMMAND   the command's resume probe, as `parity list
#                                            --resume-probes` gives it (one test per command)
#   resume.sh PARITY WORKDIR probes_complete every command with ranks has a probe or says why not
set -u
parity=$1 work=$2 scenario=$3
here=$(cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=wait_rows.sh
. "$here/wait_rows.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
err=$work/stderr

fail() {
  {
    echo "resume.sh $scenario: $*"
    echo "--- stderr:"; cat "$err" 2>/dev/null
  } >&2
  exit 1
}
rows() { /usr/bin/python3 "$here/result_rows.py" "$@" || fail "result file check failed"; }
run() { # ARGS...: parity with a time limit; sets status
  timeout 180 "$parity" "$@" >/dev/null 2>"$err"
  status=$?
  [ "$status" -eq 124 ] && fail "no end within 180 s"
  return 0
}
# Starts parity writing OUT and sends SIGNAL once its journal holds BYTES (0: once it grew
# past what the run's start writes, i.e. some row finished); sets status.
interrupt_at_bytes() { # SIGNAL OUT BYTES ARGS...
  local signal=$1 journal=$2.journal bytes=$3
  shift 3
  "$parity" "$@" >/dev/null 2>"$err" &
  local pid=$!
  wait_for_rows "$pid" "$journal" "$bytes"
  kill "-$signal" "$pid" 2>/dev/null
  wait "$pid"
  status=$?
}
# Waits until no process writing OUT is left: SIGKILL to parity leaves its mpirun and rank
# running a moment (they end when they find their parent gone), still appending to the journal.
wait_gone() { # OUT
  for _ in $(seq 200); do
    pgrep -f -- "--out $1( |$)" >/dev/null || return 0
    sleep 0.05
  done
  fail "processes writing $1 are still running"
}
interrupt_after_rows() { # SIGNAL OUT ARGS...
  local signal=$1 out=$2
  shift 2
  interrupt_at_bytes "$signal" "$out" 0 "$@"
}
# The clean run, watching how large its journal grows (sets journal_bytes).
clean_run() { # OUT ARGS...
  local out=$1 size
  shift
  journal_bytes=0
  timeout 180 "$parity" "$@" --out "$out" >/dev/null 2>"$err" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    size=$(stat -c %s "$out.journal" 2>/dev/null || echo 0)
    [ "$size" -gt "$journal_bytes" ] && journal_bytes=$size
    sleep 0.05
  done
  wait "$pid"
  status=$?
}
# Resumes the partial $work/p.h5 to the end: the result is complete, GROUP equals the clean
# run's on KEYS, and every row the partial file kept (of GROUP and of $also_taken) comes back
# unchanged, taken rather than measured again.
resume_like_clean() { # GROUP KEYS WHEN ARGS...
  local group=$1 keys=$2 when=$3
  shift 3
  cp "$work/p.h5" "$work/kept.h5"
  run "$@" --resume "$work/p.h5"
  [ "$status" -eq 0 ] || fail "--resume after $when ended with status $status"
  # shellcheck disable=SC2086 # also_taken: a list of groups
  rows resumed_like "$work/p.h5" "$work/clean.h5" "$work/kept.h5" "$group" "$keys" $also_taken
  [ ! -e "$work/p.h5.journal" ] || fail "the journal is left after a complete run"
}

# Interrupts when the journal reaches each fraction of the clean run's largest (so at rows, not
# at times that depend on the machine's load; the whole tables written at the end make about
# the second half of it), checks the partial file, resumes (once more
# interrupted at the first point) and compares GROUP with the clean run on KEYS. At least two
# points must have stopped the run midway.
points() { # SIGNAL GROUP KEYS FRACTIONS -- ARGS...
  local signal=$1 group=$2 keys=$3 fractions=$4
  shift 5
  clean_run "$work/clean.h5" "$@"
  [ "$status" -eq 0 ] || fail "the clean run ended with status $status"
  local total midway=0 first=1 bytes notes=""
  total=$(rows rows "$work/clean.h5" "$group") || exit 1
  for fraction in $fractions; do
    bytes=$(awk -v n="$journal_bytes" -v f="$fraction" 'BEGIN { printf "%d", n * f }')
    rm -f "$work/p.h5"
    interrupt_at_bytes "$signal" "$work/p.h5" "$bytes" "$@" --out "$work/p.h5"
    notes+=" $fraction:"
    if [ "$status" -eq 0 ]; then notes+=finished; continue; fi  # finished before the signal
    [ "$status" -eq 5 ] || fail "interrupted at $fraction of the journal: status $status, expected 5"
    [ -e "$work/p.h5" ] || { notes+=nothing; continue; }  # stopped before any row finished
    # The signal may come as the file is committed: then it is complete.
    /usr/bin/python3 "$here/result_rows.py" complete "$work/p.h5" 2>/dev/null && { notes+=complete; continue; }
    grep -q "partial results kept in .*p.h5" "$err" || fail "no line names the partial file"
    local kept
    kept=$(rows partial "$work/p.h5" "interrupted by SIG$signal" "$group") || exit 1
    notes+="$kept/$total"
    [ "$kept" -lt "$total" ] && midway=$((midway + 1))
    if [ "$first" -eq 1 ]; then
      # The resumed run cut short too: it keeps the rows it took and the ones it made.
      first=0
      interrupt_after_rows "$signal" "$work/p.h5" "$@" --resume "$work/p.h5"
      if [ "$status" -ne 0 ] && ! /usr/bin/python3 "$here/result_rows.py" complete "$work/p.h5" 2>/dev/null; then
        local again
        again=$(rows partial "$work/p.h5" "interrupted by SIG$signal" "$group") || exit 1
        [ "$again" -ge "$kept" ] || fail "a resumed run cut short lost rows"
      fi
    fi
    resume_like_clean "$group" "$keys" "$fraction of the journal" "$@"
  done
  [ "$midway" -ge 2 ] || fail "only $midway interruption(s) landed midway (rows kept at each point:$notes)"
}

# Commands that keep blocks of rows: each run is cut by --inject-interrupt once rank 0 has
# journaled COUNT blocks of GROUP (its signal sent where a user's would go, nothing journaled
# after it), so at a block boundary whatever the machine's load; the partial file must keep
# some rows but not all, more at each count; --resume must then give the clean run's rows on
# KEYS, every kept row taken back unchanged, not measured again. (check_points and bench_points
# above send their signals from outside, at arbitrary points.)
blocks() { # SIGNAL GROUP KEYS COUNTS -- ARGS...
  local signal=$1 group=$2 keys=$3 counts=$4 total kept before=0
  shift 5
  run "$@" --out "$work/clean.h5"
  [ "$status" -eq 0 ] || fail "the clean run ended with status $status"
  total=$(rows rows "$work/clean.h5" "$group") || exit 1
  for count in $counts; do
    rm -f "$work/p.h5"
    run "$@" --out "$work/p.h5" --inject-interrupt "$group:$count:$signal"
    [ "$status" -eq 5 ] || fail "interrupted after $count block(s): status $status, expected 5"
    grep -q "partial results kept in .*p.h5" "$err" || fail "no line names the partial file"
    kept=$(rows partial "$work/p.h5" "interrupted by SIG$signal" "$group") || exit 1
    [ "$kept" -gt "$before" ] && [ "$kept" -lt "$total" ] ||
      fail "after $count block(s) of $group: $kept of $total rows kept (more than $before and fewer than $total expected)"
    before=$kept
    resume_like_clean "$group" "$keys" "$count block(s)" "$@"
  done
}

check_filter='all_reduce/*/float32/*/16777216/*:all_gather/*/float32/*/16777216/*'
# Tables measured whole before the rows (the alpha-beta model, copy bandwidth) that --resume
# must take too, so that the rows taken and the rows measured again share them.
also_taken=""
bench_args=(bench collectives -q -e 4M --coll all_reduce,all_gather)

case $scenario in
  check_points)
    points INT check/collectives '*' "0.15 0.3 0.45" -- check -q --filter "$check_filter" ;;
  bench_points)
    also_taken="bench/point_to_point host/copy_bandwidth bench/harness_overhead"
    points TERM bench/collectives collective,algorithm,dtype,redop,in_place,count,size_bytes "0.15 0.3 0.45" -- "${bench_args[@]}" -n 10 --np 2
    # Each row's per-rank times came with it.
    /usr/bin/python3 - "$work/p.h5" <<'PY' || fail "per-rank times do not match their rows"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1]); t = f["bench/collectives"]; r = f["bench/collectives_rank_times"]
rows = r["row"][:]
assert np.all(np.bincount(rows, minlength=len(t["time_us"])) == 2)
mean = np.array([r["time_us"][rows == i].mean() for i in range(len(t["time_us"]))])
assert np.allclose(mean, t["time_us"][:], rtol=1e-9)
PY
    ;;
  # Every command with ranks keeps and takes blocks of rows (a case, a row of sizes, a strategy
  # at a world size with its ranks' rows, a model, an overlap bucket size, a run, a precision's
  # steps, ...): its probe, declared beside the command (bench/commands/), says how to cut it.
  probe)
    name=${4:?resume.sh probe: which command?}
    probe=$("$parity" list --resume-probes | awk -F'\t' -v name="$name" '$1 == name')
    [ -n "$probe" ] || fail "parity list --resume-probes has no line for '$name'"
    field() { awk -F'\t' -v i="$1" '{ print $i }' <<<"$probe"; }
    [ "$(field 2)" != "-" ] || fail "'$name' has no resume probe: $(field 3)"
    also_taken=$(field 6)
    [ "$also_taken" = "-" ] && also_taken=""
    read -r -a words <<<"$name"
    read -r -a arguments <<<"$(field 7)"
    blocks "$(field 2)" "$(field 3)" "$(field 4)" "$(field 5)" -- "${words[@]}" "${arguments[@]}" ;;
  probes_complete)
    "$parity" list --resume-probes >"$work/probes" 2>"$err" || fail "parity list --resume-probes failed"
    [ "$(wc -l <"$work/probes")" -gt 0 ] || fail "no command listed"
    if grep -F "(no probe and no reason given)" "$work/probes" >&2; then fail "a command with ranks has no resume probe"; fi ;;
  stall_while_resuming)
    # A resumed run that stalls before taking its rows back keeps them all. The first run is
    # cut at a block boundary from inside (a signal sent from here may land after the file was
    # committed whole, on a loaded machine).
    run check -q --np 2 --filter "$check_filter" --out "$work/p.h5" --inject-interrupt check/collectives:3:INT
    [ "$status" -eq 5 ] || fail "status $status, expected 5"
    kept=$(rows partial "$work/p.h5" "interrupted by SIGINT" check/collectives) || exit 1
    [ "$kept" -gt 0 ] || fail "no row kept"
    run check -q --np 2 --filter "$check_filter" --resume "$work/p.h5" -T 2 --inject-stall 1
    [ "$status" -eq 3 ] || fail "status $status, expected 3"
    rows partial "$work/p.h5" "stalled past --timeout 2: rank 1 .*injected stall" >/dev/null
    [ "$(rows rows "$work/p.h5" check/collectives)" -eq "$kept" ] || fail "rows lost by a stalled resumed run"
    [ -z "$(find "$work" -name '*.partial-*')" ] || fail "temporary files left: $(ls "$work")" ;;
  signal_after_commit)
    # A signal that lands after rank 0 committed the file whole (its journal removed) still ends
    # the job with status 5, and its line says the file is complete; the file stays as written.
    # The signal is sent once the journal is gone, racing the job's end: a try that misses
    # (status 0) is tried again, and each of one rank and two must be hit at least once.
    for np in 1 2; do
      hit=0
      for _ in $(seq 20); do
        rm -f "$work/c.h5"
        "$parity" check -q --np "$np" --filter 'all_reduce/native/float32/sum/*' --out "$work/c.h5" >/dev/null 2>"$err" &
        pid=$!
        while kill -0 "$pid" 2>/dev/null && [ ! -e "$work/c.h5.journal" ]; do sleep 0.005; done
        while kill -0 "$pid" 2>/dev/null && [ -e "$work/c.h5.journal" ]; do sleep 0.002; done
        kill -INT "$pid" 2>/dev/null
        wait "$pid"
        status=$?
        [ "$status" -eq 0 ] && continue
        [ "$status" -eq 5 ] || fail "--np $np: status $status, expected 5 (or 0 when the signal came too late)"
        rows complete "$work/c.h5"
        grep -q "c.h5 had been written whole before" "$err" || fail "--np $np: no line says the file is whole"
        if grep -q "partial results kept" "$err"; then fail "--np $np: a whole file called partial"; fi
        hit=1
        break
      done
      [ "$hit" -eq 1 ] || fail "--np $np: no signal landed between the commit and the end in 20 tries"
    done ;;
  dead_rank)
    # Rank 2 killed once rows are journaled: the parent keeps them and names the rank.
    "$parity" "${bench_args[@]}" -n 400 --np 3 --out "$work/p.h5" >/dev/null 2>"$err" &
    pid=$!
    for _ in $(seq 600); do
      [ "$(stat -c %s "$work/p.h5.journal" 2>/dev/null || echo 0)" -gt 20000 ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$(pgrep -n -f -- "--out $work/p.h5")"
    wait "$pid"
    status=$?
    [ "$status" -eq 6 ] || fail "status $status, expected 6"
    rows partial "$work/p.h5" "^rank 2 on .* died \(signal 9, Killed\)" >/dev/null
    [ -z "$(find "$work" -name '*.partial-*')" ] || fail "temporary files left: $(ls "$work")" ;;
  torn_tail)
    # A lone run killed outright, its journal's tail torn at several lengths (a record cut
    # mid-write): resumed, each point has its per-rank row, never one without the other.
    args=(bench collectives -q -b 8 -e 256K -n 20 --coll all -d float32,int32)
    timeout 180 "$parity" "${args[@]}" --out "$work/clean.h5" >/dev/null 2>"$err" || fail "the clean run failed"
    clean_rows=$(rows rows "$work/clean.h5" bench/collectives)
    for cut in 1 7 33 60; do
      interrupt_at_bytes KILL "$work/t$cut.h5" 60000 "${args[@]}" --out "$work/t$cut.h5"
      wait_gone "$work/t$cut.h5"
      [ -e "$work/t$cut.h5.journal" ] || fail "no journal after SIGKILL"
      size=$(stat -c %s "$work/t$cut.h5.journal")
      truncate -s $((size - cut)) "$work/t$cut.h5.journal"
      run "${args[@]}" --resume "$work/t$cut.h5.journal" --out "$work/r$cut.h5"
      [ "$status" -eq 0 ] || fail "cut $cut: resume status $status"
      rows complete "$work/r$cut.h5"
      points=$(rows rows "$work/r$cut.h5" bench/collectives)
      ranks=$(rows rows "$work/r$cut.h5" bench/collectives_rank_times)
      [ "$points" -eq "$clean_rows" ] || fail "cut $cut: $points rows, the clean run has $clean_rows"
      [ "$ranks" -eq "$points" ] || fail "cut $cut: $ranks per-rank rows for $points points at one rank"
      ! grep -q "is damaged" "$err" || fail "cut $cut: a torn tail called damage: $(cat "$err")"
    done
    # A byte changed in the journal's middle is damage, not a tear: said in one line, and what was
    # journaled after it runs again.
    interrupt_at_bytes KILL "$work/d.h5" 60000 "${args[@]}" --out "$work/d.h5"
    wait_gone "$work/d.h5"
    [ -e "$work/d.h5.journal" ] || fail "no journal after SIGKILL"
    /usr/bin/python3 -c "
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) // 3] ^= 0x40; open(p, 'wb').write(b)" "$work/d.h5.journal"
    run "${args[@]}" --resume "$work/d.h5.journal" --out "$work/rd.h5"
    [ "$status" -eq 0 ] || fail "damaged journal: resume status $status"
    grep -Eq "^parity: .*d\.h5\.journal is damaged at byte [0-9]+: what was journaled after it runs again$" "$err" ||
      fail "damage not said: $(cat "$err")"
    rows complete "$work/rd.h5"
    [ "$(rows rows "$work/rd.h5" bench/collectives)" -eq "$clean_rows" ] || fail "damaged journal: not the clean run's rows" ;;
  taken_then_cut)
    # A resumed run cut short again keeps every row it took back, unchanged: it journals each
    # row as it takes it, so the second partial file holds the first one's rows beside the one
    # it measured. Both cuts come from inside, at a block boundary (a case's row is a block, and
    # so is each row taken back), so the counts are exact whatever the machine's load.
    run check -q --filter "$check_filter" --out "$work/p.h5" --inject-interrupt check/collectives:2:INT
    [ "$status" -eq 5 ] || fail "the first cut: status $status, expected 5"
    kept=$(rows partial "$work/p.h5" "interrupted by SIGINT" check/collectives) || exit 1
    [ "$kept" -eq 2 ] || fail "the first cut kept $kept rows, expected 2"
    cp "$work/p.h5" "$work/kept.h5"
    run check -q --filter "$check_filter" --resume "$work/p.h5" --inject-interrupt check/collectives:3:INT
    [ "$status" -eq 5 ] || fail "the resumed run's cut: status $status, expected 5"
    again=$(rows partial "$work/p.h5" "interrupted by SIGINT" check/collectives) || exit 1
    [ "$again" -eq 3 ] || fail "the resumed run cut after taking 2 rows and measuring 1 kept $again rows, expected 3"
    rows taken "$work/kept.h5" "$work/p.h5" check/collectives ;;
  empty_table_measured)
    # A table the resumed file holds without a row is not a block taken: a table taken whole
    # (--resume's kAnyCount, "at least one row") with none is measured again, so the resumed file
    # has the copy bandwidth a clean run has, not an empty table.
    run bench collectives -q -e 8 -n 2 --coll all_reduce --out "$work/c.h5"
    [ "$status" -eq 0 ] || fail "bench collectives: status $status"
    /usr/bin/python3 - "$work/c.h5" "$work/empty.h5" <<'PY' || fail "could not empty the table"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    g = f["host/copy_bandwidth"]
    assert int(g.attrs["rows"]) > 0, "no copy bandwidth rows to drop"
    for name in list(g.keys()):
        data, attrs = g[name][()], dict(g[name].attrs)
        del g[name]
        d = g.create_dataset(name, data=data[:0])
        for k, v in attrs.items():
            d.attrs[k] = v
    g.attrs["rows"] = 0
PY
    run bench collectives -q -e 8 -n 2 --coll all_reduce --resume "$work/empty.h5" --out "$work/r.h5"
    [ "$status" -eq 0 ] || fail "resumed: status $status"
    [ "$(rows rows "$work/r.h5" host/copy_bandwidth)" -eq "$(rows rows "$work/c.h5" host/copy_bandwidth)" ] ||
      fail "the empty copy bandwidth table was taken, not measured again" ;;
  short_block)
    # A block of rows one short (a model's rows on two ranks, one of them gone) is measured again,
    # not taken: the resumed file holds the whole block, as a clean run does.
    run bench model --np 2 -q --models tiny --steps 2 --warmup 0 --out "$work/m.h5"
    [ "$status" -eq 0 ] || fail "bench model: status $status"
    /usr/bin/python3 - "$work/m.h5" "$work/short.h5" <<'PY' || fail "could not drop a row"
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    g = f["bench/model"]
    assert int(g.attrs["rows"]) == 2 and sorted(g["rank"][()].tolist()) == [0, 1], "not a block of two rows"
    keep = np.flatnonzero(g["rank"][()] == 0)
    for name in list(g.keys()):
        data, attrs = g[name][()], dict(g[name].attrs)
        del g[name]
        d = g.create_dataset(name, data=data[keep])
        for k, v in attrs.items():
            d.attrs[k] = v
    g.attrs["rows"] = 1
PY
    run bench model --np 2 -q --models tiny --steps 2 --warmup 0 --resume "$work/short.h5" --out "$work/r.h5"
    [ "$status" -eq 0 ] || fail "resumed: status $status"
    /usr/bin/python3 - "$work/short.h5" "$work/r.h5" <<'PY' || fail "the short block was taken"
import sys, h5py
short, resumed = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
ranks = sorted(resumed["bench/model"]["rank"][()].tolist())
assert ranks == [0, 1], f"the resumed file's model rows are of ranks {ranks}"
rank0 = list(resumed["bench/model"]["rank"][()]).index(0)
assert resumed["bench/model"]["step_time_s"][rank0] != short["bench/model"]["step_time_s"][0], "rank 0's row was taken"
PY
    ;;
  journal_beside_file)
    # A journal beside the partial file it came from is newer than the file (a resumed run killed
    # outright leaves it so): --resume of the file reads the journal. Here a partial file cut at
    # three blocks, and beside it the journal of a run of the same options killed further on.
    args=(bench collectives -q -b 8 -e 256K -n 20 --coll all -d float32,int32)
    run "${args[@]}" --out "$work/p.h5" --inject-interrupt bench/collectives:3:INT
    [ "$status" -eq 5 ] || fail "cut at three blocks: status $status, expected 5"
    kept=$(rows rows "$work/p.h5" bench/collectives)
    interrupt_at_bytes KILL "$work/q.h5" 60000 "${args[@]}" --out "$work/q.h5"
    wait_gone "$work/q.h5"
    [ -e "$work/q.h5.journal" ] || fail "no journal after SIGKILL"
    run "${args[@]}" --resume "$work/q.h5.journal" --out "$work/from_journal.h5"
    [ "$status" -eq 0 ] || fail "resumed from the journal: status $status"
    journaled=$(/usr/bin/python3 -c "import h5py, sys; print(int(h5py.File(sys.argv[1], 'r').attrs['resumed_rows']))" \
      "$work/from_journal.h5") || fail "no resumed_rows"
    mv "$work/q.h5.journal" "$work/p.h5.journal"
    run "${args[@]}" --resume "$work/p.h5" --out "$work/r.h5"
    [ "$status" -eq 0 ] || fail "resumed beside the journal: status $status"
    took=$(/usr/bin/python3 -c "import h5py, sys; print(int(h5py.File(sys.argv[1], 'r').attrs['resumed_rows']))" "$work/r.h5")
    [ "$journaled" -gt "$kept" ] || fail "the journal ($journaled rows) is not ahead of the file ($kept)"
    [ "$took" -eq "$journaled" ] || fail "took $took rows: the journal holds $journaled, the file $kept" ;;
  refused)
    run check -q --filter "$check_filter" --out "$work/p.h5" --inject-interrupt check/collectives:3:INT
    [ "$status" -eq 5 ] && [ -e "$work/p.h5" ] || fail "no partial file (status $status)"
    run bench collectives -q -e 8 --resume "$work/p.h5"
    [ "$status" -eq 2 ] || fail "another subcommand: status $status, expected 2"
    grep -q "was a run with the subcommand check, this one has bench collectives" "$err" || fail "no reason given"
    run check -q --np 2 --filter "$check_filter" --resume "$work/p.h5"
    [ "$status" -eq 2 ] || fail "another world size: status $status, expected 2"
    grep -q "world size 1, this one has 2" "$err" || fail "no reason given"
    # Any option that changes what is computed differs: refused, naming it (the file records
    # every such option; --out, --force, -q and the other job options may differ).
    run check -q --filter 'broadcast/*' --resume "$work/p.h5" --out "$work/other.h5"
    [ "$status" -eq 2 ] || fail "another --filter: status $status, expected 2"
    grep -qF "was a run with --filter '$check_filter', this one has 'broadcast/*'" "$err" || fail "no reason given for --filter"
    run bench collectives -q -e 8 -n 5 --out "$work/b.h5"
    run bench collectives -q -e 8 -n 7 --resume "$work/b.h5" --out "$work/b2.h5"
    [ "$status" -eq 2 ] && grep -q "was a run with --iters '5', this one has '7'" "$err" || fail "another --iters: status $status"
    run bench collectives -q -e 8 -n 5 --resume "$work/b.h5" --out "$work/b2.h5" --force -T 60
    [ "$status" -eq 0 ] || fail "the same options with other job options (--out, --force, -T) were refused: status $status"
    # 16-bit reductions in another mode measure something else.
    run bench collectives -q -e 8 -n 5 --half-accumulate native --resume "$work/b.h5" --out "$work/b3.h5"
    [ "$status" -eq 2 ] && grep -q "was a run with --half-accumulate float32, this one has native" "$err" ||
      fail "another --half-accumulate: status $status"
    run check -q --resume "$work/none.h5"
    [ "$status" -eq 2 ] && grep -q "no such file" "$err" || fail "a missing file: status $status"
    rows partial "$work/p.h5" "interrupted" >/dev/null  # refusals leave the file alone
    # A file whose record of the run is gone (an attribute removed, or of another type) cannot be
    # compared: refused, not taken as the same run.
    for change in "del f.attrs['options']" "f.attrs['options'] = 7" "del f.attrs['subcommand']" \
        "f.attrs['options'] = '\n'.join(l for l in f.attrs['options'].split('\n') if not l.startswith('--filter='))"; do
      cp "$work/p.h5" "$work/edited.h5"
      /usr/bin/python3 -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    $change" "$work/edited.h5" || fail "could not edit the copy ($change)"
      run check -q --filter "$check_filter" --resume "$work/edited.h5" --out "$work/e2.h5"
      [ "$status" -eq 2 ] && grep -q "does not record .*, so what its rows measured cannot be told; start afresh" "$err" ||
        fail "a file edited by $change: status $status"
    done
    # A column of another type is refused before any work (it failed at the first row appended,
    # with status 4 and Open MPI's banner).
    cp "$work/p.h5" "$work/edited.h5"
    /usr/bin/python3 -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    g = f['/check/collectives']
    n, attrs = len(g['passed']), dict(g['passed'].attrs)
    del g['passed']
    d = g.create_dataset('passed', data=[b'x'] * n)
    for k, v in attrs.items():
        d.attrs[k] = v" "$work/edited.h5" || fail "could not edit the copy"
    run check -q --filter "$check_filter" --resume "$work/edited.h5" --out "$work/e3.h5"
    [ "$status" -eq 2 ] && grep -q "column /check/collectives/passed holds string, not int64" "$err" && [ ! -e "$work/e3.h5" ] ||
      fail "a column of strings: status $status"
    # A journal left by a run killed outright is not overwritten by accident.
    printf 'parityJ1' >"$work/q.h5.journal"
    run check -q --filter 'broadcast/native/int32/*' --out "$work/q.h5"
    [ "$status" -eq 2 ] && grep -q "q.h5.journal holds what an interrupted run finished" "$err" || fail "a journal was overwritten: status $status" ;;
  *)
    echo "resume.sh: unknown scenario $scenario" >&2
    exit 2 ;;
esac
exit 0
