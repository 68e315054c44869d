/* Elastic averaging family: easgd, aeasgd, ameasgd, hogwild-easgd, eawild
 * (docs/algorithms.md, seed 000: Zhang, Choromanska, LeCun 2015; You, Buluç,
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
 *   aeasgd/ameasgd the center lives in windows on ranks 0..K-1
 *                  (--elastic-shards K; default: every worker holds a
 *                  slice, src/algo/center.c); an exchange, per shard under
 *                  its exclusive lock, reads its slice of c and adds d in
 *                  one blend (herd_comm_win_blend: on the agents' windows
 *                  the holder computes d from x's slice, which it is sent,
 *                  and answers with c as it was, from which the worker
 *                  computes the same d): first come first served per shard.
 *   hogwild-easgd  the same under shared locks: reads and element-wise
 *                  atomic adds of concurrent exchanges interleave. Its
 *                  windows and eawild's take shared locks only
 *                  (HERD_WIN_SHARED_LOCKS), so that no engine makes
 *                  their holders wait for each other.
 *   eawild         no lock that excludes anyone and no wait: an exchange
 *                  uses the center read at the previous exchange, starts the
 *                  accumulate of d and the read of the current center under
 *                  each shard's shared lock, and goes on with its next local step; the
 *                  lock is released (the transfers completed) after that
 *                  step's backward, so both overlap its compute on the mpi
 *                  engine. The first exchange uses the initial weights.
 *                  Whether that read already holds this worker's own d is
 *                  left open: on threads it does (the add is applied first);
 *                  on mpi the get and the accumulate of one epoch are not
 *                  ordered.
 *                  --elastic-transport messages (the default where windows
 *                  are not this process's memory: mpi, sim): the holders
 *                  serve the exchanges as messages (center.h,
 *                  herd__mcenter): d's slice goes to each holder, which adds
 *                  it and answers with its slice; a slice is pulled toward
 *                  the holder's last answer and pushed again once that
 *                  answer has come, so nothing waits for a holder, and the
 *                  holders poll before the forward pass, as backward
 *                  finishes each range and at each exchange. The answer
 *                  holds this worker's own d. Chosen by measurement: SimGrid
 *                  completes every accumulate before it returns and
 *                  serializes a target's epochs (two round trips per shard
 *                  in turn); Open MPI's osc pt2pt across hosts waits for the
 *                  target's progress either way.
 * The intended races (hogwild-easgd and eawild reads against others' adds):
 * on threads every float is read and added with relaxed atomics, so a read
 * sees each element with or without a concurrent add and ThreadSanitizer has
 * nothing to report; on mpi, MPI leaves a get that overlaps an accumulate
 * undefined, which with aligned 4-byte floats in practice reads the same way.
 * The model users keep, and the one evaluated, is the center ("center"); the
 * epoch log adds elastic_dist (mean ||x_i - c|| at this worker's exchanges),
 * exchanges, alpha, period, pushed/pulled bytes and blocked_s: the time this
 * worker waited in its exchanges (lock, allreduce, and the flush or unlock
 * that completes a transfer; eawild's completion after the next backward
 * counts too, so its blocked_s shows what the overlap did not hide). The
 * window calls' part is in comm's own wait count (comm times every window
 * call); the messages' drain adds what comm did not time.
 * Checkpoints: easgd saves its copy of the center (its local step keeps no
 * momentum): a resume is bit for bit. The asynchronous ones checkpoint with
 * every worker between two steps (ckpt_run.h): each worker first completes
 * what it has in flight (eawild's transfers, in the save hook's sizing
 * call, so it holds no lock at the checkpoint's barrier), then rank 0 saves
 * the center under its exclusive lock, and eawild the center it read at its
 * last exchange (ameasgd's local momentum is the worker's optimizer, which
 * every checkpoint holds). The epoch
 * figures go along, except blocked_s and the byte counts (timings and the
 * transport's counters start over). The record also holds alpha and the
 * period, refused on resume if they differ.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/center.h"
#include "algo/run_config.h"
#include "algo/state_io.h"
#include "core/clock.h"

typedef enum ea_kind { EA_SYNC, EA_ASYNC, EA_MOMENTUM, EA_HOGWILD, EA_WILD } ea_kind;

typedef struct ea_state {
    ea_kind kind;
    float alpha;
    size_t period;
    herd__center center; /* all but easgd */
    float *c;           /* easgd: the center; eawild: the center read at the last exchange */
    float *c_next;      /* eawild: the read in flight */
    float *d;           /* nparams */
    bool messages;      /* eawild: the center is served by messages (--elastic-transport) */
    size_t stale_slices; /* this epoch (messages): slices an exchange left for the next, unanswered */
    herd__mcenter mc;   /* eawild over messages */
    bool pending;       /* eawild: an exchange's transfers are in flight (shared locks held) */
    size_t held;        /* eawild: the shard whose shared lock is held, + 1 (0: none) */
    double dist_sum;    /* this epoch: sum of ||x - c|| at exchanges */
    size_t nexch;       /* this epoch's exchanges */
    double blocked_s;   /* this epoch: time waited in exchanges */
    uint64_t sent0, recv0; /* comm's byte counts at the epoch's start */
} ea_state;

