#!/bin/bash
# make test-sim: the sim engine's checks (docs/design.md, the sim engine).
#   1. the transport and collective checks of tests/mpi/mpi_checks.c, built
#      with smpicc, under smpirun for several world sizes;
#   2. end-to-end training of several algorithms under smpirun
#      (tests/mpi/train_checks.sh with herd-sim);
#   3. through `herd sim`: the summary, repeatability (same seed, same
#      simulated times, losses and log, twice), compute time from FLOPs
#      (steps, update, evaluation), each named platform's link and host
#      speed as written and reported, platforms/*.xml as herd sim writes
#      them, a slow host, the alpha-beta time of a ring allreduce, overlap
#      of backward and allreduce (compute from FLOPs; measured compute is
#      tests/sim/timing.sh's), the
#      receive side of an exchange, the step overhead, the communication
#      agent's wake, and herd compare on a simulated platform, and its
#      crossover map (--sweep);
#   4. --sim-cfg against SimGrid's own list of keys, a platform file of the
#      user's, and SIGTERM/SIGINT to herd sim and herd compare (no smpirun,
#      smpimain or temporary directory left; exit 128 + the signal).
# Every command runs under timeout; every check compares against an exact
# or closed-form expectation and counts as FAIL otherwise.
# usage: tests/sim/run.sh BUILD SIM_BUILD "SIZES" "ALGO:RANKS ..."
set -u
build=$1 sim_build=$2 sizes=$3 train=$4
herd=$build/herd
plot=$(cd "$(dirname "$0")/../.." && pwd)/tools/herd-plot
tmp=$(mktemp -d "${TMPDIR:-/tmp}/herd-test-sim.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok    $*"; pass=$((pass + 1)); }
bad() { echo "FAIL  $*"; fail=$((fail + 1)); }
# a JSON number field of the last line of $1 that has it
field() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" "$1" | tail -1; }

# -- 1. mpi_checks under smpirun ------------------------------------------
max=1
for n in $sizes; do [ "$n" -gt "$max" ] && max=$n; done
if ! timeout 60 "$herd" sim --workers "$max" --keep "$tmp/plat" --dry-run -- train 2>"$tmp/dry.txt"; then
    bad "herd sim --dry-run wrote no platform"; cat "$tmp/dry.txt"
fi
# another engine inside a simulated rank would run on no simulated clock: refused
out=$(timeout 60 "$herd" sim --workers 2 -- train --engine threads --model linear --train-limit 256 2>&1)
rc=$?
if [ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q "herd sim runs the mpi engine"; then
    ok "herd sim -- train --engine threads: refused (exit 2)"
else
    bad "herd sim -- train --engine threads: exit $rc"; printf '%s\n' "$out" | tail -3
fi
# a run stopped by a non-finite loss ends with herd's message and exit 1:
# an asynchronous one used to crash SimGrid (SIGSEGV, exit 139) once the
# failed rank had returned, leaving messages to its ended actor
for run in asgd:5 allreduce:50; do
    algo=${run%%:*}
    out=$(timeout 120 "$herd" sim --workers 8 -- train --algo "$algo" --model lenet --data synthetic:1x28x28:10 \
        --train-limit 4096 --test-limit 64 --epochs 1 --lr "${run##*:}" 2>&1)
    rc=$?
    if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q "^herd: step [0-9]* (epoch 1): non-finite" &&
        ! printf '%s\n' "$out" | grep -qi "segmentation\|assert"; then
        ok "herd sim, --algo $algo stopped by a non-finite value: exit 1 with herd's message"
    else
        bad "herd sim, --algo $algo stopped by a non-finite value: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
done
# --paje FILE: SimGrid's trace of the ranks' MPI calls, at a relative path
if (herd_abs=$(realpath "$herd") && cd "$tmp" && timeout 120 "$herd_abs" sim --workers 2 --paje run.paje -- train --model linear --data synthetic:1x8x8:4 \
        --train-limit 256 --test-limit 64 --epochs 1 >/dev/null 2>&1) &&
    grep -q '^%EventDef PajeDefineContainerType' "$tmp/run.paje" && grep -q 'MPI_Isend' "$tmp/run.paje"; then
    ok "herd sim --paje: a Paje trace with the ranks' MPI calls ($(wc -l <"$tmp/run.paje") lines)"
else
    bad "herd sim --paje wrote no trace"
fi
smpirun=(smpirun -platform "$tmp/plat/platform.xml" -hostfile "$tmp/plat/hosts" -quiet --log=root.thres:warning
         --cfg=network/model:CM02 --cfg=network/crosstraffic:0 --cfg=smpi/simulate-computation:no
         --cfg=smpi/test:0 --cfg=smpi/iprobe:0 --cfg=smpi/grow-injected-times:no --cfg=smpi/coll-selector:ompi)
for n in $sizes; do
    if out=$(timeout 120 "${smpirun[@]}" -np "$n" "$sim_build/mpi-checks" 2>&1) &&
        printf '%s\n' "$out" | grep -q ' 0 failed$'; then
        ok "mpi checks under smpirun, $n ranks: $(printf '%s\n' "$out" | tail -1 | sed 's/.*: //')"
    else
        bad "mpi checks under smpirun, $n ranks"; printf '%s\n' "$out" | tail -8
    fi
done

# windows whose ranks pull from each other at once (rank 1 a millisecond after rank 0), on two hosts
# joined by a 100 Mbit/s link each way (bench/lib/two-hosts.sh): rank 1's request to rank 0 leaves on
# the connection its agent's 1 MB answer to rank 0 is already crossing, so it waits for it, as over
# Open MPI's one TCP connection between two processes: two wire times, 160 ms (mpi_checks --cross-pull
# 1000000 on tests/mpi/netns.sh's hosts at 100 Mbit/s: 0.166 s, 2026-11-27). Before herd-sim's
# connections (src/comm/simwin.c) the two crossed side by side in 80 ms, which no real run did.
# shellcheck source=bench/lib/two-hosts.sh
. bench/lib/two-hosts.sh
two_hosts_platform 2 100 30 1e9 >"$tmp/two.xml"
printf 'a0\nb0\n' >"$tmp/two.hosts"
two=(smpirun -platform "$tmp/two.xml" -hostfile "$tmp/two.hosts" "${smpirun[@]:5}")
if out=$(timeout 120 "${two[@]}" -np 2 "$sim_build/mpi-checks" --cross-pull 1000000 2>&1) &&
    s=$(printf '%s\n' "$out" | sed -n 's/^cross_pull_s \([0-9.e+-]*\).*/\1/p') && [ -n "$s" ] &&
    awk -v s="$s" 'BEGIN { w = 2 * 1e6 * 8 / 100e6; exit !(s >= w && s < 1.05 * w + 2e-3) }'; then
    ok "two ranks pull 1 MB from each other at once over 100 Mbit/s each way: $s s (two wire times, 0.16 s)"
else
    bad "two ranks pulling 1 MB from each other at once: '${s:-}' s, want 0.16 s to 5% + 2 ms"; printf '%s\n' "$out" | tail -5
fi

# a host's message to itself takes its loopback, a copy at memory speed (20 GB/s, 0.1 us: src/cli/platform.h),
# not its network link up and down (as it did before herd sim wrote a <cluster>: 825 us): 1 MB to itself on
# 10gbe's hosts in 1e6 / 20e9 s + 0.1 us; to the next host, with its one-byte answer, in 2 x 25 us + 1e6 / 1.25e9 s
# (each within 1% + 1 us)
rm -rf "$tmp/lb"
timeout 60 "$herd" sim --platform 10gbe --workers 2 --keep "$tmp/lb" --dry-run -- train 2>/dev/null
lb=(smpirun -platform "$tmp/lb/platform.xml" -hostfile "$tmp/lb/hosts" "${smpirun[@]:5}")
if out=$(timeout 120 "${lb[@]}" -np 2 "$sim_build/mpi-checks" --self-send 1000000 2>&1) &&
    read -r self remote <<<"$(printf '%s\n' "$out" | sed -n 's/^self_send_s \([0-9.e+-]*\) remote_send_s \([0-9.e+-]*\).*/\1 \2/p')" &&
    [ -n "$remote" ] && awk -v s="$self" -v r="$remote" 'BEGIN { a = 1e6 / 20e9 + 1e-7; b = 50e-6 + 1e6 / 1.25e9
        exit !(s >= a && s < 1.01 * a + 1e-6 && r >= b && r < 1.01 * b + 1e-6) }'; then
    ok "1 MB to itself takes a host's loopback ($self s, 20 GB/s), to the next host its link ($remote s, 10 Gb/s)"
