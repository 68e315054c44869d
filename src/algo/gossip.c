/* Decentralized family (docs/algorithms.md, seed 003: Lian et al. NIPS'17, ICML'18).
 *
 * dpsgd (D-PSGD, synchronous): every step x_i <- sum_j W_ij x_j - lr g_i,
 * with g_i taken at the pre-averaging x_i. The exchange overlaps the
 * gradient: before_step posts the receives from this step's neighbours and
 * sends x_i (straight from the weights, which forward and backward only
 * read); after_backward waits for them and averages; the local optimizer step
 * (momentum, weight decay) then applies g_i. W gives 1/(d+1) to self and to
 * each of the d distinct neighbours of a regular, undirected graph, so it is
 * symmetric and doubly stochastic:
 *   ring (default)  i-1, i+1;
 *   exp             i +- 2^m for 2^m < n (a circulant graph: regular);
 *   random          the ring over a permutation drawn every step from the
 *                   run's seed (the same on every worker).
 * No barrier: a worker waits only for its neighbours' messages of the step.
 * Sums are taken in a fixed order, so runs are bit-identical.
 *
 * adpsgd (AD-PSGD, asynchronous): each worker's model x_i lives in a window
 * (one per worker); it computes its gradient on a private copy. Even ranks
 * are active, odd ranks passive (with an odd count the last rank is even and
 * active; its passive neighbour is n-2). An active worker, after its
 * gradient, picks ONE passive neighbour j uniformly (lost workers left out;
 * ring: i+-1, exp: i+-(2^m - 1), random: any passive rank) and averages
 * under an exclusive lock on j's window: lock, get x_j, flush, avg =
 * (x_i + x_j)/2, put avg, unlock; then x_i <- avg - lr g_i and publishes
 * x_i under an exclusive lock on its own window (only it writes there). A
 * passive worker never takes part: it reads its window into its weights
 * (shared lock), computes, and adds its optimizer step as a delta
 * (accumulate) under an exclusive lock on its own window, so an average that
 * happened meanwhile is kept, never overwritten, and never torn: averages and
 * local updates of one window are serialized by its lock, and no worker ever
 * holds one lock while taking another (deadlock-free). The only wait of a
 * passive worker is for an average in progress on its own window. No second
 * thread calls the transport.
 *
 * Both: the "average" model (mean of x_i) is what eval_params gives; the
 * epoch log carries consensus_dist = mean ||x_i - x_bar|| (dpsgd: exact, by a
 * collective at the epoch end; adpsgd: read one-sidedly by worker 0 as it
 * evaluates, outside the epoch's clock, an estimate as the models keep
 * moving, given by its next epoch record).
 *
 * Checkpoints: dpsgd keeps nothing between steps beyond the worker's weights
 * and optimizer (the random topology is drawn from (seed, step), the average
 * is recomputed at each epoch end); its record holds the topology, so a
 * resume with another --topology is refused rather than silently another
 * run. adpsgd checkpoints with every worker between two steps (ckpt_run.h):
 * each saves the model in its window (a passive one's holds the averages
 * actives made into it since its last step) under its own exclusive lock,
 * its neighbour-picking random stream and its counters.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/gossip.h"
#include "algo/run_config.h"
#include "algo/state_io.h"
#include "herd/herd_rng.h"

/* Tags below 32768, apart from the collectives' 0x7a1x. */
enum { TAG_DPSGD = 0x6470 };

/* ---- shared with pushsum.c (gossip.h) ----------------------------------- */

static const char *const topo_names[] = {"ring", "exp", "random", NULL};

#define TOPOLOGY_ROW                                                                                       \
    {.name = "topology", .type = HERD_OPT_STR, .offset = offsetof(herd__gossip_opts, topology), .choices = topo_names, \
     .help = "who talks to whom (default: the algorithm's)"}
#define END_ROW {0}

