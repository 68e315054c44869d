/* Push-sum family (docs/algorithms.md, seed 004: Assran et al. ICML'19).
 *
 * Each worker keeps a push-sum weight w_i (starting at 1) and the de-biased
 * model z_i = x_i / w_i, which is what its weights hold: gradients and
 * evaluation use z_i; the numerator x_i = w_i z_i is never stored. A step:
 *   z_i <- z_i - lr d(z_i)  (d: the local optimizer's direction, momentum
 *                           and weight decay included), so the numerator
 *                           moves by w_i lr d. docs/algorithms.md writes x_i <-
 *                           x_i - lr d; the two agree while w_i = 1 (the
 *                           default graph without delays), and the authors'
 *                           code steps on the de-biased z_i as here: with
 *                           late messages w_i can fall far below 1, and
 *                           lr / w_i on z_i diverges (seen on the convex
 *                           problem with tau = 3);
 *   keep half: (x_i, w_i) <- (x_i, w_i) / 2 (z_i does not move), and push
 *   the other half to this step's out-peer (share p = 1/2: self + one peer)
 *   mix: x_i += every (x, w) received, w_i likewise; z_i = x_i / w_i.
 * Topology (the out-peer of worker j at its step k; L = ceil(log2 n)):
 *   exp (default)  j + 2^(k mod L), the time-varying directed exponential
 *                  graph; every step is a permutation, so with w starting at 1
 *                  it stays 1 (any n, not only powers of 2);
 *   ring           j + 1 (directed);
 *   random         uniform over the others, drawn from (seed, k, j), so every
 *                  worker knows who sends to it; in-degrees vary, and so do
 *                  the weights.
 * n = 1: no messages, plain local SGD.
 *
 * Messages carry (w share, the de-biased model of that share, the sender's
 * step k, a last-message flag); mixing is the weighted mean z_i <- z_i +
 * w / (w_i + w) (z - z_i), w_i += w, which is x_i += w z, w_i += w without
 * ever forming a numerator (weights fall far below 1 on a slow link with a
 * large tau; numerators in floats would underflow). Bounded delay tau (--max-delay): at the end of its step
 * k a worker has mixed in every message sent to it at steps <= k - tau,
 * waiting for a missing one (an in-neighbour that stopped or was lost is not
 * waited for). sgp is tau = 0: every message is mixed at exactly the step it
 * was sent (one that comes early is held until then), sums in rank order, so
 * runs are bit-identical. osgp (tau >= 1) sends without waiting and mixes
 * whatever has arrived, early or late; where a message to the same peer is
 * still in flight (its sends are synchronous, herd_comm_issend: one is done
 * once the receiver has it, not once it is buffered on the way), the new
 * share is added to the next message instead (push-sum mass adds up), so a
 * sender never waits for a slow receiver, nor queues more on a slow link.
 * osgp is asynchronous: workers take batches from the shared counter, so
 * fast workers do more steps; how far ahead of a slow in-neighbour a
 * worker may run is exactly tau, so the straggler tolerance grows with
 * --max-delay (tau = 0 is sgp's lockstep).
 * At the end each worker pushes its last share with the last-message flag to
 * every possible out-peer and mixes until each in-neighbour's last message
 * came: no mass is left in flight, sum x_i and sum w_i are those of the
 * start plus the gradient steps.
 *
 * Average model and consensus distance mean ||z_i - z_bar||: sgp by a
 * collective at each epoch end and at finish (exact); osgp publishes z_i in
 * a window after each step and worker 0 reads them one-sidedly as it
 * evaluates, outside the epoch's clock (an estimate while the run goes on,
 * exact after the last step; its next epoch record gives the distance).
 *
 * Checkpoints (sgp): after a step every message of it has been mixed and
 * none of the next exists yet, so the state between steps is w_i (the
 * numerator is w_i z_i, z_i being the saved weights), and per in-neighbour
 * the step bookkeeping (got, cursor) and the message counters (not the
 * count of waits, a timing figure that starts over: a bit-exact checkpoint
 * holds nothing that depends on timing); the record also holds the
 * topology, refused on resume if it differs. osgp has no
 * checkpoints: its bounded-delay waits on in-neighbours could wait forever
 * on a worker stopped at the checkpoint's rendezvous (see ckpt_run.c), and
 * with --max-delay 0 it is not sgp either (workers take batches from the
 * shared counter in whatever order they come), so it counts as
 * asynchronous.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo/algos.h"
#include "algo/gossip.h"
#include "algo/run_config.h"
#include "algo/state_io.h"
#include "core/clock.h"
#include "herd/herd_rng.h"

enum { TAG_PUSHSUM = 0x7073 };

/* A message: this header, then nparams floats of x share. */
typedef struct sgp_hdr {
    double w;
    uint64_t step;
    uint64_t last; /* the sender's last message */
    uint64_t pad;
} sgp_hdr;