/* The options (docs/algorithms.md, seed 000). */
typedef struct ea_opts {
    double alpha;  /* moving rate; 0: beta / n with beta = 0.9 */
    size_t period; /* local steps between exchanges with the center */
    size_t shards; /* ranks holding a slice of the center; 0: every worker */
    int transport; /* eawild: ea_transport */
    float lr;      /* the plain-SGD variants' table: their default of the run's --lr (src/run/config.c) */
} ea_opts;

/* How eawild reaches the center: one-sided windows, or messages its
 * holders serve (center.h, herd__mcenter); auto: windows where they lie in
 * this process's memory (threads), else messages. */
typedef enum ea_transport { EA_TR_AUTO, EA_TR_WINDOWS, EA_TR_MESSAGES } ea_transport;
static const char *const transport_names[] = {"auto", "windows", "messages", NULL};

#define EA_OPT_ROWS \
    {.name = "elastic-alpha", .type = HERD_OPT_DOUBLE, .offset = offsetof(ea_opts, alpha), .flags = HERD_OPT_BOUNDED | HERD_OPT_MAX_OPEN, .max = 1, \
     .help = "moving rate toward the center (default 0.9/workers; easgd diverges from 2/(workers+1) on)"}, \
    {.name = "elastic-period", .type = HERD_OPT_SIZE, .offset = offsetof(ea_opts, period), .def = "1", .flags = HERD_OPT_BOUNDED, .min = 1, .max = 1000000, \
     .help = "local steps between exchanges with the center"}, \
    {.name = "elastic-shards", .type = HERD_OPT_SIZE, .offset = offsetof(ea_opts, shards), .def = "0", .flags = HERD_OPT_BOUNDED, .max = 4096, \
     .help = "spread the center over ranks 0..N-1 (asynchronous variants; default 0: every worker)"}, \
    {.name = "elastic-transport", .type = HERD_OPT_CHOICE, .offset = offsetof(ea_opts, transport), .def = "auto", .choices = transport_names, \
     .help = "eawild: reach the center by windows or by messages its holders serve (auto: windows on threads, else " "messages)"}

/* ameasgd's: its local step is Nesterov momentum at the run's --lr */
static const herd_opt ea_opt_table[] = {
    EA_OPT_ROWS,
    {0},
};

/* The plain-SGD variants' (the papers' local rule, no momentum) take --lr
 * 0.2 unless told: at the run's 0.05, made for momentum SGD, they stop at
 * 0.77 (4 workers) and 0.74 (8) after one epoch of lenet whatever the
 * elastic options; at 0.2, 0.80 and 0.76 (bench/lab run elastic-defaults
 * and learn-defaults: 0.7998 and 0.7579 for easgd on 2026-11-28). */
