/* The training run and the worker loop.
 *
 * One herd_run holds what the workers share (config, data, log, the abort
 * flag); each worker owns its model, optimizer, loader and algorithm state.
 * On the threads engine every worker is a thread of this process.
 */
#include "herd/herd_run.h"

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
#include "comm/engines.h"
#include "core/finite.h"
#include "run/ckpt_run.h"
#include "run/log.h"
#include "run/simtime.h"

typedef struct herd_run {
    const herd_train_config *cfg;
    const herd_algo_ops *algo_ops;
    herd_dataset train, test;
    int32_t *test_y;
    herd_log log;
    herd_threads_world *world; /* threads engine */
    herd_comm *mpi;            /* mpi engine: this process's endpoint */
    const char *engine;
    size_t first_rank, nlocal; /* the workers this process runs */
    double t0;
    atomic_int abort; /* set by the first worker that fails */
    atomic_bool *lost; /* per rank (threads engine): lost to --fail, the others went on */
    herd__ckpt_run *ckpt; /* --checkpoint (NULL: none) */
    bool tty;
} herd_run;

/* What this worker found non-finite in the step under way. */
typedef struct nonfinite_step {
    bool loss, grad;
    bool poison; /* a NaN still to be written into the gradient (--inject-nan, or after a non-finite loss) */
} nonfinite_step;

typedef struct worker_ctx {
    herd_run *run;
    herd_worker w;
    herd_algo algo;
    herd_loader loader;
    float *x;
    int32_t *y;
    double slow_factor;
    size_t fail_step;     /* --fail: stop for good at this step (SIZE_MAX: never) */
    herd_fail_mode fail_mode; /* how (resolved: never DEFAULT) */
    bool lost;            /* stopped by --fail while the others go on */
    herd_win *claim_win;  /* asynchronous algorithms: the shared batch counter */
    uint64_t claim_buf[2];/* on rank 0: the counter, and the stop word (see announce_stop) */
    nonfinite_step nf;
    size_t skipped, skipped_run; /* --skip-nonfinite: steps not applied, in all and in a row */
    bool agreed_stop;     /* stopped on a non-finite value with every worker, at the same step */
    double stop_read_at;  /* herd_worker_stopping: when the stop word was last read */
    float *eval_buf;      /* 2 x nparams, where the algorithm has eval_params */
    herd__ckpt_cursor resume; /* --resume: where this worker starts (step 0: from scratch) */
    /* results */
    herd_status st;
    double train_s, train_loss, test_acc, test_loss, worker0_acc, last_epoch_s;
    const char *eval_model;
    size_t images;
} worker_ctx;

bool herd_worker_lost(const herd_worker *w, size_t rank)
{
    const herd_run *r = w->run;
    return r && r->lost && rank < w->nworkers && atomic_load(&r->lost[rank]);
}

static const char *const fail_mode_names[] = {"default", "stop", "exit0", "exit1", "abort", "kill"};

herd_status herd_fail_mode_parse(const char *s, herd_fail_mode *out)
{
    for (size_t i = HERD_FAIL_STOP; i < sizeof fail_mode_names / sizeof fail_mode_names[0]; i++)
        if (!strcmp(s, fail_mode_names[i])) {
            *out = (herd_fail_mode)i;
            return HERD_OK;
        }
    return HERD_EINVAL;
}

const char *herd_fail_mode_name(herd_fail_mode m)
{
    return (size_t)m < sizeof fail_mode_names / sizeof fail_mode_names[0] ? fail_mode_names[m] : "?";
}

void herd_train_config_defaults(herd_train_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->model = "lenet";
    cfg->algo = "sgd";
    cfg->workers = 1;
    cfg->epochs = 5;
    cfg->batch = 64;
    cfg->optim = (herd_optim_config){
        .lr = 0.05f,
        .momentum = 0.9f,
        .weight_decay = 5e-4f,
        .schedule = HERD_SCHED_COSINE,
        .step_epochs = 30,
        .step_gamma = 0.1f,
    };
    cfg->seed = 1;
    cfg->threads = 1;
    cfg->eval_every = 1;
    cfg->progress = true;
    cfg->comm_timeout_s = 60;
    cfg->allreduce = (herd_allreduce_config){
        .bucket_bytes = 4u << 20,
        .overlap = HERD_OVERLAP_AUTO,
        .comm_dtype = HERD_F32,
        .csc_chunk_bytes = 32u << 10,
    };
    cfg->ps = (herd_ps_config){.shards = 1, .softsync = 1, .max_staleness = -1};
    cfg->elastic = (herd_elastic_config){.alpha = 0.0, .period = 1};
    cfg->gossip = (herd_gossip_config){.topology = NULL, .max_delay = 1};
    cfg->checkpoint_keep = 3;
}

/* Options of one family given to an algorithm of another are a mistake the
 * user wants to hear about, not silently ignored. */
static herd_status check_family_options(const herd_train_config *cfg, const herd_algo_ops *algo, herd_err *err)
{
    const char *fam = algo->family ? algo->family : "";
    const herd_ps_config *ps = &cfg->ps;
    const char *flag = ps->staleness_lr ? "--staleness-lr" : ps->softsync != 1 ? "--softsync"
                     : ps->max_staleness >= 0 ? "--max-staleness" : ps->shards != 1 ? "--ps-shards" : NULL;
    if (flag && strcmp(fam, "ps"))
        return herd_err_set(err, HERD_EINVAL, "%s applies to the parameter-server algorithms (asgd, amsgd, hogwild), not --algo %s",
                            flag, algo->name);
    if (ps->shards < 1 || ps->shards > cfg->workers)
        return herd_err_set(err, HERD_EINVAL, "--ps-shards must be in [1, workers = %zu], got %zu", cfg->workers, ps->shards);
    if (ps->softsync < 1 || ps->softsync > cfg->workers)
        return herd_err_set(err, HERD_EINVAL, "--softsync must be in [1, workers = %zu], got %zu", cfg->workers, ps->softsync);
    const herd_elastic_config *el = &cfg->elastic;
    flag = el->alpha != 0.0 ? "--elastic-alpha" : el->period != 1 ? "--elastic-period" : NULL;
    if (flag && strcmp(fam, "easgd"))
        return herd_err_set(err, HERD_EINVAL, "%s applies to the elastic averaging algorithms (easgd, aeasgd, ameasgd, hogwild-easgd, eawild), not --algo %s",
                            flag, algo->name);
    if (!(el->alpha >= 0.0 && el->alpha < 1.0))
        return herd_err_set(err, HERD_EINVAL, "--elastic-alpha must be in (0, 1), got %g", el->alpha);
    if (el->period < 1 || el->period > 1000000)
        return herd_err_set(err, HERD_EINVAL, "--elastic-period must be in [1, 1000000], got %zu", el->period);
    const herd_gossip_config *go = &cfg->gossip;
    flag = go->topology ? "--topology" : go->max_delay != 1 ? "--max-delay" : NULL;
    if (flag && strcmp(fam, "gossip"))
        return herd_err_set(err, HERD_EINVAL, "%s applies to the decentralized and push-sum algorithms (dpsgd, adpsgd, sgp, osgp), not --algo %s",
                            flag, algo->name);
    if (go->topology && strcmp(go->topology, "ring") && strcmp(go->topology, "exp") && strcmp(go->topology, "random"))
        return herd_err_set(err, HERD_EINVAL, "--topology must be ring, exp or random, got '%s'", go->topology);
    if (go->max_delay > 1000000)
        return herd_err_set(err, HERD_EINVAL, "--max-delay must be at most 1000000, got %zu", go->max_delay);
    return HERD_OK;
}

