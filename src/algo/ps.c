/* Parameter-server family: asgd, amsgd, hogwild (docs/algorithms.md, seeds 000
 * and 001), with the staleness options --staleness-lr, --softsync and
 * --max-staleness.
 *
 * The server. The global weights x~ live in a herd__center: --ps-shards K
 * slices held by ranks 0..K-1 in one-sided windows (default: K = workers,
 * every worker a holder, so that no rank's link carries every push and
 * pull; hogwild's windows take shared locks only). The holders train like
 * everyone else: a window is read and updated without its holder's help
 * (passive-target RMA on MPI, shared memory on threads), so a dedicated
 * server rank would only sit idle. Each shard is an independent server with
 * its own lock and counters (header floats of the center, exact to 2^24):
 *   COUNT   updates applied so far, GROUP gradients in the open softsync
 *   group, FINISHED workers that have stopped training, WAITING workers
 *   waiting for the open group to be applied; on shard 0, WAITERS the
 *   workers waiting for a group on any shard (softsync, below).
 * A worker visits the shards in order 0..K-1; staleness is measured on
 * each shard and shard 0's is reported.
 *
 * One step of worker i (the worker loop calls the hooks):
 *   before_step  SSP wait (below); pull: per shard, a shared lock, the
 *                weights into x_i and COUNT into pulled[k].
 *   step         g = the optimizer's direction at x_i, the pulled weights
 *                (sgd: g + wd x_i; lars: per layer trust (g + wd x_i), the
 *                trust ratio of x_i and g, as LARS takes it at the weights
 *                the gradient is of); push to every shard:
 *     asgd, amsgd (exclusive lock, one gradient at a time):
 *       tau = COUNT - pulled[k]; eta = --staleness-lr && tau >= 1 ? lr/tau : lr
 *       softsync 1: asgd x~ -= eta g; amsgd v = mu v - eta g, x~ += v; COUNT++
 *       softsync c: ACC += (eta/c) g, GROUP++; the c-th gradient applies the
 *         group (asgd x~ -= ACC; amsgd v = mu v - ACC, x~ += v), clears ACC
 *         and GROUP, COUNT++. The pusher then waits until the update holding
 *         its gradient is applied, so its next pull includes it: c = n is
 *         synchronous SGD on the average of n gradients (the same weights
 *         as allreduce, up to the order of the float sums), c = 1 is asgd.
 *         When every worker still training is waiting in the open group,
 *         it is applied short (scaled to an average of what it has).
 *     hogwild (no lock on the vector: a shared lock only, as MPI needs
 *       one): x~ -= eta g by element-wise atomic adds, COUNT += 1. Pushes
 *       interleave element by element and a pull may see half of one:
 *       Hogwild's defining race. No element update is lost (the adds are
 *       atomic, as MPI_Accumulate's are), so nothing needs annotating for
 *       ThreadSanitizer. tau is read just before the push, so concurrent
 *       pushes may see the same COUNT.
 *                After the pushes (before a softsync wait), SSP: publish
 *                this worker's step count.
 * Round trips: a pull or a push ends every shard's epoch before it waits
 * for any (herd_comm_win_unlock_begin), so the holders serve them side by
 * side, and a push that needs no counter before it applies (no
 * --staleness-lr, softsync 1, no SSP) is left in flight: amsgd's next
 * pull's epochs follow it to every shard, which applies them in order, and
 * one wait completes both; asgd and hogwild take the next pull before the
 * push, in the same step, add their own update to what it reads, and
 * compute while the push crosses (pull_ahead). COUNT for shard 0's
 * staleness figure is then read in the push's epoch, before its own
 * update, as it ends.
 * SSP (--max-staleness s): before step t a worker waits until every worker
 * still training has finished step t - s (a table of step counts in a
 * window on rank 0; a finished or lost worker no longer holds anyone back).
 * amsgd's momentum is --momentum (heavy ball on the server); asgd and
 * hogwild are plain SGD on the server and ignore --momentum. amsgd has
 * defaults of --lr and --momentum of its own (amsgd_opt_table).
 * --optimizer lars: each pushed gradient carries its own trust ratios, so
 * a server applying gradients one at a time (--softsync 1) takes exactly
 * LARS steps; a softsync group's average would need the ratios of the
 * average, whose layers span the shards: refused. --optimizer lamb keeps
 * Adam's moments per parameter, which would be server state, and its
 * trust ratio needs the norms of whole layers across shards: refused.
 * Every wait is bounded by --timeout and says what it was waiting for.
 *
 * Checkpoints (ckpt_run.h): taken with every worker between two steps, so
 * no push is half applied; each shard holder saves its shard (weights,
 * server momentum, accumulator, counters) under the shard's exclusive lock,
 * and every worker its COUNT at its last pull and its staleness figures
 * (not blocked_s, a timing). Not with --softsync or --max-staleness, whose
 * waits inside a step would never end while other workers wait at the
 * checkpoint (herd refuses them together).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo/algos.h"
#include "algo/center.h"
#include "algo/run_config.h"
#include "core/clock.h"

enum { SLOT_W, SLOT_V, SLOT_ACC, NSLOTS };
enum { CNT_COUNT, CNT_GROUP, CNT_FINISHED, CNT_WAITING, CNT_WAITERS /* shard 0's only */ };
enum { NHIST = 9 }; /* staleness 0, 1, 2, 3, 4-7, 8-15, 16-31, 32-63, 64+ */

typedef enum ps_kind { PS_ASGD, PS_AMSGD, PS_HOGWILD } ps_kind;