#define EA_SGD_LR "0.2"
static const herd_opt ea_sgd_opt_table[] = {
    EA_OPT_ROWS,
    {.name = "lr", .type = HERD_OPT_FLOAT, .offset = offsetof(ea_opts, lr), .def = EA_SGD_LR, .flags = HERD_OPT_BOUNDED | HERD_OPT_MIN_OPEN, .max = 100,
     .help = "learning rate of the local SGD steps, this variant's own (the run's 0.05 is for momentum SGD)"},
    {0},
};

/* The center's shards: at most one per worker. */
static herd_status ea_check(const herd_algo_ops *ops, const void *opts, const herd__train_config *cfg, herd_err *err)
{
    const ea_opts *o = opts;
    if (o->shards > cfg->workers)
        return herd_err_set(err, HERD_EINVAL, "--elastic-shards must be in [0, workers = %zu] (0: every worker), got %zu",
                            cfg->workers, o->shards);
    if (o->transport != EA_TR_AUTO && *(const ea_kind *)ops->variant != EA_WILD)
        return herd_err_set(err, HERD_EINVAL, "--elastic-transport applies to eawild only, not --algo %s", ops->name);
    if (*(const ea_kind *)ops->variant == EA_MOMENTUM && cfg->optim.optimizer == HERD_OPTIMIZER_LAMB)
        return herd_err_set(err, HERD_EINVAL, "--algo ameasgd's local rule is Nesterov momentum, which --optimizer "
                            "lamb does not have (its momentum is Adam's): use aeasgd with lamb, or ameasgd with sgd "
                            "or lars");
    return HERD_OK;
}

static herd_status ea_init(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    ea_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for the elastic averaging state");
    a->state = s;
    s->kind = *(const ea_kind *)a->ops->variant;
    const ea_opts *ec = w->opts;
    s->alpha = ec->alpha > 0 ? (float)ec->alpha : 0.9f / (float)w->nworkers;
    s->period = ec->period ? ec->period : 1;
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
    if (s->kind != EA_SYNC) {
        size_t shards = ec->shards ? ec->shards : w->nworkers;
        bool shared = s->kind == EA_HOGWILD || s->kind == EA_WILD; /* nobody excludes anybody */
        HERD_TRY(herd__center_create(&s->center, w->comm, w->nparams, shards, 1, w->params, shared));
        s->messages = s->kind == EA_WILD && (ec->transport == EA_TR_MESSAGES ||
                                             (ec->transport == EA_TR_AUTO && !herd_comm_windows_local(w->comm)));
        if (s->messages && (st = herd__mcenter_init(&s->mc, &s->center)) < 0)
            herd_err_set(&w->err, st, "worker %zu: %s", w->rank, herd_comm_last_error(w->comm));
    }
    s->sent0 = w->comm->bytes_sent, s->recv0 = w->comm->bytes_recv;
out:
    return st;
}

/* The local rule: plain SGD, or Nesterov momentum for ameasgd (--momentum,
 * 0.9 when it is 0); --optimizer lars scales it per layer, lamb replaces it
 * (with its own moments, which every checkpoint holds). */
static void ea_optim_config(const herd_algo_ops *ops, const void *opts, herd_optim_config *oc)
{
    (void)opts;
    if (*(const ea_kind *)ops->variant == EA_MOMENTUM) {
        oc->nesterov = true;
        if (oc->momentum == 0.0f)
            oc->momentum = 0.9f;
    } else {
        oc->momentum = 0.0f, oc->nesterov = false;
    }
}

/* d = alpha (x - c); x -= d on [lo, hi); returns that range's ||x - c||^2. */
static double elastic_pull(ea_state *s, herd_worker *w, const float *c, size_t lo, size_t hi)
{
    double sq = 0;
    for (size_t i = lo; i < hi; i++) {
        float diff = w->params[i] - c[i];
        sq += (double)diff * diff;
        s->d[i] = s->alpha * diff;
        w->params[i] -= s->d[i];
    }
    herd_comm_combined(w->comm, hi - lo);
    return sq;
}

