/* Asynchronous runs: workers claim global batches from one counter in a
 * window on rank 0, so the fast take more of them; the same window holds
 * the stop word a worker leaves when it stops the run on a non-finite
 * value, which the others read at their next claim or in a wait
 * (herd_worker_stopping). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "herd/herd_algo.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "core/clock.h"
#include "core/finite.h"
#include "run/log.h"
#include "run/run.h"

/* The stop word in rank 0's claim window: 0 while the run goes on, else
 * what (2 bits: nonfinite_what) << 60 | (rank + 1) << 40 | step. */
static uint64_t stop_word(size_t what, size_t rank, size_t step)
{
    return (uint64_t)what << 60 | ((uint64_t)rank + 1) << 40 | ((uint64_t)step & ((1ull << 40) - 1));
}

/* Asynchronous: this worker stops on a non-finite value (its loss or
 * gradient, the model at an evaluation, or another's stop word); the others
 * will read it at their next claim (the first stop word written stays). */
void herd__announce_stop(worker_ctx *c)
{
    herd_status st = HERD_OK;
    herd_comm *comm = c->w.comm;
    size_t what = herd__nf_code(c) ? (size_t)herd__nf_code(c) : 3;
    uint64_t cur = 0, word = stop_word(what, c->w.rank, c->w.step);
    HERD_TRY(herd_comm_win_lock(comm, c->claim_win, 0, true));
    st = herd_comm_win_get(comm, c->claim_win, 0, sizeof(uint64_t), &cur, sizeof cur);
    if (st == HERD_OK)
        st = herd_comm_win_flush(comm, c->claim_win, 0);
    if (st == HERD_OK && cur == 0)
        st = herd_comm_win_put(comm, c->claim_win, 0, sizeof(uint64_t), &word, sizeof word);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, c->claim_win, 0));
out:
    /* the others will not know (they stop on their own, or at --timeout);
     * EREMOTE: another worker's failure already stopped them */
    if (st < 0 && st != HERD_EREMOTE)
        snprintf(c->w.err.msg + strlen(c->w.err.msg), sizeof c->w.err.msg - strlen(c->w.err.msg),
                 " (telling the other workers failed: %.100s)", herd_comm_last_error(comm));
}

/* Another worker's stop word, read at a claim: this worker stops too. */
static herd_status stopped_by(worker_ctx *c, uint64_t word)
{
    size_t what = (size_t)(word >> 60), rank = (size_t)((word >> 40) & 0xfffff) - 1;
    return herd_err_set(&c->w.err, HERD_ENONFINITE,
                        "worker %zu found a non-finite %s at its step %zu; the run stops: the learning rate %g may be "
                        "too high%s",
                        rank, herd__nf_what(what), (size_t)(word & ((1ull << 40) - 1)),
                        (double)c->w.lr, c->run->cfg->skip_nonfinite ? "" : " (--skip-nonfinite drops such gradients)");
}

herd_status herd__stop_check(worker_ctx *c, herd_err *err)
{
    herd_status st = HERD_OK;
    herd_comm *comm = c->w.comm;
    double now = herd__now();
    if (!c->claim_win || now - c->stop_read_at < 0.01)
        return HERD_OK;
    c->stop_read_at = now;
    uint64_t word = 0;
    HERD_TRY(herd_comm_win_lock(comm, c->claim_win, 0, false));
    st = herd_comm_win_get(comm, c->claim_win, 0, sizeof(uint64_t), &word, sizeof word);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, c->claim_win, 0));
    if (st == HERD_OK && word)
        st = stopped_by(c, word);
    if (st < 0 && err != &c->w.err)
        *err = c->w.err;
out:
    return st;
}

/* Claims the next global batch: a counter in a window on rank 0. At the
 * hold (a checkpoint's) the counter stays: *index == hold, nothing claimed. */
herd_status herd__claim_batch(worker_ctx *c, uint64_t *index, uint64_t hold)
{
    herd_status st = HERD_OK;
    herd_comm *comm = c->w.comm;
    uint64_t next, got[2] = {0, 0}; /* the counter and the stop word */
    HERD_TRY(herd_comm_win_lock(comm, c->claim_win, 0, true));
    st = herd_comm_win_get(comm, c->claim_win, 0, 0, got, sizeof got);
    if (st == HERD_OK)
        st = herd_comm_win_flush(comm, c->claim_win, 0);
    *index = got[0];
    next = *index + 1;
    if (st == HERD_OK && *index != hold && got[1] == 0)
        st = herd_comm_win_put(comm, c->claim_win, 0, 0, &next, sizeof next);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, c->claim_win, 0));
    if (st == HERD_OK && got[1])
        st = stopped_by(c, got[1]);
out:
    return st;
}
