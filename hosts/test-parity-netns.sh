#!/usr/bin/env bash
# parity on the namespace cluster: 2 hosts x 2 ranks run a slice of the
# conformance suite and a small benchmark through hosts/netns-mpirun; the
# result files must name both hosts, record every case as passed and hold
# benchmark rows with positive bus bandwidth.
#
# Exit status: 0 pass, 1 fail, 77 skip (not root, no namespace support,
# mpirun or python3+h5py missing, or a cluster is already up), 2 bad usage.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source-path=SCRIPTDIR source=netns-test-lib.sh
. "$HERE/netns-test-lib.sh"
NETNS_TEST_TAG='parity-netns'

PYTHON=/usr/bin/python3
# Every all_reduce algorithm (the hierarchical one splits its work by host), in one type and
# reduction; one slice of two other collectives.
CHECK_FILTER='all_reduce/*/float32/sum/*:all_gather/*/int32/*:broadcast/binomial_tree/*'
BENCH_ARGS=(-b 1K -e 64K -f 8 -n 3 -w 1 --coll all_reduce)
# parity's own per-operation limit: a stalled collective makes parity abort
# with exit status 3 and name the rank and operation, well before the
# step's 'timeout' would kill it without saying where it hung.
OP_TIMEOUT=30

usage() {
    cat <<EOF
usage: ${0##*/} [-h|--help] PARITY_BINARY

Brings up $HOSTS namespace hosts with hosts/netns-cluster.sh and runs, with
hosts/netns-mpirun, $NP ranks ($RANKS_PER_HOST per host) of
  PARITY_BINARY check --filter '$CHECK_FILTER' --no-large -q -T $OP_TIMEOUT --out DIR/check.h5
  PARITY_BINARY bench collectives ${BENCH_ARGS[*]} -q -T $OP_TIMEOUT --out DIR/bench.h5
where DIR is a fresh directory under \${TMPDIR:-/tmp} (the hosts share this
machine's file system; rank 0 writes each file there under a temporary name
and renames it). -T $OP_TIMEOUT makes a stalled collective abort parity (exit
status 3) with a line naming the rank and operation. Then
$PYTHON with h5py checks that
  - the 'hosts' attribute of both files names $HOSTS distinct hosts,
    ${PARITY_NS_PREFIX}1..${PARITY_NS_PREFIX}$HOSTS, with $RANKS_PER_HOST ranks each;
  - /check/collectives has as many rows as 'check --list' names cases,
    and every case passed;
  - /bench/collectives has rows, all with busbw_GBps > 0 and no wrong
    elements, and /bench/collectives_rank_times names every host, with
    each rank on the host the 'hosts' attribute gives it.
Everything is torn down again, also on failure or interrupt.

Exit status: 0 pass, 1 fail, 77 skip (not root, namespaces unavailable,
mpirun or $PYTHON with h5py missing, or a namespace cluster is already up:
it is left alone unless PARITY_NETNS_TEST_FORCE=1, which reuses and then
removes it), 2 bad usage. Every step runs under 'timeout'; the whole test
takes well under 3 minutes (about 10 s on 2 cores).
EOF
}

case ${1:-} in
    -h | --help) usage; exit 0 ;;
    "" | -*) usage >&2; exit 2 ;;
