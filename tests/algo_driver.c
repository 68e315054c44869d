/* The algorithm driver of algo_driver.h. */
#include "algo_driver.h"
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "herd/herd_comm.h"
#include "herd/herd_rng.h"
#include "run/run.h"

typedef struct drive_shared {
    const drive_config *dc;
    const drive_problem *p;
    const herd_algo_ops *ops;
    herd_threads_world *world;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t turn; /* next schedule entry */
} drive_shared;

typedef struct drive_worker {
    drive_shared *sh;
    double *t_start, *t_done; /* steps each */
    herd_worker w;
    herd_algo algo;
    herd_status st;
    char log[512];
} drive_worker;

/* Waits until the schedule gives this worker the next phase. */
static herd_status wait_turn(drive_worker *d)
{
    drive_shared *sh = d->sh;
    const drive_config *dc = sh->dc;
    if (!dc->schedule)
        return HERD_OK;
    double deadline = herd__now() + dc->timeout_s;
    pthread_mutex_lock(&sh->mu);
    while (sh->turn < dc->schedule_len && dc->schedule[sh->turn] != d->w.rank) {
        if (herd__now() > deadline) {
            pthread_mutex_unlock(&sh->mu);
            return herd_err_set(&d->w.err, HERD_ETIMEOUT, "driver: worker %zu never got schedule entry %zu (worker %zu's)",
                                d->w.rank, sh->turn, dc->schedule[sh->turn]);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&sh->cv, &sh->mu, &ts);
    }
    pthread_mutex_unlock(&sh->mu);
    return HERD_OK;
}

static void end_turn(drive_worker *d)
{
    drive_shared *sh = d->sh;
    if (!sh->dc->schedule)
        return;
    pthread_mutex_lock(&sh->mu);
    if (sh->turn < sh->dc->schedule_len && sh->dc->schedule[sh->turn] == d->w.rank)
        sh->turn++;
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
}

#define HOOK(d, name)                                                   \
    do {                                                                \
        if ((d)->algo.ops->name)                                        \
            HERD_TRY((d)->algo.ops->name(&(d)->algo, &(d)->w));         \
    } while (0)

static herd_status drive_loop(drive_worker *d)
{
    herd_status st = HERD_OK;
    const drive_config *dc = d->sh->dc;
    const drive_problem *p = d->sh->p;
    herd_worker *w = &d->w;
    herd_rng rng;
    herd_rng_seed(&rng, dc->cfg.seed, 0x77000000u + w->rank);
    HOOK(d, init);
    for (size_t s = 0; s < dc->steps; s++) {
        w->lr = dc->cfg.optim.lr;
        HERD_TRY(wait_turn(d));
        HOOK(d, before_step);
        d->t_start[s] = herd__now();
        for (size_t j = 0; j < p->dim; j++)
            w->grads[j] = p->curv[j] * (w->params[j] - p->xstar[j]) + (p->noise > 0 ? p->noise * herd_rng_normal(&rng) : 0);
        end_turn(d);
        if (dc->sleep_us[w->rank] > 0) {
            double us = dc->sleep_us[w->rank];
            struct timespec ts = {(time_t)(us / 1e6), (long)(fmod(us, 1e6) * 1e3)};
            nanosleep(&ts, NULL);
        }
        HERD_TRY(wait_turn(d));
        if (d->algo.ops->grad_ready)
            HERD_TRY(d->algo.ops->grad_ready(&d->algo, w, 0, w->nparams));
        herd_step_result res = {0};
        if (d->algo.ops->after_backward)
            HERD_TRY(d->algo.ops->after_backward(&d->algo, w, &res));
        HERD_TRY(herd_algo_update(&d->algo, w, &res, false));
        d->t_done[s] = herd__now();
        HOOK(d, after_step);
        end_turn(d);
        w->step++;
        if (dc->steps_per_epoch && w->step % dc->steps_per_epoch == 0) {
            HOOK(d, end_epoch);
            if (d->algo.ops->log_epoch)
                d->algo.ops->log_epoch(&d->algo, w, d->log, sizeof d->log);
            w->epoch++;
        }
    }
    HOOK(d, finish);
out:
    return st;
}

