/* Non-finite losses and gradients (herd_run.h, skip_nonfinite).
 *
 * Every worker checks its own loss and gradient each step. allreduce then
 * agrees, from the reduced gradient (as after_backward says), whether any
 * worker's was non-finite, so all stop, or all skip the update, at the same
 * step. The other synchronous algorithms share nothing every step that
 * would tell (a gossip step talks to a few peers; an elastic or local-SGD
 * step may talk to none), and a collective per step would be the global
 * barrier they exist to avoid: there a worker drops its own non-finite
 * gradient, keeps exchanging finite weights, and the workers settle at the
 * end of the epoch (or at a checkpoint, or the run's last step) whether any
 * finding stops the run: one collective per epoch. An asynchronous worker never pushes what it found: it
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
#include "run/nonfinite.h"
#include "run/run.h"

static const char *const nonfinite_what[] = {"", "loss", "gradient", "model"};

const char *herd__nf_what(size_t code)
{
    return code < sizeof nonfinite_what / sizeof nonfinite_what[0] ? nonfinite_what[code] : "value";
}

/* 0: nothing found; 1: a non-finite loss; 2: a non-finite gradient. */
int herd__nf_code(const herd__nf *nf)
{
    return nf->step.loss ? 1 : nf->step.grad ? 2 : 0;
}

/* --inject-nan: whether this worker's gradient gets a NaN at this step. */
bool herd__nf_injected(const herd_worker *w)
{
    const herd__train_config *cfg = w->cfg;
    for (size_t i = 0; i < cfg->ninject_nan; i++)
        if (cfg->inject_nan[i].rank == w->rank && cfg->inject_nan[i].step == w->step)
            return true;
    return false;
}

/* Backward has produced grads[off, off + len): the NaN of --inject-nan, or
 * of a non-finite loss (so that what the workers reduce carries it), goes
 * into the first range; then the range is checked, unless the algorithm
 * checks the gradient on its way (own_nonfinite). */
void herd__nf_grads_arrived(herd__nf *nf, const herd_algo_ops *ops, const herd_worker *w, size_t off, size_t len)
{
    float *g = w->grads + off;
    if (nf->step.poison && len) {
        g[0] = NAN;
        nf->step.poison = false;
    }
    if (!nf->step.grad && !ops->checks_gradient && !herd__all_finite(g, len))
        nf->step.grad = true;
}

/* The end of a message that stops a run: why it may have happened
 * (skipped_run: the steps skipped in a row before it). */
static void stop_hint(const herd_run *r, const herd_worker *w, size_t skipped_run, char *buf, size_t cap)
{
    if (r->cfg->skip_nonfinite)
        snprintf(buf, cap, "%zu steps in a row were skipped (--skip-nonfinite); the run stops: the learning rate %g may be too high",
                 skipped_run, (double)w->lr);
    else
        snprintf(buf, cap, "the run stops: the learning rate %g may be too high (--skip-nonfinite %s)", (double)w->lr,
                 r->algo_ops->async || herd__nf_settles(r) ? "drops such gradients" : "skips such steps");
}

/* A non-finite value was found this step (found: "non-finite gradient on
 * worker 3", ...): skips the step (*skip) within --skip-nonfinite's bound,
 * or stops with HERD_ENONFINITE and a message in w->err. */
static herd_status nonfinite_found(herd__nf *nf, herd_run *r, herd_worker *w, size_t *epoch_skipped, const char *found,
                                   bool *skip)
{
    *skip = r->cfg->skip_nonfinite && nf->skipped_run < r->cfg->max_skips;
    herd__log_record(&r->log, "nonfinite", "\"worker\":%zu,\"step\":%zu,\"epoch\":%zu,\"own\":\"%s\",\"action\":\"%s\"",
                     w->rank, w->step, w->epoch + 1, herd__nf_code(nf) ? nonfinite_what[herd__nf_code(nf)] : "none",
                     *skip ? "skip" : "stop");
    if (*skip) {
        nf->skipped++, nf->skipped_run++, (*epoch_skipped)++;
        /* synchronous: every worker skips the same step, say it once */
        if ((r->algo_ops->async || w->rank == r->first_rank) && !r->cfg->quiet)
            fprintf(stderr, "%sstep %zu (epoch %zu): %s; the update is skipped (--skip-nonfinite)\n",
                    r->tty && r->cfg->progress ? "\r" : "", w->step, w->epoch + 1, found);
        return HERD_OK;
    }
    char hint[192];
    stop_hint(r, w, nf->skipped_run, hint, sizeof hint);
    return herd_err_set(&w->err, HERD_ENONFINITE, "step %zu (epoch %zu): %s; %s", w->step, w->epoch + 1, found, hint);
}

