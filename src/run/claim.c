/* Asynchronous runs: workers take global batches so that the fast take more
 * of them, and an epoch is the training set used once by all workers
 * together. Batch numbers run over the whole run (epoch = b / per_epoch).
 *
 * Rank 0's window holds the next batch not yet handed out, G, and the stop
 * word a worker leaves when it stops the run on a non-finite value (read at
 * the next lease). The stopping worker also copies the word into every
 * worker's own window, where herd_worker_stopping reads it without leaving
 * the worker's memory: read from rank 0 (every 10 ms), it was a round trip
 * that across hosts queued behind the bulk messages on the same connection
 * (osgp, 2 ranks on two hosts at 1 Gbit/s: 2.3 ms a read, 1.4 ms a step on
 * average, against 4.0 ms of compute). A worker does not go to rank 0
 * for every batch: it leases a range [G, G + k) of its epoch, with k a
 * guided share of what the epoch has left, (left / 2n) (at least 1), and
 * keeps the range's rest in a window of its own {lo, hi}, from which it
 * takes its next batches with a lock nobody else wants but a thief. A worker
 * whose lease is used up and whose epoch has no batch left at G steals the
 * upper half of another worker's lease in the same epoch (the first found,
 * starting after itself), so that a slow worker keeps few batches for long;
 * only when no batch of its epoch is left anywhere does it lease from the
 * next epoch. A lease never crosses an epoch's end or a checkpoint's hold:
 * when G reaches the hold and no lease holds a batch, every worker is
 * between two steps and the checkpoint is taken (loop.c). A lost worker's
 * lease (--fail) is not stolen: its batches are not trained.
 *
 * On the sim engine with 16 workers on 10 GbE, taking every batch from one
 * counter under rank 0's exclusive lock cost about 1 ms per step (a get and
 * a put, two round trips, 16 workers one after another), more than lenet's
 * whole exchange with a sharded center. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "herd/herd_algo.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "algo/run_config.h"
#include "core/clock.h"
#include "core/finite.h"
#include "run/claim.h"
#include "run/nonfinite.h"

/* The stop word in rank 0's claim window: 0 while the run goes on, else
 * what (2 bits: nonfinite_what) << 60 | (rank + 1) << 40 | step. */
static uint64_t stop_word(size_t what, size_t rank, size_t step)
{
    return (uint64_t)what << 60 | ((uint64_t)rank + 1) << 40 | ((uint64_t)step & ((1ull << 40) - 1));
}

herd_status herd__claim_open(herd__claim *cl, herd_worker *w, uint64_t claimed)
{
    herd_status st = HERD_OK;
    cl->counter_buf[0] = claimed;
    cl->counter_buf[1] = 0; /* the stop word */
    cl->lease_buf[0] = cl->lease_buf[1] = cl->lease_buf[2] = 0; /* no lease; this worker's copy of the stop word */
    HERD_TRY(herd_comm_win_create(w->comm, cl->counter_buf, w->rank == 0 ? sizeof cl->counter_buf : 0,
                                  &cl->counter_win));
    HERD_TRY(herd_comm_win_create(w->comm, cl->lease_buf, sizeof cl->lease_buf, &cl->lease_win));
out:
    return st;
}

void herd__claim_close(herd__claim *cl, herd_worker *w)
{
    if (cl->lease_win)
        herd_comm_win_free(w->comm, cl->lease_win);
    if (cl->counter_win)
        herd_comm_win_free(w->comm, cl->counter_win);
}

void herd__claim_log_epoch(const herd__claim *cl, char *buf, size_t cap)
{
    if (cl->lease_win)
        snprintf(buf + strlen(buf), cap - strlen(buf), ",\"leases\":%llu,\"steals\":%llu",
                 (unsigned long long)cl->leases, (unsigned long long)cl->stolen);
}

/* Asynchronous: this worker stops on a non-finite value (its loss or
 * gradient, the model at an evaluation, or another's stop word); the others
 * will read it at their next claim (the first stop word written stays). */