static herd_status check_config(const herd_train_config *cfg, const herd_algo_ops **algo, herd_err *err)
{
    if (!cfg->algo || !(*algo = herd_algo_find(cfg->algo))) {
        char names[512] = "";
        for (size_t i = 0; herd_algos[i]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     herd_algos[i]->name);
        return herd_err_set(err, HERD_EINVAL, "unknown algorithm '%s' (choose one of: %s)",
                            cfg->algo ? cfg->algo : "", names);
    }
    if (cfg->workers < 1 || cfg->workers > 4096)
        return herd_err_set(err, HERD_EINVAL, "--workers must be in [1, 4096], got %zu", cfg->workers);
    if ((*algo)->min_workers && cfg->workers < (*algo)->min_workers)
        return herd_err_set(err, HERD_EINVAL, "--algo %s needs at least %zu workers, got %zu",
                            cfg->algo, (*algo)->min_workers, cfg->workers);
    if ((*algo)->max_workers && cfg->workers > (*algo)->max_workers)
        return herd_err_set(err, HERD_EINVAL,
                            "--algo %s runs on at most %zu worker(s), got --workers %zu%s", cfg->algo,
                            (*algo)->max_workers, cfg->workers,
                            !strcmp(cfg->algo, "sgd") ? " (sgd is the single-worker baseline)" : "");
    if (cfg->epochs < 1 || cfg->epochs > 100000)
        return herd_err_set(err, HERD_EINVAL, "--epochs must be in [1, 100000], got %zu", cfg->epochs);
    if (cfg->batch < 1 || cfg->batch > 65536)
        return herd_err_set(err, HERD_EINVAL, "--batch must be in [1, 65536], got %zu", cfg->batch);
    if (!(cfg->optim.lr > 0.0f) || !isfinite(cfg->optim.lr) || cfg->optim.lr > 100.0f)
        return herd_err_set(err, HERD_EINVAL, "--lr must be in (0, 100], got %g", (double)cfg->optim.lr);
    if (!(cfg->optim.momentum >= 0.0f && cfg->optim.momentum < 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--momentum must be in [0, 1), got %g", (double)cfg->optim.momentum);
    if (!(cfg->optim.weight_decay >= 0.0f && cfg->optim.weight_decay < 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--weight-decay must be in [0, 1), got %g",
                            (double)cfg->optim.weight_decay);
    if (cfg->optim.nesterov && cfg->optim.momentum == 0.0f)
        return herd_err_set(err, HERD_EINVAL, "--nesterov needs --momentum > 0");
    if (!(cfg->optim.warmup_epochs >= 0 && cfg->optim.warmup_epochs <= (double)cfg->epochs))
        return herd_err_set(err, HERD_EINVAL, "--warmup must be in [0, epochs], got %g", cfg->optim.warmup_epochs);
    if (cfg->threads < 1 || cfg->threads > 256)
        return herd_err_set(err, HERD_EINVAL, "--threads must be in [1, 256], got %zu", cfg->threads);
    if (!(cfg->comm_timeout_s > 0 && cfg->comm_timeout_s <= 86400))
        return herd_err_set(err, HERD_EINVAL, "--timeout must be in (0, 86400] seconds, got %g", cfg->comm_timeout_s);
    const herd_allreduce_config *ar = &cfg->allreduce;
    if (!(ar->csc_ratio >= 0.0 && ar->csc_ratio <= 1.0))
        return herd_err_set(err, HERD_EINVAL, "--csc-ratio must be in [0, 1], got %g", ar->csc_ratio);
    if (ar->csc_ratio > 0.0 && ar->csc_ratio < 1.0 && ar->csc_chunk_bytes < sizeof(float))
        return herd_err_set(err, HERD_EINVAL, "--csc-chunk-bytes must be at least 4, got %zu", ar->csc_chunk_bytes);
    if (ar->comm_dtype != HERD_F32 && ar->comm_dtype != HERD_F16 && ar->comm_dtype != HERD_BF16)
        return herd_err_set(err, HERD_EINVAL, "unknown wire type %d", ar->comm_dtype);
    for (size_t i = 0; i < cfg->ninject_nan; i++)
        if (cfg->inject_nan[i].rank >= cfg->workers)
            return herd_err_set(err, HERD_EINVAL, "--inject-nan %zu@%zu names worker %zu, but there are %zu workers",
                                cfg->inject_nan[i].rank, cfg->inject_nan[i].step, cfg->inject_nan[i].rank, cfg->workers);
    for (size_t i = 0; i < cfg->nfail; i++)
        if (cfg->fail[i].rank >= cfg->workers)
            return herd_err_set(err, HERD_EINVAL, "--fail %zu@%zu names worker %zu, but there are %zu workers",
                                cfg->fail[i].rank, cfg->fail[i].step, cfg->fail[i].rank, cfg->workers);
    herd_status st = check_family_options(cfg, *algo, err);
    if (st < 0)
        return st;
    for (size_t i = 0; i < cfg->nslow; i++) {
        if (cfg->slow[i].rank >= cfg->workers)
            return herd_err_set(err, HERD_EINVAL, "--slow %zu:%g names worker %zu, but there are %zu workers",
                                cfg->slow[i].rank, cfg->slow[i].factor, cfg->slow[i].rank, cfg->workers);
        if (!(cfg->slow[i].factor >= 1.0 && cfg->slow[i].factor <= 1e6))
            return herd_err_set(err, HERD_EINVAL, "--slow factor must be in [1, 1e6], got %g", cfg->slow[i].factor);
    }
    return HERD_OK;
}

/* A straggler's extra time: slept in slices of at most 50 ms, so a run
 * that another worker has already failed does not wait it out. */
static void straggle(const herd_run *r, double s)
{
    double end = herd__now() + s;
    for (double left = s; left > 0 && !atomic_load(&r->abort); left = end - herd__now()) {
        double d = left < 0.05 ? left : 0.05;
        struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void grads_arrived(worker_ctx *c, size_t off, size_t len);

static herd_status on_grad_ready(void *p, size_t off, size_t len)
{
    worker_ctx *c = p;
    grads_arrived(c, off, len);
    return c->algo.ops->grad_ready(&c->algo, &c->w, off, len);
}

#define CALL_HOOK(c, hook)                                               \
    do {                                                                 \
        if ((c)->algo.ops->hook)                                         \
            HERD_TRY((c)->algo.ops->hook(&(c)->algo, &(c)->w));          \
    } while (0)

/* frac: how much of the epoch the workers have done, in [0, 1). */
static void progress(worker_ctx *c, double frac, double loss, double t_epoch)
{
    herd_run *r = c->run;
    if (!r->tty || !r->cfg->progress || r->cfg->quiet)
        return;
    size_t width = 30, done = (size_t)(frac * (double)width);
    char bar[64];
    for (size_t i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = 0;
    double images = frac * (double)(c->w.steps_per_epoch * r->cfg->batch * r->cfg->workers);
    double ips = t_epoch > 0 ? images / t_epoch : 0;
    fprintf(stderr, "\repoch %zu/%zu [%s] %3d%%  loss %.4f  %.0f img/s ", c->w.epoch + 1, r->cfg->epochs, bar,
            (int)(100 * frac), loss, ips);
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

/* Evaluation on worker 0: of the model the algorithm says users keep (a
 * center, an average) and of worker 0's own; logs and reports. */
static herd_status evaluate(worker_ctx *c, double epoch_loss, double t_epoch)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    size_t dim = herd_dataset_dim(&r->test);
    if ((st = check_eval_model(c, w->params, "worker 0's")) < 0)
        return st;
    herd_model_evaluate(w->model, r->test.x, r->test_y, r->test.n, dim, &c->test_loss, &c->test_acc);
    herd__simtime_eval(w->model, r->test.n);
    c->worker0_acc = c->test_acc;
    c->eval_model = "worker0";
    const char *name = NULL;
    if (c->algo.ops->eval_params) {
        /* evaluate the algorithm's model in w's model, then put w's weights back */
        memcpy(c->eval_buf, w->params, w->nparams * sizeof(float));
        st = c->algo.ops->eval_params(&c->algo, w, c->eval_buf + w->nparams, &name);
        if (st == HERD_OK && name)
            st = check_eval_model(c, c->eval_buf + w->nparams, name);
        if (st == HERD_OK && name) {
            memcpy(w->params, c->eval_buf + w->nparams, w->nparams * sizeof(float));
            herd_model_evaluate(w->model, r->test.x, r->test_y, r->test.n, dim, &c->test_loss, &c->test_acc);
            herd__simtime_eval(w->model, r->test.n);
            memcpy(w->params, c->eval_buf, w->nparams * sizeof(float));
            c->eval_model = name;
        }
        if (st < 0)
            return st;
    }
    herd__log_record(&r->log, "eval",
                     "\"worker\":%zu,\"epoch\":%zu,\"step\":%zu,\"train_loss\":%.6f,"
                     "\"test_loss\":%.6f,\"test_acc\":%.6f,\"model\":\"%s\",\"worker0_acc\":%.6f,"
                     "\"epoch_s\":%.6f,\"lr\":%.6g",
                     w->rank, w->epoch + 1, w->step, epoch_loss, c->test_loss, c->test_acc, c->eval_model,
                     c->worker0_acc, t_epoch, (double)w->lr);
    if (!r->cfg->quiet) {
        char also[64] = "";
        if (name)
            snprintf(also, sizeof also, " (%s; worker 0: %.4f)", name, c->worker0_acc);
        if (r->tty && r->cfg->progress)
            fputc('\r', stderr);
        fprintf(stderr, "epoch %zu/%zu  train_loss %.4f  test_loss %.4f  test_acc %.4f%s  %.1fs%s\n",
                w->epoch + 1, r->cfg->epochs, epoch_loss, c->test_loss, c->test_acc, also, t_epoch,
                r->tty && r->cfg->progress ? "                    " : "");
    }
    return HERD_OK;
}

/* The per-epoch bookkeeping of one worker. */
typedef struct epoch_stats {
    double t0, loss_sum, last_progress;
    size_t nloss, steps, skipped;
} epoch_stats;

static void epoch_begin(worker_ctx *c, epoch_stats *e, size_t epoch)
{
    herd_loader_start_epoch(&c->loader, epoch);
    c->w.epoch = epoch;
    *e = (epoch_stats){.t0 = herd__now()};
}

/* Ends the worker's current epoch: the algorithm's end_epoch, the epoch log
 * record, and (worker 0, not the run's last epoch) an evaluation. */
static herd_status epoch_end(worker_ctx *c, epoch_stats *e, bool last)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    CALL_HOOK(c, end_epoch);
    double t_epoch = herd__now() - e->t0;
    c->train_s += t_epoch;
    c->last_epoch_s = t_epoch;
    c->train_loss = e->nloss ? e->loss_sum / (double)e->nloss : 0.0;
    char extra[1024] = "";
    if (c->algo.ops->log_epoch)
        c->algo.ops->log_epoch(&c->algo, w, extra, sizeof extra);
    if (r->cfg->skip_nonfinite)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",\"skipped\":%zu", e->skipped);
    herd__log_record(&r->log, "epoch",
                     "\"worker\":%zu,\"epoch\":%zu,\"steps\":%zu,\"train_loss\":%.6f,\"epoch_s\":%.6f,"
                     "\"bytes_sent\":%llu,\"comm_wait_s\":%.6f%s",
                     w->rank, w->epoch + 1, e->steps, c->train_loss, t_epoch,
                     (unsigned long long)(w->bytes_sent + w->comm->bytes_sent), w->comm_wait_s + w->comm->wait_s,
                     extra);
    if (w->rank == 0 && !last && (w->epoch + 1) % r->cfg->eval_every == 0)
        HERD_TRY(evaluate(c, c->train_loss, t_epoch));
out:
    return st;
}

/* --fail: this worker stops for good at this step. An asynchronous
 * algorithm's run goes on without it; a synchronous one stops, naming it. */
static herd_status injected_failure(worker_ctx *c)
{
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    herd__log_record(&r->log, "fail", "\"worker\":%zu,\"step\":%zu,\"mode\":\"%s\"", w->rank, w->step,
                     herd_fail_mode_name(c->fail_mode));
    if (c->fail_mode != HERD_FAIL_STOP) { /* mpi: a process that dies, as the others must survive or report */
        fprintf(stderr, "herd: worker %zu dies at step %zu (--fail %zu@%zu:%s)\n", w->rank, w->step, w->rank,
                w->step, herd_fail_mode_name(c->fail_mode));
        fflush(NULL); /* the log's "fail" record and the line above */
        if (c->fail_mode == HERD_FAIL_ABORT)
            abort();
        if (c->fail_mode == HERD_FAIL_KILL)
            raise(SIGKILL);
        _exit(c->fail_mode == HERD_FAIL_EXIT0 ? 0 : 1); /* no MPI_Finalize: the process just ends */
    }
    if (r->algo_ops->async) {
        atomic_store(&r->lost[w->rank], true);
        c->lost = true;
        if (!r->cfg->quiet)
            fprintf(stderr, "%sworker %zu stops at step %zu (--fail); the others go on\n",
                    r->tty && r->cfg->progress ? "\r" : "", w->rank, w->step);
        return HERD_OK;
    }
    return herd_err_set(&w->err, HERD_EKILLED, "worker %zu stopped at step %zu (--fail %zu@%zu)", w->rank, w->step,
                        w->rank, w->step);
}

/* ---- non-finite losses and gradients (herd_run.h, skip_nonfinite) ------
 *
 * Every worker checks its own loss and gradient each step. Synchronous
 * algorithms then agree, from what the workers share, whether any worker's
 * was non-finite (allreduce: its reduced gradient, via its nonfinite hook;
 * the others: a one-float allreduce), so all stop, or all skip the update,
 * at the same step. An asynchronous worker never pushes what it found: it
 * stops and leaves a stop word in the batch counter's window that every
 * other worker reads at its next claim (or, skipping, drops its gradient). */

static const char *const nonfinite_what[] = {"", "loss", "gradient", "model"};

/* 0: nothing found; 1: a non-finite loss; 2: a non-finite gradient. */
static int nonfinite_code(const worker_ctx *c)
{
    return c->nf.loss ? 1 : c->nf.grad ? 2 : 0;
}

/* --inject-nan: whether this worker's gradient gets a NaN at this step. */
static bool nan_injected(const worker_ctx *c)
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
static void grads_arrived(worker_ctx *c, size_t off, size_t len)
{
    float *g = c->w.grads + off;
    if (c->nf.poison && len) {
        g[0] = NAN;
        c->nf.poison = false;
    }
    if (!c->nf.grad && !c->algo.ops->own_nonfinite && !herd__all_finite(g, len))
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
                     w->rank, w->step, w->epoch + 1, nonfinite_code(c) ? nonfinite_what[nonfinite_code(c)] : "none",
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
    codes[w->rank] = (float)nonfinite_code(c);
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
static herd_status sync_nonfinite(worker_ctx *c, epoch_stats *e, bool *skip)
{
    herd_status st = HERD_OK;
    herd_worker *w = &c->w;
    bool bad;
    *skip = false;
    if (c->algo.ops->nonfinite) {
        bad = c->algo.ops->nonfinite(&c->algo, w);
    } else {
        float f = nonfinite_code(c) ? 1.0f : 0.0f;
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

/* The stop word in rank 0's claim window: 0 while the run goes on, else
 * what (2 bits: nonfinite_what) << 60 | (rank + 1) << 40 | step. */
static uint64_t stop_word(size_t what, size_t rank, size_t step)
{
    return (uint64_t)what << 60 | ((uint64_t)rank + 1) << 40 | ((uint64_t)step & ((1ull << 40) - 1));
}

/* Asynchronous: this worker stops on a non-finite value (its loss or
 * gradient, the model at an evaluation, or another's stop word); the others
 * will read it at their next claim (the first stop word written stays). */
static void announce_stop(worker_ctx *c)
{
    herd_status st = HERD_OK;
    herd_comm *comm = c->w.comm;
    size_t what = nonfinite_code(c) ? (size_t)nonfinite_code(c) : 3;
    uint64_t cur = 0, word = stop_word(what, c->w.rank, c->w.step);
    HERD_TRY(herd_comm_win_lock(comm, c->claim_win, 0, true));
    st = herd_comm_win_get(comm, c->claim_win, 0, sizeof(uint64_t), &cur, sizeof cur);
    if (st == HERD_OK)
        st = herd_comm_win_flush(comm, c->claim_win, 0);
    if (st == HERD_OK && cur == 0)
        st = herd_comm_win_put(comm, c->claim_win, 0, sizeof(uint64_t), &word, sizeof word);
    herd_status st2 = herd_comm_win_unlock(comm, c->claim_win, 0);
    if (st == HERD_OK)
        st = st2;
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
                        rank, what < 4 ? nonfinite_what[what] : "value", (size_t)(word & ((1ull << 40) - 1)),
                        (double)c->w.lr, c->run->cfg->skip_nonfinite ? "" : " (--skip-nonfinite drops such gradients)");
}

herd_status herd_worker_stopping(herd_worker *w)
{
    herd_status st = HERD_OK;
    if (!w->run)
        return HERD_OK;
    worker_ctx *c = (worker_ctx *)(void *)((char *)w - offsetof(worker_ctx, w));
    double now = herd__now();
    if (!c->claim_win || now - c->stop_read_at < 0.01)
        return HERD_OK;
    c->stop_read_at = now;
    uint64_t word = 0;
    HERD_TRY(herd_comm_win_lock(w->comm, c->claim_win, 0, false));
    st = herd_comm_win_get(w->comm, c->claim_win, 0, sizeof(uint64_t), &word, sizeof word);
    herd_status st2 = herd_comm_win_unlock(w->comm, c->claim_win, 0);
    if (st == HERD_OK)
        st = st2;
    if (st == HERD_OK && word)
        st = stopped_by(c, word);
out:
    return st;
}

/* Asynchronous, after backward: a worker that found a non-finite loss or
 * gradient pushes nothing of it. */
static herd_status async_nonfinite(worker_ctx *c, epoch_stats *e, bool *skip)
{
    herd_worker *w = &c->w;
    *skip = false;
    int code = nonfinite_code(c);
    if (!code) {
        c->skipped_run = 0;
        return HERD_OK;
    }
    char found[128];
    snprintf(found, sizeof found, "non-finite %s on worker %zu", nonfinite_what[code], w->rank);
    return nonfinite_found(c, e, found, skip);
}

/* One step on the batch in c->x, c->y; pos is the run's progress in epochs
 * (for the learning-rate schedule). */
static herd_status train_step(worker_ctx *c, epoch_stats *e, double pos)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    const herd_train_config *cfg = r->cfg;
    herd_worker *w = &c->w;
    w->lr = herd_optim_lr(&cfg->optim, pos, (double)cfg->epochs);
    CALL_HOOK(c, before_step);
    double t_compute = herd__now();
    herd_model_forward(w->model, c->x, cfg->batch, true);
    float loss = herd_model_loss(w->model, c->y, cfg->batch, NULL);
    bool async = r->algo_ops->async, skip = false;
    c->nf = (nonfinite_step){.loss = !isfinite(loss)};
    c->nf.poison = c->nf.loss || nan_injected(c);
    herd__simtime_step(w->model, cfg->batch); /* sim engine: the step's modelled compute time */
    /* a synchronous worker goes through backward whatever its loss: the
     * others reduce with it */
    if (!(async && c->nf.loss)) {
        HERD_TRY(herd_model_backward(w->model, cfg->batch, c->algo.ops->grad_ready ? on_grad_ready : NULL, c));
        if (!c->algo.ops->grad_ready)
            grads_arrived(c, 0, w->nparams);
    }
    /* --slow scales this worker's compute (forward and backward), not its
     * waiting: the extra time is spent here, between the pull of
     * before_step and the push of after_backward/step, as a slower
     * processor would spend it. A worker's first step is not slowed: its
     * compute time is mostly one-time kernel compilation and first touches. */
    t_compute = herd__now() - t_compute;
    if (c->slow_factor > 1.0 && w->step > 0)
        straggle(r, t_compute * (c->slow_factor - 1.0));
    if (async)
        HERD_TRY(async_nonfinite(c, e, &skip));
    CALL_HOOK(c, after_backward);
    if (!async && c->algo.ops->own_nonfinite && c->algo.ops->own_nonfinite(&c->algo, w))
        c->nf.grad = true;
    if (!async)
        HERD_TRY(sync_nonfinite(c, e, &skip));
    /* a skipped step still runs the algorithm's exchanges (of finite weights):
     * its peers count on them */
    if (skip)
        ;
    else if (c->algo.ops->step)
        HERD_TRY(c->algo.ops->step(&c->algo, w));
    else
        herd_optim_step(&w->optim, w->params, w->grads, 0, w->nparams, w->lr);
    CALL_HOOK(c, after_step);
    w->step++, e->steps++;
    c->images += cfg->batch;
    if (!skip)
        e->loss_sum += loss, e->nloss++;
    if (w->rank == 0 && herd__now() - e->last_progress > 0.2) {
        e->last_progress = herd__now();
        progress(c, pos - floor(pos), e->loss_sum / (double)e->nloss, e->last_progress - e->t0);
    }
out:
    return st;
}

/* Whether the worker must stop before its next step. */
static herd_status before_next(worker_ctx *c, bool *stop)
{
    herd_run *r = c->run;
    *stop = false;
    if (atomic_load(&r->abort))
        return HERD_EREMOTE;
    if (r->cfg->max_steps && c->w.step >= r->cfg->max_steps)
        *stop = true;
    else if (c->w.step == c->fail_step) {
        *stop = true;
        return injected_failure(c);
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
    return herd__ckpt_save(c->run->ckpt, &c->algo, &c->w, &c->loader, &cur);
}

/* Synchronous algorithms: every worker takes its own slice of every global
 * step, epoch after epoch. */
static herd_status loop_static(worker_ctx *c)
{
    herd_status st = HERD_OK;
    const herd_train_config *cfg = c->run->cfg;
    herd_worker *w = &c->w;
    epoch_stats e;
    for (size_t epoch = (size_t)c->resume.epoch; epoch < cfg->epochs; epoch++) {
        epoch_begin(c, &e, epoch);
        if (c->resume.step && epoch == c->resume.epoch)
            resume_epoch(c, &e);
        bool stop = false;
        while (!stop) {
            HERD_TRY(before_next(c, &stop));
            if (stop || !herd_loader_next(&c->loader, c->x, c->y))
                break;
            HERD_TRY(train_step(c, &e, (double)epoch + (double)e.steps / (double)w->steps_per_epoch));
            if (herd__ckpt_due(c->run->ckpt, w))
                HERD_TRY(checkpoint(c, &e, 0));
        }
        if (c->lost)
            break;
        bool last = epoch + 1 == cfg->epochs || stop;
        HERD_TRY(epoch_end(c, &e, last));
        if (last)
            break;
    }
out:
    return st;
}

/* Claims the next global batch: a counter in a window on rank 0. At the
 * hold (a checkpoint's) the counter stays: *index == hold, nothing claimed. */
static herd_status claim_batch(worker_ctx *c, uint64_t *index, uint64_t hold)
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
    herd_status st2 = herd_comm_win_unlock(comm, c->claim_win, 0);
    if (st == HERD_OK)
        st = st2;
    if (st == HERD_OK && got[1])
        st = stopped_by(c, got[1]);
out:
    return st;
}

/* Asynchronous algorithms: workers claim global batches from one counter, so
 * an epoch is the whole training set used once by all workers together. */
static herd_status loop_claimed(worker_ctx *c)
{
    herd_status st = HERD_OK;
    const herd_train_config *cfg = c->run->cfg;
    herd_worker *w = &c->w;
    uint64_t per_epoch = (uint64_t)w->steps_per_epoch * w->nworkers, total = per_epoch * cfg->epochs;
    uint64_t hold = herd__ckpt_next_hold(c->run->ckpt, c->resume.claimed);
    epoch_stats e = {0};
    bool started = false, stop = false;
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
        HERD_TRY(claim_batch(c, &b, hold));
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
                HERD_TRY(epoch_end(c, &e, false));
            epoch_begin(c, &e, epoch);
            started = true;
        }
        herd_loader_batch(&c->loader, index, c->x, c->y);
        HERD_TRY(train_step(c, &e, (double)epoch + (double)index / (double)per_epoch));
    }
    if (started && !c->lost)
        HERD_TRY(epoch_end(c, &e, true));
out:
    if (st == HERD_ENONFINITE)
        announce_stop(c);
    return st;
}

static herd_status worker_loop(worker_ctx *c)
{
    herd_status st = HERD_OK;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    herd_nn_set_threads((int)r->cfg->threads);
    if (r->algo_ops->async) { /* collective, before the algorithm's own windows */
        c->claim_buf[0] = c->resume.claimed;
        c->claim_buf[1] = 0; /* the stop word */
        HERD_TRY(herd_comm_win_create(w->comm, c->claim_buf, w->rank == 0 ? sizeof c->claim_buf : 0, &c->claim_win));
    }
    CALL_HOOK(c, init);
    if (herd__ckpt_resuming(r->ckpt))
        HERD_TRY(herd__ckpt_restore_algo(r->ckpt, &c->algo, w));
    HERD_TRY(r->algo_ops->async ? loop_claimed(c) : loop_static(c));
    if (c->lost)
        goto out;
    CALL_HOOK(c, finish);
    if (r->mpi && r->algo_ops->async) /* everyone done before the final evaluation */
        HERD_TRY(herd_comm_barrier(w->comm));
out:
    return st;
}

static void *worker_thread(void *p)
{
    worker_ctx *c = p;
    c->st = worker_loop(c);
    if (c->st < 0) {
        if (!c->w.err.msg[0] && c->w.comm && c->w.comm->err.msg[0])
            c->w.err = c->w.comm->err;
        /* an engine's message names the peer waited for; where the hook
         * that passed it on did not say the step, the run says it */
        if (c->st != HERD_EREMOTE && c->w.err.msg[0] && !strstr(c->w.err.msg, "step")) {
            herd_err e = c->w.err;
            herd_err_set(&c->w.err, c->st, "%s (worker %zu, step %zu)", e.msg, c->w.rank, c->w.step);
        }
        atomic_store(&c->run->abort, 1);
        if (c->w.comm)
            c->w.comm->failed = true; /* no collective teardown (mpi): the job ends */
        /* wake the workers blocked waiting for this one */
        if (c->st != HERD_EREMOTE && !c->agreed_stop && c->run->world)
            herd_threads_world_fail(c->run->world, c->w.rank);
    }
    return NULL;
}

static herd_status worker_setup(worker_ctx *c, herd_run *r, size_t rank, herd_err *err)
{
    herd_status st = HERD_OK;
    const herd_train_config *cfg = r->cfg;
    c->run = r;
    herd_worker *w = &c->w;
    w->rank = rank, w->nworkers = cfg->workers, w->cfg = cfg, w->run = r;
    HERD_TRY(herd_model_create(cfg->model, r->train.c, r->train.h, r->train.w, r->train.nclasses,
                               cfg->batch, cfg->seed, &w->model, err));
    w->params = herd_model_params(w->model);
    w->grads = herd_model_grads(w->model);
    w->nparams = herd_model_nparams(w->model);
    HERD_TRY(herd_optim_init(&w->optim, &cfg->optim, w->nparams, err));
    HERD_TRY(herd_loader_init(&c->loader, &r->train, cfg->batch, rank, cfg->workers, cfg->seed, true, err));
    w->steps_per_epoch = herd_loader_steps(&c->loader);
    if (w->steps_per_epoch == 0) {
        st = herd_err_set(err, HERD_EINVAL,
                          "the training set (%zu examples) is smaller than one global batch (%zu workers x batch %zu)",
                          r->train.n, cfg->workers, cfg->batch);
        goto out;
    }
    c->x = malloc(cfg->batch * herd_dataset_dim(&r->train) * sizeof(float));
    c->y = malloc(cfg->batch * sizeof(int32_t));
    if (!c->x || !c->y) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for a batch");
        goto out;
    }
    if (r->mpi)
        w->comm = r->mpi;
    else
        HERD_TRY(herd_comm_threads_create(r->world, rank, &w->comm, err));
    w->comm->timeout_s = cfg->comm_timeout_s;
    c->algo.ops = r->algo_ops;
    if (c->algo.ops->eval_params && !(c->eval_buf = malloc(2 * w->nparams * sizeof(float)))) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for evaluation");
        goto out;
    }
    c->fail_step = SIZE_MAX;
    for (size_t i = 0; i < cfg->nfail; i++)
        if (cfg->fail[i].rank == rank && cfg->fail[i].step < c->fail_step)
            c->fail_step = cfg->fail[i].step, c->fail_mode = cfg->fail[i].mode;
    c->slow_factor = 1.0;
    for (size_t i = 0; i < cfg->nslow; i++)
        if (cfg->slow[i].rank == rank)
            c->slow_factor = cfg->slow[i].factor;
out:
    return st;
}

static void worker_teardown(worker_ctx *c)
{
    if (c->algo.ops && c->algo.ops->free)
        c->algo.ops->free(&c->algo, &c->w);
    if (c->claim_win)
        herd_comm_win_free(c->w.comm, c->claim_win);
    free(c->eval_buf);
    if (c->w.comm && c->w.comm != c->run->mpi)
        herd_comm_free(c->w.comm);
    herd_model_free(c->w.model);
    herd_optim_free(&c->w.optim);
    herd_loader_free(&c->loader);
    free(c->x);
    free(c->y);
}

/* Totals over every worker of the run, on every process. */
typedef struct run_totals {
    double images, bytes, wait, train_s_max;
} run_totals;

static herd_status gather_totals(herd_run *r, worker_ctx *workers, run_totals *t, herd_err *err)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < r->nlocal; i++) {
        t->images += (double)workers[i].images;
        t->bytes += (double)(workers[i].w.bytes_sent + workers[i].w.comm->bytes_sent);
        t->wait += workers[i].w.comm_wait_s + workers[i].w.comm->wait_s;
        if (workers[i].train_s > t->train_s_max)
            t->train_s_max = workers[i].train_s;
    }
    if (!r->mpi || r->mpi->size == 1)
        return HERD_OK;
    run_totals *all = malloc(r->mpi->size * sizeof *all);
    if (!all)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    herd_status st = herd_allgather(r->mpi, t, all, sizeof *t);
    if (st == HERD_OK) {
        memset(t, 0, sizeof *t);
        for (size_t i = 0; i < r->mpi->size; i++) {
            t->images += all[i].images, t->bytes += all[i].bytes, t->wait += all[i].wait;
            if (all[i].train_s_max > t->train_s_max)
                t->train_s_max = all[i].train_s_max;
        }
    } else {
        herd_err_set(err, st, "%s", herd_comm_last_error(r->mpi));
    }
    free(all);
    return st;
}