/* The options (docs/algorithms.md, seeds 000/001). */
typedef struct ps_opts {
    size_t shards;      /* ranks holding a slice of the global weights (rank 0..shards-1); 0: every worker */
    bool staleness_lr;  /* a gradient of staleness tau >= 1 is applied with lr / tau */
    size_t softsync;    /* n-softsync: gradients averaged per update (1: fully asynchronous) */
    long max_staleness; /* SSP bound s: no worker starts step t before all finished t - s (-1: none) */
    float lr, momentum; /* amsgd's table: its defaults of the run's --lr and --momentum, which the
                         * run takes from its table (src/run/config.c); the values used are the run's */
} ps_opts;

/* STALENESS_LR: --staleness-lr's default, "true" for asgd and hogwild:
 * without it their 16 workers diverge on herd sim's 10gbe (lenet, a non-finite
 * loss at step 11), as seed 001 finds of stale gradients at the run's rate;
 * with it they learn at 4 to 32 workers (tests/learn_defaults.sh). amsgd
 * keeps its own lower rate and momentum (amsgd-defaults), which learn
 * there without it. */
#define PS_OPT_ROWS(STALENESS_LR)                                                                                     \
    {.name = "ps-shards", .type = HERD_OPT_SIZE, .offset = offsetof(ps_opts, shards), .def = "0", .flags = HERD_OPT_BOUNDED, .max = 4096, \
     .help = "spread the global weights over ranks 0..N-1 (at most the workers; default 0: every worker)"},                 \
    {.name = "staleness-lr", .type = HERD_OPT_BOOL, .offset = offsetof(ps_opts, staleness_lr), .def = STALENESS_LR, \
     .help = "divide the learning rate by each gradient's staleness (=false: not)"},                                                        \
    {.name = "softsync", .type = HERD_OPT_SIZE, .offset = offsetof(ps_opts, softsync), .def = "1", .flags = HERD_OPT_BOUNDED, .min = 1, .max = 4096, \
     .help = "average N gradients per update (n-softsync; N = workers is synchronous)"},                                     \
    {.name = "max-staleness", .type = HERD_OPT_LONG, .offset = offsetof(ps_opts, max_staleness), .def = "-1", .flags = HERD_OPT_BOUNDED, .max = 1000000, \
     .help = "no worker runs more than N steps ahead of the slowest (SSP; default none)"}

static const herd_opt ps_opt_table[] = {
    PS_OPT_ROWS("true"),
    {0},
};

/* amsgd's --lr and --momentum by measurement (bench/lab run amsgd-defaults,
 * the grid of lr x momentum at 4 and 8 workers, 3 seeds): the run's 0.05 and 0.9 diverge, as server momentum adds to
 * the momentum that asynchrony itself brings (Mitliagkas et al. 2016). */
#define AMSGD_LR "0.03"
#define AMSGD_MOMENTUM "0.3"
static const herd_opt amsgd_opt_table[] = {
    PS_OPT_ROWS("false"),
    {.name = "lr", .type = HERD_OPT_FLOAT, .offset = offsetof(ps_opts, lr), .def = AMSGD_LR, .flags = HERD_OPT_BOUNDED | HERD_OPT_MIN_OPEN, .max = 100,
     .help = "learning rate, amsgd's own (the run's 0.05 diverges with server momentum; bench/lab run amsgd-defaults)"},
    {.name = "momentum", .type = HERD_OPT_FLOAT, .offset = offsetof(ps_opts, momentum), .def = AMSGD_MOMENTUM, .flags = HERD_OPT_BOUNDED | HERD_OPT_MAX_OPEN, .max = 1,
     .help = "the server's heavy-ball momentum, amsgd's own"},
    {0},
};

static const ps_opts *opts_of(const herd_worker *w) { return w->opts; }
static ps_kind kind_of(const herd_algo_ops *ops) { return *(const ps_kind *)ops->variant; }

/* The server keeps the momentum (amsgd) and the worker's gradient goes to
 * it: the worker's own optimizer keeps no momentum buffer. */
static void ps_optim_config(const herd_algo_ops *ops, const void *opts, herd_optim_config *oc)
{
    (void)ops, (void)opts;
    oc->momentum = 0.0f, oc->nesterov = false;
}

static herd_status ps_check(const herd_algo_ops *ops, const void *opts, const herd__train_config *cfg, herd_err *err)
{
    const ps_opts *o = opts;
    if (o->shards > cfg->workers)
        return herd_err_set(err, HERD_EINVAL, "--ps-shards must be in [0, workers = %zu] (0: every worker), got %zu",
                            cfg->workers, o->shards);
    if (o->softsync > cfg->workers)
        return herd_err_set(err, HERD_EINVAL, "--softsync must be in [1, workers = %zu], got %zu", cfg->workers, o->softsync);
    /* a worker that stops while the others go on (--fail's stop mode; a
     * process that dies ends an mpi job anyway) takes its shard with it
     * (check_servers): say so before the run */
    size_t shards = o->shards ? o->shards : cfg->workers, first = SIZE_MAX, step = 0;
    for (size_t i = 0; i < cfg->nfail; i++)
        if (cfg->fail[i].mode == HERD_FAIL_STOP && cfg->fail[i].rank < first)
            first = cfg->fail[i].rank, step = cfg->fail[i].step;
    if (first < shards)
        return herd_err_set(err, HERD_EINVAL,
                            "--fail %zu@%zu: worker %zu holds shard %zu of the parameter server's %zu (--ps-shards %zu%s); "
                            "an asynchronous run goes on without a lost worker, not without a shard: %s",
                            first, step, first, first, shards, o->shards, o->shards ? "" : ": every worker",
                            first ? "--ps-shards N with N <= the first failing worker keeps the server off it"
                                  : "the server's first shard is always on worker 0, which cannot fail");
    if (cfg->optim.optimizer == HERD_OPTIMIZER_LAMB)
        return herd_err_set(err, HERD_EINVAL,
                            "--optimizer lamb: --algo %s's server applies gradients shard by shard, and LAMB's "
                            "trust ratio needs a whole layer's Adam update (its moments would be server state): "
                            "use --optimizer lars or sgd",
                            ops->name);
    if (cfg->optim.optimizer == HERD_OPTIMIZER_LARS && o->softsync > 1)
        return herd_err_set(err, HERD_EINVAL,
                            "--optimizer lars with --softsync %zu: each worker scales its own gradient by its "
                            "layers' trust ratios, not the group's average (whose layers span the shards): use "
                            "--softsync 1",
                            o->softsync);
    if (kind_of(ops) == PS_HOGWILD && o->softsync > 1)
        return herd_err_set(err, HERD_EINVAL,
                            "--softsync needs a server that takes one gradient at a time: use asgd or amsgd, not hogwild");
    /* an asynchronous checkpoint stops every worker at a hold of the shared
     * batch counter: nothing may keep a worker waiting inside its step */
    const char *why = o->softsync > 1        ? "--softsync (a worker waits in its step for others to fill its group)"
                    : o->max_staleness >= 0 ? "--max-staleness (a worker waits in its step for slower ones)"
                                            : NULL;
    if (cfg->checkpoint_dir && why)
        return herd_err_set(err, HERD_EUNSUPPORTED,
                            "--checkpoint: --algo %s is asynchronous; its checkpoints stop every worker at the same "
                            "point of the shared batch counter, which %s rules out",
                            ops->name, why);
    return HERD_OK;
}