typedef struct sgp_out { /* one possible out-peer */
    size_t peer;
    unsigned char *buf; /* in flight while req */
    unsigned char *acc; /* mass waiting to be sent */
    herd_req *req;
    bool has_acc;
} sgp_out;

typedef struct sgp_in { /* one possible in-neighbour */
    size_t peer;
    unsigned char *buf;
    herd_req *req;      /* the posted receive, or NULL */
    bool ready;         /* buf holds a message not mixed yet */
    bool ended;         /* its last message was mixed */
    uint64_t got;       /* 1 + the highest step mixed from it (0: none) */
    uint64_t cursor;    /* its steps below this are checked for the delay bound */
} sgp_in;

typedef struct sgp_state {
    herd__topo topo;
    bool osgp;
    size_t tau, L;
    double wt;            /* push-sum weight w_i */
    sgp_out *out;
    size_t nout;
    sgp_in *in;
    size_t nin;
    size_t msg_bytes;
    float *avg, *tmp;     /* nparams each */
    size_t avg_step;      /* sgp: w->step of avg (SIZE_MAX: none) */
    double dist;
    herd_win *win;        /* osgp: z_i published */
    bool lazy;            /* sgp: a receive is posted when its message is due (see settle) */
    float *pub;
    uint64_t late, merged, waits;
} sgp_state;

static sgp_hdr *hdr_of(unsigned char *m) { return (sgp_hdr *)(void *)m; }
static float *data_of(unsigned char *m) { return (float *)(void *)(m + sizeof(sgp_hdr)); }

/* The out-peer of worker j at its step k. */
static size_t sgp_out_peer(const sgp_state *s, const herd_worker *w, size_t j, uint64_t k)
{
    size_t n = w->nworkers;
    if (s->topo == HERD_TOPO_RING)
        return (j + 1) % n;
    if (s->topo == HERD_TOPO_EXP)
        return (j + ((size_t)1 << (k % s->L))) % n;
    herd_rng r;
    herd_rng_seed(&r, w->cfg->seed ^ 0x5e5e0000ull, k * (uint64_t)n + j);
    return (j + 1 + (size_t)herd_rng_below(&r, n - 1)) % n;
}

static herd_status post_recv(sgp_state *s, herd_worker *w, sgp_in *in)
{
    in->ready = false;
    return herd_comm_irecv(w->comm, in->peer, TAG_PUSHSUM, in->buf, s->msg_bytes, &in->req);
}

