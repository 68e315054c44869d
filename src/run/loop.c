/* The worker loop: one worker's epochs and steps, around the algorithm's
 * hooks (herd_algo.h), with evaluation and a stop asked from outside
 * (cfg->stop); the services it calls have their own files (run.h). */
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
#include "run/ckpt_run.h"
#include "run/log.h"
#include "run/run.h"

/* What the algorithm may ask of the run (herd_algo.h, herd_peers). */
static bool peer_lost(void *ctx, size_t rank)
{
    const herd_run *r = ((worker_ctx *)ctx)->run;
    return r->lost && atomic_load(&r->lost[rank]);
}

static herd_status run_stopping(void *ctx, herd_err *err)
{
    worker_ctx *c = ctx;
    return herd__stop_check(&c->claim, &c->w, err);
}

const herd_peers_ops herd__run_peers = {.lost = peer_lost, .stopping = run_stopping};

/* A step's compute is told to the engine where it happens (herd_comm.h, "a
 * worker's own compute"): where the workers run on a virtual clock that is
 * what a step costs there; elsewhere it took the time it took, and the
 * calls do nothing. The local update's FLOPs per parameter: SGD with
 * momentum and weight decay (herd_optim_step: v = mu v + g + wd p;
 * p -= lr v). */
#define HERD__UPDATE_FLOPS_PER_PARAM 6.0

/* The step has begun and its forward pass is done; backward begins, beside
 * what grad_ready starts. */
static void compute_forward(worker_ctx *c, size_t batch)
{
    herd_comm_step_begin(c->w.comm);
    herd_comm_compute(c->w.comm, herd_model_forward_flops(c->w.model) * (double)batch);
    herd_comm_span_begin(c->w.comm, &c->compute.backward);
}

/* Backward has produced the gradients of the layer whose parameters start at
 * off: the worker's time is what that took since backward began. */
static herd_status on_grad_ready(void *p, size_t off, size_t len)
{
    worker_ctx *c = p;
    herd_comm_span_reach(c->w.comm, &c->compute.backward,
                         herd_model_backward_flops_done(c->w.model, off) * (double)c->run->cfg->batch);
    herd__nf_grads_arrived(&c->nf, c->algo.ops, &c->w, off, len);
    return c->algo.ops->grad_ready(&c->algo, &c->w, off, len);
}

