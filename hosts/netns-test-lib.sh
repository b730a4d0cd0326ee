# Steps shared by the namespace-cluster tests (test-netns-cluster.sh,
# test-parity-netns.sh and test-netns-faults.sh): prerequisite checks, the work
# directory, time-limited steps, bringing the cluster up and tearing it down on
# exit or interrupt (after the test's own netns_test_extra_cleanup, if defined).
# Sourced (not executed) by a script that runs under `set -euo pipefail`,
# has set HERE to this directory, and sets NETNS_TEST_TAG (the "[TAG]" that
# starts every message) before it calls anything here.
# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this

# shellcheck source-path=SCRIPTDIR source=netns-common.sh
. "$HERE/netns-common.sh"

# Both tests run on this cluster: HOSTS namespace hosts, RANKS_PER_HOST ranks each.
HOSTS=2
RANKS_PER_HOST=2
NP=$((HOSTS * RANKS_PER_HOST))

say() { printf '[%s] %s\n' "$NETNS_TEST_TAG" "$*"; }
skip() { say "SKIP: $*"; exit 77; }
fail() { say "FAIL: $*"; exit 1; }

# Skip (exit 77) unless running as root with ip, unshare and timeout.
netns_test_need_base() {
    [[ ${EUID:-$(id -u)} -eq 0 ]] || skip "must run as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    command -v ip >/dev/null 2>&1 || skip "'ip' missing (apt-get install -y iproute2)"
    command -v unshare >/dev/null 2>&1 || skip "'unshare' missing (util-linux)"
    command -v timeout >/dev/null 2>&1 || skip "'timeout' missing (coreutils)"
}

# Skip (exit 77) where namespaces, bridges and veths cannot be made, or where
# a namespace cluster is already up (unless PARITY_NETNS_TEST_FORCE=1).
netns_test_need_namespaces() {
    local probe_err
    # Probe inside a throwaway network namespace so that a container without
    # the needed privileges is detected (and skipped) without touching the
    # root namespace at all.
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
}

# netns_test_begin NAME STEPS_DEADLINE TEARDOWN_SECS
# Creates the work directory $work (${TMPDIR:-/tmp}/NAME.XXXXXX) with the
# cluster's $hostfile in it, and sets the traps that, on any exit or on
# INT/TERM, stop the running step, tear the cluster down (within
# TEARDOWN_SECS) and remove $work. No step may run past STEPS_DEADLINE
# (seconds since start), which leaves room for the teardown.
netns_test_begin() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    hostfile=$work/hostfile
    cluster_up=0
    step_pid=
    step_limit=0
    STEPS_DEADLINE=$2
    NETNS_TEST_TEARDOWN_SECS=$3
    trap netns_test_cleanup EXIT
    # Turn signals into a normal exit so the EXIT trap tears the cluster down.
    trap 'say "interrupted"; exit 130' INT
    trap 'say "terminated"; exit 143' TERM
}

# bounded SECS COMMAND...
# Run one step under a time limit. It runs in the background and is waited
# for, because bash postpones traps until a foreground command ends: an
# interrupted test must stop mpirun at once, not after its time limit.
# timeout puts the step in its own process group and signals all of it.
# The limit is cut to what is left before STEPS_DEADLINE and kept in
# $step_limit.
# Output files (BOUNDED_OUT and BOUNDED_ERR, set together) are opened here
# rather than on the call, so a trap firing meanwhile still prints to the
# terminal.
bounded() {
    bounded_start "$@" || return
    bounded_wait
}

# bounded_start SECS COMMAND...: the first half of 'bounded': starts the step and returns at
# once (124, nothing started, when the time budget is used up), so the caller can act while
# it runs. bounded_wait waits for it and returns its status; bounded_running tells whether it
# still runs. The EXIT trap stops a step that was started and not waited for.
bounded_start() {
    local secs=$1 left
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
}

bounded_wait() {
    local rc=0
    wait "$step_pid" || rc=$?
    step_pid=
    return "$rc"
}

bounded_running() {
    [[ -n $step_pid && -r /proc/$step_pid/stat ]] || return 1
    local stat
    stat=$(cat "/proc/$step_pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }  # the state follows the command name in parentheses
    [[ ${stat:0:1} != Z ]]
}

netns_test_cleanup() {
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
    # A test's own clean-up (links, qdiscs, stray launchers), while the cluster still exists.
    if declare -F netns_test_extra_cleanup >/dev/null; then netns_test_extra_cleanup || true; fi
    if ((cluster_up)); then
        timeout -k 2 "$NETNS_TEST_TEARDOWN_SECS" "$HERE/netns-cluster.sh" --hostfile "$hostfile" down >/dev/null 2>&1 ||
            say "warning: teardown failed; run '$HERE/netns-cluster.sh down'"
    fi
    rm -rf -- "$work"
    exit "$rc"
}

# netns_test_cluster_up SECS [--quiet]
# Brings up the HOSTS hosts with RANKS_PER_HOST slots each into $hostfile,
# within SECS; fails the test if that does not work. --quiet sends the
# step's standard output (and bounded's own messages) to /dev/null.
netns_test_cluster_up() {
    local secs=$1
    say "bringing up $HOSTS namespace hosts"
    cluster_up=1
    if [[ ${2:-} == --quiet ]]; then
        bounded "$secs" "$HERE/netns-cluster.sh" --hostfile "$hostfile" --slots "$RANKS_PER_HOST" up "$HOSTS" >/dev/null ||
            fail "netns-cluster.sh up $HOSTS failed"
    else
        bounded "$secs" "$HERE/netns-cluster.sh" --hostfile "$hostfile" --slots "$RANKS_PER_HOST" up "$HOSTS" ||
            fail "netns-cluster.sh up $HOSTS failed"
    fi
}