else
    bad "1 MB to itself on 10gbe: '${self:-}' s, want 1e6/20e9 s + 0.1 us; to the next host '${remote:-}' s"
    printf '%s\n' "$out" | tail -5
fi

# -- 2. training under smpirun -----------------------------------------------
# shellcheck disable=SC2086
while IFS= read -r line; do
    case $line in
    ok*) pass=$((pass + 1)); echo "$line" ;;
    FAIL*) fail=$((fail + 1)); echo "$line" ;;
    *) echo "$line" ;;
    esac
done < <(tests/mpi/train_checks.sh "$build/herd-sim" "${smpirun[*]}" $train 2>&1)

# -- 3. herd sim -----------------------------------------------------------------
small1=(--data synthetic:1x12x12:4 --model linear --batch 16 --train-limit 2048 --test-limit 512
       --no-progress --quiet --json)
small=("${small1[@]}" --epochs 2) # small1 with its epochs: each flag is given once
# the summary: engine sim, simulated wall_s, real_s beside it
if timeout 300 "$herd" sim --workers 4 -- train --algo allreduce "${small[@]}" >"$tmp/s.json" 2>"$tmp/s.err" &&
    grep -q '"engine":"sim"' "$tmp/s.json" && [ -n "$(field "$tmp/s.json" real_s)" ] &&
    awk -v a="$(field "$tmp/s.json" test_acc)" -v w="$(field "$tmp/s.json" wall_s)" 'BEGIN { exit !(a > 0.8 && w > 0) }'; then
    ok "herd sim train: engine sim, test_acc $(field "$tmp/s.json" test_acc), wall_s $(field "$tmp/s.json" wall_s) simulated, real_s $(field "$tmp/s.json" real_s)"
else
    bad "herd sim train summary"; cat "$tmp/s.json" "$tmp/s.err" | tail -5
fi

# repeatable to the bit: same seed, same simulated times, losses, accuracy and log, twice
# (but for the run's id and its wall-clock start)
for algo in allreduce adpsgd osgp; do
    for k in 1 2; do
        # the same --log both times: the summary's options name it
        timeout 300 "$herd" sim --workers 4 --slow 1:3 -- train --algo "$algo" "${small[@]}" --log "$tmp/r.raw" \
            2>/dev/null | sed 's/"real_s":[0-9.]*,//; s/"run_id":"[0-9a-f]*",//' >"$tmp/r$k.json"
        sed 's/"run_id":"[0-9a-f]*","time":"[^"]*",//' "$tmp/r.raw" >"$tmp/r$k.log"
        rm -f "$tmp/r.raw"
    done
    if [ -s "$tmp/r1.json" ] && cmp -s "$tmp/r1.json" "$tmp/r2.json" && cmp -s "$tmp/r1.log" "$tmp/r2.log"; then
        ok "herd sim repeatable: $algo twice, same summary and log (wall_s $(field "$tmp/r1.json" wall_s))"
    else
        bad "herd sim repeatable: $algo"; diff "$tmp/r1.json" "$tmp/r2.json" | head -4; diff "$tmp/r1.log" "$tmp/r2.log" | head -4
    fi
    rm -f "$tmp"/r?.log "$tmp"/r?.raw
done

# compute time comes from FLOPs: one worker, sgd, two epochs: wall_s = steps x (batch x train FLOPs/img +
# 6 FLOPs/parameter for the update) / speed; the evaluation after epoch 1 costs no simulated time (it
# observes the run: charged to worker 0, an asynchronous run's curve would run ahead of its time)
bt=$(timeout 60 "$build/herd" bench train --model lenet --shape 1x28x28:10 --batch 16 --steps 1 --warmup 0 --json 2>/dev/null)
mflop=$(printf '%s' "$bt" | sed -n 's/.*"train_mflop_per_img":\([0-9.e+-]*\).*/\1/p')
fwd=$(printf '%s' "$bt" | sed -n 's/.*"fwd_mflop_per_img":\([0-9.e+-]*\).*/\1/p')
np=$(printf '%s' "$bt" | sed -n 's/.*"nparams":\([0-9]*\).*/\1/p')
timeout 120 "$herd" sim --workers 1 --host-speed 1Gf -- train --algo sgd --data synthetic:1x28x28:10 --model lenet \
    --epochs 2 --batch 16 --train-limit 512 --test-limit 256 --no-progress --quiet --json >"$tmp/c.json" 2>/dev/null
steps=$(field "$tmp/c.json" steps) wall=$(field "$tmp/c.json" wall_s)
if [ -n "$mflop" ] && [ -n "$fwd" ] && [ -n "$np" ] && [ "$steps" = 64 ] &&
    awk -v m="$mflop" -v f="$fwd" -v p="$np" -v s="$steps" -v w="$wall" \
        'BEGIN { t = s * (16 * m * 1e6 + 6 * p) / 1e9; exit !(w > 0.999 * t && w < 1.001 * t) }'; then
    ok "compute from FLOPs: lenet, $steps steps x (16 x $mflop MFLOP + 6 x $np) at 1 Gflop/s = $wall s simulated"
else
    bad "compute from FLOPs: lenet, steps '$steps' (want 64), $mflop/$fwd MFLOP/img, $np parameters, wall_s '$wall'"
fi
# ... and evaluating every 4 steps as well adds no simulated time (16 evaluations of 256 examples would
# add about 1.6 s at 1 Gflop/s; the barriers around them cost microseconds)
timeout 120 "$herd" sim --workers 1 --host-speed 1Gf -- train --algo sgd --data synthetic:1x28x28:10 --model lenet \
    --epochs 2 --batch 16 --train-limit 512 --test-limit 256 --eval-every-steps 4 --no-progress --quiet --json \
    >"$tmp/c4.json" 2>/dev/null
wall4=$(field "$tmp/c4.json" wall_s)
if [ -n "$wall" ] && [ -n "$wall4" ] && awk -v a="$wall" -v b="$wall4" 'BEGIN { exit !(b - a < 1e-5 && a - b < 1e-5) }'; then
    ok "evaluation costs no simulated time: wall_s $wall4 with an evaluation every 4 steps, $wall without"