/* --fail modes: on threads a worker can only stop (a process death would
 * take every worker with it); on mpi a rank dies as a process does, and
 * the others must survive or report it. Resolves DEFAULT to the engine's. */
static herd_status check_fail_modes(herd_train_config *cfg, bool mpi, herd_err *err)
{
    for (size_t i = 0; i < cfg->nfail; i++) {
        herd_fail *f = &cfg->fail[i];
        if (f->mode == HERD_FAIL_DEFAULT)
            f->mode = mpi ? HERD_FAIL_EXIT1 : HERD_FAIL_STOP;
        if (mpi != (f->mode != HERD_FAIL_STOP))
            return herd_err_set(err, HERD_EINVAL,
                                "--fail %zu@%zu:%s: the %s engine's mode%s %s", f->rank, f->step,
                                herd_fail_mode_name(f->mode), mpi ? "mpi" : "threads", mpi ? "s are" : " is",
                                mpi ? "exit0, exit1 (the default), abort and kill"
                                    : "stop (the worker's thread ends; exit0, exit1, abort and kill would end every worker's process)");
    }
    return HERD_OK;
}

/* Picks the engine and, for mpi, this process's rank and the world size. */
static herd_status choose_engine(const herd_train_config *cfg, herd_run *r, herd_train_config *eff, herd_err *err)
{
    herd_status st = HERD_OK;
    const char *e = cfg->engine && *cfg->engine ? cfg->engine : herd__mpi_launched() ? "mpi" : "threads";
    if (!strcmp(e, "threads")) {
        r->engine = "threads", r->first_rank = 0, r->nlocal = cfg->workers;
        return HERD_OK;
    }
    if (strcmp(e, "mpi"))
        return herd_err_set(err, HERD_EINVAL, "unknown engine '%s' (choose threads or mpi)", e);
    HERD_TRY(herd__comm_mpi_create(NULL, NULL, &r->mpi, err));
    if (cfg->workers != 1 && cfg->workers != r->mpi->size) {
        st = herd_err_set(err, HERD_EINVAL,
                          "--workers %zu does not match the %zu MPI ranks (on the mpi engine each rank is one worker)",
                          cfg->workers, r->mpi->size);
        goto out;
    }
    r->engine = "mpi", r->first_rank = r->mpi->rank, r->nlocal = 1;
    eff->workers = r->mpi->size;
out:
    return st;
}