esac
(($# == 1)) || { usage >&2; exit 2; }

# Absolute path: the ranks start in other namespaces, from orted.
parity=$(readlink -f -- "$1" 2>/dev/null) || parity=$1
[[ -f $parity && -x $parity ]] || fail "parity binary '$1' does not exist or is not executable"

netns_test_need_base
command -v mpirun >/dev/null 2>&1 || skip "mpirun missing (apt-get install -y openmpi-bin)"
[[ -x $PYTHON ]] || skip "$PYTHON missing"
timeout -k 2 20 "$PYTHON" -c 'import h5py' >/dev/null 2>&1 ||
    skip "$PYTHON cannot import h5py (apt-get install -y python3-h5py)"

netns_test_need_namespaces

# The host names are what this test checks: each host must have its own
# (see PARITY_NETNS_UTS in hosts/README.md).
export PARITY_NETNS_UTS=1

# The ranks run as root in other network namespaces but on this file system;
# rank 0 writes each result file to $work under a temporary name and renames
# it. Steps end by 150 s, leaving room for the teardown (at most 15 s), so
# the whole test stays well under 3 minutes.
netns_test_begin parity-netns-parity 150 15

# What parity's exit status means (see 'parity --help').
parity_status() {
    case $1 in
        1) echo "conformance cases failed" ;;
        2) echo "bad input" ;;
        3) echo "an operation stalled past --timeout $OP_TIMEOUT" ;;
        4) echo "a fault while running" ;;
        124 | 137) echo "killed by 'timeout' after $step_limit s" ;;
        *) echo "exit status $1" ;;
    esac
}

# Run "parity ARGS..." on the cluster; NAME names the step and its logs.
run_parity() {
    local name=$1 limit=$2 rc=0
    shift 2
    say "$name: $NP ranks ($HOSTS hosts x $RANKS_PER_HOST) via hosts/netns-mpirun"
    BOUNDED_OUT=$work/$name.out BOUNDED_ERR=$work/$name.err \
        bounded "$limit" "$HERE/netns-mpirun" --hostfile "$hostfile" -n "$NP" "$parity" "$@" || rc=$?
    if ((rc != 0)); then
        say "command: hosts/netns-mpirun --hostfile $hostfile -n $NP $parity$(printf ' %q' "$@")"
        tail -n 20 "$work/$name.out" | sed 's/^/  stdout: /'
        tail -n 40 "$work/$name.err" | sed 's/^/  stderr: /'
        fail "parity $name: $(parity_status "$rc")"
    fi
}

netns_test_cluster_up 15 --quiet

# The number of cases the filter selects for NP ranks, to catch cases that
# are silently missing from the result file. --list starts no ranks.
rc=0
BOUNDED_OUT=$work/list.out BOUNDED_ERR=$work/list.err \
    bounded 15 "$parity" check --list --np "$NP" --no-large --filter "$CHECK_FILTER" || rc=$?
if ((rc != 0)); then
    sed 's/^/  stderr: /' "$work/list.err" | tail -n 20
    fail "parity check --list: $(parity_status "$rc")"
fi
ncases=$(grep -c . "$work/list.out" || true)
((ncases > 0)) || fail "parity check --list selects no cases for filter '$CHECK_FILTER'"

run_parity check 90 check --filter "$CHECK_FILTER" --no-large -q -T "$OP_TIMEOUT" --out "$work/check.h5"
grep -h '^# conformance' "$work/check.out" "$work/check.err" | sed 's/^/  /' || true
run_parity bench 60 bench collectives "${BENCH_ARGS[@]}" -q -T "$OP_TIMEOUT" --out "$work/bench.h5"
run_parity calibrate 90 bench calibrate -q -T "$OP_TIMEOUT" --out "$work/calibrate.h5"

cat >"$work/verify.py" <<'EOF'
import math
import sys

import h5py

check_path, bench_path, calibrate_path, nhosts, per_host, prefix, ncases = sys.argv[1:]
nhosts, per_host, ncases = int(nhosts), int(per_host), int(ncases)
np_ = nhosts * per_host
want_hosts = ["%s%d" % (prefix, i) for i in range(1, nhosts + 1)]
problems = []


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def check_hosts(f, what):
    if "hosts" not in f.attrs:
        problems.append("%s: no 'hosts' attribute" % what)
        return None
    hosts = [text(h) for h in f.attrs["hosts"]]
    print("  %s hosts: %s" % (what, " ".join(hosts)))
    if len(hosts) != np_:
        problems.append("%s: 'hosts' has %d entries, expected %d" % (what, len(hosts), np_))
    got = sorted(set(hosts))
    if got != want_hosts:
        problems.append("%s: distinct hosts %s, expected %s" % (what, got, want_hosts))
    for h in got:
        n = hosts.count(h)
        if n != per_host:
            problems.append("%s: host %s has %d rank(s), expected %d" % (what, h, n, per_host))
    ws = f.attrs.get("world_size")
    if ws is not None and int(ws) != np_:
        problems.append("%s: world_size %d, expected %d" % (what, int(ws), np_))
    return hosts