static herd_status sgp_init(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    sgp_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory", w->rank);
    a->state = s;
    size_t n = w->nworkers, i = w->rank, np = w->nparams ? w->nparams : 1;
    s->osgp = a->ops->async;
    s->tau = s->osgp ? ((const herd__gossip_opts *)w->opts)->max_delay : 0;
    s->topo = herd__gossip_topology(w, HERD_TOPO_EXP);
    s->L = herd__gossip_log2ceil(n);
    s->wt = 1.0;
    s->avg_step = SIZE_MAX;
    s->msg_bytes = sizeof(sgp_hdr) + w->nparams * sizeof(float);
    size_t deg = n == 1 ? 0 : s->topo == HERD_TOPO_RING ? 1 : s->topo == HERD_TOPO_EXP ? s->L : n - 1;
    s->out = calloc(deg ? deg : 1, sizeof *s->out);
    s->in = calloc(deg ? deg : 1, sizeof *s->in);
    s->avg = malloc(np * sizeof(float));
    s->tmp = malloc(np * sizeof(float));
    bool oom = !s->out || !s->in || !s->avg || !s->tmp;
    for (size_t k = 0; k < deg && !oom; k++) {
        size_t off = s->topo == HERD_TOPO_EXP ? (size_t)1 << k : k + 1;
        sgp_out *o = &s->out[s->nout++];
        o->peer = (i + off) % n;
        o->buf = calloc(1, s->msg_bytes);
        o->acc = calloc(1, s->msg_bytes);
        sgp_in *in = &s->in[s->nin++];
        in->peer = (i + n - off) % n;
        in->buf = malloc(s->msg_bytes);
        oom = !o->buf || !o->acc || !in->buf;
    }
    if (s->osgp) { /* collective: everyone takes part, even one out of memory */
        static const float none;
        s->pub = oom ? NULL : malloc(np * sizeof(float));
        if (s->pub)
            memcpy(s->pub, w->params, w->nparams * sizeof(float));
        HERD_TRY(herd_comm_win_create(w->comm, s->pub ? (void *)s->pub : (void *)&none,
                                      s->pub ? w->nparams * sizeof(float) : 0, &s->win));
        oom = oom || !s->pub;
    }
    if (oom)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory for push-sum buffers (%zu peers)", i, deg);
    s->lazy = !s->osgp;
    for (size_t k = 0; k < s->nin && !s->lazy; k++)
        HERD_TRY(post_recv(s, w, &s->in[k]));
out:
    return st;
}

/* Sends out's waiting mass if its previous message has left. */
static herd_status flush_out(sgp_state *s, herd_worker *w, sgp_out *o, bool *progress)
{
    herd_status st;
    if (o->req) {
        bool done;
        herd_req *r = o->req;
        o->req = NULL;
        if ((st = herd_comm_test(w->comm, r, &done)) < 0)
            return st;
        if (!done) {
            o->req = r;
            return HERD_OK;
        }
        *progress = true;
    }
    if (!o->has_acc)
        return HERD_OK;
    unsigned char *t = o->buf;
    o->buf = o->acc;
    o->acc = t;
    memset(o->acc, 0, s->msg_bytes);
    o->has_acc = false;
    *progress = true;
    return (s->osgp ? herd_comm_issend : herd_comm_isend)(w->comm, o->peer, TAG_PUSHSUM, o->buf, s->msg_bytes,
                                                           &o->req);
}

/* Adds the share (wt z, wt) to o's next message, which holds a weight and
 * the de-biased model of its mass (never a numerator: that would underflow
 * in floats once weights get small on a slow link). */
static void add_share(sgp_state *s, sgp_out *o, const float *z, double wt, uint64_t step, bool last)
{
    sgp_hdr *h = hdr_of(o->acc);
    float *d = data_of(o->acc);
    size_t n = (s->msg_bytes - sizeof(sgp_hdr)) / sizeof(float);
    if (wt > 0) {
        if (o->has_acc && h->w > 0)
            s->merged++;
        float f = (float)(wt / (h->w + wt));
        for (size_t k = 0; k < n; k++)
            d[k] += f * (z[k] - d[k]);
        h->w += wt;
    }
    h->step = step;
    h->last = last;
    o->has_acc = true;
}

