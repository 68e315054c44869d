#!/bin/bash
# make test-sim-timing: the sim engine's checks of measured time. herd sim
# --measured-compute charges each rank's compute as this machine's CPU
# time for it, so what these checks see depends on the machine's load:
# CI runs them in a stage with nothing beside it (.ci/run), where
# test-sim's other checks, which compare bits and simulated time only, run
# beside the sanitizers. Every command runs under timeout.
# usage: tests/sim/timing.sh BUILD
set -u
build=$1
herd=$build/herd
tmp=$(mktemp -d "${TMPDIR:-/tmp}/herd-test-sim-timing.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok    $*"; pass=$((pass + 1)); }
bad() { echo "FAIL  $*"; fail=$((fail + 1)); }
# a JSON number field of the last line of $1 that has it
field() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" "$1" | tail -1; }

# overlap with --measured-compute (herd-sim times the compute itself, sim.h): lenet's fully connected
# layers (most of its bytes) are ready first, its convolutions' backward (most of its compute) comes
# after, so their allreduce runs beside it. Hosts 10x slower than this machine's 20 Gflop/s and an
# 80 Mbit/s link make the two of comparable length: with overlap at least 40% of the reduction's
# wire time (32 steps x the model's bytes over the link) must be hidden. Measured compute varies
# with this machine's load, so both runs go side by side, under the same load. SimGrid's own
# benchmarking, which charges backward's compute at the first MPI call after it, hides none.
for ov in on off; do
    timeout 120 "$herd" sim --measured-compute --workers 2 --link 80Mbps:30us --host-speed 2Gf -- train --algo allreduce \
        --overlap "$ov" --bucket-bytes 0 --model lenet --data synthetic:1x28x28:10 --epochs 1 --batch 64 \
        --train-limit 4096 --test-limit 64 --no-progress --quiet --json >"$tmp/mov-$ov.json" 2>/dev/null &
done
wait
on=$(field "$tmp/mov-on.json" wall_s) off=$(field "$tmp/mov-off.json" wall_s) steps=$(field "$tmp/mov-on.json" steps)
lnp=$(field "$tmp/mov-on.json" nparams)
if [ "$steps" = 32 ] && [ -n "$lnp" ] && msg=$(awk -v on="$on" -v off="$off" -v p="$lnp" 'BEGIN {
        m = 32 * p * 4 * 8 / 80e6; printf "%.4g s hidden of the wire'"'"'s %.4g s", off - on, m; exit !(on > 0 && off - on > 0.4 * m) }'); then
    ok "overlap with measured compute: allreduce lenet $on s with overlap, $off s without; $msg"
else
    bad "overlap with measured compute: steps '$steps' (want 32), '$on' s with overlap, '$off' s without: ${msg:-}"
fi

echo "sim engine, measured time: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
