/* Windows served by the ranks' agents over messages (mpi_internal.h).
 *
 * Every window operation on another rank is one message to that rank's
 * agent on the endpoint's own communicator (tag AM_TAG_REQ): a header, and
 * for a put, an accumulate, a blend or a heavy-ball step the data (the
 * last two computed by the agent in one step under the window's mutex:
 * herd_comm_win_blend, herd_comm_win_heavy_ball). The agent applies it to
 * the window's memory in the order the origin sent it, and answers a get
 * and a blend with the data (the blend's as it was), a flush or an unlock
 * with an empty message, each on the tag of
 * its window (AM_TAG_REP + id), so that answers match the origin's receives
 * in order per window whatever the other windows do. A lock is not
 * answered: an origin sends its lock, operations and unlock back to back,
 * and where the lock cannot be granted the agent keeps that origin's
 * requests on the window in a queue until it can (the origin waits only for
 * the answers). A lock is granted only once the origin's epoch is there up
 * to its first flush or its unlock (an origin that waits for a get sends a
 * flush, herd__am_flush), as MPI lets a lock be taken as late as that: the
 * lock is then held while the epoch applies, not while its data crosses the
 * network, and other origins' epochs do not queue behind that transfer.
 * An unlock is answered once it is applied, so that what the epoch wrote is
 * in the target's memory when the origin's unlock returns; an origin may
 * also end epochs on several targets and wait for their answers together
 * (herd__am_unlock_begin, herd__am_wait).
 *
 * The target's own worker locks and reads or writes its window directly,
 * under the window's mutex (`mu`, which also makes each applied operation
 * atomic against it); when it unlocks it wakes the agent, which may now
 * grant a waiting origin. Windows are found by id: each rank numbers them
 * in creation order (creation is collective), taking the lowest free id.
 *
 * Threads: requests are served by the agent thread alone, under the MPI
 * lock; an origin's calls come from the worker (or its overlap thread), one
 * at a time, as every call on an endpoint does. The window table is shared
 * between them under tab_mu.
 */
#ifdef HERD_HAVE_MPI

#include "comm/mpi_internal.h"
#include "core/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { AM_TAG_REQ = 1, AM_TAG_REP = 2 };
enum { AM_LOCK_SHARED = 1, AM_LOCK_EXCL, AM_UNLOCK, AM_GET, AM_PUT, AM_ACC, AM_FLUSH, AM_BLEND, AM_HEAVY };
enum { HELD_NONE, HELD_SHARED, HELD_EXCL };

typedef struct am_hdr {
    uint32_t op, id;
    uint64_t off, len; /* bytes */
    float alpha;       /* AM_BLEND's alpha, AM_HEAVY's mu */
    uint32_t spare;
    uint64_t off2;     /* AM_HEAVY: x's offset (off: v's) */
} am_hdr;

/* A request that waits for its origin's lock (target side). */
typedef struct am_msg {
    struct am_msg *next;
    unsigned char *buf; /* am_hdr, then data */
} am_msg;

/* An origin's operations on one target still in flight: their requests and
 * the buffers to free when they complete. */
typedef struct am_out {
    MPI_Request *reqs;
    void **bufs;
    size_t n, cap;
    bool wrote;  /* a put or accumulate since the last flush */
    bool ending; /* an unlock sent, its answer not yet waited for (herd__am_unlock_begin) */
    bool locking; /* a lock sent, and no flush or unlock since: the target grants it only then */
} am_out;

struct am_win {
    uint32_t id;
    char *base;
    size_t bytes, nranks;
    uint64_t *sizes;          /* every rank's window bytes (origins check offsets) */
    pthread_mutex_t mu;       /* lock state, and the memory while an operation applies */
    pthread_cond_t cv;        /* the own worker waiting for a lock */
    long excl;                /* holder of the exclusive lock, or -1 */
    size_t shared;            /* holders of a shared one */
    unsigned char *held;      /* per rank: HELD_* */
    am_msg **qhead, **qtail;  /* per origin: requests waiting for its lock (agent only) */
    size_t *syncs;            /* per origin: flushes and unlocks in its queue (agent only) */
    am_out *out;              /* per target: this rank's operations in flight (origin only) */
};

/* A reply in flight from the agent. */
typedef struct am_send {
    MPI_Request r;
    void *buf;
} am_send;