/* Mixes in's message: (x_i, w_i) += (w z, w), kept as z_i and w_i. */
static herd_status mix(sgp_state *s, herd_worker *w, sgp_in *in, uint64_t k)
{
    sgp_hdr *h = hdr_of(in->buf);
    const float *d = data_of(in->buf);
    if (h->w > 0) {
        float f = (float)(h->w / (s->wt + h->w));
        float *z = w->params;
        for (size_t e = 0; e < w->nparams; e++)
            z[e] += f * (d[e] - z[e]);
        herd_comm_combined(w->comm, w->nparams);
        s->wt += h->w;
    }
    if (h->step < k)
        s->late++;
    if (h->step + 1 > in->got)
        in->got = h->step + 1;
    in->ready = false;
    if (h->last) {
        in->ended = true;
        return HERD_OK;
    }
    return s->lazy ? HERD_OK : post_recv(s, w, in);
}

/* Tests the posted receives; mixes the ready messages that may be mixed at
 * step k (all of them when `any`). */
static herd_status poll_in(sgp_state *s, herd_worker *w, uint64_t k, bool any, bool do_mix, bool *progress)
{
    herd_status st;
    for (size_t j = 0; j < s->nin; j++) {
        sgp_in *in = &s->in[j];
        for (;;) { /* everything that has arrived from j, not just one message */
            if (in->req) {
                bool done;
                herd_req *r = in->req;
                in->req = NULL;
                if ((st = herd_comm_test(w->comm, r, &done)) < 0)
                    return st;
                if (!done)
                    in->req = r;
                else
                    in->ready = true, *progress = true;
            }
            if (!(do_mix && in->ready && (any || hdr_of(in->buf)->step <= k)))
                break;
            if ((st = mix(s, w, in, k)) < 0)
                return st;
        }
    }
    return HERD_OK;
}

/* The in-neighbour whose message of a step <= k - tau is missing, or NULL. */
static sgp_in *missing(sgp_state *s, const herd_worker *w, uint64_t k)
{
    if (k < s->tau)
        return NULL;
    uint64_t upto = k - s->tau;
    for (size_t j = 0; j < s->nin; j++) {
        sgp_in *in = &s->in[j];
        if (in->ended || herd_worker_lost(w, in->peer))
            continue;
        uint64_t got = in->got;
        if (in->ready && hdr_of(in->buf)->step + 1 > got)
            got = hdr_of(in->buf)->step + 1;
        for (; in->cursor <= upto; in->cursor++)
            if (in->cursor >= got && sgp_out_peer(s, w, in->peer, in->cursor) == w->rank)
                return in;
    }
    return NULL;
}

static herd_status sgp_fail(sgp_state *s, herd_worker *w, herd_status st, const char *what)
{
    /* a polled wait that ran out has no engine error to add */
    const char *detail = herd_comm_last_error(w->comm);
    if (!w->err.msg[0])
        herd_err_set(&w->err, st, "worker %zu (%s, %s): %s at step %zu%s%s", w->rank, s->osgp ? "osgp" : "sgp",
                     herd__gossip_topology_name(s->topo), what, w->step, detail && *detail ? ": " : "",
                     detail ? detail : "");
    return st;
}

/* Polled waits nap 10 us, then a quarter longer each time until a nap
 * reaches 1 ms; naps stay at that one. Restarted on progress. */
static const herd__backoff sgp_first_nap = {.us = 10, .max_us = 1000, .clamp = false};

/* Progress every send; true in *pending while mass waits for a slot. */
static herd_status flush_all(sgp_state *s, herd_worker *w, bool *pending, bool *progress)
{
    herd_status st;
    *pending = false;
    for (size_t k = 0; k < s->nout; k++) {
        if ((st = flush_out(s, w, &s->out[k], progress)) < 0)
            return st;
        *pending = *pending || s->out[k].has_acc;
    }
    return HERD_OK;
}

/* sgp: posts the receive of every in-neighbour whose message of a step <= k
 * is due and not here. Posting only then keeps a message sent early (by a
 * worker ahead) off the link until it is wanted: pre-posted, it would share
 * this worker's link with the one it waits for, and once workers are out of
 * step that sharing kept them out of step (32 workers, 10gbe: every epoch
 * after the first 1.7-2.8x as long). A sender ahead waits for its previous
 * message on that link to be taken (flush_out) before it sends the next. */