/* "1:02:03", "2:03" */
static void hms(char *buf, size_t cap, double s)
{
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

/* The bar on a terminal: the epoch, its batches, loss, rate, time since
 * the run started and what is left at the rate so far. frac: how much of
 * the epoch the workers have done, in [0, 1). */
static void progress(worker_ctx *c, double frac, double loss, double t_epoch)
{
    herd_run *r = c->run;
    if (!r->tty || !r->cfg->progress || r->cfg->quiet)
        return;
    size_t width = 24, done = (size_t)(frac * (double)width);
    char bar[64], elapsed[32], eta[32];
    for (size_t i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = 0;
    double images = frac * (double)(c->w.steps_per_epoch * r->cfg->batch * r->cfg->workers);
    double ips = t_epoch > 0 ? images / t_epoch : 0;
    double t = herd__now() - r->t0, run_frac = ((double)c->w.epoch + frac) / (double)r->cfg->epochs;
    hms(elapsed, sizeof elapsed, t);
    if (run_frac > 0)
        hms(eta, sizeof eta, t * (1 - run_frac) / run_frac);
    else
        snprintf(eta, sizeof eta, "?");
    fprintf(stderr, "\repoch %zu/%zu [%s] %3d%%  step %zu/%zu  loss %.4f  %.0f img/s  %s, ETA %s ", c->w.epoch + 1,
            r->cfg->epochs, bar, (int)(100 * frac), (size_t)(frac * (double)c->w.steps_per_epoch),
            c->w.steps_per_epoch, loss, ips, elapsed, eta);
    fflush(stderr);
}

/* Evaluation: a model with a NaN or Inf is not evaluated (it would score
 * chance, 0.1 on ten classes): the run stops, saying so. */
static herd_status check_eval_model(worker_ctx *c, const float *x, const char *name)
{
    herd_worker *w = &c->w;
    if (herd__all_finite(x, w->nparams))
        return HERD_OK;
    herd__log_record(&c->run->log, "nonfinite", "\"worker\":%zu,\"step\":%zu,\"epoch\":%zu,\"model\":\"%s\",\"action\":\"stop\"",
                     w->rank, w->step, w->epoch + 1, name);
    return herd_err_set(&w->err, HERD_ENONFINITE,
                        "epoch %zu, step %zu: %s%s model holds non-finite weights; the run stops: the learning rate "
                        "%g may be too high",
                        w->epoch + 1, w->step, strstr(name, "'s") ? "" : "the ", name, (double)w->lr);
}

/* Where an evaluation is, for its "eval" record: the epoch it is in (the
 * one that ended, at an epoch's end), the run's progress in epochs (1.5:
 * halfway through the second), the training loss (the mean of the epoch's
 * batches so far; see timed_evaluate), the epoch's training time so far and worker 0's
 * training time since the start; evaluations excluded from both. */
typedef struct eval_point {
    size_t epoch;
    double progress, train_loss, epoch_s, train_s;
} eval_point;

/* Evaluation on worker 0: of the model the algorithm says users keep (a
 * center, an average) and of worker 0's own; logs and reports. */
static herd_status evaluate(worker_ctx *c, const eval_point *p);

/* With --eval-every-steps, the record's training loss is the mean over
 * the batches since the previous evaluation (an epoch's running mean would
 * fall at each epoch's start): NAN where worker 0 took none (asynchronous). */
static herd_status timed_evaluate(worker_ctx *c, const eval_point *p)
{
    double t0 = herd__now();
    eval_point q = *p;
    if (c->run->cfg->eval_every_steps && q.progress > 0)
        q.train_loss = c->eval.recent_nloss ? c->eval.recent_loss_sum / (double)c->eval.recent_nloss : NAN;
    c->eval.recent_loss_sum = 0, c->eval.recent_nloss = 0;
    herd_status st = evaluate(c, &q);
    herd__trace_span(&c->trace, &c->w, HERD__SPAN_EVAL, t0, herd__now());
    return st;
}

/* At the end of an epoch (synchronous: every worker's step is a global
 * step, so the steps taken say where; asynchronous: the epoch that ended). */
static herd_status evaluate_epoch_end(worker_ctx *c, double epoch_loss, double t_epoch)
{
    herd_worker *w = &c->w;
    double progress = c->run->algo_ops->async || !w->steps_per_epoch
                          ? (double)(w->epoch + 1)
                          : (double)w->step / (double)w->steps_per_epoch;
    return timed_evaluate(c, &(eval_point){w->epoch + 1, progress, epoch_loss, t_epoch, c->result.train_s});
}

/* The final evaluation, after every worker's last step: an asynchronous
 * run that was not cut short by --max-steps has used every batch (worker
 * 0 may have taken none of the last epoch's); with --max-steps its
 * workers took about as many steps each. */
static herd_status final_evaluate(worker_ctx *c, double epoch_loss, double t_epoch)
{
    herd_worker *w = &c->w;
    const herd__train_config *cfg = c->run->cfg;
    if (!c->run->algo_ops->async || !w->steps_per_epoch)
        return evaluate_epoch_end(c, epoch_loss, t_epoch);
    double progress = (double)cfg->epochs;
    if (cfg->max_steps && (double)w->step / (double)w->steps_per_epoch < progress)
        progress = (double)w->step / (double)w->steps_per_epoch;
    return timed_evaluate(c, &(eval_point){w->epoch + 1, progress, epoch_loss, t_epoch, c->result.train_s});
}

herd_status herd__evaluate(worker_ctx *c, double epoch_loss, double t_epoch)
{
    herd_status st = final_evaluate(c, epoch_loss, t_epoch);
    if (st < 0)
        return st;
    return herd__div_final(&c->div, c->run, &c->w, epoch_loss, c->result.test_acc, c->result.test_loss);
}

/* A worker's communication counters, kept across what an evaluation
 * communicates (no worker's training or exchange). */
typedef struct comm_counts {
    uint64_t sent, recv, algo_sent, collectives;
    double wait_s, algo_wait_s;
} comm_counts;

static comm_counts counts_get(const herd_worker *w)
{
    const herd_comm *m = w->comm;
    return (comm_counts){m->bytes_sent, m->bytes_recv, w->bytes_sent, m->collectives, m->wait_s, w->comm_wait_s};
}

static void counts_put(herd_worker *w, const comm_counts *k)
{
    herd_comm *m = w->comm;
    m->bytes_sent = k->sent, m->bytes_recv = k->recv, w->bytes_sent = k->algo_sent;
    m->collectives = k->collectives, m->wait_s = k->wait_s, w->comm_wait_s = k->algo_wait_s;
}

/* A barrier of every worker while worker 0 evaluates: its wait is not
 * counted as communication (the evaluation is no worker's training or
 * exchange time). */
static herd_status eval_barrier(worker_ctx *c)
{
    if (c->w.nworkers < 2)
        return HERD_OK;
    comm_counts k = counts_get(&c->w);
    herd_status st = herd_comm_barrier(c->w.comm);
    counts_put(&c->w, &k);
    return st;
}

/* --eval-at-start: worker 0 evaluates the model before the first step, an
 * "eval" record at epoch 0, step 0, train_s 0: the curves' first point. Its
 * training loss, with no epoch's mean yet, is the loss on the first
 * training examples (as many as the test set has). The other workers wait
 * for it at a barrier (eval_barrier). */
static herd_status evaluate_at_start(worker_ctx *c)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    w->lr = herd_optim_lr(&r->cfg->optim, 0.0, (double)r->cfg->epochs); /* the record's lr: the first step's */
    if (w->rank == 0) {
        double train_loss, train_acc;
        size_t n = r->train.n < r->test.n ? r->train.n : r->test.n;
        herd_model_evaluate(w->model, r->train.x, r->train.y, n, herd_dataset_dim(&r->train), &train_loss,
                            &train_acc);
        HERD_TRY(timed_evaluate(c, &(eval_point){0, 0, train_loss, 0, 0}));
    }
    HERD_TRY(eval_barrier(c));
out:
    return st;
}

static herd_status evaluate(worker_ctx *c, const eval_point *p)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    worker_result *res = &c->result;
    size_t dim = herd_dataset_dim(&r->test);
    if ((st = check_eval_model(c, w->params, "worker 0's")) < 0)
        return st;
    herd_model_evaluate(w->model, r->test.x, r->test.y, r->test.n, dim, &res->test_loss, &res->test_acc);
    res->worker0_acc = res->test_acc;
    res->eval_model = "worker0";
    const char *name = NULL;
    if (c->algo.ops->eval_params) {
        /* evaluate the algorithm's model in w's model, then put w's weights back */
        memcpy(c->eval.buf, w->params, w->nparams * sizeof(float));
        st = c->algo.ops->eval_params(&c->algo, w, c->eval.buf + w->nparams, &name);
        if (st == HERD_OK && name)
            st = check_eval_model(c, c->eval.buf + w->nparams, name);
        if (st == HERD_OK && name) {
            memcpy(w->params, c->eval.buf + w->nparams, w->nparams * sizeof(float));
            herd_model_evaluate(w->model, r->test.x, r->test.y, r->test.n, dim, &res->test_loss, &res->test_acc);
            memcpy(w->params, c->eval.buf, w->nparams * sizeof(float));
            res->eval_model = name;
        }
        if (st < 0)
            return st;
    }
    herd__log_record(&r->log, "eval",
                     "\"worker\":%zu,\"epoch\":%zu,\"step\":%zu,\"progress\":%.6f,\"train_loss\":%.6f,"
                     "\"test_loss\":%.6f,\"test_acc\":%.6f,\"model\":\"%s\",\"worker0_acc\":%.6f,"
                     "\"epoch_s\":%.6f,\"train_s\":%.6f,\"lr\":%.6g",
                     w->rank, p->epoch, w->step, p->progress, p->train_loss, res->test_loss, res->test_acc,
                     res->eval_model, res->worker0_acc, p->epoch_s, p->train_s, (double)w->lr);
    if (!r->cfg->quiet) {
        char also[64] = "";
        if (name)
            snprintf(also, sizeof also, " (%s; worker 0: %.4f)", name, res->worker0_acc);
        if (r->tty && r->cfg->progress)
            fputs("\r\033[K", stderr); /* the bar's line, cleared */
        char tl[32] = "n/a", at[48] = "";
        if (isfinite(p->train_loss))
            snprintf(tl, sizeof tl, "%.4f", p->train_loss);
        if (p->progress != floor(p->progress)) /* --eval-every-steps, within an epoch */
            snprintf(at, sizeof at, " step %zu", w->step);
        fprintf(stderr, "epoch %zu/%zu%s  train_loss %s  test_loss %.4f  test_acc %.4f%s  %.1fs\n", p->epoch,
                r->cfg->epochs, at, tl, res->test_loss, res->test_acc, also, p->epoch_s);
    }
    return herd__div_check(&c->div, r, w, res->test_loss);
}