/* An exchange's ||x - c||, for the epoch log. */
static void record_exchange(ea_state *s, double sq)
{
    s->dist_sum += sqrt(sq);
    s->nexch++;
}

/* Flush or unlock of shard k: where a transfer's time is spent on the mpi
 * engine (comm counts it as waiting too). */
static herd_status complete(ea_state *s, size_t k, herd_status (*fn)(herd__center *, size_t))
{
    double t0 = herd__now();
    herd_status st = fn(&s->center, k);
    s->blocked_s += herd__now() - t0;
    return st;
}

static herd_status lock_center(ea_state *s, size_t k, bool exclusive)
{
    double t0 = herd__now();
    herd_status st = herd__center_lock(&s->center, k, exclusive);
    s->blocked_s += herd__now() - t0;
    return st;
}

/* eawild: the previous exchange's transfers are complete once every shard
 * is unlocked. */
static herd_status complete_pending(ea_state *s, herd_worker *w)
{
    if (s->messages) /* nothing to complete: serve and take what has come */
        return herd__mcenter_poll(&s->mc, w, s->c);
    if (!s->pending)
        return HERD_OK;
    s->pending = false;
    herd_status st = HERD_OK;
    if (s->held)
        st = complete(s, s->held - 1, herd__center_unlock);
    s->held = 0;
    if (st == HERD_OK) {
        float *t = s->c;
        s->c = s->c_next, s->c_next = t;
    }
    return st;
}

/* aeasgd, ameasgd, hogwild-easgd: per shard, under its lock (exclusive but
 * for hogwild-easgd), read the center and add d = alpha (x - c) to it in
 * one blend (herd_comm_win_blend), then pull x toward what it read, with
 * the same d; the shards are independent, as the parameter server's are.
 * Where the holder applies the blend (the agents' windows across hosts,
 * herd-sim's), every shard's epoch is sent before any is waited for and
 * the holders serve them side by side, each lock held only while its blend
 * applies; elsewhere each blend is a get, a flush and an accumulate under
 * the lock, shard after shard. */
static herd_status exchange_locked(ea_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    herd__center *ctr = &s->center;
    bool exclusive = s->kind != EA_HOGWILD;
    float *c = s->d; /* the center read into d, then d becomes alpha (x - c) in place */
    double t0 = herd__now(); /* every lock, blend (where by parts, its flush) and unlock is waiting */
    for (size_t k = 0; k < ctr->shards; k++) {
        HERD_TRY(herd__center_lock(ctr, k, exclusive));
        st = herd__center_blend(ctr, k, 0, w->params, s->alpha, c);
        HERD_KEEP_FIRST(st, herd__center_unlock_begin(ctr, k));
        if (st < 0)
            goto out;
    }
    st = herd__center_wait(ctr);
    s->blocked_s += herd__now() - t0;
    if (st == HERD_OK) /* reads c[i] before writing d[i]: same array, same index */
        record_exchange(s, elastic_pull(s, w, c, 0, w->nparams));
out:
    return st;
}

/* eawild over messages: each slice whose last exchange is answered is
 * pulled toward that answer and its d pushed; the others wait for the next
 * exchange (center.h). */
static herd_status exchange_messages(ea_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    herd__center *ctr = &s->center;
    double sq = 0;
    size_t fresh = 0;
    for (size_t k = 0; k < ctr->shards; k++) {
        if (!herd__mcenter_ready(&s->mc, w, k))
            continue;
        size_t lo, hi;
        herd__center_range(ctr, k, &lo, &hi);
        sq += elastic_pull(s, w, s->c, lo, hi);
        HERD_TRY(herd__mcenter_push(&s->mc, w, k, s->d, s->c));
        fresh++;
    }
    if (fresh)
        record_exchange(s, sq);
    s->stale_slices += ctr->shards - fresh;
out:
    return st;
}