herd_status herd_train(const herd_train_config *cfg, herd_train_result *res, herd_err *err)
{
    herd_status st = HERD_OK;
    herd_train_config eff = *cfg;
    herd_run r = {.cfg = &eff};
    worker_ctx *workers = NULL;
    pthread_t *threads = NULL;
    size_t nstarted = 0;
    bool log_open = false;
    char log_path[4096];
    memset(res, 0, sizeof *res);
    HERD_TRY(choose_engine(cfg, &r, &eff, err));
    if (eff.allreduce.overlap == HERD_OVERLAP_AUTO) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        bool spare = r.mpi || cores < 1 || r.nlocal * eff.threads < (size_t)cores;
        eff.allreduce.overlap = spare ? HERD_OVERLAP_ON : HERD_OVERLAP_OFF;
    }
    HERD_TRY(check_config(&eff, &r.algo_ops, err));
    HERD_TRY(check_fail_modes(&eff, r.mpi != NULL, err));
    HERD_TRY(herd__ckpt_check(&eff, r.algo_ops, herd_engine_find(r.engine), err));
    if (r.first_rank != 0) {
        /* one log per process: rank 0 writes FILE, rank r FILE.rank<r> */
        eff.quiet = true;
        if (cfg->log_path) {
            snprintf(log_path, sizeof log_path, "%s.rank%zu", cfg->log_path, r.first_rank);
            eff.log_path = log_path;
        }
    }
    HERD_TRY(herd_data_open(eff.data, eff.seed, &r.train, &r.test, err));
    herd_dataset_truncate(&r.train, eff.train_limit);
    herd_dataset_truncate(&r.test, eff.test_limit);
    r.test_y = malloc((r.test.n ? r.test.n : 1) * sizeof(int32_t));
    if (!r.test_y) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < r.test.n; i++)
        r.test_y[i] = r.test.y[i];
    r.t0 = herd__now();
    r.tty = isatty(2);
    HERD_TRY(herd__log_open(&r.log, eff.log_path, r.t0, err));
    log_open = true;
    if (!r.mpi)
        HERD_TRY(herd_threads_world_create(eff.workers, &r.world, err));
    workers = calloc(r.nlocal, sizeof *workers);
    threads = calloc(r.nlocal, sizeof *threads);
    r.lost = calloc(eff.workers, sizeof *r.lost);
    if (!workers || !threads || !r.lost) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for %zu workers", r.nlocal);
        goto out;
    }
    for (size_t i = 0; i < r.nlocal; i++)
        HERD_TRY(worker_setup(&workers[i], &r, r.first_rank + i, err));
    HERD_TRY(herd__ckpt_run_open(&eff, r.algo_ops->name, workers[0].w.nparams, workers[0].w.steps_per_epoch, &r.ckpt, err));
    for (size_t i = 0; herd__ckpt_resuming(r.ckpt) && i < r.nlocal; i++)
        HERD_TRY(herd__ckpt_restore(r.ckpt, &workers[i].w, &workers[i].loader, &workers[i].resume, err));
    herd__log_record(&r.log, "start",
                     "\"algo\":\"%s\",\"engine\":\"%s\",\"model\":\"%s\",\"workers\":%zu,\"epochs\":%zu,"
                     "\"batch\":%zu,\"lr\":%g,\"momentum\":%g,\"seed\":%llu,\"nparams\":%zu,\"train_n\":%zu,\"test_n\":%zu",
                     eff.algo, r.engine, eff.model, eff.workers, eff.epochs, eff.batch, (double)eff.optim.lr,
                     (double)eff.optim.momentum, (unsigned long long)eff.seed, workers[0].w.nparams, r.train.n,
                     r.test.n);
    double t_start = herd__now();
    if (r.nlocal == 1) {
        worker_thread(&workers[0]);
    } else {
        for (; nstarted < r.nlocal; nstarted++) {
            int e = pthread_create(&threads[nstarted], NULL, worker_thread, &workers[nstarted]);
            if (e) {
                atomic_store(&r.abort, 1);
                herd_threads_world_fail(r.world, nstarted);
                st = herd_err_set(err, HERD_ENOMEM, "cannot start worker thread %zu: %s", nstarted, strerror(e));
                break;
            }
        }
        for (size_t i = 0; i < nstarted; i++)
            pthread_join(threads[i], NULL);
        if (st < 0)
            goto out;
    }
    herd_threads_world_close(r.world);
    double wall = herd__now() - t_start;
    /* Report the first real failure (not the EREMOTE of workers told to stop). */
    /* pass 0: a worker's own failure; 1: a report of another's, with its detail; 2: any */
    for (size_t pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < r.nlocal; i++)
            if (workers[i].st < 0 && (pass == 2 || (pass == 0 ? workers[i].st != HERD_EREMOTE : workers[i].w.err.msg[0]))) {
                st = workers[i].st;
                if (err)
                    *err = workers[i].w.err;
                if (err && !err->msg[0])
                    herd_err_set(err, st, "worker %zu failed: %s", r.first_rank + i, herd_strerror(st));
                herd__log_record(&r.log, "error", "\"worker\":%zu,\"status\":\"%s\"", r.first_rank + i,
                                 herd_err_name(st));
                goto out;
            }
    run_totals t;
    HERD_TRY(gather_totals(&r, workers, &t, err));
    worker_ctx *w0 = &workers[0];
    /* the final evaluation, once every worker has stopped */
    if (r.first_rank == 0) {
        st = evaluate(w0, w0->train_loss, w0->last_epoch_s);
        if (st < 0) {
            if (err)
                *err = w0->w.err.msg[0] ? w0->w.err : w0->w.comm->err;
            goto out;
        }
    }
    for (size_t i = 0; i < eff.workers && res->nlost < HERD_MAX_FAIL; i++)
        if (atomic_load(&r.lost[i])) {
            res->lost[res->nlost++] = i;
            if (!eff.quiet)
                fprintf(stderr, "worker %zu was lost at its step %zu; the others finished without it\n", i,
                        workers[i - r.first_rank].w.step);
        }
    res->algo = r.algo_ops->name;
    res->engine = r.engine;
    res->model = cfg->model;
    res->rank = r.first_rank;
    res->workers = eff.workers;
    res->overlap = eff.allreduce.overlap == HERD_OVERLAP_ON;
    /* asynchronous workers share the epochs: worker 0 may have seen few of them */
    res->epochs = r.algo_ops->async && !eff.max_steps ? eff.epochs : w0->w.epoch + (w0->w.epoch < eff.epochs ? 1 : 0);
    res->test_acc = w0->test_acc;
    res->worker0_acc = w0->worker0_acc;
    res->eval_model = w0->eval_model ? w0->eval_model : "worker0";
    res->test_loss = w0->test_loss;
    res->train_loss = w0->train_loss;
    res->wall_s = wall;
    res->train_s = t.train_s_max;
    res->train_img_per_s = t.train_s_max > 0 ? t.images / t.train_s_max : 0;
    res->images = t.images;
    res->bytes_sent = (uint64_t)t.bytes;
    res->steps = w0->w.step;
    for (size_t i = 0; i < (r.algo_ops->async ? r.nlocal : 1); i++)
        res->skipped_steps += workers[i].skipped;
    res->nparams = w0->w.nparams;
    res->comm_wait_s = t.wait / (double)eff.workers;
    /* how far the replicas of this process drifted apart (0 for synchronous algorithms) */
    for (size_t i = 1; i < r.nlocal; i++)
        for (size_t k = 0; k < w0->w.nparams; k++) {
            double d = fabs((double)workers[i].w.params[k] - (double)w0->w.params[k]);
            if (!(d <= res->replica_max_diff)) /* NaN counts as a difference */
                res->replica_max_diff = d;
        }
    herd__log_record(&r.log, "end", "\"test_acc\":%.6f,\"test_loss\":%.6f,\"wall_s\":%.6f,\"train_img_per_s\":%.3f,\"lost\":%zu",
                     res->test_acc, res->test_loss, res->wall_s, res->train_img_per_s, res->nlost);