typedef struct ps_state {
    ps_kind kind;
    herd__center center;
    herd_win *ssp_win;   /* --max-staleness: step counts, on rank 0 */
    uint64_t *ssp_steps; /* rank 0: nworkers words */
    uint64_t *ssp_view;  /* this worker's copy of the table */
    size_t ssp_who;      /* the worker an SSP wait is waiting for */
    float group_have;    /* gradients in the open softsync group, as last seen */
    float *pulled;       /* per shard: COUNT at the pull */
    float *pulling;      /* per shard: COUNT at the pull in flight */
    float *pushed;       /* per shard: COUNT at the push, where read as the push's epoch ends */
    float *base;         /* per shard: pulled[] of the weights the push in flight was computed at */
    bool in_flight;      /* the last push's epochs ended but not waited for (settle) */
    bool fresh;          /* x_i holds the pull the last step sent ahead of its push (pull_ahead) */
    bool *waits;         /* per shard: this step's wait counted in its WAITING */
    float *upd;          /* nparams */
    float *buf;          /* nparams */
    /* per-epoch figures */
    uint64_t hist[NHIST], ngrad, bytes_sent0, bytes_recv0;
    double tau_sum, tau_max, blocked_s;
} ps_state;

static const char *const hist_labels = "0,1,2,3,4-7,8-15,16-31,32-63,64+";

static size_t hist_bucket(double tau)
{
    if (tau < 4)
        return tau < 0 ? 0 : (size_t)tau;
    size_t b = 4;
    for (double lim = 8; tau >= lim && b < NHIST - 1; lim *= 2)
        b++;
    return b;
}

static size_t lost_count(const herd_worker *w)
{
    size_t n = 0;
    for (size_t r = 0; r < w->nworkers; r++)
        n += herd_worker_lost(w, r);
    return n;
}

static herd_status ps_init(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    const ps_opts *pc = w->opts;
    ps_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for the parameter server state");
    a->state = s;
    s->kind = kind_of(a->ops);
    double updates = (double)w->cfg->epochs * (double)w->steps_per_epoch * (double)w->nworkers;
    if (updates > 16777216.0)
        return herd_err_set(&w->err, HERD_EUNSUPPORTED,
                            "%.0f gradients is more than the parameter server's counters hold exactly (2^24)", updates);
    size_t shards = pc->shards ? pc->shards : w->nworkers;
    s->pulled = calloc(shards, sizeof *s->pulled);
    s->pushed = calloc(shards, sizeof *s->pushed);
    s->base = calloc(shards, sizeof *s->base);
    s->pulling = calloc(shards, sizeof *s->pulling);
    s->waits = calloc(shards, sizeof *s->waits);
    s->upd = malloc(w->nparams * sizeof(float));
    s->buf = malloc(w->nparams * sizeof(float));
    if (!s->pulled || !s->pushed || !s->base || !s->pulling || !s->waits || !s->upd || !s->buf)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for the parameter server state");
    /* every worker starts from the same weights (same seed), so any copy
     * seeds the server */
    HERD_TRY(herd__center_create(&s->center, w->comm, w->nparams, shards, NSLOTS, w->params, s->kind == PS_HOGWILD));
    if (pc->max_staleness >= 0) {
        if (!(s->ssp_view = malloc(w->nworkers * sizeof *s->ssp_view)))
            return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for the SSP table");
        if (w->rank == 0 && !(s->ssp_steps = calloc(w->nworkers, sizeof *s->ssp_steps)))
            herd_err_set(&w->err, HERD_ENOMEM, "out of memory for the SSP table");
        static const uint64_t none;
        st = herd_comm_win_create(w->comm, s->ssp_steps ? (void *)s->ssp_steps : (void *)&none,
                                  s->ssp_steps ? w->nworkers * sizeof *s->ssp_steps : 0, &s->ssp_win);
        if (st == HERD_OK && w->rank == 0 && !s->ssp_steps)
            st = HERD_ENOMEM;
    }
    s->bytes_sent0 = w->comm->bytes_sent, s->bytes_recv0 = w->comm->bytes_recv;
out:
    return st;
}