/* eawild: pull toward the center read at the last exchange, then, shard by
 * shard under its shared lock, add d and read the current center; the last
 * shard's transfers are left in flight, and complete_pending finishes them
 * after the next step's backward. One lock at a time: Open MPI's osc
 * pt2pt (across hosts over TCP) was seen to hang in MPI_Win_unlock when
 * every rank held shared locks on every other rank's shard across compute.
 * Nobody takes the center's exclusive lock, so the shared one held
 * meanwhile (what MPI needs to keep a transfer in flight) keeps nobody
 * waiting. */
static herd_status exchange_wild(ea_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    herd__center *ctr = &s->center;
    HERD_TRY(complete_pending(s, w));
    if (s->messages)
        return exchange_messages(s, w);
    record_exchange(s, elastic_pull(s, w, s->c, 0, w->nparams));
    for (size_t k = 0; k < ctr->shards && st == HERD_OK; k++) {
        HERD_TRY(lock_center(s, k, false));
        s->pending = true, s->held = k + 1; /* complete_pending unlocks what is held */
        st = herd__center_accumulate(ctr, k, 0, s->d);
        if (st == HERD_OK)
            st = herd__center_get(ctr, k, 0, s->c_next);
        if (st == HERD_OK && k + 1 < ctr->shards) {
            s->held = 0;
            st = complete(s, k, herd__center_unlock);
        }
    }
out:
    return st;
}