static void epoch_begin(worker_ctx *c, epoch_stats *e, size_t epoch)
{
    herd_loader_start_epoch(&c->loader, epoch);
    c->w.epoch = epoch;
    *e = (epoch_stats){.t0 = herd__now()};
}

/* Ends the worker's current epoch: the algorithm's end_epoch, the epoch log
 * record, and (worker 0, not the run's last epoch) an evaluation, every
 * --eval-every epochs or where a --eval-every-steps mark fell on the
 * epoch's last step (mark). */
static herd_status epoch_end(worker_ctx *c, epoch_stats *e, bool last, bool mark)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    CALL_HOOK(c, end_epoch);
    double t_epoch = herd__now() - e->t0;
    c->result.train_s += t_epoch;
    c->result.last_epoch_s = t_epoch;
    c->result.epochs_trained++;
    /* a worker that took no step this epoch (asynchronous: the others took
     * its batches) has no training loss: NaN, null in JSON, not 0 */
    c->result.train_loss = e->nloss ? e->loss_sum / (double)e->nloss : NAN;
    char extra[1024] = "";
    if (c->algo.ops->log_epoch)
        c->algo.ops->log_epoch(&c->algo, w, extra, sizeof extra);
    if (r->cfg->skip_nonfinite)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",\"skipped\":%zu", e->skipped);
    herd__claim_log_epoch(&c->claim, extra, sizeof extra); /* how this worker got its batches so far */
    herd__log_record(&r->log, "epoch",
                     "\"worker\":%zu,\"epoch\":%zu,\"steps\":%zu,\"train_loss\":%.6f,\"epoch_s\":%.6f,"
                     "\"bytes_sent\":%llu,\"collectives\":%llu,\"comm_wait_s\":%.6f%s",
                     w->rank, w->epoch + 1, e->steps, c->result.train_loss, t_epoch,
                     (unsigned long long)(w->bytes_sent + w->comm->bytes_sent),
                     (unsigned long long)w->comm->collectives, w->comm_wait_s + w->comm->wait_s, extra);
    if (w->rank == 0 && !last && (mark || (w->epoch + 1) % r->cfg->eval_every == 0))
        HERD_TRY(evaluate_epoch_end(c, c->result.train_loss, t_epoch));
