#!/bin/bash
# Checkpoints on the mpi engine: for each synchronous algorithm, a run
# killed mid-way (--fail RANK@STEP:kill, after its second checkpoint) and
# resumed with --resume ends bit for bit as the run that was not stopped:
# the same JSON test_loss, test_acc and train_loss, and the same bytes in
# its final checkpoint file (every rank's weights, momentum, cursor and the
# algorithm's state). Then a corrupt newest checkpoint falls back to the
# older one (with a warning) and still ends the same, a run checkpointed on
# the mpi engine resumes on the threads engine, ranks that read different
# checkpoints of one step are refused, and an asynchronous algorithm is
# refused (exit 2, naming it).
# usage: tests/mpi/ckpt_checks.sh HERD_BIN "MPIRUN..." [ALGO:NP ...]
set -u
bin=$1 mpirun=$2
shift 2
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(allreduce:3 dpsgd:2 localsgd:4 easgd:2)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/herd-mpi-ckpt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# 3 epochs of 21 steps a worker (1024 examples, batch 16, 3 ranks), a
# checkpoint every 10 steps: the victim dies at step 25, after the one of step 20
common=(--data synthetic:1x12x12:4 --model linear --epochs 3 --batch 16 --train-limit 1024 --test-limit 256
        --momentum 0.9 --timeout 30 --no-progress --json --checkpoint-every 10)
fail=0
# figures STDOUT: the JSON summary's test_acc, test_loss and train_loss
figures() { printf '%s\n' "$1" | grep '^{' | tail -1 | grep -o '"test_acc":[^,]*,"test_loss":[^,]*,"train_loss":[^,]*'; }
# newest DIR: the checkpoint file of the highest step
newest() { ls "$1" | sed -n 's/^ckpt-\([0-9]*\)\.herd$/\1/p' | sort -n | tail -1; }
# report OK TEXT [OUTPUT]
report() {
    if [ "$1" = 1 ]; then
        echo "ok    $2"
    else
        echo "FAIL  $2"
        [ -n "${3:-}" ] && printf '%s\n' "$3" | tail -5
        fail=1
    fi
}