else
    bad "evaluation costs no simulated time: wall_s '$wall4' with an evaluation every 4 steps, '$wall' without"
fi

# overlap of backward and communication: allreduce of mlp (three layers) on 2 hosts, one allreduce
# per layer (--bucket-bytes 0), 16 steps, with --overlap on and off. Backward is charged layer by
# layer, and a layer's reduction starts when its gradients are ready and the previous one is done.
#  - link-bound (0.8 Gb/s, 1 Tflop/s): every reduction outlasts the backward behind it, so overlap
#    hides all of backward but the last layer's (0.55% of it): off - on = 16 x backward FLOPs x 16 /
#    speed, within [99%, 100%];
#  - compute-bound (80 Gb/s, 1 Gflop/s): every reduction but the first layer's hides behind backward,
#    so a step with overlap is compute (its FLOPs as above) + the first layer's allreduce (803840
#    floats, on 2 hosts 2L + S/B), within 1% of the latter; without, more than twice that.
bt=$(timeout 60 "$build/herd" bench train --model mlp --shape 1x28x28:10 --batch 16 --steps 1 --warmup 0 --json 2>/dev/null)
mflop=$(printf '%s' "$bt" | sed -n 's/.*"train_mflop_per_img":\([0-9.e+-]*\).*/\1/p')
fwd=$(printf '%s' "$bt" | sed -n 's/.*"fwd_mflop_per_img":\([0-9.e+-]*\).*/\1/p')
np=$(printf '%s' "$bt" | sed -n 's/.*"nparams":\([0-9]*\).*/\1/p')
for spec in "link 0.8Gbps:1us 1Tf" "compute 80Gbps:0.1us 1Gf"; do
    read -r bound link hs <<<"$spec"
    for ov in on off; do
        timeout 120 "$herd" sim --workers 2 --link "$link" --host-speed "$hs" -- train --algo allreduce --overlap "$ov" \
            --bucket-bytes 0 --model mlp --data synthetic:1x28x28:10 --epochs 1 --batch 16 --train-limit 512 \
            --test-limit 64 --eval-every 2 --no-progress --quiet --json >"$tmp/ov-$ov.json" 2>/dev/null
    done
    on=$(field "$tmp/ov-on.json" wall_s) off=$(field "$tmp/ov-off.json" wall_s) steps=$(field "$tmp/ov-on.json" steps)
    if [ "$bound" = link ]; then
        check='BEGIN { b = 16 * 16 * (m - f) * 1e6 / 1e12; d = off - on; printf "off - on %.6g s, backward %.6g s", d, b
                       exit !(d >= 0.99 * b && d <= 1.0001 * b) }'
    else
        check='BEGIN { c = 16 * (16 * m * 1e6 + 6 * p) / 1e9; a = 16 * (2 * 0.1e-6 + 803840 * 4 / 10e9)
                       printf "beyond compute: %.6g s with overlap (model: the first layer'"'"'s allreduce, %.6g s), %.6g s without", on - c, a, off - c
                       exit !(on - c > 0.99 * a && on - c < 1.01 * a && off - c > 2 * a) }'
    fi
    if [ -n "$mflop" ] && [ -n "$fwd" ] && [ -n "$np" ] && [ "$steps" = 16 ] &&
        msg=$(awk -v m="$mflop" -v f="$fwd" -v p="$np" -v on="$on" -v off="$off" "$check"); then
        ok "overlap in simulated time, $bound-bound: allreduce mlp $on s with overlap, $off s without; $msg"
    else
        bad "overlap in simulated time, $bound-bound: steps '$steps', on '$on' s, off '$off' s: ${msg:-}"
    fi
done

# overlap with --measured-compute: a check of measured time, so in tests/sim/timing.sh
# (make test-sim-timing), which CI runs with nothing beside it

# the receive side of an exchange: dpsgd on 2 hosts averages its neighbour's model into its own, 2
# FLOPs per parameter, on top of the step's FLOPs; the link is fast enough that the exchange hides
# behind the step: wall_s = 8 steps x (4 x train FLOPs + 6 x params + 2 x params) / speed, within 0.1%
timeout 120 "$herd" sim --workers 2 --link 1000Gbps:0.1us --host-speed 1Gf -- train --algo dpsgd --model mlp \
    --data synthetic:1x28x28:10 --epochs 1 --batch 4 --train-limit 64 --test-limit 16 --eval-every 2 --no-progress \
    --quiet --json >"$tmp/mix.json" 2>/dev/null
wall=$(field "$tmp/mix.json" wall_s) steps=$(field "$tmp/mix.json" steps)
if [ "$steps" = 8 ] && [ -n "$mflop" ] && msg=$(awk -v m="$mflop" -v p="$np" -v w="$wall" 'BEGIN {
        t = 8 * (4 * m * 1e6 + 8 * p) / 1e9; printf "%.6g s simulated, model %.6g s", w, t; exit !(w > 0.999 * t && w < 1.001 * t) }'); then
    ok "dpsgd's averaging charged: $msg"
else
    bad "dpsgd's averaging charged: steps '$steps' (want 8), ${msg:-wall_s '$wall'}"
fi

# --step-overhead S: a framework's cost per step, S seconds on top of the FLOPs (sgd, 1 worker)
for so in 0 0.001; do
    timeout 120 "$herd" sim --workers 1 --host-speed 1Gf --step-overhead "$so" -- train --algo sgd --data synthetic:1x12x12:4 \
        --model linear --epochs 1 --batch 16 --train-limit 512 --test-limit 64 --no-progress --quiet --json \
        >"$tmp/so-$so.json" 2>/dev/null
done
a=$(field "$tmp/so-0.json" wall_s) b=$(field "$tmp/so-0.001.json" wall_s) steps=$(field "$tmp/so-0.001.json" steps)
if [ "$steps" = 32 ] && [ "$(field "$tmp/so-0.001.json" step_overhead_s)" = 0.001 ] &&
    awk -v a="$a" -v b="$b" 'BEGIN { d = b - a; exit !(d > 0.032 * 0.9999 && d < 0.032 * 1.0001) }'; then
    ok "--step-overhead 0.001: 32 steps, $a s -> $b s simulated"
else
    bad "--step-overhead 0.001: steps '$steps' (want 32), '$a' s -> '$b' s (want +0.032 s)"
fi

# herd sim killed outright (SIGKILL, no handler runs): its simulation ends too (the kernel sends
# smpirun SIGTERM as herd dies, which smpirun passes on), within 10 s; it went on before
mark=$tmp/killed-sim.jsonl
"$herd" sim --workers 2 -- train --model linear --data synthetic:1x8x8:4 --epochs 100000 --train-limit 256 \
    --test-limit 64 --no-progress --log "$mark" >/dev/null 2>&1 &
hp=$!
for _ in $(seq 600); do [ -s "$mark" ] && break; sleep 0.1; done
running=$(pgrep -f -- "$mark" | wc -l)
kill -9 "$hp"
wait "$hp" 2>/dev/null
for _ in $(seq 100); do pgrep -f -- "$mark" >/dev/null || break; sleep 0.1; done
if [ -s "$mark" ] && [ "$running" -ge 2 ] && ! pgrep -f -- "$mark" >/dev/null; then
    ok "herd sim killed with SIGKILL: its simulation ($running processes) ended with it"