const herd_opt herd__gossip_opt_table[] = {TOPOLOGY_ROW, END_ROW};
const herd_opt herd__osgp_opt_table[] = {
    TOPOLOGY_ROW,
    {.name = "max-delay", .type = HERD_OPT_SIZE, .offset = offsetof(herd__gossip_opts, max_delay), .def = "1", .flags = HERD_OPT_BOUNDED, .max = 1000000,
     .help = "steps a worker goes on without hearing from an in-neighbour"},
    END_ROW,
};

herd__topo herd__gossip_topology(const herd_worker *w, herd__topo dflt)
{
    const char *t = ((const herd__gossip_opts *)w->opts)->topology;
    if (!t)
        return dflt;
    return !strcmp(t, "ring") ? HERD_TOPO_RING : !strcmp(t, "exp") ? HERD_TOPO_EXP : HERD_TOPO_RANDOM;
}

const char *herd__gossip_topology_name(herd__topo t)
{
    return t == HERD_TOPO_RING ? "ring" : t == HERD_TOPO_EXP ? "exp" : "random";
}

herd_status herd__gossip_same_topology(herd_worker *w, uint64_t saved, herd__topo mine)
{
    if (saved == (uint64_t)mine)
        return HERD_OK;
    return herd_err_set(&w->err, HERD_EINVAL, "worker %zu: the checkpoint was written with --topology %s; this run has --topology %s",
                        w->rank, saved <= HERD_TOPO_RANDOM ? herd__gossip_topology_name((herd__topo)saved) : "(unknown)",
                        herd__gossip_topology_name(mine));
}

size_t herd__gossip_log2ceil(size_t n)
{
    size_t l = 0;
    while (l < 63 && ((size_t)1 << l) < n)
        l++;
    return l;
}

static double dist_to(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t k = 0; k < n; k++) {
        double d = (double)a[k] - (double)b[k];
        s += d * d;
    }
    return sqrt(s);
}

herd_status herd__gossip_mean_allreduce(herd_worker *w, const float *z, float *avg, double *dist)
{
    herd_status st;
    size_t n = w->nparams;
    memcpy(avg, z, n * sizeof(float));
    if ((st = herd_allreduce(w->comm, avg, n, NULL)) < 0)
        return st;
    float inv = 1.0f / (float)w->nworkers;
    for (size_t k = 0; k < n; k++)
        avg[k] *= inv;
    float d = (float)dist_to(z, avg, n);
    if ((st = herd_allreduce(w->comm, &d, 1, NULL)) < 0)
        return st;
    *dist = (double)d / (double)w->nworkers;
    return HERD_OK;
}

/* tmp <- rank j's published model. */
static herd_status read_model(herd_worker *w, herd_win *win, size_t j, float *tmp)
{
    herd_status st = herd_comm_win_lock(w->comm, win, j, false);
    if (st < 0)
        return st;
    st = herd_comm_win_get(w->comm, win, j, 0, tmp, w->nparams * sizeof(float));
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, win, j));
    return st;
}

herd_status herd__gossip_mean_windows(herd_worker *w, herd_win *win, float *avg, float *tmp, double *dist)
{
    herd_status st;
    size_t n = w->nparams, count = 0;
    double *acc = calloc(n ? n : 1, sizeof(double));
    if (!acc)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory for the average model", w->rank);
    for (size_t j = 0; j < w->nworkers; j++) {
        if (herd_worker_lost(w, j))
            continue;
        if ((st = read_model(w, win, j, tmp)) < 0)
            goto out;
        for (size_t k = 0; k < n; k++)
            acc[k] += tmp[k];
        count++;
    }
    for (size_t k = 0; k < n; k++)
        avg[k] = count ? (float)(acc[k] / (double)count) : 0.0f;
    if (dist) {
        double sum = 0;
        for (size_t j = 0; j < w->nworkers; j++) {
            if (herd_worker_lost(w, j))
                continue;
            if ((st = read_model(w, win, j, tmp)) < 0)
                goto out;
            sum += dist_to(tmp, avg, n);
        }
        *dist = count ? sum / (double)count : 0.0;
    }
    st = HERD_OK;
out:
    free(acc);
    return st;
}

