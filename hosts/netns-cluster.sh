#!/usr/bin/env bash
# Local multi-host test cluster made of Linux network namespaces.
#
# Each "host" is a network namespace parity-hI with one veth link to the
# bridge parity-br0 in the root namespace, so MPI traffic between hosts
# really goes through a TCP/IP stack and a (virtual) switch instead of
# shared memory or loopback. See hosts/README.md.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source-path=SCRIPTDIR source=netns-common.sh
. "$HERE/netns-common.sh"

usage() {
    cat <<EOF
usage: ${0##*/} [options] up N       create hosts ${PARITY_NS_PREFIX}1..${PARITY_NS_PREFIX}N (exactly N; extra ones are removed)
       ${0##*/} [options] down       remove everything 'up' created (safe to repeat)
       ${0##*/} [options] status     show bridge, hosts, addresses and hostfile
       ${0##*/} exec HOST [CMD...]   run CMD (default: a shell) on HOST

HOST is ${PARITY_NS_PREFIX}I, hI, I or ${PARITY_NET_PREFIX}.(${PARITY_HOST_OFFSET}+I).

options:
  --hostfile PATH  hostfile written by 'up' and removed by 'down'
                   (default: \$PARITY_NETNS_HOSTFILE or $PARITY_DEFAULT_HOSTFILE)
  --slots K        slots per host written to the hostfile (default: \$PARITY_NETNS_SLOTS or 2)
  -h, --help       this text

Layout: bridge $PARITY_BRIDGE = $PARITY_BRIDGE_ADDR/24 in the root namespace,
host I = namespace ${PARITY_NS_PREFIX}I with $PARITY_NS_IFNAME = ${PARITY_NET_PREFIX}.(${PARITY_HOST_OFFSET}+I)/24 and lo up.
Hosts have no default route: they reach each other and $PARITY_BRIDGE_ADDR only.
'exec' (and hosts/netns-rsh) give each command its own UTS namespace with
hostname ${PARITY_NS_PREFIX}I; set PARITY_NETNS_UTS=0 to keep the machine's hostname.
Needs root and iproute2.
EOF
}

hostfile=${PARITY_NETNS_HOSTFILE:-$PARITY_DEFAULT_HOSTFILE}
slots=${PARITY_NETNS_SLOTS:-2}
args=()
# Options are accepted anywhere before the command of 'exec'; everything
# after 'exec HOST' belongs to the command and is passed on untouched.
while (($#)); do
    if ((${#args[@]} >= 2)) && [[ ${args[0]} == exec ]]; then
        args+=("$@")
        break
    fi
    case $1 in
        -h | --help) usage; exit 0 ;;
        --hostfile) (($# >= 2)) || parity_die "--hostfile needs a path"; hostfile=$2; shift 2 ;;
        --hostfile=*) hostfile=${1#*=}; shift ;;
        --slots) (($# >= 2)) || parity_die "--slots needs a number"; slots=$2; shift 2 ;;
        --slots=*) slots=${1#*=}; shift ;;
        --) shift; args+=("$@"); break ;;
        -*) parity_die "unknown option '$1' (see --help)" ;;
        *) args+=("$1"); shift ;;
    esac
done
((${#args[@]})) || { usage >&2; exit 2; }
[[ $slots =~ ^[1-9][0-9]*$ ]] || parity_die "--slots must be a positive integer, got '$slots'"

# Namespaces of ours that currently exist, by index, sorted.
our_indices() {
    ip netns list 2>/dev/null | awk '{print $1}' |
        sed -n "s/^${PARITY_NS_PREFIX}\([0-9][0-9]*\)\$/\1/p" | sort -n
}

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx -- "$1"; }
link_exists() { ip link show dev "$1" >/dev/null 2>&1; }

# Refuse to run if the private subnet is already used by something that is
# not ours: adding our bridge would shadow or break that network.
check_subnet_free() {
    local line dev
    while read -r line; do
        dev=$(awk '{print $2}' <<<"$line")
        dev=${dev%%@*}
        [[ $dev == "$PARITY_BRIDGE" ]] && continue
        parity_die "subnet $PARITY_NET_CIDR is already in use on interface '$dev'; refusing to touch it"
    done < <(ip -o -4 addr show | awk -v p="$PARITY_NET_PREFIX." 'index($4, p) == 1')
}

# Kill (by pid) whatever still runs inside one of our namespaces, e.g. an
# orted left behind by an interrupted mpirun; otherwise the namespace and
# its veth would outlive 'ip netns del'.
kill_ns_pids() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') || true
    [[ -n ${pids// /} ]] || return 0
    echo "stopping processes in $ns: $pids" >&2
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ') || true
        [[ -n ${pids// /} ]] || return 0
        sleep 0.2
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
}

remove_host() {
    local i=$1 ns veth
    ns=$(parity_ns_name "$i")
    veth=$PARITY_VETH_PREFIX$i
    if ns_exists "$ns"; then
        kill_ns_pids "$ns"
        ip netns del "$ns"
    fi
    # Deleting one end of a veth pair deletes both; normally the pair is
    # already gone with the namespace.
    if link_exists "$veth"; then ip link del "$veth" 2>/dev/null || true; fi
}

write_hostfile() {
    local n=$1 i tmp dir
    dir=$(dirname -- "$hostfile")
    [[ -d $dir ]] || mkdir -p -- "$dir"
    tmp=$(mktemp "$hostfile.XXXXXX")
    {
        echo "$PARITY_HOSTFILE_MARKER"
        echo "# $n namespace hosts on bridge $PARITY_BRIDGE; use with hosts/netns-mpirun --hostfile $hostfile"
        for ((i = 1; i <= n; i++)); do
            echo "$(parity_host_addr "$i") slots=$slots"
        done
    } >"$tmp"
    chmod 0644 "$tmp"
    mv -f -- "$tmp" "$hostfile"
}

cmd_up() {
    (($# == 1)) || parity_die "usage: up N"
    local n=$1 i ns veth addr
    [[ $n =~ ^[1-9][0-9]*$ ]] || parity_die "N must be a positive integer, got '$n'"
    ((n <= PARITY_MAX_HOSTS)) || parity_die "N must be at most $PARITY_MAX_HOSTS"
    parity_need_root
    parity_need_ip
    check_subnet_free

    # Probe once so an unprivileged container gives one clear message
    # instead of a half-built cluster.
    if ! link_exists "$PARITY_BRIDGE"; then
        ip link add "$PARITY_BRIDGE" type bridge ||
            parity_die "cannot create bridge $PARITY_BRIDGE (no CAP_NET_ADMIN, or bridge support missing)"
    fi
    # With br_netfilter loaded, bridged frames go through the host's
    # iptables FORWARD chain (Docker sets it to DROP). Opting this one
    # bridge out keeps host-to-host traffic working without changing any
    # firewall rule. Older kernels lack the knob; that is not fatal.
    ip link set "$PARITY_BRIDGE" type bridge nf_call_iptables 0 nf_call_ip6tables 0 \
        nf_call_arptables 0 2>/dev/null || true
    ip addr replace "$PARITY_BRIDGE_ADDR/24" dev "$PARITY_BRIDGE"
    ip link set "$PARITY_BRIDGE" up

    for ((i = 1; i <= n; i++)); do
        ns=$(parity_ns_name "$i")
        veth=$PARITY_VETH_PREFIX$i
        addr=$(parity_host_addr "$i")
        if ! ns_exists "$ns"; then
            ip netns add "$ns" || parity_die "cannot create network namespace $ns (unprivileged container?)"
        fi
        if ! link_exists "$veth"; then
            # Create the peer directly inside the namespace: no window in
            # which a second eth0 exists in the root namespace.
            ip link add "$veth" type veth peer name "$PARITY_NS_IFNAME" netns "$ns" ||
                parity_die "cannot create veth pair for $ns"
        fi
        ip link set "$veth" master "$PARITY_BRIDGE"
        ip link set "$veth" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr replace "$addr/24" dev "$PARITY_NS_IFNAME"
        ip -n "$ns" link set "$PARITY_NS_IFNAME" up
    done

    # 'up N' converges to exactly N hosts so the hostfile and reality agree.
    for i in $(our_indices); do
        ((i > n)) && remove_host "$i"
    done

    write_hostfile "$n"
    echo "cluster up: $n host(s) on $PARITY_BRIDGE ($PARITY_NET_CIDR), $slots slot(s) each"
    echo "hostfile: $hostfile"
}

cmd_down() {
    (($# == 0)) || parity_die "usage: down"
    parity_need_root
    parity_need_ip
    local i link
    for i in $(our_indices); do remove_host "$i"; done
    # Leftover root-side veth ends (namespace removed by hand, processes
    # that kept it alive, ...).
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
        grep -E "^${PARITY_VETH_PREFIX}[0-9]+\$" || true); do
        ip link del "$link" 2>/dev/null || true
    done
    if link_exists "$PARITY_BRIDGE"; then ip link del "$PARITY_BRIDGE"; fi
    # Open MPI session directories are named after the host name, and only
    # these hosts are called parity-hI. A killed orted leaves its directory
    # behind; with the hosts gone, nothing uses them any more.
    local d
    for d in "${TMPDIR:-/tmp}/ompi.$PARITY_NS_PREFIX"[0-9]*; do
        [[ -d $d && ! -L $d ]] || continue
        if [[ ${d##*/} =~ ^ompi\.${PARITY_NS_PREFIX}[0-9]+\.[0-9]+$ ]]; then rm -rf -- "$d"; fi
    done
    if [[ -f $hostfile ]] && [[ $(head -n1 -- "$hostfile") == "$PARITY_HOSTFILE_MARKER" ]]; then
        rm -f -- "$hostfile"
    fi
    echo "cluster down"
}

cmd_status() {
    (($# == 0)) || parity_die "usage: status"
    parity_need_ip
    local i ns addr state nprocs up=0
    if link_exists "$PARITY_BRIDGE"; then
        up=1
        state=$(ip -br link show dev "$PARITY_BRIDGE" | awk '{print $2}')
        echo "bridge $PARITY_BRIDGE: $state $(ip -o -4 addr show dev "$PARITY_BRIDGE" | awk '{print $4}' | tr '\n' ' ')"
    else
        echo "bridge $PARITY_BRIDGE: absent"
    fi
    local any=0
    for i in $(our_indices); do
        any=1
        ns=$(parity_ns_name "$i")
        addr=$(ip -n "$ns" -o -4 addr show dev "$PARITY_NS_IFNAME" 2>/dev/null | awk '{print $4}' | tr '\n' ' ')
        state=$(ip -n "$ns" -br link show dev "$PARITY_NS_IFNAME" 2>/dev/null | awk '{print $2}')
        nprocs=$(ip netns pids "$ns" 2>/dev/null | wc -l)
        printf 'host %-12s %-8s %-16s processes=%s\n' "$ns" "${state:-no-link}" "${addr:-no-address}" "$nprocs"
    done
    ((any)) || echo "hosts: none"
    if [[ -f $hostfile ]]; then
        echo "hostfile $hostfile:"
        sed 's/^/  /' -- "$hostfile"
    else
        echo "hostfile $hostfile: absent"
    fi
    ((up && any)) || exit 3
}

cmd_exec() {
    (($# >= 1)) || parity_die "usage: exec HOST [CMD...]"
    parity_need_root
    parity_need_ip
    local i ns
    i=$(parity_host_index "$1") || parity_die "'$1' is not a cluster host (expected ${PARITY_NS_PREFIX}I, hI, I or ${PARITY_NET_PREFIX}.X)"
    ns=$(parity_ns_name "$i")
    ns_exists "$ns" || parity_die "host $ns does not exist (run: ${0##*/} up N)"
    shift
    (($#)) || set -- "${SHELL:-/bin/sh}"
    parity_ns_run "$ns" "$@"
}

sub=${args[0]}
case $sub in
    up) cmd_up "${args[@]:1}" ;;
    down) cmd_down "${args[@]:1}" ;;
    status) cmd_status "${args[@]:1}" ;;
    exec) cmd_exec "${args[@]:1}" ;;
    help) usage ;;
    *) parity_die "unknown subcommand '$sub' (see --help)" ;;
esac
