#!/usr/bin/env bash
# Every algorithm learns at its defaults: herd train --algo A --model lenet
# --epochs 1 on a slice of Fashion-MNIST, with no --lr or --momentum, at 4 and
# 8 workers (sgd: 1), must reach a test accuracy (the algorithm's kept model:
# server, center, average...) of at least MIN4 / MIN8 / MIN1. A default that
# diverges or stops learning ends near 0.10 and fails here. One ok/FAIL line
# per run, a summary, exit 1 on any failure. Then the large-batch optimizers
# at their defaults (--optimizer O alone): allreduce, 8 workers x batch 512,
# lenet, LB_EPOCHS (3) epochs of the whole training set, at least MIN_LB
# (0.75: bench/lab run optimizer-defaults measured lars 0.80/0.83, lamb 0.80/0.82 on
# seeds 1/2; lars's defaults before them ended at 0.16).
#   tests/learn_defaults.sh [HERD_BIN]           the CI slice (make test-learn)
#   ALGOS="amsgd asgd" SEEDS="1 2 3" tests/learn_defaults.sh
#   EXTRA="--lr 20" tests/learn_defaults.sh      must fail: a diverging run is seen
#   TRAIN_LIMIT=0 TEST_LIMIT=0 MIN4=0.80 MIN8=0.75 tests/learn_defaults.sh   the full data
#   SIM_WORKERS="16 32" WORKERS= OPTIMIZERS= tests/learn_defaults.sh   (make test-learn-sim)
# SIM_WORKERS: every multi-worker algorithm also on herd sim's 10gbe at each
# of these sizes, on 1024 training images per worker (16 steps of 64 each),
# at least MIN8. A simulated run repeats (its times and order are the
# simulator's), so it runs once. Measured (seed 1, 2026-11-28): at 16
# workers 0.40 (easgd) to 0.67 (asgd); at 32, 0.43 (eawild) to 0.62; asgd
# and hogwild diverged at 16 (a non-finite loss at step 11) until
# --staleness-lr became their default.
# The slice and the thresholds were chosen by measurement (test accuracy;
# a diverged run ends near 0.10 or stops on a non-finite loss, exit 1; a
# run that does not learn stays near chance; the whole data at the same
# defaults: bench/lab run learn-defaults):
#   every algorithm, 16384 images, seed 1 (lowest): 4 workers 0.6970 (easgd), 8: 0.5740 (hogwild)
#   asgd, 8 workers, 16384 images, seed 2, three runs: 0.5895 0.6795 0.7200
#   8192 images, seeds 1-2 (lowest, asgd left out): 4 workers 0.6325 (easgd), 8: 0.5210 (amsgd)
#   asgd, 8 workers, 8192 images, seed 2, four runs: 0.0985 0.2150 0.5810 0.5635
#   EXTRA="--lr 20" (allreduce, asgd, amsgd, easgd, sgp, localsgd): non-finite loss, exit 1
#   EXTRA="--lr 0.0001" (allreduce, amsgd): 4 workers 0.1415, 0.1315; 8: 0.1235, 0.1315
#   amsgd at the old --lr 0.05 --momentum 0.9: 0.0950 at 4 and 8
# 8192 images were too few: asgd's 8 workers take 16 steps each there, and
# one stale burst early on left two of four runs at 0.10-0.22 with no time
# to recover (on the whole data the same seed gives 0.8045), so the slice
# is 16384. Each run takes 1-3 s of CPU. Environment: ALGOS, WORKERS ("4 8"),
# SEEDS ("1"), TRAIN_LIMIT (16384; 0: all), TEST_LIMIT (2000; 0: all), MIN1,
# MIN4, MIN8, DATA (herd's default), EXTRA (more flags), TIMEOUT (s per run, 120),
# OPTIMIZERS ("lars lamb"; "" for none), MIN_LB, LB_EPOCHS.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${1:-build/herd}
ALGOS=${ALGOS:-"sgd allreduce asgd amsgd hogwild easgd aeasgd ameasgd hogwild-easgd eawild dpsgd adpsgd sgp osgp localsgd postlocal"}
WORKERS=${WORKERS-"4 8"}
SEEDS=${SEEDS:-1}
TRAIN_LIMIT=${TRAIN_LIMIT:-16384}
TEST_LIMIT=${TEST_LIMIT:-2000}
# 8 workers: 0.25, well below the least seen (asgd, 0.3975 in a fresh-clone
# CI on an idle machine) and well above what a run that learns nothing ends
# at (--lr 0.0001: 0.12-0.14; diverged: 0.10 or a non-finite stop)
MIN1=${MIN1:-0.60} MIN4=${MIN4:-0.50} MIN8=${MIN8:-0.25}
OPTIMIZERS=${OPTIMIZERS-"lars lamb"} MIN_LB=${MIN_LB:-0.75} LB_EPOCHS=${LB_EPOCHS:-3}
TIMEOUT=${TIMEOUT:-120} SIM_WORKERS=${SIM_WORKERS:-}
read -r -a extra <<< "${EXTRA:-}"
data=()
[ -n "${DATA:-}" ] && data=(--data "$DATA")