/* ---- dpsgd ----------------------------------------------------------------- */

typedef struct dp_state {
    herd__topo topo;
    size_t maxdeg, deg;      /* most neighbours of any step; this step's */
    size_t *nb;              /* maxdeg: this step's neighbours */
    size_t *perm;            /* n: random topology's permutation */
    float *recv;             /* maxdeg x nparams */
    herd_req **rreq, **sreq; /* maxdeg each */
    float *avg;              /* nparams: the average model, when known */
    size_t avg_step;         /* w->step it was computed at (SIZE_MAX: never) */
    double dist;
} dp_state;

/* Adds peer to nb[0..*d) unless it is self or already there. */
static void add_peer(size_t *nb, size_t *d, size_t self, size_t peer)
{
    if (peer == self)
        return;
    for (size_t k = 0; k < *d; k++)
        if (nb[k] == peer)
            return;
    nb[(*d)++] = peer;
}

/* This step's neighbours of worker i: the same graph on every worker. */
static size_t dp_neighbours(dp_state *s, const herd_worker *w, size_t step, size_t *nb)
{
    size_t n = w->nworkers, i = w->rank, d = 0;
    if (n == 1)
        return 0;
    if (s->topo == HERD_TOPO_RING) {
        add_peer(nb, &d, i, (i + n - 1) % n);
        add_peer(nb, &d, i, (i + 1) % n);
    } else if (s->topo == HERD_TOPO_EXP) {
        for (size_t m = 0; ((size_t)1 << m) < n; m++) {
            size_t off = ((size_t)1 << m) % n;
            add_peer(nb, &d, i, (i + off) % n);
            add_peer(nb, &d, i, (i + n - off) % n);
        }
    } else {
        herd_rng r;
        herd_rng_seed(&r, w->cfg->seed, 0xd9000000ull + step);
        for (size_t k = 0; k < n; k++)
            s->perm[k] = k;
        herd_rng_shuffle(&r, s->perm, n);
        size_t pos = 0;
        while (s->perm[pos] != i)
            pos++;
        add_peer(nb, &d, i, s->perm[(pos + n - 1) % n]);
        add_peer(nb, &d, i, s->perm[(pos + 1) % n]);
    }
    return d;
}

static herd_status dp_init(herd_algo *a, herd_worker *w)
{
    dp_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory", w->rank);
    a->state = s;
    s->topo = herd__gossip_topology(w, HERD_TOPO_RING);
    s->maxdeg = s->topo == HERD_TOPO_EXP ? 2 * herd__gossip_log2ceil(w->nworkers) : 2;
    s->avg_step = SIZE_MAX;
    size_t m = s->maxdeg ? s->maxdeg : 1;
    s->nb = calloc(m, sizeof *s->nb);
    s->perm = calloc(w->nworkers, sizeof *s->perm);
    s->recv = malloc(m * (w->nparams ? w->nparams : 1) * sizeof(float));
    s->rreq = calloc(m, sizeof *s->rreq);
    s->sreq = calloc(m, sizeof *s->sreq);
    s->avg = malloc((w->nparams ? w->nparams : 1) * sizeof(float));
    if (!s->nb || !s->perm || !s->recv || !s->rreq || !s->sreq || !s->avg)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory for %zu neighbours' weights", w->rank,
                            s->maxdeg);
    return HERD_OK;
}

/* Ends every request still posted (after a failure). */
static void dp_cancel(dp_state *s, herd_worker *w)
{
    for (size_t k = 0; k < s->maxdeg; k++) {
        if (s->rreq[k])
            herd_comm_cancel(w->comm, s->rreq[k]);
        if (s->sreq[k])
            herd_comm_cancel(w->comm, s->sreq[k]);
        s->rreq[k] = s->sreq[k] = NULL;
    }
}