else
    bad "herd sim killed with SIGKILL: $(pgrep -f -- "$mark" | wc -l) process(es) of its simulation left (log: $(wc -c <"$mark" 2>/dev/null) bytes)"
    pkill -9 -f -- "$mark"
fi

# --agent-wake-us W: the agent's answer, W us as an origin locks another rank's window and at each
# flush, where that rank computes; one that waits inside MPI serves its windows itself, at once.
# 2 workers of asgd, each locking the other's shard twice a step (the pull, then the push, which
# the next step's pull waits for):
# - worker 1 20x slower (10 Mflop/s hosts: compute is most of a step), so it computes whenever
#   worker 0 locks its shard: worker 0, the one with the most steps (epoch_s_min), grows by at
#   least steps x W (the pull's wake, waited for every step; the push's is partly hidden behind
#   worker 0's next compute);
# - compute next to nothing (1 Gflop/s): each worker mostly waits in an exchange, where it
#   serves the other's locks, and the slowest grows by less than steps x W (at least 2 x steps x W
#   with every lock charged);
# - dpsgd exchanges by messages only, and its simulated times stay the same to the last digit
wake_run() { # name: the rest are herd sim's flags before --
    local name=$1 al=$2
    shift 2
    timeout 120 "$herd" sim --workers 2 "$@" -- train --algo "$al" --data synthetic:1x12x12:4 --model linear \
        --epochs 1 --batch 16 --train-limit 512 --test-limit 64 --no-progress --quiet --json >"$tmp/wake-$name.json" 2>/dev/null
}
for wk in 0 1000; do
    wake_run "slow-$wk" asgd --host-speed 10Mf --slow 1:20 --agent-wake-us "$wk"
    wake_run "idle-$wk" asgd --host-speed 1Gf --agent-wake-us "$wk"
    wake_run "dpsgd-$wk" dpsgd --host-speed 1Gf --agent-wake-us "$wk"
done
# wake_check NAME FIELD WANT SAYS: FIELD of runs NAME-0 and NAME-1000 as a and b, steps_max of the
# latter as n; WANT (awk) must hold
wake_check() {
    local a b n
    a=$(field "$tmp/wake-$1-0.json" "$2") b=$(field "$tmp/wake-$1-1000.json" "$2") n=$(field "$tmp/wake-$1-1000.json" steps_max)
    if [ -n "$n" ] && [ -n "$a" ] && awk -v a="$a" -v b="$b" -v n="$n" "BEGIN { exit !($3) }"; then
        ok "--agent-wake-us 1000, $4: $2 $a s -> $b s simulated, $n steps"
    else
        bad "--agent-wake-us 1000, $4: $2 '$a' s -> '$b' s, '$n' steps (want $3)"
    fi
}
wake_check slow epoch_s_min "b - a >= n * 0.001" "target computing (worker 0's epoch: >= steps x 1 ms more)"
wake_check idle train_s "b > a && b - a < n * 0.001" "targets waiting (more, but < steps x 1 ms)"
d0=$(field "$tmp/wake-dpsgd-0.json" wall_s) d1=$(field "$tmp/wake-dpsgd-1000.json" wall_s)
if [ -n "$d0" ] && [ "$d0" = "$d1" ]; then
    ok "--agent-wake-us 1000: dpsgd's $d0 s simulated both (messages only)"
else
    bad "--agent-wake-us 1000: dpsgd '$d0' s -> '$d1' s (want equal)"
fi

# HERD_SIM_AGENT_US sets --agent-wake-us's default (a protocol's every run); the flag wins; a value
# that is no number is refused
w_env=$(HERD_SIM_AGENT_US=12.5 timeout 30 "$herd" sim --workers 2 --dry-run -- train 2>&1 | grep -o 'HERD_SIM_AGENT_US=[^ ]*')
w_flag=$(HERD_SIM_AGENT_US=12.5 timeout 30 "$herd" sim --workers 2 --agent-wake-us 3 --dry-run -- train 2>&1 |
    grep -o 'HERD_SIM_AGENT_US=[^ ]*')
HERD_SIM_AGENT_US=12x timeout 30 "$herd" sim --workers 2 --dry-run -- train >/dev/null 2>&1
w_bad=$?
if [ "$w_env" = HERD_SIM_AGENT_US=12.5 ] && [ "$w_flag" = HERD_SIM_AGENT_US=3 ] && [ $w_bad = 2 ]; then
    ok "HERD_SIM_AGENT_US=12.5: the runs' wake 12.5 us; --agent-wake-us 3 beside it: 3; '12x': exit 2"
else
    bad "HERD_SIM_AGENT_US: '$w_env' (want =12.5), with --agent-wake-us 3 '$w_flag' (want =3), '12x' exit $w_bad (want 2)"
fi

# an asynchronous run's batches are shared by need, rank 0 not favoured nor starved: asgd, 16 workers on
# 10gbe, one epoch of 60000 examples (58-59 steps a worker): rank 0's steps within 10% of the median
# worker's (when rank 0's window handed every batch out under its exclusive lock, it took 21 where the
# others took 25-39)
rm -f "$tmp/r0.jsonl"
timeout 300 "$herd" sim --platform 10gbe --workers 16 -- train --algo asgd --model lenet --data synthetic:1x28x28:10 \
    --epochs 1 --test-limit 64 --log "$tmp/r0.jsonl" --no-progress --quiet --json >"$tmp/r0.json" 2>/dev/null
r0=$(sed -n 's/.*"event":"worker","worker":0,.*"steps":\([0-9]*\).*/\1/p' "$tmp/r0.jsonl" | tail -1)
med=$(field "$tmp/r0.json" steps_median)
if [ -n "$r0" ] && [ -n "$med" ] && awk -v a="$r0" -v m="$med" 'BEGIN { exit !(m >= 50 && a >= 0.9 * m && a <= 1.1 * m) }'; then
    ok "asgd, 16 workers on 10gbe: rank 0 took $r0 steps, the median worker $med"
else
    bad "asgd, 16 workers on 10gbe: rank 0 took '${r0:-}' steps, the median worker '${med:-}' (want within 10%)"
fi

# the named platforms: the generated file and the summary carry the table's link and host speed
# (name, Gb/s, us host to host, Gflop/s; the file's latency is per link, half of host to host)
for spec in "ib-100g 100 1 680" "ib-56g 56 1.5 14000" "10gbe 10 25 8000" "slow-cloud 1 500 200"; do
    read -r name gbps lat_us gflops <<<"$spec"
    rm -rf "$tmp/p"
    timeout 120 "$herd" sim --platform "$name" --workers 2 --keep "$tmp/p" -- train --algo allreduce "${small1[@]}" --epochs 1 \
        >"$tmp/p.json" 2>/dev/null
    x=$(grep -m1 -o ' speed="[^"]*"' "$tmp/p/platform.xml" 2>/dev/null; grep -m1 -o ' bw="[^"]*" lat="[^"]*" sharing_policy="SPLITDUPLEX"' "$tmp/p/platform.xml" 2>/dev/null)
    want_x=$(awk -v g="$gbps" -v l="$lat_us" -v f="$gflops" 'BEGIN {
        printf " speed=\"%.15gf\"\n", f * 1e9
        printf " bw=\"%.15gBps\" lat=\"%.15gs\" sharing_policy=\"SPLITDUPLEX\"", g * 1e9 / 8, l * 1e-6 / 2 }')
    got="$(field "$tmp/p.json" link_gbps) $(field "$tmp/p.json" link_lat_us) $(field "$tmp/p.json" host_gflops)"
    if [ "$x" = "$want_x" ] && [ "$got" = "$gbps $lat_us $gflops" ] && grep -q "\"platform\":\"$name\"" "$tmp/p.json"; then
        ok "platform $name: $gbps Gb/s, $lat_us us, $gflops Gflop/s in the platform file and the summary"
    else
        bad "platform $name: summary '$got', want '$gbps $lat_us $gflops'; file:"; printf '%s\n%s\n' "$x" "$want_x"
    fi
