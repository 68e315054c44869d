#!/bin/bash
# End-to-end training on the mpi engine: each algorithm learns a small
# synthetic problem under mpirun and reports through rank 0's JSON summary.
# usage: tests/mpi/train_checks.sh HERD_BIN "MPIRUN..." [ALGO:NP ...]
set -u
bin=$1 mpirun=$2
shift 2
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(allreduce:3 asgd:3 amsgd:2 hogwild:4 asgd:1 dpsgd:3 adpsgd:4 sgp:3 osgp:4 easgd:3 aeasgd:4 ameasgd:2 hogwild-easgd:3 eawild:4)
fail=0
for check in "${checks[@]}"; do
    algo=${check%%:*} np=${check##*:}
    extra=()
    [ "$algo" = amsgd ] && extra=(--lr 0.01)
    out=$(timeout 120 $mpirun -np "$np" "$bin" train --algo "$algo" --data synthetic:1x12x12:4 --model linear \
        --epochs 2 --batch 16 --train-limit 2048 --test-limit 512 --timeout 30 --no-progress --quiet --json \
        "${extra[@]}" 2>&1)
    acc=$(printf '%s\n' "$out" | sed -n 's/.*"test_acc":\([0-9.]*\).*/\1/p' | tail -1)
    if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a > 0.8) }'; then
        echo "ok    mpi train $algo, $np ranks: test_acc $acc"
    else
        echo "FAIL  mpi train $algo, $np ranks: test_acc '${acc}'"
        printf '%s\n' "$out" | tail -5
        fail=1
    fi
done
# A NaN injected into worker 1's gradient at its step 1 stops a synchronous
# (allreduce: at that step; dpsgd: at the end of the epoch, settled) and an
# asynchronous run under mpirun: every rank stops (no --timeout wait),
# with the message, and mpirun exits non-zero.
for algo in allreduce asgd dpsgd; do
    # lenet, not linear: asgd's ranks share out the batches, and with steps of
    # microseconds the others could take them all before rank 1 starts
    out=$(timeout 120 $mpirun -np 3 "$bin" train --engine mpi --algo "$algo" --data synthetic:1x12x12:4 --model lenet --epochs 1 \
        --batch 16 --train-limit 8192 --test-limit 512 --timeout 30 --no-progress --quiet --inject-nan 1@1 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s\n' "$out" | grep -q "non-finite gradient.*step 1\|step 1 (epoch 1): non-finite gradient on worker 1"; then
        echo "ok    mpi train $algo --inject-nan 1@1, 3 ranks: stopped (exit $rc)"
    else
        echo "FAIL  mpi train $algo --inject-nan 1@1, 3 ranks: exit $rc"
        printf '%s\n' "$out" | tail -5
        fail=1
    fi
done
# The checks below need Open MPI's mpirun: an MPMD launch (smpirun has none),
# and ranks in processes of their own (SMPI's share one environment).
openmpi=1
case "$mpirun" in *smpirun*) openmpi=0; echo "skip  MPMD and per-process checks under smpirun" ;; esac