def table(f, name, what):
    if name not in f:
        problems.append("%s: no table %s" % (what, name))
        return None
    return f[name]


with h5py.File(check_path, "r") as f:
    check_hosts(f, "check")
    t = table(f, "check/collectives", "check")
    if t is not None:
        passed = t["passed"][()]
        cases = [text(c) for c in t["case"][()]]
        bad = [i for i, p in enumerate(passed) if int(p) != 1]
        print("  check: %d cases recorded, %d passed, %d expected" % (len(passed), len(passed) - len(bad), ncases))
        if len(passed) != ncases:
            problems.append("check: %d rows, but the filter selects %d cases" % (len(passed), ncases))
        if len(passed) == 0:
            problems.append("check: /check/collectives is empty")
        for i in bad[:10]:
            msg = text(t["message"][i]) if "message" in t else ""
            problems.append("check: case %s failed: %s" % (cases[i], msg))
        if len(bad) > 10:
            problems.append("check: ... %d failed cases in all" % len(bad))

with h5py.File(bench_path, "r") as f:
    hosts = check_hosts(f, "bench")
    t = table(f, "bench/collectives", "bench")
    if t is not None:
        bw = [float(x) for x in t["busbw_GBps"][()]]
        algos = [text(a) for a in t["algorithm"][()]]
        sizes = [int(s) for s in t["size_bytes"][()]]
        wrong = [int(w) for w in t["wrong"][()]] if "wrong" in t else [0] * len(bw)
        print("  bench: %d rows, busbw %s .. %s GB/s" % (len(bw), "%.3g" % min(bw) if bw else "-", "%.3g" % max(bw) if bw else "-"))
        if not bw:
            problems.append("bench: /bench/collectives is empty")
        for a, s, b, w in zip(algos, sizes, bw, wrong):
            if not (math.isfinite(b) and b > 0):
                problems.append("bench: %s %d B: busbw_GBps = %r, expected > 0" % (a, s, b))
            if w != 0:
                problems.append("bench: %s %d B: %d wrong element(s)" % (a, s, w))
    t = table(f, "bench/collectives_rank_times", "bench")
    if t is not None:
        rt_hosts = [text(h) for h in t["host"][()]]
        ranks = [int(r) for r in t["rank"][()]]
        seen = sorted(set(rt_hosts))
        print("  bench rank_times: %d rows, hosts %s" % (len(rt_hosts), " ".join(seen)))
        if seen != want_hosts:
            problems.append("bench: collectives_rank_times names hosts %s, expected %s" % (seen, want_hosts))
        if hosts is not None and len(hosts) == np_:
            mism = sorted({(r, h) for r, h in zip(ranks, rt_hosts) if not (0 <= r < np_) or hosts[r] != h})
            for r, h in mism[:10]:
                problems.append("bench: collectives_rank_times puts rank %d on %s, 'hosts' says %s"
                                % (r, h, hosts[r] if 0 <= r < np_ else "no such rank"))