/* "non-finite gradient on workers 1, 3, non-finite loss on worker 2" from
 * every worker's code (herd__nf_code; 0: nothing found). */
static void describe(const int *codes, size_t n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int what = 1; what <= 2; what++) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++)
            count += codes[i] == what;
        if (!count)
            continue;
        len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%snon-finite %s on worker%s", len ? ", " : "",
                                nonfinite_what[what], count > 1 ? "s" : "");
        for (size_t i = 0, k = 0; i < n && len < cap; i++)
            if (codes[i] == what && k++ < 8)
                len += (size_t)snprintf(buf + len, cap - len, "%s %zu", k > 1 ? "," : "", i);
        if (count > 8 && len < cap)
            snprintf(buf + len, cap - len, " and %zu more", count - 8);
        len = strlen(buf);
    }
}

/* Collective: every worker's `bytes` of `mine` into all[nworkers]. */
static herd_status gather(herd_worker *w, const void *mine, size_t bytes, void **all)
{
    *all = malloc(w->nworkers * bytes);
    if (!*all)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory");
    herd_status st = herd_allgather(w->comm, mine, *all, bytes);
    if (st < 0 && !w->err.msg[0])
        w->err = w->comm->err;
    return st;
}

/* Synchronous, collective, after a shared finding: which workers' own loss
 * or gradient was non-finite (one more collective, on this rare path only). */
static herd_status name_workers(const herd__nf *nf, herd_worker *w, char *buf, size_t cap)
{
    int mine = herd__nf_code(nf), *codes;
    herd_status st = gather(w, &mine, sizeof mine, (void **)&codes);
    if (st == HERD_OK) {
        describe(codes, w->nworkers, buf, cap);
        if (!buf[0])
            snprintf(buf, cap, "the averaged gradient is non-finite though no worker's own was (it overflowed)");
    }
    free(codes);
    return st;
}

/* Where the workers settle at the epoch's end: a worker that finds a
 * non-finite loss or gradient drops its gradient (its weights, which its
 * peers average with, stay finite) and goes on exchanging, so that no peer
 * waits for it; within --skip-nonfinite's bound that is all, else it holds
 * the finding for herd__nf_settle, where every worker stops. */
static herd_status hold(herd__nf *nf, herd_run *r, herd_worker *w, size_t *epoch_skipped, bool *skip)
{
    int code = herd__nf_code(nf);
    if (!code) {
        nf->skipped_run = 0;
        return HERD_OK;
    }
    *skip = true;
    bool within = r->cfg->skip_nonfinite && nf->skipped_run < r->cfg->max_skips;
    herd__log_record(&r->log, "nonfinite", "\"worker\":%zu,\"step\":%zu,\"epoch\":%zu,\"own\":\"%s\",\"action\":\"%s\"",
                     w->rank, w->step, w->epoch + 1, nonfinite_what[code], within ? "skip" : "hold");
    if (!within && !nf->held.stop)
        nf->held = (held_nonfinite){.stop = true, .code = code, .step = w->step, .epoch = w->epoch,
                                     .skipped_run = nf->skipped_run};
    nf->skipped++, nf->skipped_run++, (*epoch_skipped)++;
    if (!r->cfg->quiet)
        fprintf(stderr, "%sstep %zu (epoch %zu): non-finite %s on worker %zu; %s\n", r->tty && r->cfg->progress ? "\r" : "",
                w->step, w->epoch + 1, nonfinite_what[code], w->rank,
                within ? "its gradient is dropped (--skip-nonfinite)"
                       : "its gradients are dropped until the workers settle it at the end of the epoch, where the "
                         "run stops");
    return HERD_OK;
}