/* A shard whose holder was lost (--fail on the threads engine) is gone:
 * the run cannot go on without its weights. */
static herd_status check_servers(ps_state *s, herd_worker *w)
{
    for (size_t k = 0; k < s->center.shards; k++)
        if (herd_worker_lost(w, k))
            return herd_err_set(&w->err, HERD_EREMOTE,
                                "worker %zu: worker %zu, which holds parameter-server shard %zu of %zu, was lost; "
                                "the run cannot go on without it",
                                w->rank, k, k, s->center.shards);
    return HERD_OK;
}

/* Waits for `ready` with backoff until the deadline; the time counts as blocked. */
typedef herd_status (*ps_ready_fn)(ps_state *s, herd_worker *w, size_t arg, bool *ready);

/* Returns HERD_ETIMEOUT without a message: the caller says what it waited for. */
static herd_status wait_until(ps_state *s, herd_worker *w, ps_ready_fn ready, size_t arg)
{
    herd_status st;
    double t0 = herd__now(), deadline = t0 + w->comm->timeout_s, comm0 = w->comm->wait_s;
    herd__backoff nap = {.us = 20, .max_us = 2000, .clamp = true};
    bool ok = false;
    for (;;) {
        if ((st = check_servers(s, w)) < 0 || (st = herd_worker_stopping(w)) < 0 || (st = ready(s, w, arg, &ok)) < 0 ||
            ok)
            break;
        if (herd__now() > deadline) {
            st = HERD_ETIMEOUT;
            break;
        }
        herd__backoff_nap(&nap);
    }
    double t = herd__now() - t0;
    s->blocked_s += t;
    w->comm_wait_s += t - (w->comm->wait_s - comm0); /* what comm did not time itself */
    return st;
}

/* ---- SSP --------------------------------------------------------------- */

static herd_status ssp_ready(ps_state *s, herd_worker *w, size_t need, bool *ready)
{
    herd_status st;
    size_t n = w->nworkers;
    if ((st = herd_comm_win_lock(w->comm, s->ssp_win, 0, false)) < 0)
        return st;
    st = herd_comm_win_get(w->comm, s->ssp_win, 0, 0, s->ssp_view, n * sizeof *s->ssp_view);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, s->ssp_win, 0));
    if (st < 0)
        return st;
    *ready = true;
    for (size_t r = 0; r < n && *ready; r++)
        if (s->ssp_view[r] < need && !herd_worker_lost(w, r)) {
            *ready = false;
            s->ssp_who = r;
        }
    return HERD_OK;
}

static herd_status ssp_wait(ps_state *s, herd_worker *w)
{
    long bound = opts_of(w)->max_staleness;
    if (bound < 0 || (long)w->step <= bound)
        return HERD_OK;
    size_t need = w->step - (size_t)bound;
    herd_status st = wait_until(s, w, ssp_ready, need);
    if (st == HERD_ETIMEOUT)
        herd_err_set(&w->err, HERD_ETIMEOUT,
                     "worker %zu: waited %g s for worker %zu to finish step %zu before its own step %zu (--max-staleness %ld)",
                     w->rank, w->comm->timeout_s, s->ssp_who, need, w->step + 1, bound);
    return st;
}

static herd_status ssp_publish(ps_state *s, herd_worker *w, uint64_t steps)
{
    herd_status st;
    if ((st = herd_comm_win_lock(w->comm, s->ssp_win, 0, false)) < 0)
        return st;
    st = herd_comm_win_put(w->comm, s->ssp_win, 0, w->rank * sizeof steps, &steps, sizeof steps);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, s->ssp_win, 0));
    return st;
}

/* ---- pull and push --------------------------------------------------- */

static void record_staleness(ps_state *s, double tau)
{
    s->hist[hist_bucket(tau)]++;
    s->ngrad++;
    s->tau_sum += tau;
    if (tau > s->tau_max)
        s->tau_max = tau;
}

/* Counters 0..n-1 of shard k into v (the caller holds a lock). */
static herd_status read_counts(herd__center *c, size_t k, float *v, size_t n)
{
    herd_status st = HERD_OK;
    for (size_t i = 0; i < n; i++)
        HERD_TRY(herd__center_get_count(c, k, i, &v[i]));
    HERD_TRY(herd__center_flush(c, k));
out:
    return st;
}

/* The push's staleness on shard k from COUNT at the push and COUNT of the
 * weights it was computed at, `base` (recorded for shard 0). */
static double staleness(ps_state *s, size_t k, float count, float base)
{
    double tau = (double)count - (double)base;
    if (tau < 0) /* hogwild: a concurrent push may move COUNT between our reads */
        tau = 0;
    if (k == 0)
        record_staleness(s, tau);
    return tau;
}

/* The push's rate on shard k, its staleness recorded. */
static float stale_eta(ps_state *s, herd_worker *w, size_t k, float count, float eta_base)
{
    double tau = staleness(s, k, count, s->pulled[k]);
    return opts_of(w)->staleness_lr && tau >= 1 ? eta_base / (float)tau : eta_base;
}

/* upd[lo, hi) = scale * g */
static void scaled(float *upd, const float *g, size_t lo, size_t hi, float scale)
{
    for (size_t i = lo; i < hi; i++)
        upd[i] = scale * g[i];
}

/* Applies the update held in s->upd[lo, hi) (x~ -= upd) to shard k, with
 * amsgd's momentum: v = mu v - upd; x~ += v, a step the shard's holder
 * takes (herd_comm_win_heavy_ball: only upd crosses the network). Caller
 * holds the exclusive lock. */