struct am_state {
    MPI_Comm comm;
    pthread_mutex_t tab_mu; /* wins and nwins */
    am_win **wins;
    size_t nwins;
    atomic_bool kick;       /* the own worker unlocked: look at the queues */
    am_send *sends;         /* agent only */
    size_t nsends, capsends;
};

static am_state *state_of(herd_comm *c) { return ((mpi_comm *)c)->am; }

herd_status herd__am_create(mpi_comm *m, am_state **out)
{
    *out = NULL;
    am_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&m->base.err, HERD_ENOMEM, "out of memory");
    if (MPI_Comm_dup(m->world, &s->comm) != MPI_SUCCESS) {
        free(s);
        return herd_err_set(&m->base.err, HERD_EIO, "rank %zu: MPI_Comm_dup failed", m->base.rank);
    }
    pthread_mutex_init(&s->tab_mu, NULL);
    *out = s;
    return HERD_OK;
}

void herd__am_free(mpi_comm *m)
{
    am_state *s = m->am;
    if (!s)
        return;
    for (size_t i = 0; i < s->nsends; i++) {
        if (!m->base.failed)
            MPI_Wait(&s->sends[i].r, MPI_STATUS_IGNORE);
        free(s->sends[i].buf);
    }
    if (!m->base.failed)
        MPI_Comm_free(&s->comm);
    pthread_mutex_destroy(&s->tab_mu);
    free(s->sends);
    free(s->wins);
    free(s);
    m->am = NULL;
}

/* ---- the target: the agent serves ---------------------------------------- */

static bool grantable(const am_win *w, bool excl) { return w->excl < 0 && (!excl || w->shared == 0); }

static void grant(am_win *w, size_t rank, bool excl)
{
    w->held[rank] = excl ? HELD_EXCL : HELD_SHARED;
    if (excl)
        w->excl = (long)rank;
    else
        w->shared++;
}

static void release(am_win *w, size_t rank)
{
    if (w->held[rank] == HELD_EXCL)
        w->excl = -1;
    else if (w->held[rank] == HELD_SHARED && w->shared)
        w->shared--;
    w->held[rank] = HELD_NONE;
}

/* Sends buf (bytes; NULL for an empty answer) to rank `to` on the window's
 * answer tag; the agent frees buf once it has left. */
static void answer(am_state *s, am_win *w, int to, void *buf, size_t bytes)
{
    if (s->nsends == s->capsends) {
        size_t cap = s->capsends ? 2 * s->capsends : 16;
        am_send *p = realloc(s->sends, cap * sizeof *p);
        if (!p) { /* the origin times out, naming this rank */
            free(buf);
            return;
        }
        s->sends = p, s->capsends = cap;
    }
    am_send *a = &s->sends[s->nsends];
    if (MPI_Isend(buf, (int)bytes, MPI_BYTE, to, AM_TAG_REP + (int)w->id, s->comm, &a->r) != MPI_SUCCESS) {
        free(buf);
        return;
    }
    a->buf = buf;
    s->nsends++;
}

static void reap_answers(am_state *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->nsends; i++) {
        int done = 0;
        MPI_Test(&s->sends[i].r, &done, MPI_STATUS_IGNORE);
        if (done)
            free(s->sends[i].buf);
        else
            s->sends[k++] = s->sends[i];
    }
    s->nsends = k;
}

/* Applies origin `from`'s request; false where it is a lock that cannot be
 * granted yet (nothing done). An operation past the window's end (the
 * origin checks offsets against every rank's size) is dropped. */