static herd_status post_due(sgp_state *s, herd_worker *w, uint64_t k)
{
    for (size_t j = 0; j < s->nin; j++) {
        sgp_in *in = &s->in[j];
        if (in->req || in->ready || in->ended)
            continue;
        for (uint64_t c = in->cursor > in->got ? in->cursor : in->got; c <= k; c++)
            if (sgp_out_peer(s, w, in->peer, c) == w->rank) {
                herd_status st = post_recv(s, w, in);
                if (st < 0)
                    return st;
                break;
            }
    }
    return HERD_OK;
}

/* sgp: blocks until the missing message m (or, with none missing, this
 * step's send) is done; *blocked false when there is no request to block
 * on. A timeout names the in-neighbour or out-peer, as a polled wait's does. */
static herd_status wait_one(sgp_state *s, herd_worker *w, sgp_in *m, bool *blocked)
{
    herd_req **rq = m && m->req ? &m->req : NULL;
    size_t peer = m ? m->peer : 0;
    /* no message missing: the send that keeps this step's share waiting */
    for (size_t j = 0; !rq && !m && j < s->nout; j++)
        if (s->out[j].req && s->out[j].has_acc)
            rq = &s->out[j].req, peer = s->out[j].peer;
    *blocked = rq != NULL;
    if (!rq)
        return HERD_OK;
    herd_req *r = *rq;
    *rq = NULL;
    herd_status st = herd_comm_wait(w->comm, r);
    if (st == HERD_ETIMEOUT) {
        char what[128];
        snprintf(what, sizeof what, "no progress for %g s %s %zu", w->comm->timeout_s,
                 m ? "waiting for in-neighbour" : "sending to out-peer", peer);
        return sgp_fail(s, w, st, what);
    }
    if (st == HERD_OK && m)
        m->ready = true;
    return st;
}

/* Receives until nothing from a step <= k - tau is missing (and, with tau =
 * 0, until this step's share has left: sgp never merges messages). */
static herd_status settle(sgp_state *s, herd_worker *w, uint64_t k)
{
    herd_status st = HERD_OK;
    /* the wait counted here is what the comm's own calls (herd_comm_wait)
     * did not already add to comm->wait_s: the summary sums both */
    double deadline = herd__now() + w->comm->timeout_s, t0 = herd__now(), comm0 = w->comm->wait_s;
    herd__backoff nap = sgp_first_nap;
    bool waited = false;
    for (;;) {
        bool progress = false, pending;
        HERD_TRY(poll_in(s, w, k, s->tau > 0, s->tau > 0, &progress));
        HERD_TRY(flush_all(s, w, &pending, &progress));
        sgp_in *m = missing(s, w, k);
        if (!m && !(s->tau == 0 && pending))
            break;
        waited = true;
        HERD_TRY(herd_worker_stopping(w)); /* an in-neighbour stopped on a non-finite value */
        if (progress)
            deadline = herd__now() + w->comm->timeout_s, nap = sgp_first_nap;
        /* sgp (synchronous: a lost worker stops the run) blocks on the one
         * request it waits for, so it goes on the moment that message or
         * send is done; polled waits overshoot by up to a quarter of the
         * wait, and on the exponential graph those delays compound from
         * worker to worker (32 workers, 10gbe: 0.9 ms a step instead of
         * 0.3). osgp polls with naps: an in-neighbour lost meanwhile (--fail)
         * stops being waited for. */
        if (!s->osgp) {
            bool blocked;
            HERD_TRY(post_due(s, w, k));
            HERD_TRY(wait_one(s, w, m, &blocked));
            if (blocked)
                continue;
        }
        if (herd__now() > deadline) {
            char what[128];
            snprintf(what, sizeof what, "no progress for %g s %s %zu", w->comm->timeout_s,
                     m ? "waiting for in-neighbour" : "sending to out-peer", m ? m->peer : s->out[0].peer);
            return sgp_fail(s, w, HERD_ETIMEOUT, what);
        }
        herd__backoff_nap(&nap);
    }
    /* sgp: mixed only now, in rank order (bit-identical runs) */
    bool progress = false;
    HERD_TRY(poll_in(s, w, k, s->tau > 0, true, &progress));
    if (waited) {
        s->waits++;
        w->comm_wait_s += herd__now() - t0 - (w->comm->wait_s - comm0);
    }
out:
    if (st < 0)
        sgp_fail(s, w, st, "gossip");
    return st;
}