static herd_status apply_update(ps_state *s, herd_worker *w, size_t k, size_t lo, size_t hi)
{
    herd_status st = HERD_OK;
    herd__center *c = &s->center;
    if (s->kind == PS_AMSGD) {
        HERD_TRY(herd__center_heavy_ball(c, k, SLOT_V, SLOT_W, s->upd, w->cfg->optim.momentum));
    } else {
        for (size_t i = lo; i < hi; i++)
            s->upd[i] = -s->upd[i];
        HERD_TRY(herd__center_accumulate(c, k, SLOT_W, s->upd));
    }
    HERD_TRY(herd__center_add_count(c, k, CNT_COUNT, 1.0f));
out:
    return st;
}

/* Shard 0's WAITERS += delta, the caller holding shard k's exclusive lock
 * (shard 0 locked after k, the only order in which two shards are ever
 * held). */
static herd_status add_waiters(herd__center *c, size_t k, float delta)
{
    herd_status st = HERD_OK;
    if (k != 0)
        HERD_TRY(herd__center_lock(c, 0, true));
    st = herd__center_add_count(c, 0, CNT_WAITERS, delta);
    if (k != 0)
        HERD_KEEP_FIRST(st, herd__center_unlock(c, 0));
out:
    return st;
}

/* The group of shard k is applied (the caller holds k's exclusive lock):
 * its waiters wait no more, here and in shard 0's WAITERS. */
static herd_status release_waiters(herd__center *c, size_t k)
{
    herd_status st = HERD_OK;
    float waiting = 0;
    HERD_TRY(herd__center_get_count(c, k, CNT_WAITING, &waiting));
    HERD_TRY(herd__center_flush(c, k));
    if (waiting == 0)
        goto out;
    HERD_TRY(herd__center_set_count(c, k, CNT_WAITING, 0.0f));
    st = add_waiters(c, k, -waiting);
out:
    return st;
}

/* This worker waits for shard k's open group (the caller holds k's
 * exclusive lock): counted in k's WAITING and shard 0's WAITERS until the
 * group is applied (release_waiters). */
static herd_status count_wait(herd__center *c, size_t k)
{
    herd_status st = HERD_OK;
    HERD_TRY(herd__center_add_count(c, k, CNT_WAITING, 1.0f));
    st = add_waiters(c, k, 1.0f);
out:
    return st;
}

/* Whether every worker still training waits for a group, on any shard. */
static herd_status all_waiting(ps_state *s, herd_worker *w, bool *all)
{
    herd_status st = HERD_OK;
    herd__center *c = &s->center;
    float v[CNT_WAITERS + 1] = {0};
    HERD_TRY(herd__center_lock(c, 0, false));
    st = read_counts(c, 0, v, CNT_WAITERS + 1);
    HERD_KEEP_FIRST(st, herd__center_unlock(c, 0));
    *all = st == HERD_OK && v[CNT_WAITERS] >= (float)(w->nworkers - lost_count(w)) - v[CNT_FINISHED];
out:
    return st;
}

/* With the exclusive lock on shard k and the group's sum in ACC (already
 * scaled by eta/c per gradient): applies it as one update, scaled to an
 * average of `have` gradients when the group is short. */
static herd_status apply_group(ps_state *s, herd_worker *w, size_t k, float have)
{
    herd_status st = HERD_OK;
    herd__center *c = &s->center;
    size_t lo, hi;
    herd__center_range(c, k, &lo, &hi);
    HERD_TRY(herd__center_flush(c, k)); /* the accumulates into ACC and GROUP land before we read and reset them */
    HERD_TRY(herd__center_get(c, k, SLOT_ACC, s->upd));
    HERD_TRY(herd__center_flush(c, k));
    float scale = (float)opts_of(w)->softsync / have;
    if (scale != 1.0f)
        for (size_t i = lo; i < hi; i++)
            s->upd[i] *= scale;
    HERD_TRY(apply_update(s, w, k, lo, hi));
    memset(s->buf + lo, 0, (hi - lo) * sizeof(float));
    HERD_TRY(herd__center_put(c, k, SLOT_ACC, s->buf));
    HERD_TRY(herd__center_set_count(c, k, CNT_GROUP, 0.0f));
    HERD_TRY(release_waiters(c, k));
out:
    return st;
}

/* softsync: is the update after `after` applied on shard `k`? If no
 * gradient can come to fill the open group, applies it short: every worker
 * still training is in it, or every one waits for a group on some shard
 * (each shard groups the pushes in its own order, so two workers can each
 * wait, alone, in a group of another shard for the other's next push: once
 * the others had finished, that stalled until --timeout). A waiting worker
 * is counted (count_wait) until its group is applied (release_waiters). */
static herd_status group_ready(ps_state *s, herd_worker *w, size_t k, bool *ready)
{
    herd_status st = HERD_OK;
    herd__center *c = &s->center;
    float v[3] = {0}; /* COUNT, GROUP, FINISHED */
    bool everyone = false;
    *ready = false;
    for (int exclusive = 0; exclusive < 2; exclusive++) {
        HERD_TRY(herd__center_lock(c, k, exclusive));
        st = read_counts(c, k, v, 3);
        float alive = (float)(w->nworkers - lost_count(w)) - v[CNT_FINISHED];
        bool done = st == HERD_OK && v[CNT_COUNT] > s->pulled[k] + 0.5f; /* pulled[k] holds COUNT at the push */
        bool stuck = st == HERD_OK && !done && v[CNT_GROUP] > 0 && (v[CNT_GROUP] >= alive || everyone);
        if (st == HERD_OK && exclusive && !done && !s->waits[k]) {
            st = count_wait(c, k);
            s->waits[k] = st == HERD_OK;
        }
        if (st == HERD_OK && exclusive && stuck)
            st = apply_group(s, w, k, v[CNT_GROUP]);
        HERD_KEEP_FIRST(st, herd__center_unlock(c, k));
        if (st < 0)
            goto out;
        *ready = done || (exclusive && stuck);
        s->group_have = v[CNT_GROUP];
        if (done || exclusive)
            break;
        if (!stuck && s->waits[k] && v[CNT_GROUP] > 0) {
            HERD_TRY(all_waiting(s, w, &everyone));
            stuck = everyone;
        }
        if (!stuck && s->waits[k])
            break; /* counted already, and nothing to apply: wait on */
    }
out:
    return st;
}

