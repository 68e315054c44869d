#!/bin/bash
# The failure matrix on the mpi engine: for each algorithm family and each way
# a rank can die (--fail RANK@STEP:MODE, MODE exit0, exit1, abort, kill), and
# for a rank that stalls past --timeout (--slow), the job must end with a
# non-zero status, within --timeout plus some slack (never a hang), and its
# output must name the rank that failed; a stall must also name the step.
# Open MPI 4.1 has no fault tolerance: the aim is a clean, named stop.
# usage: tests/mpi/fail_matrix.sh HERD_BIN "MPIRUN..." [MPI_CHECKS_BIN]
#   with MPI_CHECKS_BIN, also a window lock held past the timeout
#   (mpi_checks --lock-stall): the waiting rank must be stopped, naming it.
#   FULL=1 runs every algorithm of every family (by default each mode takes
#   one algorithm of each family in turn, so all eight are covered).
set -u
bin=$1 mpirun=$2 checks=${3:-}
np=3 victim=1 step=2 tmo=3 slack=15
bound=$((tmo + slack))
# family:algorithm...
families=(allreduce:allreduce ps:asgd elastic:aeasgd,easgd gossip:dpsgd,adpsgd pushsum:sgp,osgp)
modes=(exit0 exit1 abort kill)
# a long run cut short by --max-steps: every rank reaches the failure step
# even where asynchronous ranks share out batches and a late starter could
# otherwise find none left
common=(--data synthetic:1x12x12:4 --model linear --batch 16 --train-limit 1024 --test-limit 128 --epochs 100
        --max-steps 200 --timeout "$tmo" --no-progress --quiet)

rows=() fail=0
# run FAMILY ALGO MODE EXTRA...: one row of the table
run() {
    local family=$1 algo=$2 mode=$3
    shift 3
    local t0 t1 out rc secs named ok
    t0=$(date +%s.%N)
    if [ "$mode" = lock ]; then
        out=$(timeout -k 5 "$bound" $mpirun -np "$np" "$checks" --lock-stall 2>&1)
    else
        out=$(timeout -k 5 "$bound" $mpirun -np "$np" "$bin" train --algo "$algo" "${common[@]}" "$@" 2>&1)
    fi
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    # named: by mpirun or by a survivor, not only by the failing rank's own
    # last words ("dies at step")
    local others
    others=$(printf '%s\n' "$out" | grep -v 'dies at step')
    named=no
    local who="(rank $victim([^0-9]|\$)|in-neighbour $victim([^0-9]|\$)|\[\[[0-9]+,[0-9]+\],$victim\])"
    if [ "$mode" = stall ]; then
        case $algo in asgd | aeasgd | adpsgd) who="timed out after" ;; esac
    fi
    [ "$mode" = lock ] && who="rank 2: timed out after 1 s in MPI_Win_lock on rank 0's window"
    if printf '%s\n' "$others" | grep -Eq "$who"; then
        named=yes
        # a stall is reported by the survivors, with the step they were at
        [ "$mode" = stall ] && ! printf '%s\n' "$others" | grep -q 'step [0-9]' && named=no-step
    fi
    # in time: `timeout` did not have to stop it (its 124, or 137 after -k;
    # a rank's SIGKILL also makes mpirun return 137, hence the clock)
    ok=ok
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && awk -v s="$secs" -v b="$bound" 'BEGIN { exit !(s < b) }' &&
        [ "$named" = yes ] || ok=FAIL
    rows+=("$(printf '%-9s %-9s %-6s %4s %6s  %-8s %s' "$family" "$algo" "$mode" "$rc" "$secs" "$named" "$ok")")
    if [ "$ok" = FAIL ]; then
        fail=1
        printf 'FAIL  %s %s %s (rc %s, %s s, named %s); output:\n' "$family" "$algo" "$mode" "$rc" "$secs" "$named"
        printf '%s\n' "$out" | grep -v '^\s*$' | tail -15 | sed 's/^/      /'
    fi
}

for m in "${!modes[@]}"; do
    mode=${modes[$m]}
    for fa in "${families[@]}"; do
        family=${fa%%:*}
        IFS=, read -ra algos <<<"${fa#*:}"
        if [ -n "${FULL:-}" ]; then
            for algo in "${algos[@]}"; do run "$family" "$algo" "$mode" --fail "$victim@$step:$mode"; done
        else
            run "$family" "${algos[$((m % ${#algos[@]}))]}" "$mode" --fail "$victim@$step:$mode"
        fi
    done
done
# Stalls: rank $victim computes far longer than --timeout. Synchronous
# algorithms wait for it at once and name it; asynchronous ones (FULL=1)
# only in the final barrier (--max-steps), which cannot tell who is missing:
# they must stop in time, saying they timed out.
stalls=(allreduce:allreduce elastic:easgd gossip:dpsgd pushsum:sgp)
[ -n "${FULL:-}" ] && stalls+=(ps:asgd elastic:aeasgd gossip:adpsgd pushsum:osgp)
for fa in "${stalls[@]}"; do
    run "${fa%%:*}" "${fa#*:}" stall --slow "$victim:1000000"
done

[ -n "$checks" ] && run window mpi_checks lock

printf '\nfailure matrix: %d ranks, rank %d fails at step %d, --timeout %d s, bound %d s\n' "$np" "$victim" "$step" "$tmo" "$bound"
printf '%-9s %-9s %-6s %4s %6s  %-8s %s\n' family algo mode rc secs named result
printf '%s\n' "${rows[@]}"
exit $fail