/* Publishes z_i for one-sided readers (osgp). */
static herd_status publish(sgp_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    if (!s->win)
        return HERD_OK;
    HERD_TRY(herd_comm_win_lock(w->comm, s->win, w->rank, true));
    st = herd_comm_win_put(w->comm, s->win, w->rank, 0, w->params, w->nparams * sizeof(float));
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(w->comm, s->win, w->rank));
out:
    return st;
}

/* One push-sum round after the local step: keep half, push half, mix. */
static herd_status sgp_after_step(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    sgp_state *s = a->state;
    uint64_t k = w->step;
    if (s->nout) {
        size_t peer = sgp_out_peer(s, w, w->rank, k);
        if (!herd_worker_lost(w, peer)) {
            sgp_out *o = NULL;
            for (size_t j = 0; j < s->nout; j++)
                if (s->out[j].peer == peer)
                    o = &s->out[j];
            HERD_ASSERT(o);
            s->wt *= 0.5;
            add_share(s, o, w->params, s->wt, k, false);
        }
        HERD_TRY(settle(s, w, k));
    }
    HERD_TRY(publish(s, w));
out:
    return st;
}

/* The last share to every out-peer, then mix until every in-neighbour's
 * last message came and every message of ours left. */
static herd_status sgp_drain(sgp_state *s, herd_worker *w)
{
    herd_status st = HERD_OK;
    uint64_t k = w->step;
    for (size_t j = 0; j < s->nout; j++)
        if (!herd_worker_lost(w, s->out[j].peer))
            add_share(s, &s->out[j], w->params, 0.0, k, true);
    s->lazy = false; /* every in-neighbour's last message is due now */
    for (size_t j = 0; j < s->nin; j++)
        if (!s->in[j].req && !s->in[j].ready && !s->in[j].ended)
            HERD_TRY(post_recv(s, w, &s->in[j]));
    double deadline = herd__now() + w->comm->timeout_s, t0 = herd__now(), comm0 = w->comm->wait_s;
    herd__backoff nap = sgp_first_nap;
    for (;;) {
        bool progress = false, pending, busy = false, open = false;
        HERD_TRY(poll_in(s, w, k, true, true, &progress));
        HERD_TRY(flush_all(s, w, &pending, &progress));
        for (size_t j = 0; j < s->nout; j++)
            busy = busy || (s->out[j].req && !herd_worker_lost(w, s->out[j].peer));
        size_t who = 0;
        for (size_t j = 0; j < s->nin; j++)
            if (!s->in[j].ended && !herd_worker_lost(w, s->in[j].peer))
                open = true, who = s->in[j].peer;
        if (!pending && !busy && !open)
            break;
        HERD_TRY(herd_worker_stopping(w));
        if (progress)
            deadline = herd__now() + w->comm->timeout_s, nap = sgp_first_nap;
        if (herd__now() > deadline) {
            char what[128];
            snprintf(what, sizeof what, "no progress for %g s at the end, %s %zu", w->comm->timeout_s,
                     open ? "waiting for the last message of in-neighbour" : "sending to out-peer", who);
            return sgp_fail(s, w, HERD_ETIMEOUT, what);
        }
        herd__backoff_nap(&nap);
    }
    w->comm_wait_s += herd__now() - t0 - (w->comm->wait_s - comm0);
out:
    if (st < 0)
        sgp_fail(s, w, st, "the last exchange");
    return st;
}

/* sgp: the average, by one allreduce (collective: every worker ends its
 * epoch at the same step). osgp, asynchronous: none here; worker 0 reads
 * every window as it evaluates (sgp_eval_params), outside the epoch's
 * clock, where every worker read all n models here inside its training
 * time (32 workers: 1024 model transfers at each epoch's end). */