static herd_status exchange(ea_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    switch (s->kind) {
    case EA_SYNC: {
        record_exchange(s, elastic_pull(s, w, s->c, 0, w->nparams));
        double t0 = herd__now();
        st = herd_allreduce(w->comm, s->d, w->nparams, &(herd_allreduce_opts){.wire = HERD_F32});
        s->blocked_s += herd__now() - t0;
        if (st < 0)
            goto out;
        for (size_t i = 0; i < w->nparams; i++)
            s->c[i] += s->d[i];
        break;
    }
    case EA_ASYNC:
    case EA_MOMENTUM:
    case EA_HOGWILD:
        st = exchange_locked(s, w);
        break;
    case EA_WILD:
        st = exchange_wild(s, w);
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
static herd_status ea_settle(herd_algo *a, herd_worker *w)
{
    herd_status st = complete_pending(a->state, w);
    if (st < 0 && !w->err.msg[0])
        herd_err_set(&w->err, st, "worker %zu: completing the elastic exchange at step %zu: %s", w->rank,
                     w->step, herd_comm_last_error(w->comm));
    return st;
}

/* Everything this worker sent to the center is in it, and (messages) every
 * worker has said so of its own: at the run's end and a checkpoint's hold,
 * where every worker calls it. */
static herd_status quiesce(ea_state *s, herd_worker *w)
{
    if (!s->messages)
        return complete_pending(s, w);
    double waited = 0, comm0 = w->comm->wait_s;
    herd_status st = herd__mcenter_drain(&s->mc, w, s->c, &waited);
    s->blocked_s += waited;
    w->comm_wait_s += waited - (w->comm->wait_s - comm0); /* what comm did not time itself */
    return st;
}

static herd_status ea_finish(herd_algo *a, herd_worker *w)
{
    herd_status st = quiesce(a->state, w);
    if (st < 0 && !w->err.msg[0])
        herd_err_set(&w->err, st, "worker %zu: completing its elastic exchanges at the end: %s", w->rank,
                     herd_comm_last_error(w->comm));
    return st;
}

static herd_status ea_after_step(herd_algo *a, herd_worker *w)
{
    ea_state *s = a->state;
    if ((w->step + 1) % s->period)
        return HERD_OK;
    return exchange(s, w);
}

/* eawild over messages: a holder serves, and a worker takes answers,
 * whenever it passes here too (before the forward pass and as backward
 * finishes each range): where a transport moves a message only while its
 * ends are inside the library (Open MPI over TCP), an exchange answered once
 * a step would come back a step late. */
static herd_status ea_progress(herd_algo *a, herd_worker *w)
{
    ea_state *s = a->state;
    return s->messages ? herd__mcenter_poll(&s->mc, w, s->c) : HERD_OK;
}

static herd_status ea_grad_ready(herd_algo *a, herd_worker *w, size_t off, size_t len)
{
    (void)off, (void)len;
    return ea_progress(a, w);
}

static herd_status ea_after_backward(herd_algo *a, herd_worker *w, herd_step_result *res)
{
    (void)res;
    return ea_settle(a, w);
}

static herd_status ea_eval_params(herd_algo *a, herd_worker *w, float *out, const char **name)
{
    ea_state *s = a->state;
    *name = NULL;
    if (s->kind == EA_SYNC) {
        memcpy(out, s->c, w->nparams * sizeof(float));
    } else {
        herd_status st = complete_pending(s, w);
        if (st == HERD_OK)
            st = herd__center_read(&s->center, out);
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
    ea_state *s = a->state;
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len,
             ",\"elastic_dist\":%.6g,\"exchanges\":%zu,\"alpha\":%g,\"period\":%zu,\"pushed_bytes\":%llu,"
             "\"pulled_bytes\":%llu,\"blocked_s\":%.6f",
             s->nexch ? s->dist_sum / (double)s->nexch : 0.0, s->nexch, (double)s->alpha, s->period,
             (unsigned long long)(w->comm->bytes_sent - s->sent0), (unsigned long long)(w->comm->bytes_recv - s->recv0),
             s->blocked_s);
    if (s->messages) {
        len = strlen(buf);
        snprintf(buf + len, cap - len, ",\"transport\":\"messages\",\"stale_slices\":%zu,\"served\":%llu",
                 s->stale_slices, (unsigned long long)s->mc.served);
    }
    s->dist_sum = 0, s->nexch = 0, s->blocked_s = 0, s->stale_slices = 0;
    s->sent0 = w->comm->bytes_sent, s->recv0 = w->comm->bytes_recv;
}

static const uint64_t EA_LAYOUT = HERD__STATE_LAYOUT('e', 'a', 's', 'g', 3);

static herd_status ea_save(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len)
{
    ea_state *s = a->state;
    /* eawild: the checkpoint holds no transfer in flight; the sizing call
     * (every worker, before the checkpoint's barrier) settles them */
    herd_status st = buf ? complete_pending(s, w) : quiesce(s, w);
    if (st < 0) {
        if (!w->err.msg[0])
            herd_err_set(&w->err, st, "worker %zu: completing its elastic exchanges for a checkpoint: %s", w->rank,
                         herd_comm_last_error(w->comm));
        return st;
    }
    herd__state_out o = herd__state_out_make(buf, cap);
    herd__state_put_u64(&o, EA_LAYOUT);
    herd__state_put_u64(&o, s->kind);
    herd__state_put_f64(&o, (double)s->alpha);
    herd__state_put_u64(&o, s->period);
    herd__state_put_u64(&o, s->kind == EA_SYNC ? 0 : s->center.shards);
    if (s->c)
        herd__state_put(&o, s->c, w->nparams * sizeof(float));
    if (s->kind != EA_SYNC)
        st = herd__center_save(&s->center, &o);
    herd__state_put_f64(&o, s->dist_sum);
    herd__state_put_u64(&o, s->nexch);
    *len = o.len;
    return st;
}

static herd_status ea_load(herd_algo *a, herd_worker *w, const void *buf, size_t len)
{
    ea_state *s = a->state;
    const char *what = a->ops->name;
    herd__state_in in = herd__state_in_make(buf, len);
    herd_status st = herd__state_layout(&in, EA_LAYOUT, w, what);
    if (st < 0)
        return st;
    uint64_t kind = herd__state_get_u64(&in);
    double alpha = herd__state_get_f64(&in);
    uint64_t period = herd__state_get_u64(&in);
    uint64_t shards = herd__state_get_u64(&in);
    if (in.bad)
        return herd__state_end(&in, w, what);
    if (kind != s->kind)
        return herd_err_set(&w->err, HERD_ECORRUPT, "worker %zu: the checkpoint's %s state is of another variant", w->rank, what);
    if (alpha != (double)s->alpha || period != s->period)
        return herd_err_set(&w->err, HERD_EINVAL,
                            "worker %zu: the checkpoint was written with --elastic-alpha %g --elastic-period %llu; this "
                            "run has %g and %zu",
                            w->rank, alpha, (unsigned long long)period, (double)s->alpha, s->period);
    if (s->kind != EA_SYNC && shards != s->center.shards)
        return herd_err_set(&w->err, HERD_EINVAL,
                            "worker %zu: the checkpoint was written with --elastic-shards %llu; this run has %zu", w->rank,
                            (unsigned long long)shards, s->center.shards);
    if (s->c)
        herd__state_get(&in, s->c, w->nparams * sizeof(float));
    if (s->kind != EA_SYNC && (st = herd__center_load(&s->center, &in, w, what)) < 0)
        return st;
    s->dist_sum = herd__state_get_f64(&in);
    s->nexch = (size_t)herd__state_get_u64(&in);
    return herd__state_end(&in, w, what);
}

static void ea_free(herd_algo *a, herd_worker *w)
{
    ea_state *s = a->state;
    if (!s)
        return;
    if (s->messages)
        herd__mcenter_free(&s->mc);
    else
        complete_pending(s, w);
    if (s->kind != EA_SYNC)
        herd__center_free(&s->center);
    free(s->c);
    free(s->c_next);
    free(s->d);
    free(s);
    a->state = NULL;
}

static const ea_kind kind_sync = EA_SYNC, kind_async = EA_ASYNC, kind_momentum = EA_MOMENTUM,
                     kind_hogwild = EA_HOGWILD, kind_wild = EA_WILD;

#define EA_OPS(var, nm, kind, is_async, table, text)                                           \
    const herd_algo_ops var = {                                                                \
        .name = nm,                                                                            \
        .summary = text,                                                                       \
        .opts = table,                                                                         \
        .opts_size = sizeof(ea_opts),                                                          \
        .check = ea_check,                                                                     \
        .variant = &kind,                                                                      \
        .min_workers = 1,                                                                      \
        .async = is_async,                                                                     \
        .init = ea_init,                                                                       \
        .before_step = ea_progress,                                                            \
        .grad_ready = ea_grad_ready,                                                           \
        .after_backward = ea_after_backward,                                                   \
        .optim_config = ea_optim_config,                                                       \
        .after_step = ea_after_step,                                                           \
        .end_epoch = ea_settle,                                                                \
        .finish = ea_finish,                                                                   \
        .eval_params = ea_eval_params,                                                         \
        .log_epoch = ea_log_epoch,                                                             \
        .free = ea_free,                                                                       \
        .save = ea_save,                                                                       \
        .load = ea_load,                                                                       \
    }

EA_OPS(herd__algo_easgd, "easgd", kind_sync, false, ea_sgd_opt_table,
       "synchronous elastic averaging SGD: all workers pull toward one center at once (default --lr " EA_SGD_LR ")");
EA_OPS(herd__algo_aeasgd, "aeasgd", kind_async, true, ea_sgd_opt_table,
       "asynchronous EASGD: each worker exchanges with the center under its lock (default --lr " EA_SGD_LR ")");
EA_OPS(herd__algo_ameasgd, "ameasgd", kind_momentum, true, ea_opt_table,
       "asynchronous momentum EASGD: Nesterov momentum in the local steps");
EA_OPS(herd__algo_hogwild_easgd, "hogwild-easgd", kind_hogwild, true, ea_sgd_opt_table,
       "asynchronous EASGD without a lock on the center (default --lr " EA_SGD_LR ")");
EA_OPS(herd__algo_eawild, "eawild", kind_wild, true, ea_sgd_opt_table,
       "EA-wild: lock-free, non-blocking exchanges overlapped with the next step (default --lr " EA_SGD_LR ")");