out:
    if (st < 0 && r.mpi)
        r.mpi->failed = true; /* as in worker_thread: no collective teardown */
    if (workers)
        for (size_t i = 0; i < r.nlocal; i++)
            worker_teardown(&workers[i]);
    free(workers);
    free(threads);
    free(r.lost);
    herd__ckpt_run_free(r.ckpt);
    herd_threads_world_free(r.world);
    if (r.mpi)
        herd_comm_free(r.mpi);
    if (log_open)
        herd__log_close(&r.log);
    free(r.test_y);
    herd_dataset_free(&r.train);
    herd_dataset_free(&r.test);
    return st;
}

void herd_train_result_json(const herd_train_result *res, FILE *f)
{
    fprintf(f,
            "{\"algo\":\"%s\",\"engine\":\"%s\",\"model\":\"%s\",\"workers\":%zu,\"epochs\":%zu,"
            "\"steps\":%zu,\"test_acc\":%.6f,\"test_loss\":%.6f,\"train_loss\":%.6f,\"wall_s\":%.6f,"
            "\"train_s\":%.6f,\"train_img_per_s\":%.3f,\"bytes_sent\":%llu,\"comm_wait_s\":%.6f,"
            "\"nparams\":%zu,\"eval_model\":\"%s\",\"worker0_acc\":%.6f,\"skipped_steps\":%zu,\"lost\":[",
            res->algo, res->engine, res->model, res->workers, res->epochs, res->steps, res->test_acc,
            res->test_loss, res->train_loss, res->wall_s, res->train_s, res->train_img_per_s,
            (unsigned long long)res->bytes_sent, res->comm_wait_s, res->nparams,
            res->eval_model ? res->eval_model : "worker0", res->worker0_acc, res->skipped_steps);
    for (size_t i = 0; i < res->nlost; i++)
        fprintf(f, "%s%zu", i ? "," : "", res->lost[i]);
    fputs("]", f);
    if (res->algo && !strcmp(res->algo, "allreduce"))
        fprintf(f, ",\"overlap\":%s", res->overlap ? "true" : "false");
    fputs("}", f);
}