done
# --link and --host-speed override, and say so in the summary
timeout 120 "$herd" sim --platform ib-100g --workers 2 --link 25Gbps:5us --host-speed 2Tf -- train --algo allreduce "${small1[@]}" \
    --epochs 1 >"$tmp/o.json" 2>/dev/null
got="$(field "$tmp/o.json" link_gbps) $(field "$tmp/o.json" link_lat_us) $(field "$tmp/o.json" host_gflops)"
if [ "$got" = "25 5 2000" ]; then
    ok "--link 25Gbps:5us --host-speed 2Tf: summary $got"
else
    bad "--link 25Gbps:5us --host-speed 2Tf: summary '$got', want '25 5 2000'"
fi
# platforms/*.xml are what herd sim writes at the papers' sizes
for spec in "ib-100g 16 ib-100g" "ib-56g 64 ib-56g" "ib-56g 512 ib-56g-512" "10gbe 32 10gbe" "slow-cloud 16 slow-cloud"; do
    read -r name n file <<<"$spec"
    rm -rf "$tmp/p"
    timeout 60 "$herd" sim --platform "$name" --workers "$n" --keep "$tmp/p" --dry-run -- train 2>/dev/null
    if cmp -s "$tmp/p/platform.xml" "platforms/$file.xml"; then
        ok "platforms/$file.xml is herd sim --platform $name --workers $n"
    else
        bad "platforms/$file.xml differs from herd sim --platform $name --workers $n (regenerate it)"
    fi
done

# a host 10x slower: compute-bound allreduce takes ~10x as long (--eval-every 2: no evaluation between
# the epochs, which worker 0 would do at its own speed)
fast=(--link 1000Gbps:0.1us --host-speed 1Gf)
timeout 120 "$herd" sim --workers 4 "${fast[@]}" -- train --algo allreduce "${small[@]}" --eval-every 2 >"$tmp/f.json" 2>/dev/null
timeout 120 "$herd" sim --workers 4 "${fast[@]}" --slow 2:10 -- train --algo allreduce "${small[@]}" --eval-every 2 >"$tmp/g.json" 2>/dev/null
a=$(field "$tmp/f.json" wall_s) b=$(field "$tmp/g.json" wall_s)
if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 9 * a && b < 11 * a) }'; then
    ok "--slow 2:10: allreduce $a s -> $b s simulated"
else
    bad "--slow 2:10: allreduce '$a' s -> '$b' s simulated (expected ~10x)"
fi

# an asynchronous run with a 100x straggler (adpsgd, 8 hosts): the summary's per-worker figures say
# what happened. The straggler's step outlasts the others' epochs, so the run's train_s grows and
# takes in the straggler's time (its epoch, > 1.5x the median worker's), while the median worker's
# epoch time barely moves (< 1.15x); the slowest worker is the straggler, with the fewest steps.
slowrun=(--workers 8 --platform 10gbe --host-speed 100Gf)
timeout 300 "$herd" sim "${slowrun[@]}" -- train --algo adpsgd --model lenet --data synthetic:1x28x28:10 --epochs 2 \
    --batch 16 --train-limit 2048 --test-limit 256 --no-progress --quiet --json >"$tmp/s0.json" 2>/dev/null
timeout 300 "$herd" sim "${slowrun[@]}" --slow 3:100 -- train --algo adpsgd --model lenet --data synthetic:1x28x28:10 \
    --epochs 2 --batch 16 --train-limit 2048 --test-limit 256 --no-progress --quiet --json >"$tmp/s1.json" 2>/dev/null
m0=$(field "$tmp/s0.json" epoch_s_median) m1=$(field "$tmp/s1.json" epoch_s_median)
t0=$(field "$tmp/s0.json" train_s) t1=$(field "$tmp/s1.json" train_s) x1=$(field "$tmp/s1.json" epoch_s_max)
if [ "$(field "$tmp/s1.json" slowest_worker)" = 3 ] && [ -n "$m0" ] && [ -n "$m1" ] &&
    [ "$(field "$tmp/s1.json" steps_min)" -lt "$(field "$tmp/s0.json" steps_min)" ] &&
    awk -v m0="$m0" -v m1="$m1" -v t0="$t0" -v t1="$t1" -v x="$x1" \
        'BEGIN { exit !(m1 < 1.15 * m0 && t1 > t0 && t1 >= x && x > 1.5 * m1) }'; then
    ok "adpsgd with a 100x straggler: train_s $t0 -> $t1 s, the median worker's epoch $m0 -> $m1 s, the slowest (worker 3) $x1 s"
else
    bad "adpsgd with a 100x straggler: train_s '$t0' -> '$t1', median epoch '$m0' -> '$m1', slowest worker $(field "$tmp/s1.json" slowest_worker) at '$x1'"
fi

# sgp's waits end when their message does: on 32 hosts the exponential graph (a different
# in-neighbour every step) takes no longer per epoch than the ring (one in-neighbour), within 10%
# (polled waits overshot and the overshoot compounded across the graph: 1.65x at 20 steps); and
# its second epoch no longer than its first, within 10% (the workers start each epoch together
# after worker 0's evaluation; out of step, the second took 2.8x the first)
for t in ring exp; do
    timeout 300 "$herd" sim --workers 32 --platform 10gbe -- train --algo sgp --topology "$t" --model lenet \
        --data synthetic:1x28x28:10 --epochs 2 --train-limit 40960 --test-limit 1000 --no-progress --quiet --json \
        --log "$tmp/sgp-$t.log" >"$tmp/sgp-$t.json" 2>/dev/null
done
a=$(field "$tmp/sgp-ring.json" epoch_s_median) b=$(field "$tmp/sgp-exp.json" epoch_s_median)
e1=$(grep '"event":"epoch","worker":0,"epoch":1,' "$tmp/sgp-exp.log" | sed 's/.*"epoch_s":\([0-9.]*\).*/\1/')
e2=$(grep '"event":"epoch","worker":0,"epoch":2,' "$tmp/sgp-exp.log" | sed 's/.*"epoch_s":\([0-9.]*\).*/\1/')
if [ -n "$a" ] && [ -n "$b" ] && [ -n "$e1" ] && [ -n "$e2" ] &&
    awk -v a="$a" -v b="$b" -v e1="$e1" -v e2="$e2" 'BEGIN { exit !(b < 1.1 * a && e2 < 1.1 * e1) }'; then
    ok "sgp on 32 hosts, 2 epochs of 20 steps: exp $b s per epoch, ring $a s; worker 0's epochs $e1 s, $e2 s"
else
    bad "sgp on 32 hosts: exp '$b' s per epoch against ring '$a' s, worker 0's epochs '$e1' s, '$e2' s (want within 10%)"