static bool apply(am_state *s, am_win *w, int from, const unsigned char *buf)
{
    am_hdr h;
    memcpy(&h, buf, sizeof h);
    const unsigned char *data = buf + sizeof h;
    bool inside = h.off <= w->bytes && h.len <= w->bytes - h.off;
    bool unlocked = false;
    pthread_mutex_lock(&w->mu);
    switch (h.op) {
    case AM_LOCK_SHARED:
    case AM_LOCK_EXCL:
        if (!w->syncs[from] || !grantable(w, h.op == AM_LOCK_EXCL)) {
            pthread_mutex_unlock(&w->mu);
            return false;
        }
        grant(w, (size_t)from, h.op == AM_LOCK_EXCL);
        break;
    case AM_UNLOCK:
        release(w, (size_t)from);
        pthread_cond_broadcast(&w->cv);
        unlocked = true;
        break;
    case AM_PUT:
        if (inside)
            memcpy(w->base + h.off, data, h.len);
        break;
    case AM_ACC:
        if (inside)
            herd__mpi_add_floats(w->base + h.off, data, h.len / sizeof(float));
        break;
    case AM_HEAVY:
        if (inside && h.off2 <= w->bytes && h.len <= w->bytes - h.off2)
            herd__mpi_heavy_ball_floats(w->base + h.off, w->base + h.off2, data, h.len / sizeof(float), h.alpha);
        break;
    case AM_GET:
    case AM_BLEND: { /* answered with the values before */
        void *copy = h.len ? malloc(h.len) : NULL;
        if (copy && inside)
            memcpy(copy, w->base + h.off, h.len);
        if (copy && inside && h.op == AM_BLEND)
            herd__mpi_blend_floats(w->base + h.off, data, h.len / sizeof(float), h.alpha);
        pthread_mutex_unlock(&w->mu);
        if (inside && (copy || !h.len))
            answer(s, w, from, copy, h.len);
        else
            free(copy);
        return true;
    }
    default:
        break;
    }
    pthread_mutex_unlock(&w->mu);
    if (unlocked || h.op == AM_FLUSH)
        answer(s, w, from, NULL, 0);
    return true;
}

static void enqueue(am_win *w, int from, unsigned char *buf)
{
    am_msg *q = malloc(sizeof *q);
    if (!q) { /* the origin times out, naming this rank */
        free(buf);
        return;
    }
    *q = (am_msg){.buf = buf};
    if (w->qtail[from])
        w->qtail[from]->next = q;
    else
        w->qhead[from] = q;
    w->qtail[from] = q;
}

static bool is_sync(uint32_t op) { return op == AM_FLUSH || op == AM_UNLOCK; }

static uint32_t op_of(const unsigned char *buf)
{
    am_hdr h;
    memcpy(&h, buf, sizeof h);
    return h.op;
}

/* Applies what waited for a lock and can now go, until nothing moves. */
static void drain(am_state *s, am_win *w)
{
    bool moved = true;
    while (moved) {
        moved = false;
        for (size_t o = 0; o < w->nranks; o++)
            while (w->qhead[o] && apply(s, w, (int)o, w->qhead[o]->buf)) {
                am_msg *q = w->qhead[o];
                if (is_sync(op_of(q->buf)))
                    w->syncs[o]--;
                w->qhead[o] = q->next;
                if (!w->qhead[o])
                    w->qtail[o] = NULL;
                free(q->buf);
                free(q);
                moved = true;
            }
    }
}

static am_win *lookup(am_state *s, uint32_t id)
{
    pthread_mutex_lock(&s->tab_mu);
    am_win *w = id < s->nwins ? s->wins[id] : NULL;
    pthread_mutex_unlock(&s->tab_mu);
    return w;
}