static herd_status sgp_end_epoch(herd_algo *a, herd_worker *w)
{
    sgp_state *s = a->state;
    if (s->osgp)
        return HERD_OK;
    if (s->avg_step == w->step)
        return HERD_OK;
    herd_status st = herd__gossip_mean_allreduce(w, w->params, s->avg, &s->dist);
    if (st == HERD_OK)
        s->avg_step = w->step;
    return st;
}

/* sgp's average before an evaluation within an epoch (osgp, asynchronous,
 * takes its own in eval_params). */
static herd_status sgp_before_eval(herd_algo *a, herd_worker *w)
{
    sgp_state *s = a->state;
    return s->osgp ? HERD_OK : sgp_end_epoch(a, w);
}

static herd_status sgp_finish(herd_algo *a, herd_worker *w)
{
    herd_status st = HERD_OK;
    sgp_state *s = a->state;
    if (s->nout || s->nin)
        HERD_TRY(sgp_drain(s, w));
    HERD_TRY(publish(s, w));
    if (!s->osgp) { /* collective: sgp's workers finish together */
        s->avg_step = SIZE_MAX;
        HERD_TRY(sgp_end_epoch(a, w));
    }
out:
    return st;
}

static herd_status sgp_eval_params(herd_algo *a, herd_worker *w, float *out, const char **name)
{
    sgp_state *s = a->state;
    if (s->osgp) { /* its consensus distance too: the next epoch record gives it */
        herd_status st = herd__gossip_mean_windows(w, s->win, out, s->tmp, &s->dist);
        if (st == HERD_OK)
            *name = "average";
        return st;
    }
    if (s->avg_step != SIZE_MAX) {
        memcpy(out, s->avg, w->nparams * sizeof(float));
        *name = "average";
    }
    return HERD_OK;
}

static void sgp_log_epoch(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    (void)w;
    sgp_state *s = a->state;
    snprintf(buf, cap,
             ",\"consensus_dist\":%.6g,\"topology\":\"%s\",\"push_weight\":%.17g,\"max_delay\":%zu,"
             "\"waits\":%llu,\"late_msgs\":%llu,\"merged_msgs\":%llu",
             s->dist, herd__gossip_topology_name(s->topo), s->wt, s->tau, (unsigned long long)s->waits,
             (unsigned long long)s->late, (unsigned long long)s->merged);
}

static const uint64_t SGP_LAYOUT = HERD__STATE_LAYOUT('p', 'u', 's', 'h', 1);

static herd_status sgp_save(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len)
{
    sgp_state *s = a->state;
    for (size_t j = 0; j < s->nin; j++)
        if (s->in[j].ready)
            return herd_err_set(&w->err, HERD_EINTERNAL, "worker %zu (sgp): a message of in-neighbour %zu is not mixed at a checkpoint",
                                w->rank, s->in[j].peer);
    for (size_t j = 0; j < s->nout; j++)
        if (s->out[j].has_acc)
            return herd_err_set(&w->err, HERD_EINTERNAL, "worker %zu (sgp): a share for out-peer %zu is unsent at a checkpoint",
                                w->rank, s->out[j].peer);
    herd__state_out o = herd__state_out_make(buf, cap);
    herd__state_put_u64(&o, SGP_LAYOUT);
    herd__state_put_u64(&o, (uint64_t)s->topo);
    herd__state_put_f64(&o, s->wt);
    herd__state_put_u64(&o, s->late);
    herd__state_put_u64(&o, s->merged);
    herd__state_put_u64(&o, s->nin);
    for (size_t j = 0; j < s->nin; j++) {
        herd__state_put_u64(&o, s->in[j].peer);
        herd__state_put_u64(&o, s->in[j].got);
        herd__state_put_u64(&o, s->in[j].cursor);
        herd__state_put_u64(&o, s->in[j].ended);
    }
    *len = o.len;
    return HERD_OK;
}