out:
    return st;
}

/* --eval-every-steps, within an epoch: worker 0 evaluates the model after
 * the step that reached a mark, progress epochs into the run; synchronous
 * workers all wait for it at a barrier (async: the others go on
 * training). The time it takes is moved out of the epoch (e->t0 forward),
 * as an epoch-end evaluation is outside every epoch: the curves' time, the
 * epoch's and the run's training time exclude it. */
static herd_status evaluate_between_steps(worker_ctx *c, epoch_stats *e, double progress)
{
    herd_status st = HERD_OK;
    herd_worker *w = &c->w;
    double t0 = herd__now();
    if (!c->run->algo_ops->async && c->algo.ops->before_eval) {
        comm_counts k = counts_get(w);
        st = c->algo.ops->before_eval(&c->algo, w);
        counts_put(w, &k);
        if (st < 0)
            goto out;
    }
    if (w->rank == 0) {
        double epoch_s = t0 - e->t0;
        double loss = e->nloss ? e->loss_sum / (double)e->nloss : NAN;
        HERD_TRY(timed_evaluate(c, &(eval_point){w->epoch + 1, progress, loss, epoch_s, c->result.train_s + epoch_s}));
    }
    if (!c->run->algo_ops->async)
        HERD_TRY(eval_barrier(c));
out:
    e->t0 += herd__now() - t0;
    return st;
}

/* One step on the batch in c->x, c->y; pos is the run's progress in epochs
 * (for the learning-rate schedule). */