/* Posts this step's exchange: x_i to every neighbour, theirs into recv. */
static herd_status dp_before_step(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    dp_state *s = a->state;
    size_t n = w->nparams, bytes = n * sizeof(float);
    s->deg = dp_neighbours(s, w, w->step, s->nb);
    HERD_ASSERT(s->deg <= s->maxdeg);
    for (size_t k = 0; k < s->deg; k++) {
        HERD_TRY(herd_comm_irecv(w->comm, s->nb[k], TAG_DPSGD, s->recv + k * n, bytes, &s->rreq[k]));
        HERD_TRY(herd_comm_isend(w->comm, s->nb[k], TAG_DPSGD, w->params, bytes, &s->sreq[k]));
    }
out:
    if (st < 0)
        dp_cancel(s, w);
    return st;
}

/* Waits for the neighbours and averages: x_i <- sum_j W_ij x_j. */
static herd_status dp_after_backward(herd_algo *a, herd_worker *w, herd_step_result *res)
{
    (void)res;
    herd_status st = HERD_OK;
    dp_state *s = a->state;
    size_t n = w->nparams;
    for (size_t k = 0; k < s->deg; k++) {
        herd_req *r = s->rreq[k];
        s->rreq[k] = NULL;
        HERD_TRY(herd_comm_wait(w->comm, r));
        r = s->sreq[k];
        s->sreq[k] = NULL;
        HERD_TRY(herd_comm_wait(w->comm, r));
    }
    if (s->deg) {
        float wt = 1.0f / (float)(s->deg + 1);
        float *x = w->params;
        for (size_t e = 0; e < n; e++) {
            float sum = x[e];
            for (size_t k = 0; k < s->deg; k++)
                sum += s->recv[k * n + e];
            x[e] = sum * wt;
        }
        herd_comm_combined(w->comm, s->deg * n);
    }
out:
    if (st < 0) {
        dp_cancel(s, w);
        if (!w->err.msg[0])
            herd_err_set(&w->err, st, "worker %zu (dpsgd, %s): step %zu exchange with its neighbours failed: %s",
                         w->rank, herd__gossip_topology_name(s->topo), w->step, herd_comm_last_error(w->comm));
    }
    return st;
}

/* Collective (every worker ends its epochs at the same step). */
static herd_status dp_refresh_average(dp_state *s, herd_worker *w)
{
    if (s->avg_step == w->step)
        return HERD_OK;
    herd_status st = herd__gossip_mean_allreduce(w, w->params, s->avg, &s->dist);
    if (st == HERD_OK)
        s->avg_step = w->step;
    return st;
}

static herd_status dp_end_epoch(herd_algo *a, herd_worker *w) { return dp_refresh_average(a->state, w); }

static herd_status dp_finish(herd_algo *a, herd_worker *w) { return dp_refresh_average(a->state, w); }

static herd_status dp_before_eval(herd_algo *a, herd_worker *w) { return dp_refresh_average(a->state, w); }

static herd_status dp_eval_params(herd_algo *a, herd_worker *w, float *out, const char **name)
{
    dp_state *s = a->state;
    if (s->avg_step != SIZE_MAX) {
        memcpy(out, s->avg, w->nparams * sizeof(float));
        *name = "average";
    }
    return HERD_OK;
}

static void dp_log_epoch(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    (void)w;
    dp_state *s = a->state;
    snprintf(buf, cap, ",\"consensus_dist\":%.6g,\"topology\":\"%s\",\"neighbours\":%zu", s->dist,
             herd__gossip_topology_name(s->topo), s->deg);
}

static const uint64_t DP_LAYOUT = HERD__STATE_LAYOUT('d', 'p', 's', 'g', 1);

static herd_status dp_save(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len)
{
    (void)w;
    dp_state *s = a->state;
    herd__state_out o = herd__state_out_make(buf, cap);
    herd__state_put_u64(&o, DP_LAYOUT);
    herd__state_put_u64(&o, (uint64_t)s->topo);
    *len = o.len;
    return HERD_OK;
}