void herd__announce_stop(herd__claim *cl, herd_worker *w, int code)
{
    herd_status st = HERD_OK;
    herd_comm *comm = w->comm;
    size_t what = code ? (size_t)code : 3;
    uint64_t cur = 0, word = stop_word(what, w->rank, w->step);
    HERD_TRY(herd_comm_win_lock(comm, cl->counter_win, 0, true));
    st = herd_comm_win_get(comm, cl->counter_win, 0, sizeof(uint64_t), &cur, sizeof cur);
    if (st == HERD_OK)
        st = herd_comm_win_flush(comm, cl->counter_win, 0);
    if (st == HERD_OK && cur == 0)
        st = herd_comm_win_put(comm, cl->counter_win, 0, sizeof(uint64_t), &word, sizeof word);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->counter_win, 0));
    if (st < 0)
        goto out;
    /* every worker's copy gets the word rank 0 holds (the first written), so
     * all name the same worker */
    if (cur)
        word = cur;
    for (size_t r = 0; r < w->nworkers && st == HERD_OK; r++) {
        uint64_t have = 0;
        if (herd_worker_lost(w, r)) /* its window answers nobody */
            continue;
        if ((st = herd_comm_win_lock(comm, cl->lease_win, r, true)) < 0)
            break;
        st = herd_comm_win_get(comm, cl->lease_win, r, 2 * sizeof(uint64_t), &have, sizeof have);
        if (st == HERD_OK)
            st = herd_comm_win_flush(comm, cl->lease_win, r);
        if (st == HERD_OK && have == 0)
            st = herd_comm_win_put(comm, cl->lease_win, r, 2 * sizeof(uint64_t), &word, sizeof word);
        HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->lease_win, r));
    }
out:
    /* the others will not know (they stop on their own, or at --timeout);
     * EREMOTE: another worker's failure already stopped them */
    if (st < 0 && st != HERD_EREMOTE)
        snprintf(w->err.msg + strlen(w->err.msg), sizeof w->err.msg - strlen(w->err.msg),
                 " (telling the other workers failed: %.100s)", herd_comm_last_error(comm));
}

/* Another worker's stop word, read at a claim: this worker stops too. */
static herd_status stopped_by(herd_worker *w, uint64_t word)
{
    size_t what = (size_t)(word >> 60), rank = (size_t)((word >> 40) & 0xfffff) - 1;
    return herd_err_set(&w->err, HERD_ENONFINITE,
                        "worker %zu found a non-finite %s at its step %zu; the run stops: the learning rate %g may be "
                        "too high%s",
                        rank, herd__nf_what(what), (size_t)(word & ((1ull << 40) - 1)),
                        (double)w->lr, w->cfg->skip_nonfinite ? "" : " (--skip-nonfinite drops such gradients)");
}

herd_status herd__stop_check(herd__claim *cl, herd_worker *w, herd_err *err)
{
    herd_status st = HERD_OK;
    herd_comm *comm = w->comm;
    double now = herd__now();
    if (!cl->counter_win || now - cl->stop_read_at < 0.01)
        return HERD_OK;
    cl->stop_read_at = now;
    uint64_t word = 0;
    size_t me = w->rank;
    HERD_TRY(herd_comm_win_lock(comm, cl->lease_win, me, true));
    st = herd_comm_win_get(comm, cl->lease_win, me, 2 * sizeof(uint64_t), &word, sizeof word);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->lease_win, me));
    if (st == HERD_OK && word)
        st = stopped_by(w, word);
    if (st < 0 && err != &w->err)
        *err = w->err;
out:
    return st;
}

/* The batches of one epoch: per_epoch; the run's: total. */
static uint64_t per_epoch(const herd_worker *w) { return (uint64_t)w->steps_per_epoch * w->nworkers; }

static uint64_t epoch_end(const herd_worker *w, uint64_t b) { return (b / per_epoch(w) + 1) * per_epoch(w); }

/* The next batch of this worker's own lease, if any (*got). */
static herd_status take_own(herd__claim *cl, herd_worker *w, uint64_t *index, bool *got)
{
    herd_status st = HERD_OK;
    herd_comm *comm = w->comm;
    size_t me = w->rank;
    uint64_t l[2] = {0, 0};
    *got = false;
    HERD_TRY(herd_comm_win_lock(comm, cl->lease_win, me, true));
    st = herd_comm_win_get(comm, cl->lease_win, me, 0, l, sizeof l);
    if (st == HERD_OK)
        st = herd_comm_win_flush(comm, cl->lease_win, me);
    if (st == HERD_OK && l[0] < l[1]) {
        *index = l[0]++;
        *got = true;
        st = herd_comm_win_put(comm, cl->lease_win, me, 0, l, sizeof(uint64_t));
    }
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->lease_win, me));
out:
    return st;
}

/* Sets this worker's lease to [lo, hi). */
static herd_status set_own(herd__claim *cl, herd_worker *w, uint64_t lo, uint64_t hi)
{
    herd_status st = HERD_OK;
    herd_comm *comm = w->comm;
    uint64_t l[2] = {lo, hi};
    HERD_TRY(herd_comm_win_lock(comm, cl->lease_win, w->rank, true));
    st = herd_comm_win_put(comm, cl->lease_win, w->rank, 0, l, sizeof l);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->lease_win, w->rank));