static herd_status train_step(worker_ctx *c, epoch_stats *e, double pos)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    const herd__train_config *cfg = r->cfg;
    herd_worker *w = &c->w;
    w->lr = herd_optim_lr(&cfg->optim, pos, (double)cfg->epochs);
    double t_pull = herd__now();
    CALL_HOOK(c, before_step);
    double t_compute = herd__now();
    herd__trace_span(&c->trace, w, HERD__SPAN_PULL, t_pull, t_compute);
    herd_model_forward(w->model, c->x, cfg->batch, true);
    float loss = herd_model_loss(w->model, c->y, cfg->batch, NULL);
    double t_forward = herd__now();
    herd__trace_span(&c->trace, w, HERD__SPAN_FORWARD, t_compute, t_forward);
    bool async = r->algo_ops->async, skip = false;
    c->nf.step = (nonfinite_step){.loss = !isfinite(loss)};
    c->nf.step.poison = c->nf.step.loss || herd__nf_injected(w);
    compute_forward(c, cfg->batch);
    /* a synchronous worker goes through backward whatever its loss: the
     * others reduce with it */
    if (!(async && c->nf.step.loss)) {
        HERD_TRY(herd_model_backward(w->model, cfg->batch, c->algo.ops->grad_ready ? on_grad_ready : NULL, c));
        if (!c->algo.ops->grad_ready)
            herd__nf_grads_arrived(&c->nf, c->algo.ops, w, 0, w->nparams);
    }
    herd__trace_span(&c->trace, w, HERD__SPAN_BACKWARD, t_forward, herd__now());
    herd_comm_span_reach(w->comm, &c->compute.backward,
                         (herd_model_train_flops(w->model) - herd_model_forward_flops(w->model)) * (double)cfg->batch);
    /* --slow scales this worker's compute (forward and backward), not its
     * waiting: the extra time is spent here, between the pull of
     * before_step and the push of after_backward/step, as a slower
     * processor would spend it. A worker's first step is not slowed, so that
     * a run with a stalled worker gets to its first checkpoint (kernel
     * compilation and first touches were paid by warm_up, before the clock
     * started). */
    double t_started = t_compute;
    t_compute = herd__now() - t_compute;
    if (cfg->adapt_threads)
        herd_nn_adapt_step(&c->compute.adapt, t_compute, herd__now());
    herd__fault_slow(&c->fault, r, w, t_compute);
    double t_exchange = herd__now();
    herd__trace_span(&c->trace, w, HERD__SPAN_COMPUTE, t_started, t_exchange);
    if (async)
        HERD_TRY(herd__nf_async(&c->nf, r, w, &e->skipped, &skip));
    herd_step_result res = {0};
    if (c->algo.ops->after_backward)
        HERD_TRY(c->algo.ops->after_backward(&c->algo, w, &res));
    if (!async && c->algo.ops->checks_gradient && res.own_nonfinite)
        c->nf.step.grad = true;
    if (!async)
        HERD_TRY(herd__nf_sync(&c->nf, r, w, &e->skipped, &res, &skip));
    /* the update, in one place; a skipped step still runs the algorithm's
     * exchanges (of finite weights): its peers count on them */
    herd_comm_compute(w->comm, HERD__UPDATE_FLOPS_PER_PARAM * (double)herd_model_nparams(w->model));
    double t_update = herd__now();
    HERD_TRY(herd_algo_update(&c->algo, w, &res, skip));
    herd__trace_span(&c->trace, w, HERD__SPAN_UPDATE, t_update, herd__now());
    CALL_HOOK(c, after_step);
    herd__trace_span(&c->trace, w, HERD__SPAN_EXCHANGE, t_exchange, herd__now());
    w->step++, e->steps++;
    atomic_store_explicit(&c->stop.at_step, w->step, memory_order_relaxed);
    c->result.images += cfg->batch;
    if (!skip) {
        e->loss_sum += loss, e->nloss++;
        c->eval.recent_loss_sum += loss, c->eval.recent_nloss++;
        herd__div_step(&c->div, w, loss);
    }
    if (cfg->log_every && w->step % cfg->log_every == 0)
        herd__log_record(&r->log, "step", "\"worker\":%zu,\"step\":%zu,\"epoch\":%zu,\"loss\":%.6g,\"lr\":%.6g,"
                                          "\"skipped\":%s",
                         w->rank, w->step, w->epoch + 1, loss, (double)w->lr, skip ? "true" : "false");
    if (w->rank == 0 && herd__now() - e->last_progress > 0.1) {
        e->last_progress = herd__now();
        progress(c, pos - floor(pos), e->loss_sum / (double)e->nloss, e->last_progress - e->t0);
    }