bool herd__am_serve(mpi_comm *m, bool again)
{
    am_state *s = m->am;
    bool served = false;
    if (atomic_exchange(&s->kick, false)) {
        pthread_mutex_lock(&s->tab_mu);
        for (size_t i = 0; i < s->nwins; i++)
            if (s->wins[i])
                drain(s, s->wins[i]);
        pthread_mutex_unlock(&s->tab_mu);
    }
    /* Open MPI's MPI_Improbe looks for a match before it progresses, so a
     * request that only this call reads off the socket is found by the next
     * one: an agent's turn that finds nothing probes once more (without
     * it, the request a wake was for waited a whole period for the agent's
     * next turn: a pull across hosts took 0.43 ms instead of 0.11); a
     * waiting caller, which probes again soon, does not */
    for (int k = 0; k < 256; k++) {
        int flag = 0, bytes = 0;
        MPI_Message msg;
        MPI_Status status;
        if (MPI_Improbe(MPI_ANY_SOURCE, AM_TAG_REQ, s->comm, &flag, &msg, &status) != MPI_SUCCESS)
            break;
        if (!flag) {
            if (!again)
                break;
            again = false;
            continue;
        }
        MPI_Get_count(&status, MPI_BYTE, &bytes);
        unsigned char *buf = malloc(bytes > 0 ? (size_t)bytes : 1);
        if (!buf || MPI_Mrecv(buf, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
            (size_t)bytes < sizeof(am_hdr)) {
            free(buf);
            continue;
        }
        served = true;
        int from = status.MPI_SOURCE;
        am_hdr h;
        memcpy(&h, buf, sizeof h);
        am_win *w = lookup(s, h.id);
        if (!w || (size_t)from >= w->nranks) {
            free(buf);
            continue;
        }
        /* A lock waits in the queue until the origin's epoch is here up
         * to its first flush or its unlock, which the origin sends without
         * waiting: granted then, the lock is held while the epoch applies,
         * not while its data crosses the network, and the other origins'
         * epochs are not held back by that transfer. */
        bool lock = h.op == AM_LOCK_SHARED || h.op == AM_LOCK_EXCL;
        if (w->qhead[from] || lock || !apply(s, w, from, buf)) { /* behind its lock */
            enqueue(w, from, buf);
            if (is_sync(h.op))
                w->syncs[from]++;
        } else {
            free(buf);
        }
        if (is_sync(h.op))
            drain(s, w);
    }
    reap_answers(s);
    return served || s->nsends > 0;
}

/* ---- the origin ------------------------------------------------------------ */

static herd_status out_push(herd_comm *c, am_out *o, MPI_Request r, void *buf)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 8;
        MPI_Request *rq = realloc(o->reqs, cap * sizeof *rq);
        if (rq)
            o->reqs = rq;
        void **b = rq ? realloc(o->bufs, cap * sizeof *b) : NULL;
        if (!b) {
            free(buf);
            return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
        }
        o->bufs = b, o->cap = cap;
    }
    o->reqs[o->n] = r, o->bufs[o->n] = buf;
    o->n++;
    return HERD_OK;
}

/* Sends target a request: the header, then `len` bytes of data (NULL: none). */
static herd_status send_request(herd_comm *c, herd_win *win, size_t target, am_hdr h, const void *data)
{
    am_win *w = win->am;
    uint64_t len = h.len;
    size_t bytes = sizeof(am_hdr) + (data ? len : 0);
    if (bytes > (size_t)INT32_MAX)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: a window operation of %zu bytes is too large for MPI",
                            c->rank, bytes);
    unsigned char *buf = malloc(bytes);
    if (!buf)
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    h.id = w->id;
    memcpy(buf, &h, sizeof h);
    if (data)
        memcpy(buf + sizeof h, data, len);
    MPI_Request r;
    mpi_enter(c);
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, (int)target, AM_TAG_REQ, state_of(c)->comm, &r);
    mpi_leave(c);
    if (rc != MPI_SUCCESS) {
        free(buf);
        return herd__mpi_fail(c, rc, "MPI_Isend (a window request)");
    }
    return out_push(c, &w->out[target], r, buf);
}

static herd_status request(herd_comm *c, herd_win *win, size_t target, uint32_t op, uint64_t off, uint64_t len,
                           const void *data)
{
    return send_request(c, win, target, (am_hdr){.op = op, .off = off, .len = len}, data);
}

/* Posts the receive of target's next answer on this window into dst. */
static herd_status expect(herd_comm *c, herd_win *win, size_t target, void *dst, size_t bytes)
{
    MPI_Request r;
    mpi_enter(c);
    int rc = MPI_Irecv(dst, (int)bytes, MPI_BYTE, (int)target, AM_TAG_REP + (int)win->am->id, state_of(c)->comm, &r);
    mpi_leave(c);
    if (rc != MPI_SUCCESS)
        return herd__mpi_fail(c, rc, "MPI_Irecv (a window answer)");
    return out_push(c, &win->am->out[target], r, NULL);
}

/* Waits until everything this rank sent target on the window has left and
 * every answer has come. */
