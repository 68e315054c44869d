# shellcheck shell=bash disable=SC2034  # sourced: the callers use what it sets
# Two hosts on one machine, for the mpi engine under mpirun: sourced by
# tests/mpi/multihost.sh (make test-multihost) and bench/lib/two-hosts-ctl
# (the same hosts as commands, for bench/lab's two-host specs).
#
# Each host is a network namespace of its own, joined to the other by a veth
# pair, 10.231.0.1 and 10.231.0.2/24 (addresses that exist only inside these
# namespaces), each end shaped with tc tbf where a rate is given. Every
# process of a host also gets a UTS namespace with its own host name, so Open
# MPI sees two nodes: between them its ranks talk TCP over the veth, never
# shared memory. mpirun runs on host 0 and starts host 1's daemon through an
# rsh agent that enters host 1's namespaces (there is no sshd). Needs root,
# ip and tc (iproute2), unshare and taskset (util-linux) and Open MPI's
# mpirun.
#
# Each host has its own share of the machine's cores, as a real host has
# its own: host 0 the first half of this process's CPUs, host 1 the rest
# (taskset; on 2 cores, one each), and says so in its slots, so that Open
# MPI yields where a host runs more ranks than it has cores, as on one host
# with --oversubscribe. The ranks are left unbound (--bind-to none: Open
# MPI's binding would ignore the host's share) and take the host's cores
# over its ranks for their threads, as herd does anywhere.
#
#   netns_usable          prints why two hosts cannot be made here, or nothing
#   netns_up RATE         makes them (RATE: tc tbf rate such as 1gbit, empty:
#                         not shaped); where it fails, NETNS_ERR says why
#   NETNS_MPIRUN          (an array, set by netns_up) mpirun with its ranks
#                         on both hosts, a host's cores at a time, the rest
#                         oversubscribed: "${NETNS_MPIRUN[@]}" -np 4 ...
#   NETNS_CPUS            (set by netns_up) "CPUS0 CPUS1": each host's cores,
#                         as taskset lists them
#   netns_link_bytes      bytes the two hosts have sent each other so far
#   netns_run S OUT CMD   runs CMD for at most S seconds, stdout into OUT and
#                         stderr into OUT.err; its exit status (124: timed
#                         out). In the background, so that a signal's trap
#                         runs at once rather than after CMD
#   netns_down            removes what netns_up made (namespaces, their
#                         processes and links, the files) and stops the
#                         command netns_run runs; safe to repeat
#
# The caller runs netns_down on every exit path (a trap on EXIT).

NETNS_NET=10.231.0
NETNS_MADE=()
NETNS_DIR=
NETNS_SHAPED=
NETNS_MPIRUN=()
NETNS_CHILD=
NETNS_ERR=
NETNS_CPUS=


# runs a command of netns_up; where it fails, NETNS_ERR is it and its message
netns__do() {
    local e
    e=$("$@" 2>&1) && return 0
    NETNS_ERR="'$*' failed: $e"
    return 1
}

netns_usable() {
    [ "$(id -u)" -eq 0 ] || { echo "not root (network namespaces need root)"; return; }
    local c
    for c in ip tc unshare taskset mpirun; do
        command -v "$c" > /dev/null || { echo "no '$c' command (apt-get install iproute2 util-linux openmpi-bin)"; return; }
    done
}