out:
    return st;
}

/* cfg->stop was asked: whether this worker stops now. Synchronous workers
 * must stop at one step (the next checkpoint's collective, the peers they
 * exchange with): the first to see the request sets it to the furthest
 * worker's step + 2, which none has passed (a synchronous worker is never
 * far ahead of the others: it waits for them in its exchanges), and every
 * worker stops when it gets there. An asynchronous worker stops at once. */
static herd_status stop_asked(worker_ctx *c, bool *stop)
{
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    int sig = atomic_load_explicit(r->cfg->stop, memory_order_relaxed);
    if (!r->algo_ops->async && herd__run_spans_processes(r)) /* no step to agree on in one process */
        return herd_err_set(&w->err, HERD_ESTOPPED, "stopped by signal %d at step %zu", sig, w->step);
    size_t at = atomic_load(&r->stop_at);
    if (!r->algo_ops->async && at == SIZE_MAX) {
        size_t most = 0;
        for (size_t i = 0; i < r->nlocal; i++) {
            size_t s = atomic_load_explicit(&r->workers[i].stop.at_step, memory_order_relaxed);
            most = s > most ? s : most;
        }
        atomic_compare_exchange_strong(&r->stop_at, &at, most + 2);
        at = atomic_load(&r->stop_at);
    }
    if (r->algo_ops->async || w->step >= at)
        *stop = c->stop.stopped = true;
    return HERD_OK;
}

/* Whether the worker must stop before its next step. */
static herd_status before_next(worker_ctx *c, bool *stop)
{
    herd_run *r = c->run;
    *stop = false;
    if (atomic_load(&r->abort))
        return HERD_EREMOTE;
    if (r->cfg->stop && atomic_load_explicit(r->cfg->stop, memory_order_relaxed)) {
        herd_status st = stop_asked(c, stop);
        if (st < 0 || *stop)
            return st;
    }
    if (r->cfg->max_steps && c->w.step >= r->cfg->max_steps)
        *stop = true;
    else if (c->w.step == c->fault.fail_step) {
        *stop = true;
        return herd__fault_fail(&c->fault, r, &c->w);
    }
    return HERD_OK;
}

/* --resume: the checkpoint's epoch goes on from the step it was written at. */
static void resume_epoch(worker_ctx *c, epoch_stats *e)
{
    c->loader.step = (size_t)c->resume.epoch_step;
    e->steps = (size_t)c->resume.epoch_step, e->nloss = (size_t)c->resume.nloss, e->loss_sum = c->resume.loss_sum;
}

/* --checkpoint: collective; every worker saves at the same step, or
 * (asynchronous) at the same hold of the batch counter, `claimed`. */
static herd_status checkpoint(worker_ctx *c, const epoch_stats *e, uint64_t claimed)
{
    herd__ckpt_cursor cur = {.epoch = c->w.epoch, .epoch_step = e->steps, .step = c->w.step, .nloss = e->nloss,
                             .loss_sum = e->loss_sum, .claimed = claimed};
    double t0 = herd__now();
    herd_status st = herd__ckpt_save(c->run->ckpt, &c->algo, &c->w, &c->loader, &cur);
    herd__trace_span(&c->trace, &c->w, HERD__SPAN_CHECKPOINT, t0, herd__now());
    return st;
}

/* Synchronous algorithms: every worker takes its own slice of every global
 * step, epoch after epoch. */