static herd_status dp_load(herd_algo *a, herd_worker *w, const void *buf, size_t len)
{
    dp_state *s = a->state;
    herd__state_in in = herd__state_in_make(buf, len);
    herd_status st = herd__state_layout(&in, DP_LAYOUT, w, "dpsgd");
    if (st < 0)
        return st;
    uint64_t topo = herd__state_get_u64(&in);
    if ((st = herd__state_end(&in, w, "dpsgd")) < 0)
        return st;
    return herd__gossip_same_topology(w, topo, s->topo);
}

static void dp_free(herd_algo *a, herd_worker *w)
{
    dp_state *s = a->state;
    if (!s)
        return;
    dp_cancel(s, w);
    free(s->nb);
    free(s->perm);
    free(s->recv);
    free(s->rreq);
    free(s->sreq);
    free(s->avg);
    free(s);
    a->state = NULL;
}

const herd_algo_ops herd__algo_dpsgd = {
    .name = "dpsgd",
    .summary = "D-PSGD: synchronous gossip, x_i averaged with its neighbours every step (--topology ring|exp|random)",
    .opts = herd__gossip_opt_table,
    .opts_size = sizeof(herd__gossip_opts),
    .min_workers = 1,
    .async = false,
    .init = dp_init,
    .before_step = dp_before_step,
    .after_backward = dp_after_backward,
    .end_epoch = dp_end_epoch,
    .before_eval = dp_before_eval,
    .finish = dp_finish,
    .eval_params = dp_eval_params,
    .log_epoch = dp_log_epoch,
    .free = dp_free,
    .save = dp_save,
    .load = dp_load,
};

/* ---- adpsgd ---------------------------------------------------------------- */

typedef struct ad_state {
    herd__topo topo;
    herd_win *win;
    float *xw;        /* nparams: this worker's model, exposed in win */
    float *snap;      /* nparams: the weights the gradient was taken at */
    float *peer;      /* nparams: the passive neighbour's model, then the average */
    size_t *cand, ncand; /* an active worker's passive neighbours */
    bool active;
    herd_rng rng;
    uint64_t averages, skipped; /* pair averages made (active); none possible (all neighbours lost) */
    double dist;
} ad_state;

static bool ad_is_active(size_t rank) { return rank % 2 == 0; }

static herd_status ad_init(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ad_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory", w->rank);
    a->state = s;
    size_t n = w->nworkers, i = w->rank, np = w->nparams ? w->nparams : 1;
    s->topo = herd__gossip_topology(w, HERD_TOPO_RING);
    s->active = ad_is_active(i);
    herd_rng_seed(&s->rng, w->cfg->seed, 0xad000000ull + i);
    s->xw = malloc(np * sizeof(float));
    s->snap = malloc(np * sizeof(float));
    s->peer = malloc(np * sizeof(float));
    s->cand = calloc(n, sizeof *s->cand);
    bool oom = !s->xw || !s->snap || !s->peer || !s->cand;
    if (!oom)
        memcpy(s->xw, w->params, w->nparams * sizeof(float));
    /* collective: every worker takes part, even one out of memory */
    static const float none;
    HERD_TRY(herd_comm_win_create(w->comm, oom ? (void *)&none : s->xw, oom ? 0 : w->nparams * sizeof(float), &s->win));
    if (oom)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory for adpsgd's model copies", i);
    if (s->active && n > 1) {
        if (s->topo == HERD_TOPO_RANDOM) {
            for (size_t j = 1; j < n; j += 2)
                add_peer(s->cand, &s->ncand, i, j);
        } else {
            /* ring: offsets 1; exp: the odd offsets 2^m - 1 (an even offset never reaches a passive rank) */
            for (size_t m = 1; ((size_t)1 << m) - 1 < n; m++) {
                size_t off = ((size_t)1 << m) - 1;
                size_t fwd = (i + off) % n, back = (i + n - off) % n;
                if (!ad_is_active(fwd))
                    add_peer(s->cand, &s->ncand, i, fwd);
                if (!ad_is_active(back))
                    add_peer(s->cand, &s->ncand, i, back);
                if (s->topo == HERD_TOPO_RING)
                    break;
            }
        }
    }
out:
    return st;
}