# this process's CPUs (taskset's list syntax) split in two halves, "A B"
netns__split_cpus() {
    local list cpus=() part i a b
    list=$(taskset -cp $$ 2> /dev/null | sed 's/.*: *//')
    IFS=, read -r -a parts <<< "$list"
    for part in "${parts[@]}"; do
        a=${part%-*} b=${part#*-}
        for ((i = a; i <= b; i++)); do cpus+=("$i"); done
    done
    [ ${#cpus[@]} -ge 2 ] || { echo "${cpus[0]:-0} ${cpus[0]:-0}"; return; }
    local half=$((${#cpus[@]} / 2))
    echo "$(IFS=,; echo "${cpus[*]:0:half}") $(IFS=,; echo "${cpus[*]:half}")"
}

# whether $1 is a tc rate herd's test bed takes (100mbit, 1gbit, 2500kbit)
netns__rate_ok() {
    awk -v r="$1" 'BEGIN {
        n = r + 0; u = tolower(substr(r, length(n "") + 1))
        exit !(n > 0 && (u == "kbit" || u == "mbit" || u == "gbit")) }'
}

netns_up() {
    local rate=$1 tag="herd-$$-$RANDOM" i cpus0 cpus1 slots0 slots1
    NETNS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/herd-multihost.XXXXXX") ||
        { NETNS_ERR="cannot make a directory in ${TMPDIR:-/tmp}"; return 1; }
    for i in 0 1; do
        netns__do ip netns add "$tag-$i" || return 1
        NETNS_MADE+=("$tag-$i")
    done
    netns__do ip link add hv0 netns "$tag-0" type veth peer name hv1 netns "$tag-1" || return 1
    for i in 0 1; do
        netns__do ip -n "$tag-$i" link set lo up &&
            netns__do ip -n "$tag-$i" addr add "$NETNS_NET.$((i + 1))/24" dev "hv$i" &&
            netns__do ip -n "$tag-$i" link set "hv$i" up || return 1
    done
    # tbf at 1gbit, measured with herd's allreduce of 64 MiB between the
    # hosts: burst 2mb sustains 117 MB/s (the rate less TCP/IP headers),
    # 256kb only 80 (the kernel's timer releases GSO segments of up to 64 KiB
    # too late). But a bucket of 2 MB is no link of that rate for herd's
    # messages: after any idle moment it lets 2 MB through at the veth's
    # speed (a 247 KB model crossed "1gbit" in 0.33 ms, at 6 Gbit/s, and
    # "100mbit" in 0.27 ms). A bucket of two 16 KiB segments (the veth's GSO
    # segments capped to match) holds every transfer to the rate, as a
    # switched link of that rate takes it: herd's ring allreduce of 247 KB
    # between the hosts takes 1.89 ms at 1gbit and 20.6 ms at 100mbit, of
    # 16 MiB 211 ms and 2.10 s (79 and 8.0 MB/s of bus bandwidth).
    # Not a peak rate over one segment instead (tbf's peakrate, mtu 16384):
    # as exact (1.98 and 20.6 ms; 82 and 8.3 MB/s), but the kernel then
    # paces every segment on a timer of its own, and the hosts' cores paid
    # for it in softirq time a real network interface never charges: dpsgd
    # on 2 ranks, which hides its 247 KB exchange behind compute, took 6.0
    # ms a step against 4.0 unshaped, and 4.7 with this bucket (softirq 1.42
    # s of the epoch's CPU time against 0.33 and 0.03). Measured 2026-11-27
    # on the 2-vCPU AMD EPYC VM. GSO stays on: one packet per MTU costs more
    # CPU than 30 MB/s here.
    NETNS_SHAPED=
    if [ -n "$rate" ]; then
        netns__rate_ok "$rate" || { NETNS_ERR="tc rate '$rate': expected a number and kbit, mbit or gbit"; return 1; }
        for i in 0 1; do
            netns__do ip -n "$tag-$i" link set "hv$i" gso_max_size 16384 &&
                netns__do tc -n "$tag-$i" qdisc add dev "hv$i" root tbf rate "$rate" burst 32kb latency 50ms ||
                return 1
        done
        NETNS_SHAPED=$rate
    fi
    NETNS_CPUS=$(netns__split_cpus)
    read -r cpus0 cpus1 <<< "$NETNS_CPUS"
    slots0=$(echo "$cpus0" | tr , '\n' | wc -l) slots1=$(echo "$cpus1" | tr , '\n' | wc -l)
    printf '%s slots=%s\n' "$NETNS_NET.1" "$slots0" "$NETNS_NET.2" "$slots1" > "$NETNS_DIR/hosts"
    # mpirun's rsh agent: "agent HOST COMMAND..." runs COMMAND, a shell
    # command line, on HOST (it is only ever asked for host 1's daemon)
    cat > "$NETNS_DIR/agent" << EOF
#!/bin/sh
case \$1 in
$NETNS_NET.1) ns=$tag-0 name=host0-$$ cpus=$cpus0 ;;
$NETNS_NET.2) ns=$tag-1 name=host1-$$ cpus=$cpus1 ;;
*) echo "herd multihost agent: no host \$1" >&2; exit 1 ;;
esac
shift
exec taskset -c "\$cpus" ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$name" "\$*"
EOF
    chmod +x "$NETNS_DIR/agent"
    # the two hosts answer each other (bounded: no wait without a timeout)
    timeout 10 ip netns exec "$tag-0" bash -c "exec 3<>/dev/tcp/$NETNS_NET.2/1" 2> /dev/null
    [ $? -ne 124 ] || { NETNS_ERR="host 1 ($NETNS_NET.2) does not answer host 0"; return 1; }
    # TMPDIR: Open MPI's session directories, removed with NETNS_DIR
    NETNS_MPIRUN=(taskset -c "$cpus0" ip netns exec "$tag-0" unshare --uts sh -c 'hostname "$0" && exec "$@"' "host0-$$"
        env TMPDIR="$NETNS_DIR" mpirun --allow-run-as-root --oversubscribe --bind-to none --hostfile "$NETNS_DIR/hosts"
        --mca plm_rsh_agent "$NETNS_DIR/agent" --mca oob_tcp_if_include "$NETNS_NET.0/24"
        --mca btl_tcp_if_include "$NETNS_NET.0/24")
}

netns_link_bytes() {
    local i n sum=0
    for i in 0 1; do
        n=$(ip netns exec "${NETNS_MADE[$i]}" cat "/sys/class/net/hv$i/statistics/tx_bytes" 2> /dev/null) || n=0
        sum=$((sum + n))
    done
    echo $sum
}

netns_run() {
    local s=$1 out=$2 rc
    shift 2
    timeout -k 5 "$s" "$@" > "$out" 2> "$out.err" &
    NETNS_CHILD=$!
    wait "$NETNS_CHILD"
    rc=$?
    NETNS_CHILD=
    return $rc
}

netns_down() {
    local ns pids t child=$NETNS_CHILD
    NETNS_CHILD=
    if [ -n "$child" ]; then
        # timeout passes it on: mpirun ends its ranks and daemons, within
        # moments; after 10 s, timeout's process group goes by force
        kill "$child" 2> /dev/null
        for t in $(seq 100); do
            kill -0 "$child" 2> /dev/null || break
            sleep 0.1
        done
        kill -9 -- "-$child" 2> /dev/null
        wait "$child" 2> /dev/null
    fi
    for ns in "${NETNS_MADE[@]}"; do
        # whatever still runs on the host (mpirun, orted, ranks) ends with it
        pids=$(ip netns pids "$ns" 2> /dev/null)
        [ -z "$pids" ] || kill -9 $pids 2> /dev/null
        for t in $(seq 50); do
            [ -n "$(ip netns pids "$ns" 2> /dev/null)" ] || break
            sleep 0.1
        done
        ip netns del "$ns" 2> /dev/null # its end of the veth pair goes with it
    done
    NETNS_MADE=() NETNS_MPIRUN=() NETNS_CPUS=
    [ -z "$NETNS_DIR" ] || rm -rf "$NETNS_DIR"
    NETNS_DIR=
}