[ -x "$bin" ] || { echo "learn-defaults: no herd binary at $bin (make first)"; exit 1; }
runs=0 failed=0 t0=$SECONDS
# one run of herd train with these flags (after "${launch[@]}": herd sim's, or none): sets out, rc and acc
launch=()
train_once() {
    out=$(timeout "$TIMEOUT" "$bin" "${launch[@]}" train "$@" "${data[@]}" --no-progress --quiet --json "${extra[@]}" 2>&1)
    rc=$?
    acc=$(printf '%s\n' "$out" | sed -n 's/.*"test_acc":\([0-9.]*\).*/\1/p' | tail -n 1)
}
passes() { [ "$rc" -eq 0 ] && [ -n "$acc" ] && awk -v a="$acc" -v m="$1" 'BEGIN { exit !(a >= m) }'; }
# one check: what it is called, its threshold, then its flags. A run that
# ends below its threshold with exit 0 runs once more, and the check passes
# if that one clears it: an asynchronous run's interleaving differs run to
# run, and on two busy cores one stale burst early on can leave a default
# that learns near chance (asgd and amsgd, 8 workers: 0.124 and 0.088 in
# one fresh-clone CI of 2026-11-28; 0.44-0.73 in 32 reruns of that build
# and the one before, 12 on an idle machine and 20 beside a busy process).
# A default that diverges, stops or does not learn fails both
# runs; a synchronous run repeats its first.
check() {
    local what=$1 min=$2 t=$SECONDS first=
    shift 2
    train_once "$@"
    if ! passes "$min" && [ "$rc" -eq 0 ] && [ ${#launch[@]} -eq 0 ]; then
        first=$acc
        train_once "$@"
    fi
    what="$what: test_acc ${acc:-none} (at least $min)${first:+ on a second run, the first ${first:-none}}, exit $rc, $((SECONDS - t)) s"
    runs=$((runs + 1))
    if passes "$min"; then
        echo "ok    $what"
    else
        echo "FAIL  $what"
        [ "$rc" -ne 0 ] && printf '%s\n' "$out" | tail -n 3 | sed 's/^/      /'
        failed=$((failed + 1))
    fi
}
for algo in $ALGOS; do
    workers=$WORKERS
    [ "$algo" = sgd ] && [ -n "$WORKERS" ] && workers=1 # the single-worker baseline
    for n in $workers; do
        min=MIN$n
        min=${!min:-$MIN8}
        for seed in $SEEDS; do
            check "$algo, $n worker(s), seed $seed" "$min" --algo "$algo" --workers "$n" --model lenet --epochs 1 \
                --seed "$seed" --train-limit "$TRAIN_LIMIT" --test-limit "$TEST_LIMIT"
        done
    done
done
for n in $SIM_WORKERS; do
    launch=(sim --platform 10gbe --workers "$n" --)
    for algo in $ALGOS; do
        [ "$algo" = sgd ] && continue
        for seed in $SEEDS; do
            check "$algo, herd sim 10gbe, $n workers, seed $seed" "$MIN8" --algo "$algo" --model lenet --epochs 1 \
                --seed "$seed" --train-limit $((1024 * n)) --test-limit "$TEST_LIMIT"
        done
    done
    launch=()
done
for opt in $OPTIMIZERS; do
    check "--optimizer $opt, 8 x 512, $LB_EPOCHS epochs" "$MIN_LB" --algo allreduce --workers 8 --batch 512 \
        --model lenet --epochs "$LB_EPOCHS" --optimizer "$opt"
done
echo "learn-defaults: $runs runs, $((runs - failed)) ok, $failed FAIL ($((SECONDS - t0)) s)"
[ "$failed" -eq 0 ]