static void *drive_thread(void *arg)
{
    drive_worker *d = arg;
    d->st = drive_loop(d);
    if (d->st < 0) {
        if (!d->w.err.msg[0] && d->w.comm->err.msg[0])
            d->w.err = d->w.comm->err;
        if (d->st != HERD_EREMOTE)
            herd_threads_world_fail(d->sh->world, d->w.rank);
    }
    end_turn(d); /* a failed worker must not hold the schedule */
    return NULL;
}

herd_status drive_run(const drive_config *dc, const drive_problem *p, drive_result *res, herd_err *err)
{
    herd_status st = HERD_OK;
    size_t n = dc->cfg.workers;
    void *opts = NULL;
    memset(res, 0, sizeof *res);
    drive_shared sh = {.dc = dc, .p = p, .ops = herd_algo_find(dc->cfg.algo)};
    drive_worker *ws = calloc(n, sizeof *ws);
    pthread_t *th = calloc(n, sizeof *th);
    if (!sh.ops) {
        free(ws), free(th);
        return herd_err_set(err, HERD_EINVAL, "driver: no algorithm '%s'", dc->cfg.algo);
    }
    if (!ws || !th || n > DRIVE_MAX_WORKERS) {
        free(ws), free(th);
        return herd_err_set(err, HERD_ENOMEM, "driver: %zu workers", n);
    }
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    res->t_start = calloc(n * (dc->steps ? dc->steps : 1), sizeof(double));
    res->t_done = calloc(n * (dc->steps ? dc->steps : 1), sizeof(double));
    if (!res->t_start || !res->t_done) {
        st = herd_err_set(err, HERD_ENOMEM, "driver: out of memory");
        goto out;
    }
    HERD_TRY(herd__algo_opts_parse(sh.ops, &dc->cfg, &opts, err));
    HERD_TRY(herd_threads_world_create(n, &sh.world, err));
    for (size_t i = 0; i < n; i++) {
        drive_worker *d = &ws[i];
        herd_worker *w = &d->w;
        d->sh = &sh;
        d->algo.ops = sh.ops;
        d->t_start = res->t_start + i * dc->steps;
        d->t_done = res->t_done + i * dc->steps;
        w->rank = i, w->nworkers = n, w->cfg = &dc->cfg, w->opts = opts, w->nparams = p->dim;
        w->steps_per_epoch = dc->steps_per_epoch ? dc->steps_per_epoch : dc->steps;
        w->params = malloc(p->dim * sizeof(float));
        w->grads = calloc(p->dim, sizeof(float));
        if (!w->params || !w->grads) {
            st = herd_err_set(err, HERD_ENOMEM, "driver: out of memory");
            goto out;
        }
        memcpy(w->params, p->x0, p->dim * sizeof(float));
        HERD_TRY(herd_algo_optim_init(sh.ops, opts, &dc->cfg.optim, NULL, p->dim, &w->optim, err));
        HERD_TRY(herd_comm_threads_create(sh.world, i, &w->comm, err));
        w->comm->timeout_s = dc->timeout_s > 0 ? dc->timeout_s : 20;
    }
    size_t started = 0;
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, drive_thread, &ws[started])) {
            herd_threads_world_fail(sh.world, started);
            break;
        }
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    herd_threads_world_close(sh.world);
    for (size_t i = 0; i < n && st == HERD_OK; i++)
        if (ws[i].st < 0) {
            st = ws[i].st;
            if (err)
                *err = ws[i].w.err;
        }
    if (started < n && st == HERD_OK)
        st = herd_err_set(err, HERD_ENOMEM, "driver: cannot start thread %zu", started);
    res->x = malloc(n * p->dim * sizeof(float));
    res->eval = malloc(p->dim * sizeof(float));
    if (!res->x || !res->eval) {
        st = herd_err_set(err, HERD_ENOMEM, "driver: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(res->x + i * p->dim, ws[i].w.params, p->dim * sizeof(float));
        memcpy(res->log[i], ws[i].log, sizeof res->log[i]);
        res->bytes_sent[i] = ws[i].w.bytes_sent + ws[i].w.comm->bytes_sent;
    }
    memcpy(res->eval, ws[0].w.params, p->dim * sizeof(float));
    if (st == HERD_OK && sh.ops->eval_params) {
        const char *name = NULL;
        float *tmp = malloc(p->dim * sizeof(float));
        if (!tmp) {
            st = herd_err_set(err, HERD_ENOMEM, "driver: out of memory");
            goto out;
        }
        st = sh.ops->eval_params(&ws[0].algo, &ws[0].w, tmp, &name);
        if (st == HERD_OK && name)
            memcpy(res->eval, tmp, p->dim * sizeof(float));
        else if (st < 0 && err)
            *err = ws[0].w.err.msg[0] ? ws[0].w.err : ws[0].w.comm->err;
        res->eval_name = name;
        free(tmp);
    }
out:
    for (size_t i = 0; i < n; i++) {
        drive_worker *d = &ws[i];
        if (d->algo.ops && d->algo.ops->free && d->w.comm)
            d->algo.ops->free(&d->algo, &d->w);
        herd_comm_free(d->w.comm);
        herd_optim_free(&d->w.optim);
        free(d->w.params);
        free(d->w.grads);
    }
    herd_threads_world_free(sh.world);
    free(opts);
    pthread_mutex_destroy(&sh.mu);
    pthread_cond_destroy(&sh.cv);
    free(ws);
    free(th);
    return st;
}