/* Whether a push to shard k reads its counters first: the staleness-aware
 * rate and the softsync group need them, and the staleness figures
 * (recorded on shard 0). A plain push to another shard does not, and so
 * saves the round trip of the read where the holder is on another host. */
static bool push_reads_counts(const herd_worker *w, size_t k)
{
    return k == 0 || opts_of(w)->staleness_lr || opts_of(w)->softsync > 1;
}

/* Whether the push needs COUNT before it applies (the staleness rate, the
 * softsync group); else COUNT is read in the push's epoch, before its own
 * update, and arrives as the epoch ends, without a round trip of its own. */
static bool push_needs_counts(const herd_worker *w)
{
    return opts_of(w)->staleness_lr || opts_of(w)->softsync > 1;
}

static herd_status push_locked(ps_state *s, herd_worker *w, size_t k, float eta_base)
{
    herd_status st = HERD_OK;
    herd__center *c = &s->center;
    size_t lo, hi, softsync = opts_of(w)->softsync;
    herd__center_range(c, k, &lo, &hi);
    float v[2] = {0}; /* COUNT, GROUP */
    bool reads = push_reads_counts(w, k), now = reads && push_needs_counts(w);
    HERD_TRY(herd__center_lock(c, k, true));
    if (now)
        st = read_counts(c, k, v, softsync > 1 ? 2 : 1);
    else if (reads)
        st = herd__center_get_count(c, k, CNT_COUNT, &s->pushed[k]);
    float count = v[CNT_COUNT], group = v[CNT_GROUP];
    if (st == HERD_OK) {
        float eta = now ? stale_eta(s, w, k, count, eta_base) : eta_base;
        if (softsync == 1) {
            scaled(s->upd, w->grads, lo, hi, eta);
            st = apply_update(s, w, k, lo, hi);
        } else {
            scaled(s->upd, w->grads, lo, hi, eta / (float)softsync);
            st = herd__center_accumulate(c, k, SLOT_ACC, s->upd);
            if (st == HERD_OK)
                st = herd__center_add_count(c, k, CNT_GROUP, 1.0f);
            if (st == HERD_OK && group + 1 >= (float)softsync)
                st = apply_group(s, w, k, group + 1);
        }
        if (now)
            s->pulled[k] = count; /* now: COUNT at the push, for the softsync wait */
    }
    HERD_KEEP_FIRST(st, herd__center_unlock_begin(c, k));
out:
    return st;
}

static herd_status push_hogwild(ps_state *s, herd_worker *w, size_t k, float eta_base)
{
    herd_status st = HERD_OK;
    herd__center *c = &s->center;
    size_t lo, hi;
    herd__center_range(c, k, &lo, &hi);
    float count = 0;
    bool reads = push_reads_counts(w, k), now = reads && push_needs_counts(w);
    HERD_TRY(herd__center_lock(c, k, false));
    if (now)
        st = read_counts(c, k, &count, 1);
    else if (reads)
        st = herd__center_get_count(c, k, CNT_COUNT, &s->pushed[k]);
    if (st == HERD_OK) {
        scaled(s->upd, w->grads, lo, hi, -(now ? stale_eta(s, w, k, count, eta_base) : eta_base));
        st = herd__center_accumulate(c, k, SLOT_W, s->upd);
        if (st == HERD_OK)
            st = herd__center_add_count(c, k, CNT_COUNT, 1.0f);
    }
    HERD_KEEP_FIRST(st, herd__center_unlock_begin(c, k));
out:
    return st;
}

/* Whether the push's epochs may stay in flight after the step, to be
 * waited for with the next pull's: not where the step reads the server's
 * counters itself (--staleness-lr, softsync) or publishes its end (SSP).
 * A checkpoint's sizing call settles them before its barrier (ps_save). */
static bool push_left_in_flight(const ps_state *s, const herd_worker *w)
{
    return !push_needs_counts(w) && !s->ssp_win;
}

/* The push's epochs have completed: its staleness, read as they ended. */
static void pushed(ps_state *s, herd_worker *w)
{
    if (!push_needs_counts(w))
        for (size_t k = 0; k < s->center.shards; k++)
            if (push_reads_counts(w, k))
                (void)staleness(s, k, s->pushed[k], s->base[k]);
}

/* Completes the last push where the step left it in flight. */
static herd_status settle(ps_state *s, herd_worker *w)
{
    if (!s->in_flight)
        return HERD_OK;
    s->in_flight = false;
    herd_status st = herd__center_wait(&s->center);
    if (st == HERD_OK)
        pushed(s, w);
    return st;
}

/* Whether the step pulls the next weights before it pushes (asgd and
 * hogwild whose push is left in flight): it waits for the pull (and for
 * the last step's push, long arrived), then sends the push and goes on to
 * compute while the push crosses the network; the next step's wait
 * completes it. A step then waits for one transfer, the pull's answers,
 * where it waited for two, one after the other (a pull that must read the
 * push waits for the push's data to arrive first). The pull reads the
 * weights without this worker's push; the worker adds its own update to
 * them (x~ -= eta g, the holder's float operations), and so sees its push
 * applied, as a pull that followed it would. amsgd cannot (its holder
 * applies the momentum, which the worker does not have). */
