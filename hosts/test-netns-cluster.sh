#!/usr/bin/env bash
# Self-test of the namespace cluster: 2 hosts x 2 ranks run a tiny MPI
# program that reports its host and allreduces the rank numbers.
#
# Exit status: 0 pass, 1 fail, 77 skip (not root, no namespace support,
# no MPI compiler, or a cluster is already up and must not be destroyed).
set -euo pipefail

HERE=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source-path=SCRIPTDIR source=netns-common.sh
. "$HERE/netns-common.sh"

HOSTS=2
RANKS_PER_HOST=2
NP=$((HOSTS * RANKS_PER_HOST))

usage() {
    cat <<EOF
usage: ${0##*/} [-h|--help]

Brings up $HOSTS namespace hosts with hosts/netns-cluster.sh, compiles a small
MPI program with mpicc into a temporary directory, runs it with
hosts/netns-mpirun as $HOSTS hosts x $RANKS_PER_HOST ranks, checks the
MPI_Allreduce sum and that $HOSTS distinct host names appear, and tears
everything down again (also on failure or interrupt).

Exit status: 0 pass, 1 fail, 77 skip (not root, namespaces unavailable,
mpicc/mpirun missing, or a namespace cluster is already up: it is left alone
unless PARITY_NETNS_TEST_FORCE=1, which reuses and then removes it).
Every step runs under 'timeout'; the whole test takes well under a minute.
EOF
}

case ${1:-} in
    -h | --help) usage; exit 0 ;;
    "") ;;
    *) usage >&2; exit 2 ;;
esac

say() { printf '[netns-test] %s\n' "$*"; }
skip() { say "SKIP: $*"; exit 77; }
fail() { say "FAIL: $*"; exit 1; }

[[ ${EUID:-$(id -u)} -eq 0 ]] || skip "must run as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
command -v ip >/dev/null 2>&1 || skip "'ip' missing (apt-get install -y iproute2)"
command -v unshare >/dev/null 2>&1 || skip "'unshare' missing (util-linux)"
command -v timeout >/dev/null 2>&1 || skip "'timeout' missing (coreutils)"
command -v mpicc >/dev/null 2>&1 || skip "mpicc missing (apt-get install -y libopenmpi-dev openmpi-bin)"
command -v mpirun >/dev/null 2>&1 || skip "mpirun missing (apt-get install -y openmpi-bin)"

# Probe inside a throwaway network namespace so that a container without the
# needed privileges is detected (and skipped) without touching the root
# namespace at all.
if ! probe_err=$(timeout -k 2 5 unshare --net --uts -- sh -c \
    'ip link add parity-probe0 type bridge && ip link add parity-probe1 type veth peer name parity-probe2 && hostname parity-probe' 2>&1); then
    skip "cannot create network namespaces/bridges/veths here: ${probe_err:-unknown error}"
fi

# Never tear down a cluster somebody else is using.
if ip link show dev "$PARITY_BRIDGE" >/dev/null 2>&1 ||
    ip netns list 2>/dev/null | grep -Eq "^${PARITY_NS_PREFIX}[0-9]+( |\$)"; then
    [[ ${PARITY_NETNS_TEST_FORCE:-0} == 1 ]] ||
        skip "a namespace cluster ($PARITY_BRIDGE / ${PARITY_NS_PREFIX}*) is already up; run '$HERE/netns-cluster.sh down' first or set PARITY_NETNS_TEST_FORCE=1"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/parity-netns-test.XXXXXX")
hostfile=$work/hostfile
cluster_up=0
step_pid=
step_limit=0

# Run one step under a time limit. It runs in the background and is waited
# for, because bash postpones traps until a foreground command ends: an
# interrupted test must stop mpirun at once, not after its time limit.
# timeout puts the step in its own process group and signals all of it.
# No step may run past STEPS_DEADLINE (seconds since start), which leaves
# room for the teardown so the whole test stays under a minute.
# Output files (BOUNDED_OUT and BOUNDED_ERR, set together) are opened here
# rather than on the call, so a trap firing meanwhile still prints to the
# terminal.
STEPS_DEADLINE=45
bounded() {
    local secs=$1 rc=0 left
    shift
    left=$((STEPS_DEADLINE - SECONDS))
    ((left >= 1)) || { say "time budget used up"; return 124; }
    ((secs <= left)) || secs=$left
    step_limit=$secs
    if [[ -n ${BOUNDED_OUT:-} ]]; then
        timeout -k 2 "$secs" "$@" >"$BOUNDED_OUT" 2>"$BOUNDED_ERR" &
    else
        timeout -k 2 "$secs" "$@" &
    fi
    step_pid=$!
    wait "$step_pid" || rc=$?
    step_pid=
    return "$rc"
}