void drive_run_ok(const drive_config *dc, const drive_problem *p, drive_result *res)
{
    herd_err err = {0};
    if (drive_run(dc, p, res, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s: %s", dc->cfg.algo, err.msg);
}

void drive_result_free(drive_result *res)
{
    free(res->x);
    free(res->eval);
    free(res->t_start);
    free(res->t_done);
    res->x = res->eval = NULL;
    res->t_start = res->t_done = NULL;
}

drive_problem drive_problem_make(size_t dim, float noise, uint64_t seed)
{
    float *xs = malloc(dim * sizeof(float)), *a = malloc(dim * sizeof(float)), *x0 = calloc(dim, sizeof(float));
    herd_rng r;
    herd_rng_seed(&r, seed, 0x51);
    for (size_t j = 0; xs && a && j < dim; j++) {
        xs[j] = 2.0f * herd_rng_uniform(&r) - 1.0f;
        a[j] = 0.5f + 1.5f * herd_rng_uniform(&r);
    }
    return (drive_problem){.dim = dim, .xstar = xs, .curv = a, .x0 = x0, .noise = noise};
}

void drive_problem_free(drive_problem *p)
{
    free((void *)p->xstar);
    free((void *)p->curv);
    free((void *)p->x0);
}

double drive_max_error(const drive_problem *p, const float *x)
{
    double m = 0;
    for (size_t j = 0; j < p->dim; j++) {
        double e = fabs((double)x[j] - (double)p->xstar[j]);
        if (!(e <= m))
            m = e;
    }
    return m;
}

drive_config drive_config_make(const char *algo, size_t workers, size_t steps, float lr)
{
    drive_config dc;
    memset(&dc, 0, sizeof dc);
    herd__train_config_defaults(&dc.cfg);
    dc.cfg.algo = algo;
    dc.cfg.workers = workers;
    dc.cfg.optim.lr = lr;
    dc.cfg.optim.momentum = 0;
    dc.cfg.optim.weight_decay = 0;
    dc.cfg.optim.schedule = HERD_SCHED_CONST;
    dc.steps = steps;
    dc.timeout_s = 20;
    return dc;
}