static bool pull_ahead(const ps_state *s, const herd_worker *w)
{
    return s->kind != PS_AMSGD && push_left_in_flight(s, w);
}

/* The pull: the weights into x_i and COUNT into pulling[]. Every shard's
 * epoch is ended before any is waited for, so that the shards' holders
 * serve them side by side; the last step's push, if still in flight,
 * completes in the same wait (its staleness recorded). */
static herd_status pull(ps_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    for (size_t k = 0; k < s->center.shards; k++) {
        HERD_TRY(herd__center_lock(&s->center, k, false));
        st = herd__center_get(&s->center, k, SLOT_W, w->params);
        if (st == HERD_OK)
            st = herd__center_get_count(&s->center, k, CNT_COUNT, &s->pulling[k]);
        HERD_KEEP_FIRST(st, herd__center_unlock_begin(&s->center, k));
        if (st < 0)
            goto out;
    }
    HERD_TRY(settle(s, w));
    st = herd__center_wait(&s->center);
out:
    return st;
}

/* Before a step: the pull, unless the last step pulled before its push
 * (pull_ahead). The last step's push, if still in flight, went to each
 * shard ahead of the pull's epochs, which therefore read it applied. */
static herd_status ps_before_step(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ps_state *s = a->state;
    HERD_TRY(check_servers(s, w));
    if (s->fresh) {
        s->fresh = false;
        goto out;
    }
    if (s->ssp_win)
        HERD_TRY(ssp_wait(s, w));
    HERD_TRY(pull(s, w));
    memcpy(s->pulled, s->pulling, s->center.shards * sizeof *s->pulled);
out:
    return st;
}

/* The step's pull taken before its push (pull_ahead): x_i is the pulled
 * weights with this worker's update (s->upd, the change the push makes)
 * added, and the pull's COUNT counts that update. */
static void took_pull_ahead(ps_state *s, herd_worker *w)
{
    for (size_t i = 0; i < w->nparams; i++)
        w->params[i] += s->upd[i];
    for (size_t k = 0; k < s->center.shards; k++)
        s->pulled[k] = s->pulling[k] + 1.0f;
    s->fresh = true;
}

static herd_status ps_step(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ps_state *s = a->state;
    herd_optim_direction(&w->optim, w->grads, w->params);
    bool ahead = pull_ahead(s, w);
    if (ahead)
        HERD_TRY(pull(s, w)); /* completes the last step's push too */
    /* the weights this push's gradient was computed at, for its staleness */
    memcpy(s->base, s->pulled, s->center.shards * sizeof *s->base);
    /* as the pull: every shard's epoch ended before any is waited for */
    for (size_t k = 0; k < s->center.shards; k++)
        HERD_TRY(s->kind == PS_HOGWILD ? push_hogwild(s, w, k, w->lr) : push_locked(s, w, k, w->lr));
    s->in_flight = true;
    if (!push_left_in_flight(s, w))
        HERD_TRY(settle(s, w));
    if (ahead)
        took_pull_ahead(s, w);
    /* SSP counts a step as finished once its gradient is pushed: a worker
     * waiting for its softsync group must not hold back the workers that
     * would fill it */
    if (s->ssp_win)
        HERD_TRY(ssp_publish(s, w, w->step + 1));
    if (opts_of(w)->softsync > 1)
        for (size_t k = 0; k < s->center.shards; k++) {
            s->waits[k] = false;
            st = wait_until(s, w, group_ready, k);
            if (st == HERD_ETIMEOUT)
                herd_err_set(&w->err, HERD_ETIMEOUT,
                             "worker %zu: waited %g s for its softsync group on shard %zu to fill (%.0f of %zu gradients)",
                             w->rank, w->comm->timeout_s, k, (double)s->group_have, opts_of(w)->softsync);
            if (st < 0)
                goto out;
        }
out:
    return st;
}

/* The epoch's figures hold its last push. */
static herd_status ps_end_epoch(herd_algo *a, herd_worker *w) { return settle(a->state, w); }

/* This worker stops training: SSP and open softsync groups stop counting on it. */
static herd_status ps_finish(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ps_state *s = a->state;
    HERD_TRY(settle(s, w));
    if (s->ssp_win)
        HERD_TRY(ssp_publish(s, w, UINT64_MAX));
    if (opts_of(w)->softsync > 1)
        for (size_t k = 0; k < s->center.shards; k++) {
            HERD_TRY(herd__center_lock(&s->center, k, true));
            st = herd__center_add_count(&s->center, k, CNT_FINISHED, 1.0f);
            HERD_KEEP_FIRST(st, herd__center_unlock(&s->center, k));
            if (st < 0)
                goto out;
        }
out:
    return st;
}

static herd_status ps_eval_params(herd_algo *a, herd_worker *w, float *out, const char **name)
{
    ps_state *s = a->state;
    herd_status st = settle(s, w);
    if (st == HERD_OK)
        st = herd__center_read(&s->center, out);
    if (st < 0 && !w->err.msg[0])
        w->err = w->comm->err;
    *name = st == HERD_OK ? "server" : NULL;
    return st;
}