for check in "${checks[@]}"; do
    algo=${check%%:*} np=${check##*:}
    whole=$tmp/$algo-whole cut=$tmp/$algo-cut
    ref=$(timeout 120 $mpirun -np "$np" "$bin" train --algo "$algo" "${common[@]}" --checkpoint "$whole" 2>/dev/null)
    want=$(figures "$ref")
    printf '%s\n' "$want" >"$tmp/$algo.want"
    timeout 120 $mpirun -np "$np" "$bin" train --algo "$algo" "${common[@]}" --checkpoint "$cut" \
        --fail "$((np - 1))@25:kill" >/dev/null 2>&1
    rc=$? killed_at=$(newest "$cut")
    out=$(timeout 120 $mpirun -np "$np" "$bin" train --algo "$algo" "${common[@]}" --checkpoint "$cut" --resume 2>"$tmp/err")
    got=$(figures "$out") last=$(newest "$whole")
    ok=0
    [ -n "$want" ] && [ "$rc" -ne 0 ] && [ "$killed_at" = 20 ] && [ "$got" = "$want" ] &&
        cmp -s "$whole/ckpt-$last.herd" "$cut/ckpt-$last.herd" && ok=1
    report $ok "mpi checkpoint $algo, $np ranks: killed at step 25 (exit $rc, newest ckpt-$killed_at), resumed: $got, ckpt-$last.herd bit for bit" "$(cat "$tmp/err")"
done

# A corrupt newest checkpoint: the resume falls back to the one before, says
# so, and still ends bit for bit. First, a copy of the intact one for the
# threads engine.
cut=$tmp/corrupt whole=$tmp/allreduce-whole last=$(newest "$tmp/allreduce-whole")
timeout 120 $mpirun -np 3 "$bin" train --algo allreduce "${common[@]}" --checkpoint "$cut" --fail 1@25:exit1 >/dev/null 2>&1
mkdir "$tmp/threads" "$tmp/mixA" && cp "$cut/ckpt-20.herd" "$tmp/threads/" && cp "$cut/ckpt-20.herd" "$tmp/mixA/"
printf 'XXXX' | dd of="$cut/ckpt-20.herd" bs=1 seek=4000 conv=notrunc status=none
out=$(timeout 120 $mpirun -np 3 "$bin" train --algo allreduce "${common[@]}" --checkpoint "$cut" --resume 2>"$tmp/err")
ok=0
grep -q "skipped 1 newer checkpoint" "$tmp/err" && grep -q "resuming from .*ckpt-10.herd" "$tmp/err" &&
    [ "$(figures "$out")" = "$(cat "$tmp/allreduce.want")" ] && cmp -s "$whole/ckpt-$last.herd" "$cut/ckpt-$last.herd" && ok=1
report $ok "mpi checkpoint, corrupt ckpt-20.herd: resumed from ckpt-10.herd with a warning, $(figures "$out"), ckpt-$last.herd bit for bit" "$(cat "$tmp/err")"

# The same file on either engine: the mpi run's checkpoint of step 20
# resumes on the threads engine with as many workers and herd's ring (the
# mpi engine's allreduce), and ends bit for bit as the mpi run.
out=$(timeout 120 "$bin" train --engine threads --workers 3 --allreduce ring --algo allreduce "${common[@]}" \
    --checkpoint "$tmp/threads" --resume 2>"$tmp/err")
rc=$? ok=0
grep -q "resuming from .*ckpt-20.herd" "$tmp/err" && [ "$(figures "$out")" = "$(cat "$tmp/allreduce.want")" ] &&
    cmp -s "$whole/ckpt-$last.herd" "$tmp/threads/ckpt-$last.herd" && ok=1
report $ok "mpi checkpoint resumed on the threads engine (3 workers, --allreduce ring): exit $rc, ckpt-$last.herd bit for bit" "$(cat "$tmp/err")"

# Ranks that read checkpoints of the same step but not the same bytes (two
# directories: here one whose run skipped a step on a NaN: other weights,
# the same options, which the header does not tell apart; another --lr
# would be refused by each rank alone) are refused, naming the step and
# both digests; they used to go on with different replicas, exit 0.
timeout 120 $mpirun -np 3 "$bin" train --algo allreduce "${common[@]}" --skip-nonfinite --inject-nan 0@5 --max-steps 20 \
    --checkpoint "$tmp/lr" >/dev/null 2>&1
mkdir "$tmp/mixB" && cp "$tmp/lr/ckpt-20.herd" "$tmp/mixB/"
out=$(timeout 120 $mpirun -np 2 "$bin" train --algo allreduce "${common[@]}" --checkpoint "$tmp/mixA" --resume : \
    -np 1 "$bin" train --algo allreduce "${common[@]}" --checkpoint "$tmp/mixB" --resume 2>&1 >/dev/null)
rc=$? ok=0
[ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q "read checkpoints of step 20 that differ (content digests" && ok=1
report $ok "mpi checkpoint, ranks reading other checkpoints of step 20: refused (exit $rc)" "$out"

# Asynchronous algorithms are refused on the mpi engine, once, naming the algorithm.
out=$(timeout 60 $mpirun -np 2 "$bin" train --algo asgd "${common[@]}" --checkpoint "$tmp/async" 2>&1 >/dev/null)
rc=$?
n=$(printf '%s\n' "$out" | grep -c -- "^herd: --checkpoint: --algo asgd is asynchronous")
ok=0
[ $rc -eq 2 ] && [ "$n" -eq 1 ] && ok=1
report $ok "mpi checkpoint --algo asgd, 2 ranks: refused (exit $rc, said $n times)" "$out"
exit $fail