fi

# alpha-beta: a ring allreduce of S bytes on n hosts, bandwidth B, latency L: 2(n-1)(L + S/(nB)), within 10%
for spec in "8 10 20 1048576" "16 10 20 4194304" "8 100 1 16777216" "8 1 500 8192" "3 10 20 999996"; do
    read -r n gbps lat_us bytes <<<"$spec"
    t=$(timeout 120 "$herd" sim --workers "$n" --link "${gbps}Gbps:${lat_us}us" -- bench allreduce --min-bytes "$bytes" \
        --max-bytes "$bytes" --iters 3 --warmup 1 --segment-bytes 67108864 --json 2>/dev/null | sed -n 's/.*"time_us":\([0-9.]*\).*/\1/p')
    want=$(awk -v n="$n" -v g="$gbps" -v l="$lat_us" -v s="$bytes" 'BEGIN { printf "%.1f", 2 * (n - 1) * (l + s / (n * g * 1e9 / 8) * 1e6) }')
    if [ -n "$t" ] && awk -v t="$t" -v w="$want" 'BEGIN { exit !(t > 0.9 * w && t < 1.1 * w) }'; then
        ok "alpha-beta: ring allreduce of $bytes B on $n hosts at $gbps Gb/s, $lat_us us: $t us simulated, model $want us"
    else
        bad "alpha-beta: ring allreduce of $bytes B on $n hosts at $gbps Gb/s, $lat_us us: '$t' us, model $want us"
    fi
done

# herd compare warns when its setting defeats its question: lenet on 10gbe hosts computes a step
# in microseconds, so every 8-worker run is slower than one worker; on ib-100g with 4 it is not
if timeout 300 "$herd" compare --platform 10gbe --workers 8 --epochs 1 --model lenet \
        --extra "--train-limit 2048 --test-limit 256" --out "$tmp/cmpw" allreduce >"$tmp/cmpw.txt" 2>"$tmp/cmpw.err" &&
    grep -q "warning: every run on several workers is slower than one worker (speedup at most 0\.[0-9]*): a step computes in [0-9.e-]* ms but takes [0-9.e-]* ms" "$tmp/cmpw.err" &&
    timeout 300 "$herd" compare --platform ib-100g --workers 4 --epochs 1 --model lenet \
        --extra "--train-limit 2048 --test-limit 256" --out "$tmp/cmpw2" allreduce >"$tmp/cmpw2.txt" 2>"$tmp/cmpw2.err" &&
    ! grep -q "warning: every run" "$tmp/cmpw2.err"; then
    ok "herd compare warns where every multi-worker run is slower than one worker: $(grep -o 'a step computes in [^,]*' "$tmp/cmpw.err")"
else
    bad "herd compare's warning"; tail -4 "$tmp/cmpw.err" "$tmp/cmpw2.err"
fi

# herd compare on a simulated platform: table, CSV (baseline + one row per spec), and no plots of its
# own (no .gp, .png or .pdf); tools/herd-plot draws them from what it wrote
if timeout 300 "$herd" compare --platform 10gbe --workers 4 --epochs 2 --model linear --data synthetic:1x12x12:4 \
        --extra "--batch 16 --train-limit 2048 --test-limit 512" --target 0.9 --out "$tmp/cmp" allreduce "asgd --staleness-lr" \
        >"$tmp/cmp.txt" 2>"$tmp/cmp.err" && [ "$(wc -l <"$tmp/cmp/compare.csv")" -eq 4 ] &&
    [ -z "$(ls "$tmp/cmp" | grep '\.\(gp\|png\|pdf\)$')" ] &&
    grep -qF "draw the plots with: herd-plot $tmp/cmp (tools/herd-plot in the source tree)" "$tmp/cmp.err" &&
    timeout 120 "$plot" "$tmp/cmp" 2>"$tmp/cmp-plot.err" &&
    { ! command -v gnuplot >/dev/null || [ -s "$tmp/cmp/accuracy_time.png" ]; } &&
    grep -q '^| asgd --staleness-lr ' "$tmp/cmp.txt"; then
    ok "herd compare on sim: $(($(wc -l <"$tmp/cmp/compare.csv") - 1)) runs in compare.csv, $(ls "$tmp/cmp" | grep -c png) plots by tools/herd-plot"
else
    bad "herd compare on sim"; cat "$tmp/cmp.txt" "$tmp/cmp.err" "$tmp/cmp-plot.err" 2>/dev/null | tail -8