static void ps_log_epoch(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    ps_state *s = a->state;
    size_t len = strlen(buf);
    len += (size_t)snprintf(buf + len, cap - len,
                            ",\"ps_shards\":%zu,\"gradients\":%llu,\"staleness_mean\":%.4f,\"staleness_max\":%.0f,"
                            "\"staleness_hist_buckets\":\"%s\",\"staleness_hist\":[",
                            s->center.shards, (unsigned long long)s->ngrad,
                            s->ngrad ? s->tau_sum / (double)s->ngrad : 0.0, s->tau_max, hist_labels);
    for (size_t b = 0; b < NHIST && len < cap; b++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%llu", b ? "," : "", (unsigned long long)s->hist[b]);
    if (len < cap)
        snprintf(buf + len, cap - len, "],\"pushed_bytes\":%llu,\"pulled_bytes\":%llu,\"blocked_s\":%.6f",
                 (unsigned long long)(w->comm->bytes_sent - s->bytes_sent0),
                 (unsigned long long)(w->comm->bytes_recv - s->bytes_recv0), s->blocked_s);
    memset(s->hist, 0, sizeof s->hist);
    s->ngrad = 0, s->tau_sum = 0, s->tau_max = 0, s->blocked_s = 0;
    s->bytes_sent0 = w->comm->bytes_sent, s->bytes_recv0 = w->comm->bytes_recv;
}

/* The run's n-softsync in both counts: herd's --softsync C (gradients per
 * update) and the paper's n = workers / C (seed 001: the server updates
 * after lambda / n gradients, and the mean staleness is about n). */
static void ps_summary_json(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    (void)a;
    size_t c = opts_of(w)->softsync;
    snprintf(buf, cap, ",\"softsync\":%zu,\"softsync_n\":%g,\"staleness_lr\":%s", c, (double)w->nworkers / (double)c,
             opts_of(w)->staleness_lr ? "true" : "false");
}

static const uint64_t PSV_LAYOUT = HERD__STATE_LAYOUT('p', 's', 'r', 'v', 1);

static herd_status ps_save(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len)
{
    ps_state *s = a->state;
    /* the sizing call, on every worker before the checkpoint's barrier:
     * every push is in its shard before any holder copies one */
    herd_status st = settle(s, w);
    if (st < 0)
        return st;
    herd__state_out o = herd__state_out_make(buf, cap);
    herd__state_put_u64(&o, PSV_LAYOUT);
    herd__state_put_u64(&o, s->center.shards);
    st = herd__center_save(&s->center, &o);
    herd__state_put(&o, s->pulled, s->center.shards * sizeof *s->pulled);
    herd__state_put(&o, s->hist, sizeof s->hist);
    herd__state_put_u64(&o, s->ngrad);
    herd__state_put_f64(&o, s->tau_sum);
    herd__state_put_f64(&o, s->tau_max);
    *len = o.len;
    return st;
}

static herd_status ps_load(herd_algo *a, herd_worker *w, const void *buf, size_t len)
{
    ps_state *s = a->state;
    herd__state_in in = herd__state_in_make(buf, len);
    herd_status st = herd__state_layout(&in, PSV_LAYOUT, w, "parameter server");
    if (st < 0)
        return st;
    uint64_t shards = herd__state_get_u64(&in);
    if (!in.bad && shards != s->center.shards)
        return herd_err_set(&w->err, HERD_EINVAL, "worker %zu: the checkpoint was written with --ps-shards %llu; this run has --ps-shards %zu",
                            w->rank, (unsigned long long)shards, s->center.shards);
    if ((st = herd__center_load(&s->center, &in, w, "parameter server")) < 0)
        return st;
    herd__state_get(&in, s->pulled, s->center.shards * sizeof *s->pulled);
    herd__state_get(&in, s->hist, sizeof s->hist);
    s->ngrad = herd__state_get_u64(&in);
    s->tau_sum = herd__state_get_f64(&in);
    s->tau_max = herd__state_get_f64(&in);
    return herd__state_end(&in, w, "parameter server");
}

static void ps_free(herd_algo *a, herd_worker *w)
{
    ps_state *s = a->state;
    if (!s)
        return;
    herd__center_free(&s->center);
    if (s->ssp_win)
        herd_comm_win_free(w->comm, s->ssp_win);
    free(s->ssp_steps);
    free(s->ssp_view);
    free(s->pulled);
    free(s->pushed);
    free(s->base);
    free(s->pulling);
    free(s->waits);
    free(s->upd);
    free(s->buf);
    free(s);
    a->state = NULL;
}

static const ps_kind kind_asgd = PS_ASGD, kind_amsgd = PS_AMSGD, kind_hogwild = PS_HOGWILD;

#define PS_OPS(var, nm, kind, table, text)                                                     \
    const herd_algo_ops var = {                                                                \
        .name = nm,                                                                            \
        .summary = text,                                                                       \
        .opts = table,                                                                         \
        .opts_size = sizeof(ps_opts),                                                          \
        .check = ps_check,                                                                     \
        .optim_config = ps_optim_config,                                                       \
        .variant = &kind,                                                                      \
        .min_workers = 1,                                                                      \
        .async = true,                                                                         \
        .init = ps_init,                                                                       \
        .before_step = ps_before_step,                                                         \
        .step = ps_step,                                                                       \
        .end_epoch = ps_end_epoch,                                                             \
        .finish = ps_finish,                                                                   \
        .eval_params = ps_eval_params,                                                         \
        .log_epoch = ps_log_epoch,                                                             \
        .summary_json = ps_summary_json,                                                       \
        .free = ps_free,                                                                       \
        .save = ps_save,                                                                       \
        .load = ps_load,                                                                       \
    }

PS_OPS(herd__algo_asgd, "asgd", kind_asgd, ps_opt_table, "asynchronous SGD on a parameter server (Downpour), one gradient at a time");
PS_OPS(herd__algo_amsgd, "amsgd", kind_amsgd, amsgd_opt_table,
       "asynchronous momentum SGD: the parameter server keeps the momentum (defaults --lr " AMSGD_LR " --momentum " AMSGD_MOMENTUM ")");
PS_OPS(herd__algo_hogwild, "hogwild", kind_hogwild, ps_opt_table, "Hogwild!: lock-free asynchronous SGD on a parameter server");