/* The weights to compute on: this worker's model as it is now. */
static herd_status ad_before_step(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ad_state *s = a->state;
    size_t bytes = w->nparams * sizeof(float);
    if (!s->active) { /* actives may have averaged into it since */
        HERD_TRY(herd_comm_win_lock(w->comm, s->win, w->rank, false));
        st = herd_comm_win_get(w->comm, s->win, w->rank, 0, w->params, bytes);
        HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, s->win, w->rank));
        HERD_TRY(st);
    }
    memcpy(s->snap, w->params, bytes);
out:
    return st;
}

/* One passive neighbour not lost, uniformly; SIZE_MAX when none. */
static size_t ad_pick(ad_state *s, const herd_worker *w)
{
    size_t alive = 0;
    for (size_t k = 0; k < s->ncand; k++)
        alive += !herd_worker_lost(w, s->cand[k]);
    if (alive == 0)
        return SIZE_MAX;
    size_t r = (size_t)herd_rng_below(&s->rng, alive);
    for (size_t k = 0; k < s->ncand; k++)
        if (!herd_worker_lost(w, s->cand[k]) && r-- == 0)
            return s->cand[k];
    return SIZE_MAX;
}

/* Active: x_i, x_j <- (x_i + x_j)/2, atomic under j's exclusive lock. */
static herd_status ad_after_backward(herd_algo *a, herd_worker *w, herd_step_result *res)
{
    (void)res;
    herd_status st = HERD_OK;
    ad_state *s = a->state;
    if (!s->active || s->ncand == 0)
        return HERD_OK;
    size_t j = ad_pick(s, w), n = w->nparams, bytes = n * sizeof(float);
    if (j == SIZE_MAX) {
        s->skipped++;
        return HERD_OK;
    }
    HERD_TRY(herd_comm_win_lock(w->comm, s->win, j, true));
    st = herd_comm_win_get(w->comm, s->win, j, 0, s->peer, bytes);
    if (st == HERD_OK)
        st = herd_comm_win_flush(w->comm, s->win, j);
    if (st == HERD_OK) {
        /* x_i is snap: only this worker writes its own model */
        for (size_t k = 0; k < n; k++)
            s->peer[k] = 0.5f * (s->snap[k] + s->peer[k]);
        herd_comm_combined(w->comm, n);
        st = herd_comm_win_put(w->comm, s->win, j, 0, s->peer, bytes);
    }
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, s->win, j));
    HERD_TRY(st);
    memcpy(w->params, s->peer, bytes);
    s->averages++;
out:
    if (st < 0 && !w->err.msg[0])
        herd_err_set(&w->err, st, "worker %zu (adpsgd): averaging with passive worker %zu failed: %s", w->rank, j,
                     herd_comm_last_error(w->comm));
    return st;
}

/* After the local step (the worker's optimizer), its result goes to the
 * window: an active worker's as is (it alone writes there), a passive
 * worker's as a delta added to whatever averages happened since
 * before_step. A skipped update has nothing to publish. */
static herd_status ad_publish(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ad_state *s = a->state;
    size_t n = w->nparams, bytes = n * sizeof(float);
    if (w->skipped)
        return HERD_OK;
    HERD_TRY(herd_comm_win_lock(w->comm, s->win, w->rank, true));
    if (s->active) {
        st = herd_comm_win_put(w->comm, s->win, w->rank, 0, w->params, bytes);
    } else {
        for (size_t k = 0; k < n; k++)
            s->snap[k] = w->params[k] - s->snap[k];
        st = herd_comm_win_accumulate(w->comm, s->win, w->rank, 0, s->snap, n);
    }
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, s->win, w->rank));
    HERD_TRY(st);
out:
    return st;
}

/* The worker's weights end as its model in the window (for its own eval). */
static herd_status ad_finish(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ad_state *s = a->state;
    HERD_TRY(herd_comm_win_lock(w->comm, s->win, w->rank, false));
    st = herd_comm_win_get(w->comm, s->win, w->rank, 0, w->params, w->nparams * sizeof(float));
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, s->win, w->rank));
out:
    return st;
}

