/* Elastic averaging family: easgd, aeasgd, ameasgd, hogwild-easgd, eawild
 * (ALGORITHMS.md, seed 000: Zhang, Choromanska, LeCun 2015; You, Buluç,
 * Demmel SC17).
 *
 * Workers keep their own x_i and take local steps; every --elastic-period
 * tau steps they exchange with the center c, moving rate alpha
 * (--elastic-alpha, default beta/n with beta = 0.9):
 *     d = alpha (x_i - c);  x_i -= d;  c += d
 * Local step: plain SGD with the worker's rate and weight decay (the EASGD
 * papers' local rule; --momentum is not used), except ameasgd, whose local
 * step is Nesterov momentum with --momentum (0.9 when it is 0).
 *   easgd          synchronous: every worker exchanges at the same step;
 *                  every worker keeps an identical copy of the center and
 *                  moves it by the sum of all d (one allreduce), so runs are
 *                  deterministic and no window is needed.
 *   aeasgd/ameasgd the center lives in a window on rank 0 (src/algo/center.c);
 *                  an exchange takes the exclusive lock, reads c, adds d,
 *                  unlocks: first come first served.
 *   hogwild-easgd  the same under a shared lock: reads and element-wise
 *                  atomic adds of concurrent exchanges interleave.
 *   eawild         no lock that excludes anyone and no wait: an exchange
 *                  uses the center read at the previous exchange, starts the
 *                  accumulate of d and the read of the current center under
 *                  a shared lock, and goes on with its next local step; the
 *                  lock is released (the transfers completed) after that
 *                  step's backward, so both overlap its compute on the mpi
 *                  engine. The first exchange uses the initial weights.
 * The model users keep, and the one evaluated, is the center ("center"); the
 * epoch log adds elastic_dist (mean ||x_i - c|| at this worker's exchanges),
 * exchanges, alpha and period.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/center.h"

typedef enum ea_kind { EA_SYNC, EA_ASYNC, EA_MOMENTUM, EA_HOGWILD, EA_WILD } ea_kind;

typedef struct ea_state {
    ea_kind kind;
    float alpha;
    size_t period;
    herd_center center; /* all but easgd */
    float *c;           /* easgd: the center; eawild: the center read at the last exchange */
    float *c_next;      /* eawild: the read in flight */
    float *d;           /* nparams */
    bool pending;       /* eawild: an exchange's transfers are in flight (shared lock held) */
    herd_optim local;   /* the local step's optimizer */
    double dist_sum;
    size_t nexch;
} ea_state;

static herd_status ea_init(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ea_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for the elastic averaging state");
    a->state = s;
    const char *nm = a->ops->name;
    s->kind = !strcmp(nm, "easgd")     ? EA_SYNC
            : !strcmp(nm, "ameasgd")   ? EA_MOMENTUM
            : !strcmp(nm, "hogwild-easgd") ? EA_HOGWILD
            : !strcmp(nm, "eawild")    ? EA_WILD
                                       : EA_ASYNC;
    const herd_elastic_config *ec = &w->cfg->elastic;
    s->alpha = ec->alpha > 0 ? (float)ec->alpha : 0.9f / (float)w->nworkers;
    s->period = ec->period ? ec->period : 1;
    herd_optim_config oc = w->cfg->optim;
    if (s->kind == EA_MOMENTUM) {
        oc.nesterov = true;
        if (oc.momentum == 0.0f)
            oc.momentum = 0.9f;
    } else {
        oc.momentum = 0.0f, oc.nesterov = false;
    }
    HERD_TRY(herd_optim_init(&s->local, &oc, w->nparams, &w->err));
    s->d = malloc(w->nparams * sizeof(float));
    if (s->kind == EA_SYNC || s->kind == EA_WILD)
        s->c = malloc(w->nparams * sizeof(float));
    if (s->kind == EA_WILD)
        s->c_next = malloc(w->nparams * sizeof(float));
    if (!s->d || ((s->kind == EA_SYNC || s->kind == EA_WILD) && !s->c) || (s->kind == EA_WILD && !s->c_next))
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for the elastic averaging state");
    /* every worker starts from the same weights (same seed): the center too */
    if (s->c)
        memcpy(s->c, w->params, w->nparams * sizeof(float));
    if (s->kind != EA_SYNC)
        HERD_TRY(herd_center_create(&s->center, w->comm, w->nparams, 1, 1, w->params));
out:
    return st;
}

static herd_status ea_step(herd_algo *a, herd_worker *w)
{
    ea_state *s = a->state;
    herd_optim_step(&s->local, w->params, w->grads, 0, w->nparams, w->lr);
    return HERD_OK;
}

/* d = alpha (x - c); x -= d; records ||x - c||. */
static void elastic_pull(ea_state *s, herd_worker *w, const float *c)
{
    double sq = 0;
    for (size_t i = 0; i < w->nparams; i++) {
        float diff = w->params[i] - c[i];
        sq += (double)diff * diff;
        s->d[i] = s->alpha * diff;
        w->params[i] -= s->d[i];
    }
    s->dist_sum += sqrt(sq);
    s->nexch++;
}

/* eawild: the previous exchange's transfers are complete once unlocked. */
static herd_status complete_pending(ea_state *s)
{
    if (!s->pending)
        return HERD_OK;
    s->pending = false;
    herd_status st = herd_center_unlock(&s->center, 0);
    if (st == HERD_OK) {
        float *t = s->c;
        s->c = s->c_next, s->c_next = t;
    }
    return st;
}

