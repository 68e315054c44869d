/* The run's result: totals over every worker (every process), the
 * summary's figures, and its JSON form. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_nn.h"
#include "herd/herd_run.h"
#include "core/json.h"
#include "run/run.h"

/* Totals over every worker of the run, on every process. */
typedef struct run_totals {
    double images, bytes, wait, train_s_max, skipped;
} run_totals;

static herd_status gather_totals(herd_run *r, worker_ctx *workers, run_totals *t, herd_err *err)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < r->nlocal; i++) {
        t->images += (double)workers[i].result.images;
        t->bytes += (double)(workers[i].w.bytes_sent + workers[i].w.comm->bytes_sent);
        t->wait += workers[i].w.comm_wait_s + workers[i].w.comm->wait_s;
        t->skipped += (double)workers[i].nf.skipped;
        if (workers[i].result.train_s > t->train_s_max)
            t->train_s_max = workers[i].result.train_s;
    }
    if (!herd__run_spans_processes(r))
        return HERD_OK;
    /* one worker per process (the engines that span processes) */
    herd_comm *comm = workers[0].w.comm;
    run_totals *all = malloc(comm->size * sizeof *all);
    if (!all)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    herd_status st = herd_allgather(comm, t, all, sizeof *t);
    if (st == HERD_OK) {
        memset(t, 0, sizeof *t);
        for (size_t i = 0; i < comm->size; i++) {
            t->images += all[i].images, t->bytes += all[i].bytes, t->wait += all[i].wait;
            t->skipped += all[i].skipped;
            if (all[i].train_s_max > t->train_s_max)
                t->train_s_max = all[i].train_s_max;
        }
    } else {
        herd_err_set(err, st, "%s", herd_comm_last_error(comm));
    }
    free(all);
    return st;
}

/* One worker's figures, as every process sees them. */
typedef struct worker_figs {
    double train_s, epochs, steps;
} worker_figs;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (n > 0; sorts v). */
static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every worker's time per epoch and steps (all processes'), their median,
 * min and max into res, and a "worker" log record each. */
static herd_status worker_figures(herd_run *r, worker_ctx *workers, herd_train_result *res, herd_err *err)
{
    herd_status st = HERD_OK;
    size_t n = r->cfg->workers;
    worker_figs *all = calloc(n, sizeof *all);
    double *v = calloc(n, sizeof *v);
    if (!all || !v) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < r->nlocal; i++)
        all[r->first_rank + i] = (worker_figs){workers[i].result.train_s, (double)workers[i].result.epochs_trained,
                                               (double)workers[i].w.step};
    if (herd__run_spans_processes(r)) { /* one worker per process */
        herd_comm *comm = workers[0].w.comm;
        worker_figs mine = all[r->first_rank];
        if ((st = herd_allgather(comm, &mine, all, sizeof mine)) < 0) {
            herd_err_set(err, st, "%s", herd_comm_last_error(comm));
            goto out;
        }
    }
    size_t k = 0;
    res->epoch_s_max = 0, res->epoch_s_min = INFINITY, res->slowest_worker = 0;
    for (size_t i = 0; i < n; i++) {
        if (all[i].epochs < 1) /* lost before it ended an epoch */
            continue;
        double e = all[i].train_s / all[i].epochs;
        v[k++] = e;
        if (e > res->epoch_s_max)
            res->epoch_s_max = e, res->slowest_worker = i;
        if (e < res->epoch_s_min)
            res->epoch_s_min = e;
    }
    res->epoch_s_median = k ? median(v, k) : 0;
    if (!k)
        res->epoch_s_min = 0;
    res->steps_min = SIZE_MAX, res->steps_max = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = (size_t)all[i].steps;
        v[i] = all[i].steps;
        res->steps_min = s < res->steps_min ? s : res->steps_min;
        res->steps_max = s > res->steps_max ? s : res->steps_max;
    }
    res->steps_median = median(v, n);
    if (r->first_rank == 0)
        for (size_t i = 0; i < n; i++)
            herd__log_record(&r->log, "worker", "\"worker\":%zu,\"steps\":%.0f,\"epochs\":%.0f,\"train_s\":%.6f,\"epoch_s\":%.6f",
                             i, all[i].steps, all[i].epochs, all[i].train_s,
                             all[i].epochs >= 1 ? all[i].train_s / all[i].epochs : NAN);
out:
    free(all);
    free(v);
    return st;
}

/* The model the final evaluation scored (herd__evaluate left it in
 * eval_buf where it is the algorithm's), on rank 0 of a run that ended:
 * into the run's last checkpoint, and to the caller (cfg->keep_final). */