static herd_status loop_static(worker_ctx *c)
{
    herd_status st = HERD_OK;
    const herd__train_config *cfg = c->run->cfg;
    herd_worker *w = &c->w;
    bool settles = herd__nf_settles(c->run);
    epoch_stats e;
    for (size_t epoch = (size_t)c->resume.epoch; epoch < cfg->epochs; epoch++) {
        epoch_begin(c, &e, epoch);
        if (c->resume.step && epoch == c->resume.epoch)
            resume_epoch(c, &e);
        bool stop = false, mark = false;
        while (!stop) {
            HERD_TRY(before_next(c, &stop));
            if (c->stop.stopped && c->run->ckpt && w->step > 0 && !herd__ckpt_due(c->run->ckpt, w)) {
                /* stopped from outside: this step is saved (every worker is here) */
                if (settles)
                    HERD_TRY(herd__nf_settle(&c->nf, c->run, w));
                HERD_TRY(checkpoint(c, &e, 0));
            }
            c->stop.saved = c->stop.stopped && c->run->ckpt && w->step > 0;
            if (stop || !herd_loader_next(&c->loader, c->x, c->y))
                break;
            HERD_TRY(train_step(c, &e, (double)epoch + (double)e.steps / (double)w->steps_per_epoch));
            if (herd__ckpt_due(c->run->ckpt, w)) {
                if (settles) /* a checkpoint holds no unsettled finding */
                    HERD_TRY(herd__nf_settle(&c->nf, c->run, w));
                HERD_TRY(checkpoint(c, &e, 0));
            }
            /* --eval-every-steps: every worker's step count is the global
             * one; a mark on the epoch's last step is the epoch end's, one
             * on the run's last (--max-steps) the final evaluation's */
            if (cfg->eval_every_steps && w->step % cfg->eval_every_steps == 0 && w->step != cfg->max_steps) {
                if (e.steps == w->steps_per_epoch)
                    mark = true;
                else
                    HERD_TRY(evaluate_between_steps(c, &e, (double)w->step / (double)w->steps_per_epoch));
            }
        }
        if (c->fault.lost)
            break;
        if (settles)
            HERD_TRY(herd__nf_settle(&c->nf, c->run, w));
        bool last = epoch + 1 == cfg->epochs || stop;
        HERD_TRY(epoch_end(c, &e, last, mark));
        if (last)
            break;
        /* the next epoch starts together, as the first did, once worker 0
         * has evaluated: workers that leave the epoch's collectives and
         * evaluation at different times start a gossip out of step, and
         * sgp stays out of step (on 32 workers, 10gbe, lenet: 31.6 ms for
         * its second epoch against 11.4 for its first; with this, 11.3).
         * Waiting here counts as evaluation, not training (no epoch's time) */
        if (w->nworkers > 1)
            HERD_TRY(herd_comm_barrier(w->comm));
    }
out:
    return st;
}

/* Asynchronous algorithms: workers claim global batches from one counter, so
 * an epoch is the whole training set used once by all workers together. */
static herd_status loop_claimed(worker_ctx *c)
{
    herd_status st = HERD_OK;
    const herd__train_config *cfg = c->run->cfg;
    herd_worker *w = &c->w;
    uint64_t per_epoch = (uint64_t)w->steps_per_epoch * w->nworkers, total = per_epoch * cfg->epochs;
    uint64_t hold = herd__ckpt_next_hold(c->run->ckpt, c->resume.claimed);
    /* --eval-every-steps: a global step is one batch a worker, so N steps
     * are N x workers batches in the counter's order (b); worker 0
     * evaluates after its first step on a batch at or past each mark
     * (marks passed while it took none give one evaluation), the
     * progress that batch's place. Leases (claim.c) hand a worker a range
     * of the epoch ahead of the others', so the place is within a lease's
     * share of the epoch of the batches trained. A mark at an epoch's end
     * is that epoch end's evaluation (mark). */
    uint64_t every = (uint64_t)cfg->eval_every_steps * w->nworkers;
    uint64_t next_mark = every ? (c->resume.claimed / every + 1) * every : UINT64_MAX;
    epoch_stats e = {0};
    bool started = false, stop = false, mark = false;
    if (c->resume.step) { /* --resume: this worker's epoch goes on */
        epoch_begin(c, &e, (size_t)c->resume.epoch);
        resume_epoch(c, &e);
        started = true;
    }
    for (;;) {
        HERD_TRY(before_next(c, &stop));
        if (stop)
            break;
        uint64_t b;
        double t_claim = herd__now();
        HERD_TRY(herd__claim_batch(&c->claim, w, &b, hold));
        herd__trace_span(&c->trace, w, HERD__SPAN_BATCH, t_claim, herd__now());
        if (b == hold) { /* every worker stops here, between two steps */
            HERD_TRY(checkpoint(c, &e, b));
            hold = herd__ckpt_next_hold(c->run->ckpt, b);
            continue;
        }
        if (b >= total)
            break;
        size_t epoch = (size_t)(b / per_epoch), index = (size_t)(b % per_epoch);
        if (!started || epoch != w->epoch) {
            if (started)
                HERD_TRY(epoch_end(c, &e, false, mark));
            epoch_begin(c, &e, epoch);
            started = true, mark = false;
        }
        herd_loader_batch(&c->loader, index, c->x, c->y);
        HERD_TRY(train_step(c, &e, (double)epoch + (double)index / (double)per_epoch));
        if (w->rank == 0 && b + 1 >= next_mark) {
            next_mark = ((b + 1) / every + 1) * every;
            if ((b + 1) % per_epoch == 0)
                mark = true;
            else
                HERD_TRY(evaluate_between_steps(c, &e, (double)(b + 1) / (double)per_epoch));
        }
    }
    if (started && !c->fault.lost)
        HERD_TRY(epoch_end(c, &e, true, false));
out:
    if (st == HERD_ENONFINITE)
        herd__announce_stop(&c->claim, w, herd__nf_code(&c->nf));
    return st;
}