if [ $openmpi = 1 ]; then
    # Ranks started with different options (an MPMD launch) are refused before
    # the algorithm's first message, on every rank, with one message naming what
    # differs and the ranks (were: heap corruption, a hang, MPI_ERR_REQUEST, or
    # exit 0 with a wrong answer): model, algorithm, wire type, batch, and an
    # option the agreed record takes from the run's table (HERD_OPT_AGREE).
    base=(train --data synthetic:1x12x12:4 --epochs 1 --train-limit 512 --test-limit 128 --timeout 30 --no-progress)
    # --algo allreduce, unless the rank's options name the algorithm (a flag is given once)
    algo_of() { case "$1" in *--algo*) ;; *) echo --algo allreduce ;; esac; }
    for spec in "--model lenet|--model linear|--model linear|--model lenet (rank 0) / linear (ranks 1-2)" \
        "--algo asgd|--algo allreduce|--algo asgd|--algo asgd (ranks 0,2) / allreduce (rank 1)" \
        "--comm-dtype fp16|--comm-dtype fp32|--comm-dtype fp16|--comm-dtype fp16 (ranks 0,2) / fp32 (rank 1)" \
        "--batch 16|--batch 16|--batch 32|--batch 16 (ranks 0-1) / 32 (rank 2)" \
        "--inject-nan 0@900|--inject-nan 0@900|--inject-nan 1@900|--inject-nan 0@900 (ranks 0-1) / 1@900 (rank 2)"; do
        IFS='|' read -r a0 a1 a2 want <<<"$spec"
        # shellcheck disable=SC2086 # each spec's options are words
        out=$(timeout 120 $mpirun -np 1 "$bin" "${base[@]}" $(algo_of "$a0") $a0 : -np 1 "$bin" "${base[@]}" $(algo_of "$a1") $a1 \
            : -np 1 "$bin" "${base[@]}" $(algo_of "$a2") $a2 2>&1)
        rc=$?
        said=$(printf '%s\n' "$out" | grep -c "^herd: ranks started with different configurations")
        if [ $rc -eq 2 ] && [ "$said" -eq 1 ] && printf '%s\n' "$out" | grep -qF -- "$want" &&
            ! printf '%s\n' "$out" | grep -q "stopping after this step\|corrupt\|Segmentation"; then
            echo "ok    mpi train, ranks disagree: $want (exit 2, said once)"
        else
            echo "FAIL  mpi train, ranks disagree on '$want': exit $rc, said $said times"
            printf '%s\n' "$out" | tail -5
            fail=1
        fi
    done
    # A usage error and a configuration refused before the world starts are
    # said once (rank 0), not once per rank.
    for bad in "--bogus|unknown flag '--bogus'" "--model foo|unknown model 'foo'"; do
        flag=${bad%%|*} says=${bad#*|}
        out=$(timeout 60 $mpirun -np 3 "$bin" train $flag 2>&1)
        rc=$?
        n=$(printf '%s\n' "$out" | grep -cF -- "$says")
        if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ]; then
            echo "ok    mpi train $flag, 3 ranks: said once (exit $rc)"
        else
            echo "FAIL  mpi train $flag, 3 ranks: exit $rc, said $n times"
            fail=1
        fi
    done
    # The size mpirun gives is known before the world starts: --workers
    # another is a usage error (exit 2, said once) for the run and --dry-run
    # alike, and --dry-run checks the algorithm at that size (sgd refuses 2).
    for bad in "--workers 3|--workers 3 does not match the 2 processes the launcher started" \
        "--workers 3 --dry-run|--workers 3 does not match the 2 processes the launcher started" \
        "--algo sgd --dry-run|--algo sgd runs on at most 1 worker(s), got --workers 2"; do
        flags=${bad%%|*} says=${bad#*|}
        # shellcheck disable=SC2086 # the flags' words
        out=$(timeout 60 $mpirun -np 2 "$bin" train --data synthetic:1x12x12:4 --model linear --epochs 1 \
            --train-limit 256 --quiet $flags 2>&1)
        rc=$?
        n=$(printf '%s\n' "$out" | grep -cF -- "$says")
        if [ $rc -eq 2 ] && [ "$n" -eq 1 ]; then
            echo "ok    mpi train $flags, 2 ranks: refused once (exit 2)"
        else
            echo "FAIL  mpi train $flags, 2 ranks: exit $rc, said $n times"
            fail=1
        fi
    done
    # Only rank 1 has it (MPMD): rank 1 says it, naming itself, and the job ends.
    out=$(timeout 60 $mpirun -np 1 "$bin" train --data synthetic:1x12x12:4 --model linear --epochs 1 \
        --train-limit 256 --quiet : -np 1 "$bin" train --bogus 2>&1)
    rc=$?
    n=$(printf '%s\n' "$out" | grep -cF -- "herd (rank 1): unknown flag '--bogus'")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ]; then
        echo "ok    mpi train --bogus on rank 1 only: rank 1 says it (exit $rc)"
    else
        echo "FAIL  mpi train --bogus on rank 1 only: exit $rc, said $n times"
        fail=1
    fi
fi
# One run, one id: every rank's log names it; the evaluation is rank 0's,
# elsewhere null (was 0.0).
logdir=$(mktemp -d "${TMPDIR:-/tmp}/herd-mpi-log.XXXXXX")
timeout 60 $mpirun -np 2 "$bin" train --data synthetic:1x12x12:4 --model linear --epochs 1 --train-limit 512 \
    --test-limit 128 --timeout 30 --quiet --log "$logdir/run.jsonl" >/dev/null 2>&1
ids=$(cat "$logdir"/run.jsonl* 2>/dev/null | sed -n 's/.*"event":"start","run_id":"\([0-9a-f]*\)".*/\1/p' | sort -u)
if [ "$(printf '%s\n' "$ids" | grep -c .)" -eq 1 ] && grep -q '"event":"end","test_acc":null' "$logdir/run.jsonl.rank1" &&
    grep -q '"event":"end","test_acc":0\.' "$logdir/run.jsonl"; then
    echo "ok    mpi train --log, 2 ranks: one run id ($ids), rank 1's evaluation null"
else
    echo "FAIL  mpi train --log, 2 ranks: run ids '$ids'"; tail -2 "$logdir"/run.jsonl*
    fail=1
fi
rm -rf "$logdir"
exit $fail