static herd_status final_model(herd_run *r, worker_ctx *workers, herd_train_result *res, herd_err *err)
{
    const worker_ctx *w0 = &workers[0];
    size_t np = w0->w.nparams, nb = herd_model_nbuffers(w0->w.model);
    bool stopped = false;
    for (size_t i = 0; i < r->nlocal; i++)
        stopped = stopped || workers[i].stop.stopped;
    if (r->first_rank != 0 || stopped)
        return HERD_OK;
    const float *kept = strcmp(res->eval_model, "worker0") ? w0->eval.buf + np : w0->w.params;
    herd_status st = herd__ckpt_final(r->ckpt, kept, res->eval_model, err);
    if (st < 0 || !r->cfg->keep_final)
        return st;
    size_t c = r->train.c;
    res->final_params = malloc(np * sizeof(float) + 1);
    res->final_buffers = malloc(nb * sizeof(float) + 1);
    if (r->train.mean && r->train.std) { /* what the model's inputs must be made into */
        res->input_mean = malloc(c * sizeof(float));
        res->input_std = malloc(c * sizeof(float));
    }
    if (!res->final_params || !res->final_buffers || (r->train.mean && (!res->input_mean || !res->input_std))) {
        herd_train_result_free(res);
        return herd_err_set(err, HERD_ENOMEM, "out of memory for a copy of the final model");
    }
    memcpy(res->final_params, kept, np * sizeof(float));
    memcpy(res->final_buffers, herd_model_buffers(w0->w.model), nb * sizeof(float));
    if (res->input_mean) {
        memcpy(res->input_mean, r->train.mean, c * sizeof(float));
        memcpy(res->input_std, r->train.std, c * sizeof(float));
    }
    res->nbuffers = nb;
    res->in_c = r->train.c, res->in_h = r->train.h, res->in_w = r->train.w, res->nclasses = r->train.nclasses;
    return HERD_OK;
}

void herd_train_result_free(herd_train_result *res)
{
    free(res->final_params);
    free(res->final_buffers);
    free(res->options);
    free(res->input_mean);
    free(res->input_std);
    res->final_params = res->final_buffers = res->input_mean = res->input_std = NULL;
    res->options = NULL;
}

herd_status herd__result_fill(herd_run *r, worker_ctx *workers, double wall, herd_train_result *res, herd_err *err)
{
    herd_status st = HERD_OK;
    const herd__train_config *cfg = r->cfg;
    run_totals t;
    HERD_TRY(gather_totals(r, workers, &t, err));
    HERD_TRY(worker_figures(r, workers, res, err));
    worker_ctx *w0 = &workers[0];
    for (size_t i = 0; i < cfg->workers && res->nlost < HERD_MAX_FAIL; i++)
        if (atomic_load(&r->lost[i])) {
            res->lost[res->nlost++] = i;
            if (!cfg->quiet)
                fprintf(stderr, "worker %zu was lost at its step %zu; the others finished without it\n", i,
                        workers[i - r->first_rank].w.step);
        }
    res->algo = r->algo_ops->name;
    res->status = w0->div.diverged ? "diverged" : w0->div.not_learning ? "not_learning" : "ok";
    res->engine = r->world->engine->name;
    res->model = cfg->model;
    res->optimizer = herd_optimizer_name(cfg->optim.optimizer);
    res->precision = herd_precision_name(cfg->precision);
    res->train_digest = r->train.digest, res->test_digest = r->test.digest;
    res->other_data = herd__ckpt_other_data(r->ckpt, &res->ckpt_train_digest, &res->ckpt_test_digest);
    res->lr = herd_optim_base_lr(&cfg->optim);
    res->rank = r->first_rank;
    res->workers = cfg->workers;
    res->threads = cfg->threads;
    res->threads_from = r->threads_from;
    res->adapt_threads = cfg->adapt_threads;
    size_t steps = 0, full = 0;
    for (size_t i = 0; i < r->nlocal; i++)
        steps += workers[i].compute.adapt.steps, full += workers[i].compute.adapt.steps_full,
            res->threads_switches += workers[i].compute.adapt.switches;
    res->threads_full_share = steps ? (double)full / (double)steps : 1.0;
    if (w0->algo.ops->summary_json)
        w0->algo.ops->summary_json(&w0->algo, &w0->w, res->algo_json, sizeof res->algo_json);
    /* asynchronous workers share the epochs: worker 0 may have seen few of them */
    res->epochs = r->algo_ops->async && !cfg->max_steps ? cfg->epochs : w0->w.epoch + (w0->w.epoch < cfg->epochs ? 1 : 0);
    /* the evaluation is rank 0's: elsewhere there is no figure (null), not 0 */
    bool evaluated = r->first_rank == 0;
    const worker_result *out = &w0->result;
    res->test_acc = evaluated ? out->test_acc : NAN;
    res->worker0_acc = evaluated ? out->worker0_acc : NAN;
    res->eval_model = out->eval_model ? out->eval_model : "worker0";
    res->test_loss = evaluated ? out->test_loss : NAN;
    res->train_loss = out->train_loss;
    memcpy(res->run_id, r->run_id, sizeof res->run_id);
    res->wall_s = wall;
    res->train_s = t.train_s_max;
    res->train_img_per_s = t.train_s_max > 0 ? t.images / t.train_s_max : 0;
    res->images = t.images;
    res->bytes_sent = (uint64_t)t.bytes;
    res->steps = w0->w.step;
    /* a synchronous step is skipped by every worker alike; elsewhere each
     * worker drops its own gradients */
    res->skipped_steps = r->algo_ops->async || herd__nf_settles(r) ? (size_t)t.skipped : workers[0].nf.skipped;
    res->nparams = w0->w.nparams;
    res->comm_wait_s = t.wait / (double)cfg->workers;
    /* how far the replicas of this process drifted apart (0 for synchronous algorithms) */
    for (size_t i = 1; i < r->nlocal; i++)
        for (size_t k = 0; k < w0->w.nparams; k++) {
            double d = fabs((double)workers[i].w.params[k] - (double)w0->w.params[k]);
            if (!(d <= res->replica_max_diff)) /* NaN counts as a difference */
                res->replica_max_diff = d;
        }
    HERD_TRY(final_model(r, workers, res, err));
    herd__log_record(&r->log, "end", "\"test_acc\":%.6f,\"test_loss\":%.6f,\"wall_s\":%.6f,\"train_img_per_s\":%.3f,\"lost\":%zu",
                     res->test_acc, res->test_loss, res->wall_s, res->train_img_per_s, res->nlost);
out:
    return st;
}