static herd_status complete(herd_comm *c, herd_win *win, size_t target, double deadline, const char *what)
{
    am_out *o = &win->am->out[target];
    double t0 = herd__now();
    if (o->n) /* a rank of this host hears the requests through shared memory: wake it */
        herd__mpi_poke((mpi_comm *)c, target);
    while (o->n) {
        int done = 0;
        mpi_enter(c);
        int rc = MPI_Testall((int)o->n, o->reqs, &done, MPI_STATUSES_IGNORE);
        mpi_leave(c);
        if (rc != MPI_SUCCESS)
            return herd__mpi_fail(c, rc, "MPI_Testall (window operations)");
        if (done)
            break;
        if (herd__now() >= deadline)
            return herd_err_set(&c->err, HERD_ETIMEOUT,
                                "rank %zu: timed out after %g s waiting for rank %zu to answer %s on its window",
                                c->rank, herd__comm_timeout(c), target, what);
        herd__mpi_idle(c, t0);
    }
    for (size_t i = 0; i < o->n; i++)
        free(o->bufs[i]);
    o->n = 0;
    o->wrote = o->ending = false;
    return HERD_OK;
}

static herd_status check_range(herd_comm *c, herd_win *win, size_t target, size_t offset, size_t bytes,
                               const char *fn)
{
    uint64_t size = win->am->sizes[target];
    if (offset > size || bytes > size - offset)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s: bytes %zu..%zu are past rank %zu's window (%llu bytes)",
                            c->rank, fn, offset, offset + bytes, target, (unsigned long long)size);
    return HERD_OK;
}

/* ---- the own window ---------------------------------------------------- */