bool herd__nf_settles(const herd_run *r)
{
    return !r->algo_ops->async && !r->algo_ops->agrees_nonfinite && r->cfg->workers > 1;
}

/* What a worker brings to the settlement. */
typedef struct held_finding {
    uint64_t step, epoch, skipped_run;
    int32_t code; /* 0: nothing that stops the run */
    int32_t pad;
} held_finding;

herd_status herd__nf_settle(herd__nf *nf, herd_run *r, herd_worker *w)
{
    float any = nf->held.stop ? 1.0f : 0.0f;
    herd_status st = herd_allreduce(w->comm, &any, 1, &(herd_allreduce_opts){.wire = HERD_F32});
    if (st < 0) {
        if (!w->err.msg[0])
            w->err = w->comm->err;
        return st;
    }
    if (any == 0.0f)
        return HERD_OK;
    const held_nonfinite *h = &nf->held;
    held_finding mine = {h->step, h->epoch, h->skipped_run, h->stop ? h->code : 0, 0}, *all;
    int *codes = malloc(w->nworkers * sizeof *codes);
    if ((st = gather(w, &mine, sizeof mine, (void **)&all)) == HERD_OK && !codes)
        st = herd_err_set(&w->err, HERD_ENOMEM, "out of memory");
    if (st == HERD_OK) {
        size_t first = SIZE_MAX; /* the worker whose finding came first */
        for (size_t i = 0; i < w->nworkers; i++) {
            codes[i] = all[i].code;
            if (all[i].code && (first == SIZE_MAX || all[i].step < all[first].step))
                first = i;
        }
        char found[256], hint[192];
        describe(codes, w->nworkers, found, sizeof found);
        herd__log_record(&r->log, "nonfinite",
                         "\"worker\":%zu,\"step\":%llu,\"epoch\":%llu,\"own\":\"%s\",\"action\":\"stop\",\"stopped_at\":%zu",
                         w->rank, (unsigned long long)all[first].step, (unsigned long long)all[first].epoch + 1,
                         mine.code ? nonfinite_what[mine.code] : "none", w->step);
        stop_hint(r, w, (size_t)all[first].skipped_run, hint, sizeof hint);
        st = herd_err_set(&w->err, HERD_ENONFINITE, "step %llu (epoch %llu): %s; settled at step %zu: %s",
                          (unsigned long long)all[first].step, (unsigned long long)all[first].epoch + 1, found,
                          w->step, hint);
        nf->agreed_stop = true; /* everyone stops here: nobody waits for anyone */
    }
    free(codes);
    free(all);
    return st;
}

/* Synchronous: after after_backward, every worker the same answer (where
 * the algorithm agrees on it, or there is one worker), or each its own
 * until the settlement (herd__nf_settles). */
herd_status herd__nf_sync(herd__nf *nf, herd_run *r, herd_worker *w, size_t *epoch_skipped,
                          const herd_step_result *res, bool *skip)
{
    herd_status st = HERD_OK;
    *skip = false;
    if (herd__nf_settles(r))
        return hold(nf, r, w, epoch_skipped, skip);
    bool bad = r->algo_ops->agrees_nonfinite ? res->nonfinite : herd__nf_code(nf) != 0;
    if (!bad) {
        nf->skipped_run = 0;
        goto out;
    }
    char found[256];
    HERD_TRY(name_workers(nf, w, found, sizeof found));
    st = nonfinite_found(nf, r, w, epoch_skipped, found, skip);
    nf->agreed_stop = st < 0; /* everyone stops here: nobody waits for anyone */
out:
    return st;
}

/* Asynchronous, after backward: a worker that found a non-finite loss or
 * gradient pushes nothing of it. */
herd_status herd__nf_async(herd__nf *nf, herd_run *r, herd_worker *w, size_t *epoch_skipped, bool *skip)
{
    *skip = false;
    int code = herd__nf_code(nf);
    if (!code) {
        nf->skipped_run = 0;
        return HERD_OK;
    }
    char found[128];
    snprintf(found, sizeof found, "non-finite %s on worker %zu", nonfinite_what[code], w->rank);
    return nonfinite_found(nf, r, w, epoch_skipped, found, skip);
}