herd_status herd_train_result_json(const herd_train_result *res, FILE *f)
{
    /* the whole object in memory first: herd__json_write turns a non-finite
     * number into null, which it can tell only with the key before it */
    char *buf = NULL;
    size_t len = 0;
    if (!res || !f || res->nlost > HERD_MAX_FAIL) /* no err here: the status says it */
        return HERD_EINVAL;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return HERD_ENOMEM;
    fprintf(m,
            "{\"algo\":\"%s\",\"status\":\"%s\",\"run_id\":\"%s\",\"engine\":\"%s\",\"model\":\"%s\",\"workers\":%zu,\"threads\":%zu,"
            "\"threads_from\":\"%s\",\"adapt_threads\":%s,\"threads_full_share\":%.4f,\"threads_switches\":%zu,\"epochs\":%zu,\"steps\":%zu,\"test_acc\":%.6f,\"test_loss\":%.17g,\"train_loss\":%.17g,\"wall_s\":%.6f,"
            "\"train_s\":%.6f,\"train_img_per_s\":%.3f,\"bytes_sent\":%llu,\"comm_wait_s\":%.6f,"
            "\"nparams\":%zu,\"eval_model\":\"%s\",\"worker0_acc\":%.6f,\"skipped_steps\":%zu,"
            "\"epoch_s_median\":%.6f,\"epoch_s_min\":%.6f,\"epoch_s_max\":%.6f,\"slowest_worker\":%zu,"
            "\"steps_median\":%.1f,\"steps_min\":%zu,\"steps_max\":%zu,\"lost\":[",
            res->algo, res->status ? res->status : "ok", res->run_id, res->engine, res->model, res->workers, res->threads,
            res->threads_from ? res->threads_from : "--threads", res->adapt_threads ? "true" : "false",
            res->threads_full_share, res->threads_switches, res->epochs,
            res->steps,
            res->test_acc, res->test_loss, res->train_loss, res->wall_s, res->train_s, res->train_img_per_s,
            (unsigned long long)res->bytes_sent, res->comm_wait_s, res->nparams,
            res->eval_model ? res->eval_model : "worker0", res->worker0_acc, res->skipped_steps, res->epoch_s_median,
            res->epoch_s_min, res->epoch_s_max, res->slowest_worker, res->steps_median, res->steps_min,
            res->steps_max);
    for (size_t i = 0; i < res->nlost; i++)
        fprintf(m, "%s%zu", i ? "," : "", res->lost[i]);
    fputs("]", m);
    if (res->optimizer) /* not on a run refused before it was configured */
        fprintf(m, ",\"optimizer\":\"%s\",\"lr\":%.9g", res->optimizer, res->lr);
    if (res->precision)
        fprintf(m, ",\"precision\":\"%s\"", res->precision);
    if (res->train_digest || res->test_digest)
        fprintf(m, ",\"train_digest\":\"%016" PRIx64 "\",\"test_digest\":\"%016" PRIx64 "\"", res->train_digest,
                res->test_digest);
    if (res->other_data) /* resumed with --other-data: what the checkpoint's run read */
        fprintf(m, ",\"checkpoint_train_digest\":\"%016" PRIx64 "\",\"checkpoint_test_digest\":\"%016" PRIx64 "\"",
                res->ckpt_train_digest, res->ckpt_test_digest);
    fputs(res->algo_json, m);
    if (res->options) /* every option as the run resolved it */
        fprintf(m, ",\"options\":%s", res->options);
    fputs("}", m);
    herd_status st = fclose(m) ? HERD_ENOMEM : HERD_OK;
    if (st == HERD_OK && herd__json_write(f, buf) < 0)
        st = HERD_EIO;
    free(buf);
    return st;
}