static herd_status own_lock(herd_comm *c, am_win *w, bool excl, double deadline)
{
    herd_status st = HERD_OK;
    pthread_mutex_lock(&w->mu);
    while (!grantable(w, excl)) {
        if (herd__now() >= deadline) {
            st = herd_err_set(&c->err, HERD_ETIMEOUT,
                              "rank %zu: timed out after %g s waiting for its own window's %s lock (held by rank %ld)",
                              c->rank, herd__comm_timeout(c), excl ? "exclusive" : "shared", w->excl);
            break;
        }
        struct timespec ts; /* 10 ms, then the deadline again */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    if (st == HERD_OK)
        grant(w, c->rank, excl);
    pthread_mutex_unlock(&w->mu);
    return st;
}

static void own_unlock(herd_comm *c, am_win *w)
{
    pthread_mutex_lock(&w->mu);
    release(w, c->rank);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    /* an origin's lock may wait in the agent's queue */
    mpi_comm *m = (mpi_comm *)c;
    atomic_store(&m->am->kick, true);
    herd__mpi_poke(m, c->rank);
}

/* ---- the window calls ---------------------------------------------------- */

herd_status herd__am_win_create(herd_comm *c, herd_win *win, void *base, size_t bytes, double deadline)
{
    am_state *s = state_of(c);
    am_win *w = calloc(1, sizeof *w);
    if (!w)
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    w->base = base, w->bytes = bytes, w->nranks = c->size, w->excl = -1;
    w->sizes = calloc(c->size, sizeof *w->sizes);
    w->held = calloc(c->size, sizeof *w->held);
    w->qhead = calloc(c->size, sizeof *w->qhead);
    w->qtail = calloc(c->size, sizeof *w->qtail);
    w->syncs = calloc(c->size, sizeof *w->syncs);
    w->out = calloc(c->size, sizeof *w->out);
    herd_status st = HERD_OK;
    if (!w->sizes || !w->held || !w->qhead || !w->qtail || !w->syncs || !w->out) {
        st = herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* the lowest free id: every rank frees and creates in the same order */
    pthread_mutex_lock(&s->tab_mu);
    size_t id = 0;
    while (id < s->nwins && s->wins[id])
        id++;
    if (id == s->nwins) {
        am_win **p = realloc(s->wins, (s->nwins + 1) * sizeof *p);
        if (p)
            s->wins = p, s->wins[s->nwins++] = NULL;
    }
    if (id < s->nwins)
        w->id = (uint32_t)id, s->wins[id] = w;
    pthread_mutex_unlock(&s->tab_mu);
    if (id >= s->nwins) {
        st = herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
        goto fail;
    }
    win->am = w;
    /* every rank's size; also the window's rendezvous */
    uint64_t mine = bytes;
    MPI_Request r;
    mpi_enter(c);
    int rc = MPI_Iallgather(&mine, 1, MPI_UINT64_T, w->sizes, 1, MPI_UINT64_T, ((mpi_comm *)c)->world, &r);
    mpi_leave(c);
    if (rc != MPI_SUCCESS)
        return herd__mpi_fail(c, rc, "MPI_Iallgather (a window's sizes)");
    return herd__mpi_poll(c, &r, deadline, "a window's creation (some rank never arrived)");
fail:
    free(w->sizes), free(w->held), free(w->qhead), free(w->qtail), free(w->syncs), free(w->out);
    free(w);
    return st;
}

herd_status herd__am_win_free(herd_comm *c, herd_win *win, double deadline)
{
    am_state *s = state_of(c);
    am_win *w = win->am;
    herd_status st = HERD_OK;
    if (!c->failed) { /* nobody reaches it any more once every rank is here */
        MPI_Request r;
        mpi_enter(c);
        int rc = MPI_Ibarrier(((mpi_comm *)c)->world, &r);
        mpi_leave(c);
        st = rc != MPI_SUCCESS ? herd__mpi_fail(c, rc, "MPI_Ibarrier (a window's release)")
                               : herd__mpi_poll(c, &r, deadline, "a window's release (some rank never arrived)");
    }
    /* out of the table between two of the agent's turns (it serves under
     * the MPI lock): none is using it, and no request for it can come */
    mpi_enter(c);
    pthread_mutex_lock(&s->tab_mu);
    s->wins[w->id] = NULL;
    pthread_mutex_unlock(&s->tab_mu);
    mpi_leave(c);
    for (size_t i = 0; i < w->nranks; i++) {
        for (am_msg *q = w->qhead[i], *next; q; q = next) {
            next = q->next;
            free(q->buf);
            free(q);
        }
        am_out *o = &w->out[i];
        for (size_t k = 0; k < o->n; k++) {
            if (!c->failed)
                MPI_Request_free(&o->reqs[k]);
            free(o->bufs[k]);
        }
        free(o->reqs), free(o->bufs);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->sizes), free(w->held), free(w->qhead), free(w->qtail), free(w->syncs), free(w->out);
    free(w);
    win->am = NULL;
    return st;
}

herd_status herd__am_lock(herd_comm *c, herd_win *win, size_t target, bool exclusive, double deadline)
{
    if (target == c->rank)
        return own_lock(c, win->am, exclusive, deadline);
    win->am->out[target].locking = true;
    return request(c, win, target, exclusive ? AM_LOCK_EXCL : AM_LOCK_SHARED, 0, 0, NULL);
}

/* Sends the unlock of this rank's epoch on target (its own window: released
 * at once); *sent: a request went, whose answer is still to come. */
static herd_status send_unlock(herd_comm *c, herd_win *win, size_t target, bool *sent)
{
    *sent = false;
    if (target == c->rank) {
        own_unlock(c, win->am);
        return HERD_OK;
    }
    win->am->out[target].locking = false;
    herd_status st = expect(c, win, target, NULL, 0);
    if (st == HERD_OK)
        st = request(c, win, target, AM_UNLOCK, 0, 0, NULL);
    *sent = st == HERD_OK;
    return st;
}

herd_status herd__am_unlock(herd_comm *c, herd_win *win, size_t target, double deadline)
{
    bool sent;
    herd_status st = send_unlock(c, win, target, &sent);
    return sent ? complete(c, win, target, deadline, "an unlock") : st;
}

/* The unlock's request sent, its answer left for herd__am_wait: the
 * target's agent serves this epoch while the origin sends its next ones. */
herd_status herd__am_unlock_begin(herd_comm *c, herd_win *win, size_t target)
{
    bool sent;
    herd_status st = send_unlock(c, win, target, &sent);
    if (sent) {
        win->am->out[target].ending = true;
        herd__mpi_poke((mpi_comm *)c, target); /* a rank of this host: it serves the epoch now */
    }
    return st;
}

herd_status herd__am_wait(herd_comm *c, herd_win *win, double deadline)
{
    am_win *w = win->am;
    for (size_t t = 0; t < w->nranks; t++)
        if (w->out[t].ending) {
            herd_status st = complete(c, win, t, deadline, "an unlock");
            if (st < 0)
                return st;
        }
    return HERD_OK;
}

herd_status herd__am_flush(herd_comm *c, herd_win *win, size_t target, double deadline)
{
    if (target == c->rank)
        return HERD_OK;
    herd_status st = HERD_OK;
    am_out *o = &win->am->out[target];
    /* gets are complete when their data is here, writes when answered, and
     * an epoch's lock is granted once a flush or the unlock is there */
    if (o->wrote || o->locking) {
        if ((st = expect(c, win, target, NULL, 0)) == HERD_OK)
            st = request(c, win, target, AM_FLUSH, 0, 0, NULL);
        o->locking = false;
    }
    return st < 0 ? st : complete(c, win, target, deadline, "a flush");
}

herd_status herd__am_get(herd_comm *c, herd_win *win, size_t target, size_t offset, void *dst, size_t bytes)
{
    herd_status st = check_range(c, win, target, offset, bytes, "win_get");
    if (st < 0)
        return st;
    am_win *w = win->am;
    if (target == c->rank) {
        pthread_mutex_lock(&w->mu);
        memcpy(dst, w->base + offset, bytes);
        pthread_mutex_unlock(&w->mu);
        return HERD_OK;
    }
    if ((st = expect(c, win, target, dst, bytes)) < 0)
        return st;
    return request(c, win, target, AM_GET, offset, bytes, NULL);
}

herd_status herd__am_put(herd_comm *c, herd_win *win, size_t target, size_t offset, const void *src, size_t bytes)
{
    herd_status st = check_range(c, win, target, offset, bytes, "win_put");
    if (st < 0)
        return st;
    am_win *w = win->am;
    if (target == c->rank) {
        pthread_mutex_lock(&w->mu);
        memcpy(w->base + offset, src, bytes);
        pthread_mutex_unlock(&w->mu);
        return HERD_OK;
    }
    w->out[target].wrote = true;
    return request(c, win, target, AM_PUT, offset, bytes, src);
}

herd_status herd__am_blend(herd_comm *c, herd_win *win, size_t target, size_t offset, const float *src, size_t count,
                           float alpha, float *fetched)
{
    size_t bytes = count * sizeof(float);
    herd_status st = check_range(c, win, target, offset, bytes, "win_blend");
    if (st < 0)
        return st;
    am_win *w = win->am;
    if (target == c->rank) {
        pthread_mutex_lock(&w->mu);
        memcpy(fetched, w->base + offset, bytes);
        herd__mpi_blend_floats(w->base + offset, src, count, alpha);
        pthread_mutex_unlock(&w->mu);
        return HERD_OK;
    }
    w->out[target].wrote = true;
    if ((st = expect(c, win, target, fetched, bytes)) < 0)
        return st;
    return send_request(c, win, target, (am_hdr){.op = AM_BLEND, .off = offset, .len = bytes, .alpha = alpha}, src);
}

herd_status herd__am_heavy_ball(herd_comm *c, herd_win *win, size_t target, size_t offset_v, size_t offset_x,
                                const float *upd, size_t count, float mu)
{
    size_t bytes = count * sizeof(float);
    herd_status st = check_range(c, win, target, offset_v, bytes, "win_heavy_ball");
    if (st == HERD_OK)
        st = check_range(c, win, target, offset_x, bytes, "win_heavy_ball");
    if (st < 0)
        return st;
    am_win *w = win->am;
    if (target == c->rank) {
        pthread_mutex_lock(&w->mu);
        herd__mpi_heavy_ball_floats(w->base + offset_v, w->base + offset_x, upd, count, mu);
        pthread_mutex_unlock(&w->mu);
        return HERD_OK;
    }
    w->out[target].wrote = true;
    return send_request(
        c, win, target,
        (am_hdr){.op = AM_HEAVY, .off = offset_v, .len = bytes, .alpha = mu, .off2 = offset_x}, upd);
}

herd_status herd__am_accumulate(herd_comm *c, herd_win *win, size_t target, size_t offset, const float *src,
                                size_t count)
{
    size_t bytes = count * sizeof(float);
    herd_status st = check_range(c, win, target, offset, bytes, "win_accumulate");
    if (st < 0)
        return st;
    am_win *w = win->am;
    if (target == c->rank) {
        pthread_mutex_lock(&w->mu);
        herd__mpi_add_floats(w->base + offset, src, count);
        pthread_mutex_unlock(&w->mu);
        return HERD_OK;
    }
    w->out[target].wrote = true;
    return request(c, win, target, AM_ACC, offset, bytes, src);
}

#endif