out:
    return st;
}

/* Steals the upper half of another worker's lease whose batches lie in the
 * epoch ending at `end` (0: any epoch): the first batch into *index, the
 * rest becomes this worker's lease. */
static herd_status steal(herd__claim *cl, herd_worker *w, uint64_t end, uint64_t *index, bool *got)
{
    herd_status st = HERD_OK;
    herd_comm *comm = w->comm;
    size_t n = w->nworkers;
    *got = false;
    for (size_t j = 1; j < n && !*got; j++) {
        size_t v = (w->rank + j) % n;
        if (herd_worker_lost(w, v))
            continue;
        uint64_t l[2] = {0, 0};
        HERD_TRY(herd_comm_win_lock(comm, cl->lease_win, v, true));
        st = herd_comm_win_get(comm, cl->lease_win, v, 0, l, sizeof l);
        if (st == HERD_OK)
            st = herd_comm_win_flush(comm, cl->lease_win, v);
        if (st == HERD_OK && l[0] < l[1] && (!end || epoch_end(w, l[0]) == end)) {
            uint64_t mid = l[0] + (l[1] - l[0]) / 2, hi = l[1];
            l[1] = mid;
            st = herd_comm_win_put(comm, cl->lease_win, v, sizeof(uint64_t), &l[1], sizeof l[1]);
            if (st == HERD_OK) {
                *index = mid, *got = true;
                cl->end = end ? end : epoch_end(w, mid);
                cl->stolen++;
            }
            HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->lease_win, v));
            if (st == HERD_OK && hi - mid > 1)
                st = set_own(cl, w, mid + 1, hi);
        } else {
            HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->lease_win, v));
        }
        if (st < 0)
            goto out;
    }
out:
    return st;
}

/* Leases from G: within this worker's epoch (cl->end), or, with
 * `next_epoch`, wherever G is. *index = G when nothing was leased (the hold,
 * the run's end, or G past this worker's epoch). */
static herd_status lease(herd__claim *cl, herd_worker *w, uint64_t hold, bool next_epoch, uint64_t *index,
                         bool *got)
{
    herd_status st = HERD_OK;
    herd_comm *comm = w->comm;
    uint64_t got0[2] = {0, 0}; /* G and the stop word */
    uint64_t total = per_epoch(w) * w->cfg->epochs, cap = hold < total ? hold : total;
    *got = false;
    HERD_TRY(herd_comm_win_lock(comm, cl->counter_win, 0, true));
    st = herd_comm_win_get(comm, cl->counter_win, 0, 0, got0, sizeof got0);
    if (st == HERD_OK)
        st = herd_comm_win_flush(comm, cl->counter_win, 0);
    uint64_t g = got0[0];
    *index = g;
    if (st == HERD_OK && got0[1] == 0 && g < cap && (next_epoch || !cl->end || g < cl->end)) {
        uint64_t end = epoch_end(w, g) < cap ? epoch_end(w, g) : cap;
        uint64_t k = (end - g) / (2 * (uint64_t)w->nworkers), next;
        k = k ? k : 1;
        next = g + k;
        st = herd_comm_win_put(comm, cl->counter_win, 0, 0, &next, sizeof next);
        if (st == HERD_OK) {
            *got = true;
            cl->end = epoch_end(w, g);
            cl->leases++;
        }
        HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->counter_win, 0));
        if (st == HERD_OK && k > 1)
            st = set_own(cl, w, g + 1, next);
    } else {
        HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, cl->counter_win, 0));
    }
    if (st == HERD_OK && got0[1])
        st = stopped_by(w, got0[1]);
out:
    return st;
}

/* Claims the next global batch (see the top comment). At the hold (a
 * checkpoint's) nothing is claimed and *index == hold; past the last batch
 * *index >= the run's total. */
herd_status herd__claim_batch(herd__claim *cl, herd_worker *w, uint64_t *index, uint64_t hold)
{
    herd_status st = HERD_OK;
    bool got = false;
    HERD_TRY(take_own(cl, w, index, &got));
    if (got)
        return herd__stop_check(cl, w, &w->err);
    HERD_TRY(lease(cl, w, hold, false, index, &got));
    if (got)
        goto out;
    /* G is at the hold, at the end, or past this worker's epoch: what is
     * left of the epoch lies in others' leases */
    HERD_TRY(steal(cl, w, cl->end, index, &got));
    if (got)
        goto out;
    HERD_TRY(lease(cl, w, hold, true, index, &got));
out:
    return st;
}