static herd_status sgp_load(herd_algo *a, herd_worker *w, const void *buf, size_t len)
{
    sgp_state *s = a->state;
    herd__state_in in = herd__state_in_make(buf, len);
    herd_status st = herd__state_layout(&in, SGP_LAYOUT, w, "sgp");
    if (st < 0)
        return st;
    uint64_t topo = herd__state_get_u64(&in);
    double wt = herd__state_get_f64(&in);
    uint64_t late = herd__state_get_u64(&in), merged = herd__state_get_u64(&in);
    uint64_t nin = herd__state_get_u64(&in);
    if (!in.bad && (st = herd__gossip_same_topology(w, topo, s->topo)) < 0)
        return st;
    if (!in.bad && nin != s->nin)
        return herd_err_set(&w->err, HERD_ECORRUPT, "worker %zu: the checkpoint's sgp state has %llu in-neighbours, this run %zu",
                            w->rank, (unsigned long long)nin, s->nin);
    if (!in.bad && !(wt > 0.0 && wt <= (double)w->nworkers))
        return herd_err_set(&w->err, HERD_ECORRUPT, "worker %zu: the checkpoint's push-sum weight is %g (not in (0, %zu])",
                            w->rank, wt, w->nworkers);
    for (size_t j = 0; j < s->nin && !in.bad; j++) {
        sgp_in *x = &s->in[j];
        uint64_t peer = herd__state_get_u64(&in);
        x->got = herd__state_get_u64(&in);
        x->cursor = herd__state_get_u64(&in);
        x->ended = herd__state_get_u64(&in) != 0;
        if (!in.bad && peer != x->peer)
            return herd_err_set(&w->err, HERD_ECORRUPT, "worker %zu: the checkpoint's in-neighbour %zu is worker %llu, this run's %zu",
                                w->rank, j, (unsigned long long)peer, x->peer);
    }
    if ((st = herd__state_end(&in, w, "sgp")) < 0)
        return st;
    s->wt = wt, s->late = late, s->merged = merged;
    return HERD_OK;
}

static void sgp_free(herd_algo *a, herd_worker *w)
{
    sgp_state *s = a->state;
    if (!s)
        return;
    for (size_t k = 0; k < s->nout; k++) {
        if (s->out[k].req)
            herd_comm_cancel(w->comm, s->out[k].req);
        free(s->out[k].buf);
        free(s->out[k].acc);
    }
    for (size_t k = 0; k < s->nin; k++) {
        if (s->in[k].req)
            herd_comm_cancel(w->comm, s->in[k].req);
        free(s->in[k].buf);
    }
    if (s->win)
        herd_comm_win_free(w->comm, s->win);
    free(s->out);
    free(s->in);
    free(s->avg);
    free(s->tmp);
    free(s->pub);
    free(s);
    a->state = NULL;
}

#define PUSHSUM_OPS(nm, is_async, table, save_fn, load_fn, text)                                          \
    {                                                                                                     \
        .name = nm, .summary = text, .min_workers = 1, .async = is_async,                                 \
        .opts = table, .opts_size = sizeof(herd__gossip_opts),                                            \
        .init = sgp_init, .after_step = sgp_after_step, .end_epoch = sgp_end_epoch,                      \
        .before_eval = sgp_before_eval, .finish = sgp_finish, .eval_params = sgp_eval_params,             \
        .log_epoch = sgp_log_epoch, .free = sgp_free,                                                     \
        .save = save_fn, .load = load_fn,                                                                 \
    }

const herd_algo_ops herd__algo_sgp =
    PUSHSUM_OPS("sgp", false, herd__gossip_opt_table, sgp_save, sgp_load, "SGP: push-sum gossip with de-biased models, one peer per step (--topology exp|ring|random)");
const herd_algo_ops herd__algo_osgp =
    PUSHSUM_OPS("osgp", true, herd__osgp_opt_table, NULL, NULL, "overlap SGP: asynchronous push-sum, messages may be --max-delay steps late");