# The calibration's levels: rank 0's ping-pong with rank 1 (its host) is the node link, with the
# first rank of the other host the network's, as the peers and hosts recorded show. Their
# latencies are printed, not compared: TCP between namespaces usually starts slower than shared
# memory within one, but under load the two measured within a microsecond either way (a test
# asserts no timing).
import json
with h5py.File(calibrate_path, "r") as f:
    hosts = check_hosts(f, "calibrate")
    t = table(f, "bench/calibrate_levels", "calibrate")
    if t is not None and hosts is not None:
        levels = {text(l): i for i, l in enumerate(t["level"][()])}
        if sorted(levels) != ["network", "node"]:
            problems.append("calibrate: levels %s, expected node and network" % sorted(levels))
        else:
            node, net = levels["node"], levels["network"]
            node_peer, net_peer = int(t["peer"][node]), int(t["peer"][net])
            if hosts[node_peer] != hosts[0] or hosts[net_peer] == hosts[0]:
                problems.append("calibrate: node peer %d on %s, network peer %d on %s, rank 0 on %s"
                                % (node_peer, hosts[node_peer], net_peer, hosts[net_peer], hosts[0]))
            c = json.load(open(calibrate_path[:-3] + ".cluster.json"))
            for level, i in (("node", node), ("network", net)):
                for key, col in (("latency_us", "alpha_us"), ("GBps", "bandwidth_GBps")):
                    want = float(t[col][i])
                    if abs(c[level + "_" + key] - want) > 1e-5 * want:
                        problems.append("calibrate: %s_%s %r, the table's %r" % (level, key, c[level + "_" + key], want))
            print("  calibrate: node %.2f us, %.3g GB/s (rank %d); network %.2f us, %.3g GB/s (rank %d)"
                  % (t["alpha_us"][node], t["bandwidth_GBps"][node], node_peer, t["alpha_us"][net],
                     t["bandwidth_GBps"][net], net_peer))
            for level, i in (("node", node), ("network", net)):
                if not (t["alpha_us"][i] > 0 and t["bandwidth_GBps"][i] > 0):
                    problems.append("calibrate: the %s link's latency %r us and bandwidth %r GB/s are not both above 0"
                                    % (level, t["alpha_us"][i], t["bandwidth_GBps"][i]))
    # The collectives at every level: the world, each host's ranks (node) and one rank a host
    # (network), each swept at the same sizes, and in the description by level.
    links = table(f, "bench/calibrate_links", "calibrate")
    if links is not None:
        ranks = {}
        for l, n in zip(links["level"][()], links["ranks"][()]):
            ranks.setdefault(text(l), set()).add(int(n))
        want = {"world": {np_}, "node": {per_host}, "network": {nhosts}}
        if ranks != want:
            problems.append("calibrate: collectives' levels and ranks %r, expected %r" % (ranks, want))
        c = json.load(open(calibrate_path[:-3] + ".cluster.json"))
        for key in ("all_reduce", "node:all_reduce", "network:all_gather", "network:all_to_all"):
            if key not in c.get("collective_rates", {}):
                problems.append("calibrate: the description's collective_rates lacks %s" % key)
        fits = table(f, "bench/calibrate_collectives", "calibrate")
        if fits is not None and len(fits["level"][()]) != 12:
            problems.append("calibrate: %d collective fits, expected 4 collectives at 3 levels" % len(fits["level"][()]))

for p in problems:
    print("  problem: " + p)
sys.exit(1 if problems else 0)
EOF

say "verifying result files with $PYTHON + h5py"
for f in check bench calibrate; do
    [[ -s $work/$f.h5 ]] || fail "parity $f exited 0 but wrote no $work/$f.h5"
done
rc=0
bounded 30 "$PYTHON" "$work/verify.py" "$work/check.h5" "$work/bench.h5" "$work/calibrate.h5" \
    "$HOSTS" "$RANKS_PER_HOST" "$PARITY_NS_PREFIX" "$ncases" || rc=$?
((rc == 0)) || fail "result files do not show a correct $HOSTS-host run (see problems above)"

say "PASS: parity check ($ncases cases) and bench on $NP ranks, $HOSTS hosts ($(seq -s ' ' -f "${PARITY_NS_PREFIX}%g" 1 "$HOSTS")), ${SECONDS}s"