/* One forward and backward pass on a batch of zeros before the run's clock
 * starts, the model left as it was: the first pass compiles the kernels
 * (oneDNN's JIT) and touches every activation buffer, tens of
 * milliseconds that would otherwise fall on each worker's first step at a
 * different time. Asynchronous workers that start out of step divide the
 * batches unevenly: a small run's batches all went to the workers whose
 * kernels were ready first. Not on an engine with a virtual clock, where
 * compute is charged by what it is, not by how long it takes, and 256
 * ranks would each pay it in real time. */
static herd_status warm_up(worker_ctx *c)
{
    if (c->run->world->engine->caps & HERD_ENGINE_VIRTUAL_CLOCK)
        return HERD_OK;
    herd_status st = herd_model_warm_up(c->w.model);
    return st < 0 ? herd_err_set(&c->w.err, st, "out of memory for the warm-up pass") : st;
}

static herd_status worker_loop(worker_ctx *c)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    herd_nn_adapt_init(&c->compute.adapt, (int)r->cfg->threads, herd__now());
    atomic_store(&c->stop.at_step, w->step); /* --resume: where it starts */
    HERD_TRY(warm_up(c));
    if (r->algo_ops->async) /* and they start together */
        HERD_TRY(herd_comm_barrier(w->comm));
    if (r->algo_ops->async) /* collective, before the algorithm's own windows */
        HERD_TRY(herd__claim_open(&c->claim, w, c->resume.claimed));
    CALL_HOOK(c, init);
    if (herd__ckpt_resuming(r->ckpt))
        HERD_TRY(herd__ckpt_restore_algo(r->ckpt, &c->algo, w));
    if (r->cfg->eval_at_start && w->step == 0) /* not on --resume: the curve has its start */
        HERD_TRY(evaluate_at_start(c));
    HERD_TRY(r->algo_ops->async ? loop_claimed(c) : loop_static(c));
    if (c->fault.lost)
        goto out;
    CALL_HOOK(c, finish);
    if (herd__run_spans_processes(r) && r->algo_ops->async) /* everyone done before the final evaluation */
        HERD_TRY(herd_comm_barrier(w->comm));
out:
    return st;
}

void *herd__worker_thread(void *p)
{
    worker_ctx *c = p;
    c->result.st = worker_loop(c);
    if (c->result.st < 0) {
        if (!c->w.err.msg[0] && c->w.comm && c->w.comm->err.msg[0])
            c->w.err = c->w.comm->err;
        /* an engine's message names the peer waited for; where the hook
         * that passed it on did not say the step, the run says it */
        if (c->result.st != HERD_EREMOTE && c->w.err.msg[0] && !strstr(c->w.err.msg, "step")) {
            herd_err e = c->w.err;
            herd_err_set(&c->w.err, c->result.st, "%s (worker %zu, step %zu)", e.msg, c->w.rank, c->w.step);
        }
        atomic_store(&c->run->abort, 1);
        if (c->w.comm)
            c->w.comm->failed = true; /* no collective teardown (mpi): the job ends */
        /* wake the workers blocked waiting for this one */
        if (c->result.st != HERD_EREMOTE && !c->nf.agreed_stop)
            herd_world_fail(c->run->world, c->w.rank);
    }
    return NULL;
}
