#!/usr/bin/env bash
# Self-test of the namespace cluster: 2 hosts x 2 ranks run a tiny MPI
# program that reports its host and allreduces the rank numbers.
#
# Exit status: 0 pass, 1 fail, 77 skip (not root, no namespace support,
# no MPI compiler, or a cluster is already up and must not be destroyed).
set -euo pipefail

HERE=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source-path=SCRIPTDIR source=netns-test-lib.sh
. "$HERE/netns-test-lib.sh"
NETNS_TEST_TAG='netns-test'

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

netns_test_need_base
command -v mpicc >/dev/null 2>&1 || skip "mpicc missing (apt-get install -y libopenmpi-dev openmpi-bin)"
command -v mpirun >/dev/null 2>&1 || skip "mpirun missing (apt-get install -y openmpi-bin)"
netns_test_need_namespaces

# Steps end by 45 s, leaving room for the teardown (at most 8 s), so the
# whole test stays under a minute.
netns_test_begin parity-netns-test 45 8
netns_test_cluster_up 10

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