/* The average (and the consensus distance the next epoch record gives) is
 * read from every worker's window here, as worker 0 evaluates, outside the
 * epoch's clock: at each epoch's end every worker read all n models (n^2
 * transfers) inside its training time, for an average only an evaluation
 * uses. */
static herd_status ad_eval_params(herd_algo *a, herd_worker *w, float *out, const char **name)
{
    ad_state *s = a->state;
    herd_status st = herd__gossip_mean_windows(w, s->win, out, s->peer, &s->dist);
    if (st == HERD_OK)
        *name = "average";
    return st;
}

static void ad_log_epoch(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    (void)w;
    ad_state *s = a->state;
    snprintf(buf, cap, ",\"consensus_dist\":%.6g,\"topology\":\"%s\",\"role\":\"%s\",\"averages\":%llu,\"no_peer\":%llu",
             s->dist, herd__gossip_topology_name(s->topo), s->active ? "active" : "passive",
             (unsigned long long)s->averages, (unsigned long long)s->skipped);
}

static const uint64_t AD_LAYOUT = HERD__STATE_LAYOUT('a', 'd', 'p', 's', 1);

static herd_status ad_save(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len)
{
    herd_status st = HERD_OK;
    ad_state *s = a->state;
    size_t bytes = w->nparams * sizeof(float);
    herd__state_out o = herd__state_out_make(buf, cap);
    herd__state_put_u64(&o, AD_LAYOUT);
    herd__state_put_u64(&o, (uint64_t)s->topo);
    void *model = herd__state_reserve(&o, bytes);
    herd__state_put(&o, s->rng.s, sizeof s->rng.s);
    herd__state_put_u64(&o, s->averages);
    herd__state_put_u64(&o, s->skipped);
    herd__state_put_f64(&o, s->dist);
    *len = o.len;
    if (model)
        st = herd__state_win_copy(w->comm, s->win, w->rank, false, model, bytes);
    return st;
}

static herd_status ad_load(herd_algo *a, herd_worker *w, const void *buf, size_t len)
{
    herd_status st = HERD_OK;
    ad_state *s = a->state;
    size_t bytes = w->nparams * sizeof(float);
    herd__state_in in = herd__state_in_make(buf, len);
    HERD_TRY(herd__state_layout(&in, AD_LAYOUT, w, "adpsgd"));
    uint64_t topo = herd__state_get_u64(&in);
    if (!in.bad)
        HERD_TRY(herd__gossip_same_topology(w, topo, s->topo));
    const void *model = herd__state_take(&in, bytes);
    herd__state_get(&in, s->rng.s, sizeof s->rng.s);
    s->averages = herd__state_get_u64(&in);
    s->skipped = herd__state_get_u64(&in);
    s->dist = herd__state_get_f64(&in);
    HERD_TRY(herd__state_end(&in, w, "adpsgd"));
    st = herd__state_win_copy(w->comm, s->win, w->rank, true, (void *)model, bytes);
out:
    return st;
}

static void ad_free(herd_algo *a, herd_worker *w)
{
    ad_state *s = a->state;
    if (!s)
        return;
    if (s->win)
        herd_comm_win_free(w->comm, s->win);
    free(s->xw);
    free(s->snap);
    free(s->peer);
    free(s->cand);
    free(s);
    a->state = NULL;
}

const herd_algo_ops herd__algo_adpsgd = {
    .name = "adpsgd",
    .summary = "AD-PSGD: asynchronous gossip, active workers average atomically with one passive neighbour",
    .opts = herd__gossip_opt_table,
    .opts_size = sizeof(herd__gossip_opts),
    .min_workers = 1,
    .async = true,
    .init = ad_init,
    .before_step = ad_before_step,
    .after_backward = ad_after_backward,
    .after_step = ad_publish,
    .finish = ad_finish,
    .eval_params = ad_eval_params,
    .log_epoch = ad_log_epoch,
    .free = ad_free,
    .save = ad_save,
    .load = ad_load,
};