static herd_status exchange(ea_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    herd_center *ctr = &s->center;
    switch (s->kind) {
    case EA_SYNC:
        elastic_pull(s, w, s->c);
        HERD_TRY(herd_allreduce(w->comm, s->d, w->nparams, &(herd_allreduce_opts){.wire = HERD_F32}));
        for (size_t i = 0; i < w->nparams; i++)
            s->c[i] += s->d[i];
        break;
    case EA_ASYNC:
    case EA_MOMENTUM:
    case EA_HOGWILD: {
        bool exclusive = s->kind != EA_HOGWILD;
        float *c = s->d; /* read the center into d, then d becomes alpha (x - c) in place */
        HERD_TRY(herd_center_lock(ctr, 0, exclusive));
        st = herd_center_get(ctr, 0, 0, c);
        if (st == HERD_OK)
            st = herd_center_flush(ctr, 0);
        if (st == HERD_OK) {
            elastic_pull(s, w, c); /* reads c[i] before writing d[i]: same array, same index */
            st = herd_center_accumulate(ctr, 0, 0, s->d);
        }
        herd_status st2 = herd_center_unlock(ctr, 0);
        if (st == HERD_OK)
            st = st2;
        break;
    }
    case EA_WILD:
        HERD_TRY(complete_pending(s));
        elastic_pull(s, w, s->c);
        HERD_TRY(herd_center_lock(ctr, 0, false));
        s->pending = true;
        st = herd_center_accumulate(ctr, 0, 0, s->d);
        if (st == HERD_OK)
            st = herd_center_get(ctr, 0, 0, s->c_next);
        break;
    }
out:
    if (st < 0 && !w->err.msg[0])
        herd_err_set(&w->err, st, "worker %zu: elastic exchange at step %zu: %s", w->rank, w->step,
                     herd_comm_last_error(w->comm));
    return st;
}

/* eawild: the transfers started at the last exchange had this step's
 * forward and backward to complete in. */
static herd_status ea_after_backward(herd_algo *a, herd_worker *w)
{
    (void)w;
    return complete_pending(a->state);
}

static herd_status ea_after_step(herd_algo *a, herd_worker *w)
{
    ea_state *s = a->state;
    if ((w->step + 1) % s->period)
        return HERD_OK;
    return exchange(s, w);
}

static herd_status ea_settle(herd_algo *a, herd_worker *w)
{
    (void)w;
    return complete_pending(a->state);
}

static herd_status ea_eval_params(herd_algo *a, herd_worker *w, float *out, const char **name)
{
    ea_state *s = a->state;
    *name = NULL;
    if (s->kind == EA_SYNC) {
        memcpy(out, s->c, w->nparams * sizeof(float));
    } else {
        herd_status st = complete_pending(s);
        if (st == HERD_OK)
            st = herd_center_read(&s->center, out);
        if (st < 0) {
            if (!w->err.msg[0])
                w->err = w->comm->err;
            return st;
        }
    }
    *name = "center";
    return HERD_OK;
}

static void ea_log_epoch(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    (void)w;
    ea_state *s = a->state;
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, ",\"elastic_dist\":%.6g,\"exchanges\":%zu,\"alpha\":%g,\"period\":%zu",
             s->nexch ? s->dist_sum / (double)s->nexch : 0.0, s->nexch, (double)s->alpha, s->period);
    s->dist_sum = 0, s->nexch = 0;
}

static void ea_free(herd_algo *a, herd_worker *w)
{
    (void)w;
    ea_state *s = a->state;
    if (!s)
        return;
    complete_pending(s);
    if (s->kind != EA_SYNC)
        herd_center_free(&s->center);
    herd_optim_free(&s->local);
    free(s->c);
    free(s->c_next);
    free(s->d);
    free(s);
    a->state = NULL;
}

#define EA_OPS(var, nm, is_async, text)                                                        \
    const herd_algo_ops var = {                                                                \
        .name = nm,                                                                            \
        .summary = text,                                                                       \
        .family = "easgd",                                                                     \
        .min_workers = 1,                                                                      \
        .async = is_async,                                                                     \
        .init = ea_init,                                                                       \
        .after_backward = ea_after_backward,                                                         \
        .step = ea_step,                                                                       \
        .after_step = ea_after_step,                                                           \
        .end_epoch = ea_settle,                                                                \
        .finish = ea_settle,                                                                   \
        .eval_params = ea_eval_params,                                                         \
        .log_epoch = ea_log_epoch,                                                             \
        .free = ea_free,                                                                       \
    }

EA_OPS(herd__algo_easgd, "easgd", false, "synchronous elastic averaging SGD: all workers pull toward one center at once");
EA_OPS(herd__algo_aeasgd, "aeasgd", true, "asynchronous EASGD: each worker exchanges with the center under its lock");
EA_OPS(herd__algo_ameasgd, "ameasgd", true, "asynchronous momentum EASGD: Nesterov momentum in the local steps");
EA_OPS(herd__algo_hogwild_easgd, "hogwild-easgd", true, "asynchronous EASGD without a lock on the center");
EA_OPS(herd__algo_eawild, "eawild", true, "EA-wild: lock-free, non-blocking exchanges overlapped with the next step");