cleanup() {
    local rc=$?
    # A second signal must not cut the teardown short.
    trap "" INT TERM
    trap - EXIT
    if [[ -n $step_pid ]]; then
        # TERM to timeout is passed on to mpirun, which stops its orteds;
        # any that outlive it are killed by pid in 'down'.
        kill -TERM "$step_pid" 2>/dev/null || true
        wait "$step_pid" 2>/dev/null || true
    fi
    if ((cluster_up)); then
        timeout -k 2 8 "$HERE/netns-cluster.sh" --hostfile "$hostfile" down >/dev/null 2>&1 ||
            say "warning: teardown failed; run '$HERE/netns-cluster.sh down'"
    fi
    rm -rf -- "$work"
    exit "$rc"
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap tears the cluster down.
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

say "bringing up $HOSTS namespace hosts"
cluster_up=1
bounded 10 "$HERE/netns-cluster.sh" --hostfile "$hostfile" --slots "$RANKS_PER_HOST" up "$HOSTS" ||
    fail "netns-cluster.sh up $HOSTS failed"

cat >"$work/allreduce.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size;
    char host[256] = "";
    long long mine, sum = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host - 1);
    mine = rank;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    printf("rank=%d size=%d host=%s sum=%lld\n", rank, size, host, sum);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
EOF
say "compiling test program"
bounded 15 mpicc -O1 -o "$work/allreduce" "$work/allreduce.c" || fail "mpicc failed"

say "running $NP ranks ($HOSTS hosts x $RANKS_PER_HOST) via hosts/netns-mpirun"
rc=0
BOUNDED_OUT=$work/out BOUNDED_ERR=$work/err \
    bounded 25 "$HERE/netns-mpirun" --hostfile "$hostfile" -n "$NP" "$work/allreduce" || rc=$?
sort -t= -k2,2n "$work/out" | sed 's/^/  /'
if ((rc != 0)); then
    sed 's/^/  stderr: /' "$work/err" | tail -n 40
    ((rc == 124 || rc == 137)) && fail "mpirun timed out after $step_limit s"
    fail "mpirun exited with status $rc"
fi

lines=$(grep -c '^rank=' "$work/out" || true)
((lines == NP)) || fail "expected $NP rank lines, got $lines"
expect=$((NP * (NP - 1) / 2))
bad=$(grep '^rank=' "$work/out" | grep -vc " size=$NP .* sum=$expect\$" || true)
((bad == 0)) || fail "$bad rank(s) report a wrong size or Allreduce sum (expected size=$NP sum=$expect)"
ranks=$(sed -n 's/^rank=\([0-9]*\) .*/\1/p' "$work/out" | sort -n | tr '\n' ' ')
[[ $ranks == "$(seq -s ' ' 0 $((NP - 1))) " ]] || fail "ranks seen: $ranks, expected 0..$((NP - 1))"
hosts=$(sed -n 's/.* host=\([^ ]*\) .*/\1/p' "$work/out" | sort -u)
nhosts=$(grep -c . <<<"$hosts")
((nhosts == HOSTS)) || fail "expected $HOSTS distinct host names, got $nhosts: $(tr '\n' ' ' <<<"$hosts")"
for ((i = 1; i <= HOSTS; i++)); do
    n=$(grep -c " host=$(parity_ns_name "$i") " "$work/out" || true)
    ((n == RANKS_PER_HOST)) || fail "host $(parity_ns_name "$i") ran $n rank(s), expected $RANKS_PER_HOST"
done

say "PASS: $NP ranks on $HOSTS hosts ($(tr '\n' ' ' <<<"$hosts" | sed 's/ $//')), allreduce sum=$expect"
