# shellcheck shell=bash
# Sourced by bench/lib/two-hosts-ctl (a simulation beside two real hosts,
# tests/mpi/netns.sh) and tests/sim/run.sh: the SimGrid platform of the
# same shape, and the agents' wake measured on the real ones.
#
# two_hosts_speed CORES NP
#   Each simulated host's rate in flop/s: SimGrid times a rank's real
#   compute at 20 Gflop/s (herd sim --measured-compute --real-speed 20Gf),
#   and NP real ranks share this machine's CORES (at most one core each).
# two_hosts_platform NP RATE_MBIT LAT_US SPEED [RANK:FACTOR]
#   Prints the platform: hosts a0.. and b0.. (NP/2 each, as mpirun places
#   ranks 0..NP/2-1 on the first host), joined inside a host by shared
#   memory and across by one link of RATE_MBIT and LAT_US each way (the
#   veth pair with one tbf per direction); rank RANK's host FACTOR times
#   slower (herd sim's --slow, which a platform file does not take).

two_hosts_speed() {
    awk -v c="$1" -v n="$2" 'BEGIN { s = 20e9 * c / n; if (s > 20e9) s = 20e9; printf "%.6g", s }'
}

two_hosts_platform() {
    local np=$1 rate=$2 lat=$3 speed=$4 slow=${5:-} h i s d r=0 sp
    echo "<?xml version='1.0'?>"
    echo '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">'
    echo '<platform version="4.1">'
    echo '  <zone id="two-hosts" routing="Full">'
    for h in a b; do
        for i in $(seq 0 $((np / 2 - 1))); do
            sp=$speed
            [ -z "$slow" ] || [ "${slow%%:*}" != "$r" ] ||
                sp=$(awk -v s="$speed" -v f="${slow#*:}" 'BEGIN { printf "%.6g", s / f }')
            echo "    <host id=\"$h$i\" speed=\"${sp}f\"/>"
            r=$((r + 1))
        done
    done
    echo '    <link id="mem-a" bandwidth="4GBps" latency="1us"/>'
    echo '    <link id="mem-b" bandwidth="4GBps" latency="1us"/>'
    echo "    <link id=\"ab\" bandwidth=\"${rate}Mbps\" latency=\"${lat}us\"/>"
    echo "    <link id=\"ba\" bandwidth=\"${rate}Mbps\" latency=\"${lat}us\"/>"
    for s in $(seq 0 $((np / 2 - 1))); do
        for d in $(seq 0 $((np / 2 - 1))); do
            [ "$s" = "$d" ] || for h in a b; do
                echo "    <route src=\"$h$s\" dst=\"$h$d\" symmetrical=\"NO\"><link_ctn id=\"mem-$h\"/></route>"
            done
            echo "    <route src=\"a$s\" dst=\"b$d\" symmetrical=\"NO\"><link_ctn id=\"ab\"/></route>"
            echo "    <route src=\"b$d\" dst=\"a$s\" symmetrical=\"NO\"><link_ctn id=\"ba\"/></route>"
        done
    done
    echo '  </zone>'
    echo '</platform>'
}

# two_hosts_wake CHECKS LAT_US (after netns_up, with netns_run's $out)
#   Calibrates herd sim --agent-wake-us: mpi_checks --pull-latency (CHECKS),
#   pulls 2 ms apart so that each finds the agent asleep,
#   times a lock, a 100-float get and an unlock on a rank of the other host
#   while it computes; the wake is that less the two link latencies of the
#   round trip, which herd sim's agents' messages take themselves. Sets
#   PULL_US and WAKE_US; returns 1 on failure.
two_hosts_wake() {
    local checks=$1 lat=$2 f=$NETNS_DIR/pull-latency
    netns_run 60 "$f" "${NETNS_MPIRUN[@]}" --map-by node -np 2 "$checks" --pull-latency 0 2000 || return 1
    PULL_US=$(sed -n 's/^pull_latency_us \([0-9.]*\).*/\1/p' "$f")
    [ -n "$PULL_US" ] || return 1
    WAKE_US=$(awk -v p="$PULL_US" -v l="$lat" 'BEGIN { w = p - 2 * l; if (w < 0) w = 0; printf "%.0f", w }')
}
