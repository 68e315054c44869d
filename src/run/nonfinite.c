/* Non-finite losses and gradients (herd_run.h, skip_nonfinite).
 *
 * Every worker checks its own loss and gradient each step. Synchronous
 * algorithms then agree, from what the workers share, whether any worker's
 * was non-finite (allreduce: its reduced gradient, as after_backward says;
 * the others: a one-float allreduce), so all stop, or all skip the update,
 * at the same step. An asynchronous worker never pushes what it found: it
 * stops and leaves a stop word in the batch counter's window that every
 * other worker reads at its next claim (claim.c; or, skipping, drops its
 * gradient). */
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

static const char *const nonfinite_what[] = {"", "loss", "gradient", "model"};

const char *herd__nf_what(size_t code)
{
    return code < sizeof nonfinite_what / sizeof nonfinite_what[0] ? nonfinite_what[code] : "value";
}

/* 0: nothing found; 1: a non-finite loss; 2: a non-finite gradient. */
int herd__nf_code(const worker_ctx *c)
{
    return c->nf.loss ? 1 : c->nf.grad ? 2 : 0;
}

/* --inject-nan: whether this worker's gradient gets a NaN at this step. */
bool herd__nf_injected(const worker_ctx *c)
{
    const herd_train_config *cfg = c->run->cfg;
    for (size_t i = 0; i < cfg->ninject_nan; i++)
        if (cfg->inject_nan[i].rank == c->w.rank && cfg->inject_nan[i].step == c->w.step)
            return true;
    return false;
}

/* Backward has produced grads[off, off + len): the NaN of --inject-nan, or
 * of a non-finite loss (so that what the workers reduce carries it), goes
 * into the first range; then the range is checked, unless the algorithm
 * checks the gradient on its way (own_nonfinite). */
void herd__nf_grads_arrived(worker_ctx *c, size_t off, size_t len)
{
    float *g = c->w.grads + off;
    if (c->nf.poison && len) {
        g[0] = NAN;
        c->nf.poison = false;
    }
    if (!c->nf.grad && !c->algo.ops->checks_gradient && !herd__all_finite(g, len))
        c->nf.grad = true;
}

/* The end of a message that stops a run: why it may have happened. */
static void stop_hint(const worker_ctx *c, char *buf, size_t cap)
{
    if (c->run->cfg->skip_nonfinite)
        snprintf(buf, cap, "%zu steps in a row were skipped (--skip-nonfinite); the run stops: the learning rate %g may be too high",
                 c->skipped_run, (double)c->w.lr);
    else
        snprintf(buf, cap, "the run stops: the learning rate %g may be too high (--skip-nonfinite %s)", (double)c->w.lr,
                 c->run->algo_ops->async ? "drops such gradients" : "skips such steps");
}

/* A non-finite value was found this step (found: "non-finite gradient on
 * worker 3", ...): skips the step (*skip) within --skip-nonfinite's bound,
 * or stops with HERD_ENONFINITE and a message in w->err. */
static herd_status nonfinite_found(worker_ctx *c, epoch_stats *e, const char *found, bool *skip)
{
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    *skip = r->cfg->skip_nonfinite && c->skipped_run < HERD_NONFINITE_MAX_SKIPS;
    herd__log_record(&r->log, "nonfinite", "\"worker\":%zu,\"step\":%zu,\"epoch\":%zu,\"own\":\"%s\",\"action\":\"%s\"",
                     w->rank, w->step, w->epoch + 1, herd__nf_code(c) ? nonfinite_what[herd__nf_code(c)] : "none",
                     *skip ? "skip" : "stop");
    if (*skip) {
        c->skipped++, c->skipped_run++, e->skipped++;
        /* synchronous: every worker skips the same step, say it once */
        if ((r->algo_ops->async || w->rank == r->first_rank) && !r->cfg->quiet)
            fprintf(stderr, "%sstep %zu (epoch %zu): %s; the update is skipped (--skip-nonfinite)\n",
                    r->tty && r->cfg->progress ? "\r" : "", w->step, w->epoch + 1, found);
        return HERD_OK;
    }
    char hint[192];
    stop_hint(c, hint, sizeof hint);
    return herd_err_set(&w->err, HERD_ENONFINITE, "step %zu (epoch %zu): %s; %s", w->step, w->epoch + 1, found, hint);
}

/* Synchronous, collective, after a shared finding: which workers' own loss
 * or gradient was non-finite (one more allreduce, on this rare path only). */
static herd_status name_workers(worker_ctx *c, char *buf, size_t cap)
{
    herd_worker *w = &c->w;
    float *codes = calloc(w->nworkers, sizeof *codes);
    if (!codes)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory");
    codes[w->rank] = (float)herd__nf_code(c);
    herd_status st = herd_allreduce(w->comm, codes, w->nworkers, &(herd_allreduce_opts){.wire = HERD_F32});
    if (st == HERD_OK) {
        size_t n[3] = {0}, len = 0;
        for (size_t i = 0; i < w->nworkers; i++)
            n[codes[i] == 1.0f ? 1 : codes[i] == 2.0f ? 2 : 0]++;
        buf[0] = 0;
        for (int what = 1; what <= 2; what++) {
            if (!n[what])
                continue;
            len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%snon-finite %s on worker%s", len ? ", " : "",
                                    nonfinite_what[what], n[what] > 1 ? "s" : "");
            for (size_t i = 0, k = 0; i < w->nworkers && len < cap; i++)
                if (codes[i] == (float)what && k++ < 8)
                    len += (size_t)snprintf(buf + len, cap - len, "%s %zu", k > 1 ? "," : "", i);
            if (n[what] > 8 && len < cap)
                snprintf(buf + len, cap - len, " and %zu more", n[what] - 8);
            len = strlen(buf);
        }
        if (!len)
            snprintf(buf, cap, "the averaged gradient is non-finite though no worker's own was (it overflowed)");
    } else if (!w->err.msg[0]) {
        w->err = w->comm->err;
    }
    free(codes);
    return st;
}

/* Synchronous: after after_backward, every worker the same answer. */
herd_status herd__nf_sync(worker_ctx *c, epoch_stats *e, const herd_step_result *res, bool *skip)
{
    herd_status st = HERD_OK;
    herd_worker *w = &c->w;
    bool bad;
    *skip = false;
    if (c->algo.ops->agrees_nonfinite) {
        bad = res->nonfinite;
    } else {
        float f = herd__nf_code(c) ? 1.0f : 0.0f;
        if ((st = herd_allreduce(w->comm, &f, 1, &(herd_allreduce_opts){.wire = HERD_F32})) < 0) {
            if (!w->err.msg[0])
                w->err = w->comm->err;
            goto out;
        }
        bad = f > 0.0f;
    }
    if (!bad) {
        c->skipped_run = 0;
        goto out;
    }
    char found[256];
    HERD_TRY(name_workers(c, found, sizeof found));
    st = nonfinite_found(c, e, found, skip);
    c->agreed_stop = st < 0; /* everyone stops here: nobody waits for anyone */
out:
    return st;
}

/* Asynchronous, after backward: a worker that found a non-finite loss or
 * gradient pushes nothing of it. */
herd_status herd__nf_async(worker_ctx *c, epoch_stats *e, bool *skip)
{
    herd_worker *w = &c->w;
    *skip = false;
    int code = herd__nf_code(c);
    if (!code) {
        c->skipped_run = 0;
        return HERD_OK;
    }
    char found[128];
    snprintf(found, sizeof found, "non-finite %s on worker %zu", nonfinite_what[code], w->rank);
    return nonfinite_found(c, e, found, skip);
}