fi
# its figures come from the runs' logs: the CSV's epoch_s is the median of the workers' epoch times, and
# the curve's time at each evaluation its progress times that epoch time (one clock for every algorithm)
cmp_ok=1
for k in 00 01 02; do
    log="$tmp/cmp/run$k.jsonl" dat="$tmp/cmp/run$k.dat"
    med=$(sed -n 's/.*"event":"worker".*"epoch_s":\([0-9][0-9.]*\).*/\1/p' "$log" 2>/dev/null | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%.6f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    csv=$(awk -F, -v r=$((10#$k + 2)) 'NR == r { printf "%.6f", $(NF - 4) }' "$tmp/cmp/compare.csv")
    want=$(sed -n 's/.*"event":"eval".*"progress":\([0-9.]*\).*/\1/p' "$log" 2>/dev/null | awk -v e="$csv" '{ print $1 * e }')
    got=$(awk '!/^#/ { print $2 }' "$dat" 2>/dev/null)
    # the same times to 1e-4 (the CSV's epoch_s is rounded)
    same=$(paste <(printf '%s\n' "$want") <(printf '%s\n' "$got") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if ($2 == "" || d > 1e-4 * ($1 > 0 ? $1 : 1)) bad = 1 } END { print bad ? 0 : NR }')
    # the log prints each worker's epoch_s to 6 decimals while the summary's median is taken
    # before rounding: the two may differ by a unit in the 6th place
    if [ -z "$want" ] || [ "$same" = 0 ] || [ "$(printf '%s\n' "$got" | wc -l)" != "$same" ] || [ -z "$med" ] || [ -z "$csv" ] ||
        ! awk -v a="$med" -v b="$csv" 'BEGIN { d = a - b; exit !(d <= 1.5e-6 && d >= -1.5e-6) }'; then
        cmp_ok=0; echo "run$k: curve times '$got' vs the log's progress x epoch_s '$want'; csv epoch_s '$csv' vs median '$med'"
    fi
done
if [ "$cmp_ok" = 1 ]; then
    ok "herd compare's times: epoch_s the median worker's, curves at progress x that epoch time (3 runs)"
else
    bad "herd compare's times do not come from the logs as documented"
fi
# every curve starts at the untrained model (herd train --eval-at-start): epoch 0, time 0
first=$(for k in 00 01 02; do awk '!/^#/ { print $1 "@" $2; exit }' "$tmp/cmp/run$k.dat" 2>/dev/null; done | tr '\n' ' ')
if [ "$first" = "0@0 0@0 0@0 " ]; then
    ok "herd compare's curves start at epoch 0, time 0 (3 runs)"
else
    bad "herd compare's curves' first rows (epoch@time): '$first', not 0@0 for each run"
fi
# both loss plots of tools/herd-plot draw the same columns, test loss (4, titled) and train loss (5,
# dashed, untitled), and their key names both; the plot of one output is the lines from its 'set output'
# to the next
loss_cols() {
    awk -v f="$1.png'" 'index($0, "set output") { on = index($0, f) > 0 } on' "$tmp/cmp/plots.gp" |
        grep -o '):[0-9] [a-z]*title\|dt [0-9]\|solid: test loss\|dashed: train loss' | sort -u | tr '\n' ' '
}
want_cols="):4 title ):5 notitle dashed: train loss dt 1 dt 2 solid: test loss "
if [ "$(loss_cols loss_time)" = "$want_cols" ] && [ "$(loss_cols loss_epochs)" = "$want_cols" ]; then
    ok "herd compare's loss plots both draw test loss (solid) and train loss (dashed)"
else
    bad "herd compare's loss plots: loss_time '$(loss_cols loss_time)', loss_epochs '$(loss_cols loss_epochs)'," \
        "want '$want_cols'"
fi
# a PDF beside each PNG
if command -v gnuplot >/dev/null; then
    pdf_ok=1
    for png in "$tmp"/cmp/*.png; do
        [ "$(head -c 4 "${png%.png}.pdf" 2>/dev/null)" = "%PDF" ] || { pdf_ok=0; echo "no PDF for $png"; }
    done
    if [ "$pdf_ok" = 1 ] && [ "$(ls "$tmp"/cmp/*.pdf | wc -l)" -eq 4 ]; then
        ok "tools/herd-plot writes a PDF beside each of its 4 PNGs"
    else
        bad "tools/herd-plot's PDFs: $(ls "$tmp"/cmp/*.pdf 2>/dev/null | wc -l) of 4"
    fi
fi
# --scaling: tools/herd-plot's speedup plot's log x axis is ticked at the worker counts run (autofreq or
# "set xtics 1" left it unlabelled), and the ticks and format are reset after it
if timeout 120 "$herd" compare --platform 10gbe --scaling 1,2,4 --epochs 1 --model linear --data synthetic:1x12x12:4 \
        --extra "--train-limit 512 --test-limit 128" --out "$tmp/cmps" allreduce >"$tmp/cmps.txt" 2>"$tmp/cmps.err" &&
    timeout 120 "$plot" "$tmp/cmps" 2>>"$tmp/cmps.err" &&
    [ "$(awk 'index($0, "speedup_workers.png") { on = 1 } on && /^set (xtics|logscale|format)/' "$tmp/cmps/plots.gp" |
        tr '\n' ';')" = "set logscale xy 2;set format xy '%g';set xtics (1, 2, 4);set format xy;set xtics autofreq;" ] &&
    grep -q '^unset logscale$' "$tmp/cmps/plots.gp" &&
    { ! command -v gnuplot >/dev/null || [ "$(head -c 4 "$tmp/cmps/speedup_workers.pdf")" = "%PDF" ]; }; then
    ok "herd compare --scaling 1,2,4, tools/herd-plot: speedup plot ticked at 1, 2, 4 on its log axis, reset after"
else
    bad "herd compare --scaling: the speedup plot's ticks"; cat "$tmp/cmps.err" | tail -4
    awk 'index($0, "speedup_workers.png") { on = 1 } on' "$tmp/cmps/plots.gp" 2>/dev/null | head -20
fi

# --sweep and --models: a crossover map, 2 cells (link bandwidths) x 2 specs x 2 seeds; crossover.csv
# has a row a run, and each cell's winner in crossover.md (and on stdout) is the spec whose runs all
# reached the target with the lowest mean time to it, "none" where no spec's did (awk, from the CSV; the
# specs in the order that puts the slower first)
if timeout 300 "$herd" compare --platform 10gbe --workers 4 --epochs 2 --models linear --data synthetic:1x12x12:4 \
        --sweep link=1Gbps:25us,100Gbps:25us --seeds 2 --no-baseline --target 0.6 \
        --extra "--batch 16 --train-limit 1024 --test-limit 256" --out "$tmp/xo" asgd allreduce \
        >"$tmp/xo.txt" 2>"$tmp/xo.err"; then
    rows=$(awk -F, 'NR > 1 { gsub(/"/, ""); print $1, $3, $4, $5, $7, $8 }' "$tmp/xo/crossover.csv" | sort | tr '\n' ';')
    want="linear 100Gbps:25us linear-2 allreduce 1 ok;linear 100Gbps:25us linear-2 allreduce 2 ok;"
    want+="linear 100Gbps:25us linear-2 asgd 1 ok;linear 100Gbps:25us linear-2 asgd 2 ok;"
    want+="linear 1Gbps:25us linear-1 allreduce 1 ok;linear 1Gbps:25us linear-1 allreduce 2 ok;"
    want+="linear 1Gbps:25us linear-1 asgd 1 ok;linear 1Gbps:25us linear-1 asgd 2 ok;"
    expect=$(awk -F, 'NR > 1 {
            gsub(/"/, ""); cell = $1 " " $3; k = cell SUBSEP $5; n[k]++; cells[cell]
            if ($9 == 1) { r[k]++; t[k] += $10 }
        }
        END {
            for (k in n) {
                split(k, p, SUBSEP)
                if (r[k] == n[k] && (!(p[1] in best) || t[k] / n[k] < best[p[1]])) { best[p[1]] = t[k] / n[k]; win[p[1]] = p[2] }
            }
            for (c in cells) print c, (c in win ? win[c] : "none")
        }' "$tmp/xo/crossover.csv" | sort | tr '\n' ';')
    got=$(awk -F'|' 'NF > 9 && $3 ~ /Gbps/ { gsub(/ /, ""); print $2, $3, $4 }' "$tmp/xo/crossover.md" | sort | tr '\n' ';')
    shown=$(awk -F'|' 'NF > 9 && $3 ~ /Gbps/ { gsub(/ /, ""); print $2, $3, $4 }' "$tmp/xo.txt" | sort | tr '\n' ';')
    if [ "$rows" = "$want" ] && [ -n "$expect" ] && [ "$got" = "$expect" ] && [ "$shown" = "$expect" ] &&
        [ -s "$tmp/xo/linear-1/compare.csv" ] && [ -s "$tmp/xo/linear-2/compare_summary.csv" ] &&
        [ ! -e "$tmp/xo/crossover.png" ] && timeout 120 "$plot" "$tmp/xo" 2>"$tmp/xo-plot.err" &&
        { ! command -v gnuplot >/dev/null || { [ -s "$tmp/xo/crossover.png" ] &&
            [ "$(head -c 4 "$tmp/xo/crossover.pdf")" = "%PDF" ] && [ -s "$tmp/xo/linear-2/accuracy_time.png" ]; }; }; then
        ok "herd compare --sweep: 8 runs in crossover.csv, each cell's winner the lowest mean time to target ($expect)"
    else
        bad "herd compare --sweep: rows '$rows' (want '$want'); winners '$got', stdout '$shown', from the CSV '$expect'"
        tail -3 "$tmp/xo-plot.err" 2>/dev/null
    fi
else
    bad "herd compare --sweep: exit $?"; tail -6 "$tmp/xo.err"
fi

# a swept value herd sim refuses stops herd compare before any run (herd sim --dry-run checks each)
timeout 60 "$herd" compare --platform 10gbe --sweep link=1Gbps:5us,fast:5us --model linear \
    --data synthetic:1x8x8:4 --out "$tmp/xo-bad" allreduce >"$tmp/xo-bad.txt" 2>"$tmp/xo-bad.err"
rc=$?
if [ $rc -eq 2 ] && grep -q "\-\-sweep link value 'fast:5us' is refused (above); no run was started" "$tmp/xo-bad.err" &&
    [ ! -e "$tmp/xo-bad/crossover.csv" ]; then
    ok "herd compare --sweep: a value herd sim refuses stops it before any run (exit 2)"
else
    bad "herd compare --sweep: a refused value: exit $rc"; tail -4 "$tmp/xo-bad.err"
fi

# -- 4. what herd sim refuses, and signals --------------------------------------
# --sim-cfg against SimGrid's own list of keys (smpirun prints it for a key it does not have): each
# key is taken with the value SimGrid prints for it, but for those herd sets from its own flags
# (refused, naming the flag); a key SimGrid lacks is refused
cfg_list=$(timeout 60 "${smpirun[@]}" -np 1 --cfg=herd/no-such-key:0 "$build/herd-sim" train 2>&1 |
    sed -n 's/^  \([^ :]*\): ([a-z]*)\(.*\)$/\1:\2/p')
nkeys=0 cfg_bad=()
while IFS= read -r kv; do
    [ -n "$kv" ] || continue
    nkeys=$((nkeys + 1))
    case ${kv%%:*} in
    smpi/np | smpi/hostfile | smpi/simulate-computation | smpi/host-speed) want=2 ;;
    *) want=0 ;;
    esac
    timeout 30 "$herd" sim --workers 1 --sim-cfg "$kv" --bin /bin/true --keep "$tmp/cfgd" --dry-run -- train \
        >/dev/null 2>"$tmp/cfg.err"
    rc=$?
    [ "$rc" = "$want" ] || cfg_bad+=("$kv (exit $rc, want $want: $(head -1 "$tmp/cfg.err"))")
done <<<"$cfg_list"
timeout 30 "$herd" sim --workers 1 --sim-cfg herd/no-such-key:0 --bin /bin/true --keep "$tmp/cfgd" --dry-run -- train \
    >/dev/null 2>&1
rc=$?
# --measured-compute times each rank's thread: SimGrid's context factory is herd's then
timeout 30 "$herd" sim --workers 1 --measured-compute --sim-cfg contexts/factory:raw --bin /bin/true --keep "$tmp/cfgd" \
    --dry-run -- train >/dev/null 2>"$tmp/cfg.err"
mrc=$?
grep -q "thread contexts" "$tmp/cfg.err" || mrc="$mrc (no reason given)"
[ "$mrc" = 2 ] || cfg_bad+=("--measured-compute with contexts/factory:raw: exit $mrc, want 2")
if [ "$nkeys" -ge 100 ] && [ ${#cfg_bad[@]} -eq 0 ] && [ "$rc" = 2 ]; then
    ok "--sim-cfg: SimGrid's $nkeys configuration keys taken (4 of them herd's own, refused; the context factory with --measured-compute), an unknown one refused"
else
    bad "--sim-cfg against SimGrid's $nkeys keys: unknown key exit $rc (want 2)"; printf '  %s\n' "${cfg_bad[@]}" | head -8
fi

# a platform file of the user's: checked (well-formed, a <platform>, hosts), then run
if timeout 120 "$herd" sim --platform platforms/ib-100g.xml --workers 2 -- train --algo allreduce "${small1[@]}" --epochs 1 \
        >"$tmp/pf.json" 2>"$tmp/pf.err" && grep -q '"platform":"platforms/ib-100g.xml"' "$tmp/pf.json"; then
    ok "--platform platforms/ib-100g.xml: checked and run, test_acc $(field "$tmp/pf.json" test_acc)"
else
    bad "--platform platforms/ib-100g.xml"; tail -3 "$tmp/pf.err"
fi

# SIGTERM and SIGINT to herd sim (SIGINT arrives though a script's background job ignores it):
# forwarded to smpirun's process group, whose smpirun and smpimain end; herd sim removes its
# directory, says so in one line and exits 128 + the signal. herd sim runs with a TMPDIR of its
# own: every process whose command line names it, and every file in it, is this run's.
# Every wait has a bound: smpimain up within 60 s, herd sim ended 30 s after the signal.
long=(--data synthetic:1x12x12:4 --model lenet --epochs 1000 --batch 16 --train-limit 2048 --test-limit 64
      --no-progress --quiet)
# waits up to 60 s for smpimain of a run whose command line holds $1; then 1 s more
await_smpimain() {
    for _ in $(seq 600); do pgrep -f "smpimain.*$1" >/dev/null && break; sleep 0.1; done
    sleep 1
}
# sends signal $2 to pid $1 and waits up to 30 s for it: rc, its exit status, or "hung" (then killed)
signal_and_wait() {
    kill -"$2" "$1"
    for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$1" 2>/dev/null; then kill -KILL "$1"; wait "$1"; rc=hung; else wait "$1"; rc=$?; fi
}
# what is left of a run whose command line and files are under $1 (killed, so that nothing outlives the test)
leftovers() {
    local pids
    pids=$(pgrep -f "$1" | tr '\n' ' ')
    [ -n "$pids" ] && { echo "processes: $pids"; kill -KILL $pids 2>/dev/null; }
    find "$1" -mindepth 1 -maxdepth 2 ! -name '*.out' ! -name '*.err' ! -path "$1/out*" | sed 's/^/file: /'
}
for spec in "TERM 143" "INT 130"; do
    read -r sig code <<<"$spec"
    st="$tmp/sig-$sig"
    mkdir -p "$st"
    TMPDIR=$st "$herd" sim --workers 4 -- train --algo allreduce "${long[@]}" >"$st/run.out" 2>"$st/run.err" &
    pid=$!
    await_smpimain "$st"
    signal_and_wait "$pid" "$sig"
    left=$(leftovers "$st")
    if [ "$rc" = "$code" ] && [ -z "$left" ] && grep -q "^herd: sim stopped by SIG$sig: " "$st/run.err"; then
        ok "SIG$sig to herd sim: exit $rc, no smpirun or smpimain left, its directory removed"
    else
        bad "SIG$sig to herd sim: exit $rc (want $code); $left"; grep -v '^  ->' "$st/run.err" | tail -4
    fi
done
# herd compare on sim, stopped during a run: its herd sim, and that one's smpirun, end; 143
st="$tmp/sig-cmp"
mkdir -p "$st"
TMPDIR=$st "$herd" compare --platform ib-100g --workers 4 --epochs 1000 --model lenet --data synthetic:1x12x12:4 \
    --extra "--batch 16 --train-limit 2048 --test-limit 64" --no-baseline --out "$st/out" allreduce asgd \
    >"$st/run.out" 2>"$st/run.err" &
pid=$!
await_smpimain "$st"
signal_and_wait "$pid" TERM
left=$(leftovers "$st")
if [ "$rc" = 143 ] && [ -z "$left" ] && grep -q "^herd: compare stopped by SIGTERM: 0 of 2 run(s) ended" "$st/run.err" &&
    [ ! -e "$st/out/run01.jsonl" ]; then
    ok "SIGTERM to herd compare on sim: exit 143, its herd sim and smpirun ended, the second run not started"
else
    bad "SIGTERM to herd compare on sim: exit $rc (want 143); $left"; grep -v '^  ->' "$st/run.err" | tail -4
fi

echo "sim engine: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
