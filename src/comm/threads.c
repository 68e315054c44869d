/* The threads engine: every worker is a thread of one process, and a
 * herd_threads_world is what they share. Nothing here is global, so any
 * number of worlds may live in one process.
 *
 * Point-to-point: each rank has a mailbox (a mutex, a condition variable, the
 * messages that arrived before their receive, and the receives posted before
 * their message). A send whose receive is already posted claims it and copies
 * straight into the receiver's buffer, outside the lock (one copy); otherwise
 * it copies the message into the mailbox (eager) and the receive copies it
 * out. Matching is by (source, tag), first in first out. Sends therefore
 * complete at once; receives block on the condition variable with a deadline
 * on CLOCK_MONOTONIC, so 16 workers on 2 cores never spin.
 *
 * Windows: win_create is a rendezvous (a barrier) after which every rank has
 * every other rank's base pointer; get/put are memcpy, complete at once (flush
 * has nothing to do). Each target of each
 * window has a reader-writer lock made of the window's mutex and condition
 * variable (writers first), so that a lock wait has a deadline and wakes on a
 * failure. Accesses need the caller to hold a lock on the target, as MPI does;
 * accumulate under a shared lock adds element by element atomically (as
 * MPI_Accumulate does), under an exclusive one plainly; gets and puts under a
 * shared lock move aligned words with relaxed atomic loads and stores, since
 * shared-lock accumulates (Hogwild's lock-free updates) may be changing the
 * same words: racy by design, but never undefined behaviour.
 * After herd_threads_world_close (every worker thread has ended) win_free
 * skips its rendezvous, so one thread can free all ranks' windows.
 *
 * Failure: herd_threads_world_fail wakes every waiter (receives, barrier,
 * window locks); each then returns HERD_EREMOTE naming the failed rank.
 *
 * The engine table (herd__engine_threads, at the end) is these same
 * functions on the world's herd_world base: every worker is local.
 *
 * Lock order: world->mu before a window's mu; a mailbox's mu alone.
 */
#include "comm/comm_internal.h"
#include "core/clock.h"
#include "core/finite.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A message that arrived before its receive. */
typedef struct msg {
    struct msg *next;
    size_t src, len;
    int tag;
    unsigned char data[];
} msg;

enum req_state {
    REQ_POSTED,  /* in the mailbox's posted list, waiting for a sender */
    REQ_CLAIMED, /* a sender took it off the list and is copying into buf */
    REQ_DONE,
};

struct herd_req {
    bool recv;
    int state;       /* receives: enum req_state, under the mailbox lock */
    bool bad_len;    /* the message had `got` bytes, not `len` */
    size_t peer, len, got;
    int tag;
    void *buf;
    herd_req *next;  /* in the posted list */
};

typedef struct mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* the owner waits here for its receives */
    msg *head, *tail;               /* arrived, not yet received, oldest first */
    herd_req *posted, *posted_tail; /* receives without a message, oldest first */
} mailbox;

typedef struct win_target {
    size_t readers, writers_waiting;
    bool writer;
} win_target;

/* What all ranks share of one window. */
typedef struct win_slot {
    struct win_slot *next; /* in the world's list */
    uint64_t seq;          /* this window is every rank's seq-th */
    void **base;           /* per rank */
    size_t *bytes;         /* per rank */
    pthread_mutex_t mu;    /* the per-target locks */
    pthread_cond_t cv;
    win_target *t;         /* per target */
    size_t freed;          /* ranks that have freed it (under world->mu) */
} win_slot;

enum { HELD_NONE, HELD_SHARED, HELD_EXCLUSIVE };

/* One rank's handle on a window. */
struct herd_win {
    win_slot *slot;
    unsigned char *held; /* per target: HELD_* */
};

struct herd_threads_world {
    herd_world base; /* size n; this process runs all of them */
    size_t n;
    mailbox *box;
    pthread_mutex_t mu; /* barrier, and the window list */
    pthread_cond_t cv;
    size_t bar_count, bar_gen;
    size_t *bar_in;       /* per rank: 1 + the generation it last arrived in (for messages) */
    win_slot *wins;
    float **ar_buf;       /* the shared-memory allreduce: each rank's buffer */
    bool *ar_bad;         /* and whether the chunk it summed holds a NaN or Inf */
    bool *ar_in_bad;      /* n x n: [r * n + j]: rank j's buffer, in the chunk rank r summed, did */
    atomic_size_t failed; /* 0, or 1 + the failed rank */
    atomic_bool closed;   /* every worker thread has ended */
};

typedef struct thr_comm {
    herd_comm base;
    herd_threads_world *world;
    uint64_t nwins; /* windows created so far: the next one's seq */
} thr_comm;

static herd_threads_world *world_of(herd_comm *c) { return ((thr_comm *)c)->world; }

/* A monotonic deadline as the absolute time pthread_cond_timedwait wants. */
static struct timespec abs_time(double deadline)
{
    if (deadline > 1e15)
        deadline = 1e15;
    double s = deadline < 0 ? 0 : deadline;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_nsec = 999999999L;
    return ts;
}

static void cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* The failed rank, or SIZE_MAX while the world is healthy. */
static size_t failed_rank(herd_threads_world *w)
{
    size_t f = atomic_load(&w->failed);
    return f ? f - 1 : SIZE_MAX;
}

static herd_status remote_failure(herd_comm *c, const char *what)
{
    return herd_err_set(&c->err, HERD_EREMOTE, "rank %zu: worker %zu failed (while %s)", c->rank,
                        failed_rank(world_of(c)), what);
}

/* ---- the world ----------------------------------------------------- */

extern const herd_engine herd__engine_threads; /* at the end of this file */

herd_status herd_threads_world_create(size_t n, herd_threads_world **out, herd_err *err)
{
    if (!out)
        return herd_err_set(err, HERD_EINVAL, "threads engine: out is NULL");
    *out = NULL;
    if (n == 0)
        return herd_err_set(err, HERD_EINVAL, "threads engine: nworkers is 0 (need at least one worker)");
    herd_threads_world *w = calloc(1, sizeof *w);
    if (w)
        w->box = calloc(n, sizeof *w->box);
    if (w) {
        w->ar_buf = calloc(n, sizeof *w->ar_buf);
        w->ar_bad = calloc(n, sizeof *w->ar_bad);
        w->ar_in_bad = n <= SIZE_MAX / n ? calloc(n * n, sizeof *w->ar_in_bad) : NULL;
        w->bar_in = calloc(n, sizeof *w->bar_in);
    }
    if (!w || !w->box || !w->ar_buf || !w->ar_bad || !w->ar_in_bad || !w->bar_in) {
        if (w)
            free(w->box), free(w->ar_buf), free(w->ar_bad), free(w->ar_in_bad), free(w->bar_in);
        free(w);
        return herd_err_set(err, HERD_ENOMEM, "threads engine: out of memory for %zu workers", n);
    }
    w->base = (herd_world){.engine = &herd__engine_threads, .size = n, .first_rank = 0, .nlocal = n};
    w->n = n;
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_init(&w->box[i].mu, NULL);
        cond_init(&w->box[i].cv);
    }
    pthread_mutex_init(&w->mu, NULL);
    cond_init(&w->cv);
    atomic_init(&w->failed, 0);
    atomic_init(&w->closed, false);
    *out = w;
    return HERD_OK;
}

static void slot_destroy(win_slot *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->base);
    free(s->bytes);
    free(s->t);
    free(s);
}

void herd_threads_world_free(herd_threads_world *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++) {
        for (msg *m = w->box[i].head; m;) {
            msg *next = m->next;
            free(m);
            m = next;
        }
        pthread_mutex_destroy(&w->box[i].mu);
        pthread_cond_destroy(&w->box[i].cv);
    }
    for (win_slot *s = w->wins; s;) { /* windows some rank never freed */
        win_slot *next = s->next;
        slot_destroy(s);
        s = next;
    }
    free(w->box);
    free(w->ar_buf);
    free(w->ar_bad);
    free(w->ar_in_bad);
    free(w->bar_in);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

void herd_threads_world_close(herd_threads_world *w)
{
    if (w)
        atomic_store(&w->closed, true);
}

void herd_threads_world_fail(herd_threads_world *w, size_t rank)
{
    size_t healthy = 0;
    if (!w || !atomic_compare_exchange_strong(&w->failed, &healthy, rank + 1))
        return; /* the first failure is the one reported */
    /* Each waiter checks `failed` under the lock it waits with, so taking
     * that lock before broadcasting means none can miss the wake-up. */
    for (size_t i = 0; i < w->n; i++) {
        pthread_mutex_lock(&w->box[i].mu);
        pthread_cond_broadcast(&w->box[i].cv);
        pthread_mutex_unlock(&w->box[i].mu);
    }
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    for (win_slot *s = w->wins; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---- point-to-point ------------------------------------------------ */

/* With b locked: takes `which` off the posted list if it is there, or
 * (which == NULL) the oldest receive posted for (src, tag); returns it or NULL. */
static herd_req *unlink_posted(mailbox *b, const herd_req *which, size_t src, int tag)
{
    herd_req *prev = NULL;
    for (herd_req *r = b->posted; r; prev = r, r = r->next) {
        if (which ? r != which : r->peer != src || r->tag != tag)
            continue;
        if (prev)
            prev->next = r->next;
        else
            b->posted = r->next;
        if (b->posted_tail == r)
            b->posted_tail = prev;
        return r;
    }
    return NULL;
}

/* With b locked: claims the oldest receive posted for (src, tag), if any. */
static herd_req *claim_posted(mailbox *b, size_t src, int tag)
{
    herd_req *r = unlink_posted(b, NULL, src, tag);
    if (r)
        r->state = REQ_CLAIMED;
    return r;
}

/* With b locked: removes a receive that may still be posted. */
static void unpost(mailbox *b, herd_req *req) { unlink_posted(b, req, 0, 0); }

/* With b locked: takes the oldest arrived message from (src, tag) off the
 * list, or returns NULL. */
static msg *take_arrived(mailbox *b, size_t src, int tag)
{
    msg *prev = NULL;
    for (msg *m = b->head; m; prev = m, m = m->next) {
        if (m->src != src || m->tag != tag)
            continue;
        if (prev)
            prev->next = m->next;
        else
            b->head = m->next;
        if (b->tail == m)
            b->tail = prev;
        return m;
    }
    return NULL;
}

/* Copies a message into a receive that nobody else can touch now (claimed,
 * or not yet posted); a length mismatch is reported by the receive. */
static void fill(herd_req *r, const void *data, size_t bytes)
{
    r->got = bytes;
    r->bad_len = bytes != r->len;
    if (!r->bad_len && bytes)
        memcpy(r->buf, data, bytes);
}

/* Completes a claimed receive: fills it outside the lock, then wakes its owner. */
static void deliver(mailbox *b, herd_req *r, const void *data, size_t bytes)
{
    fill(r, data, bytes);
    pthread_mutex_lock(&b->mu);
    r->state = REQ_DONE;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static herd_status t_isend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    herd_req *r = malloc(sizeof *r);
    if (!r)
        return herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a send request", c->rank);
    *r = (herd_req){.recv = false, .state = REQ_DONE, .peer = peer, .tag = tag};
    mailbox *b = &world_of(c)->box[peer];
    /* A receive posted for us with this tag takes the data directly. None can
     * be posted while an older message of ours with this tag waits in the
     * mailbox (it would have taken that one), so FIFO order holds. */
    pthread_mutex_lock(&b->mu);
    herd_req *rr = claim_posted(b, c->rank, tag);
    pthread_mutex_unlock(&b->mu);
    if (rr) {
        deliver(b, rr, buf, bytes);
        *req = r;
        return HERD_OK;
    }
    msg *m = malloc(sizeof *m + bytes);
    if (!m) {
        free(r);
        return herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a %zu-byte message to rank %zu",
                            c->rank, bytes, peer);
    }
    *m = (msg){.src = c->rank, .len = bytes, .tag = tag};
    if (bytes)
        memcpy(m->data, buf, bytes);
    pthread_mutex_lock(&b->mu);
    rr = claim_posted(b, c->rank, tag); /* posted while we copied? */
    if (!rr) {
        if (b->tail)
            b->tail->next = m;
        else
            b->head = m;
        b->tail = m;
    }
    pthread_mutex_unlock(&b->mu);
    if (rr) {
        deliver(b, rr, m->data, bytes);
        free(m);
    }
    *req = r;
    return HERD_OK;
}

static herd_status t_irecv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req)
{
    herd_req *r = malloc(sizeof *r);
    if (!r)
        return herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a receive request", c->rank);
    *r = (herd_req){.recv = true, .state = REQ_POSTED, .peer = peer, .tag = tag, .buf = buf, .len = bytes};
    mailbox *b = &world_of(c)->box[c->rank];
    pthread_mutex_lock(&b->mu);
    msg *m = take_arrived(b, peer, tag);
    if (!m) {
        if (b->posted_tail)
            b->posted_tail->next = r;
        else
            b->posted = r;
        b->posted_tail = r;
    }
    pthread_mutex_unlock(&b->mu);
    if (m) { /* r is not visible to anyone else: copy without the lock */
        fill(r, m->data, m->len);
        r->state = REQ_DONE;
        free(m);
    }
    *req = r;
    return HERD_OK;
}

/* The outcome of a completed receive. */
static herd_status finished(herd_comm *c, const herd_req *r)
{
    if (r->recv && r->bad_len)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: expected %zu bytes from rank %zu (tag %d), got %zu",
                            c->rank, r->len, r->peer, r->tag, r->got);
    return HERD_OK;
}

static herd_status t_wait(herd_comm *c, herd_req *req, double deadline)
{
    if (!req->recv) { /* sends complete when posted */
        free(req);
        return HERD_OK;
    }
    herd_threads_world *w = world_of(c);
    mailbox *b = &w->box[c->rank];
    struct timespec abs = abs_time(deadline);
    herd_status st = HERD_OK;
    pthread_mutex_lock(&b->mu);
    while (req->state != REQ_DONE) {
        if (req->state == REQ_CLAIMED) { /* a sender is copying: done soon, whatever else happens */
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        if (atomic_load(&w->failed)) {
            char what[96];
            snprintf(what, sizeof what, "waiting for a message from rank %zu (tag %d)", req->peer, req->tag);
            st = remote_failure(c, what);
            break;
        }
        if (herd__now() >= deadline) {
            st = herd_err_set(&c->err, HERD_ETIMEOUT,
                              "rank %zu: timed out after %g s waiting for a message from rank %zu (tag %d)", c->rank,
                              herd__comm_timeout(c), req->peer, req->tag);
            break;
        }
        pthread_cond_timedwait(&b->cv, &b->mu, &abs);
    }
    if (st < 0) { /* not completed: no sender may claim it any more */
        unpost(b, req);
        req->state = REQ_DONE;
    }
    pthread_mutex_unlock(&b->mu);
    if (st == HERD_OK)
        st = finished(c, req);
    if (st == HERD_OK) /* on failure the wrapper cancels (frees) it */
        free(req);
    return st;
}

static herd_status t_test(herd_comm *c, herd_req *req, bool *done)
{
    herd_status st = HERD_OK;
    if (req->recv) {
        herd_threads_world *w = world_of(c);
        mailbox *b = &w->box[c->rank];
        pthread_mutex_lock(&b->mu);
        int state = req->state;
        if (state == REQ_POSTED && atomic_load(&w->failed)) {
            unpost(b, req);
            state = REQ_DONE;
            char what[96];
            snprintf(what, sizeof what, "testing a receive from rank %zu (tag %d)", req->peer, req->tag);
            st = remote_failure(c, what);
        }
        pthread_mutex_unlock(&b->mu);
        *done = state == REQ_DONE;
        if (!*done)
            return HERD_OK;
    }
    *done = true;
    if (st == HERD_OK)
        st = finished(c, req);
    free(req);
    return st;
}

static void t_cancel(herd_comm *c, herd_req *req)
{
    if (req->recv) {
        mailbox *b = &world_of(c)->box[c->rank];
        pthread_mutex_lock(&b->mu);
        if (req->state == REQ_POSTED)
            unpost(b, req);
        while (req->state == REQ_CLAIMED) /* never free a buffer a sender is filling */
            pthread_cond_wait(&b->cv, &b->mu);
        pthread_mutex_unlock(&b->mu);
    }
    free(req);
}

/* ---- barrier ----------------------------------------------------------- */

/* With w->mu locked. A rank that gives up (timeout, failure) withdraws, so
 * the count stays right for the others. */
static herd_status barrier_locked(herd_comm *c, double deadline, const char *what)
{
    herd_threads_world *w = world_of(c);
    if (atomic_load(&w->failed))
        return remote_failure(c, what);
    size_t gen = w->bar_gen;
    w->bar_in[c->rank] = gen + 1;
    if (++w->bar_count == w->n) {
        w->bar_count = 0;
        w->bar_gen++;
        pthread_cond_broadcast(&w->cv);
        return HERD_OK;
    }
    struct timespec abs = abs_time(deadline);
    while (gen == w->bar_gen) {
        if (atomic_load(&w->failed)) {
            w->bar_count--;
            return remote_failure(c, what);
        }
        if (herd__now() >= deadline) {
            size_t arrived = w->bar_count, missing = 0;
            while (missing < w->n && w->bar_in[missing] == gen + 1)
                missing++;
            w->bar_count--; /* bar_in keeps it: the ranks still waiting name one that never came */
            return herd_err_set(&c->err, HERD_ETIMEOUT,
                                "rank %zu: timed out after %g s %s: nothing yet from rank %zu (%zu of %zu ranks arrived)",
                                c->rank, herd__comm_timeout(c), what, missing, arrived, w->n);
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &abs);
    }
    return HERD_OK;
}

/* A barrier; `what` says where, for the timeout's message. */
static herd_status barrier_at(herd_comm *c, double deadline, const char *what)
{
    herd_threads_world *w = world_of(c);
    pthread_mutex_lock(&w->mu);
    herd_status st = barrier_locked(c, deadline, what);
    pthread_mutex_unlock(&w->mu);
    return st;
}

static herd_status t_barrier(herd_comm *c, double deadline) { return barrier_at(c, deadline, "in a barrier"); }

/* ---- allreduce in shared memory (the engine's own) ---------------------- */

/* Every rank's buffer lives in this process, so no message needs to carry
 * it: rank r sums chunk r of all the buffers, in rank order, into its own
 * buffer, then copies every other chunk from the buffer of the rank that
 * summed it. Three barriers: every buffer is ready; every chunk is summed;
 * every copy is done (a caller may change its buffer only when nobody reads
 * it any more). The order of the sum is fixed, so every rank and every run
 * gets the same bits. For 2 ranks a rank moves about 2.5x the buffer's bytes
 * through memory, where a ring of messages moves about 3.5x. */
enum { AR_BLOCK = 2048 }; /* floats summed at once: 8 KiB stays in L1 */

/* dst[lo, hi) = scale x (bufs[0] + ... + bufs[n-1]) on [lo, hi), summed in
 * that order, each sum rounded before the multiplication; dst may be one of
 * bufs. Returns false when check and a result is a NaN or Inf; src_bad (n
 * flags, or NULL): set for each buffer holding a NaN or Inf on [lo, hi).
 * The scale and the checks work on a block while it is in L1: no pass over
 * memory of their own. */
static bool sum_in_rank_order(float *const *bufs, size_t n, float *dst, size_t lo, size_t hi, float scale,
                              bool check, bool *src_bad)
{
    float acc[AR_BLOCK];
    bool finite = true;
    for (size_t b = lo; b < hi; b += AR_BLOCK) {
        size_t m = hi - b < AR_BLOCK ? hi - b : AR_BLOCK;
        memcpy(acc, bufs[0] + b, m * sizeof(float));
        if (src_bad && !herd__all_finite(acc, m))
            src_bad[0] = true;
        for (size_t j = 1; j < n; j++) {
            const float *src = bufs[j] + b;
            for (size_t i = 0; i < m; i++)
                acc[i] += src[i];
            if (src_bad && !herd__all_finite(src, m))
                src_bad[j] = true;
        }
        if (scale != 1.0f)
            for (size_t i = 0; i < m; i++)
                acc[i] *= scale;
        if (check && !herd__all_finite(acc, m))
            finite = false;
        memcpy(dst + b, acc, m * sizeof(float));
    }
    return finite;
}

/* Chunk i of count floats over n ranks, in whole 64-byte lines where the
 * count allows, so no two ranks write into one cache line. */
static void ar_chunk(size_t count, size_t n, size_t i, size_t *lo, size_t *hi)
{
    size_t lines = (count + 15) / 16, q = lines / n, r = lines % n;
    size_t first = i * q + (i < r ? i : r);
    *lo = first * 16 < count ? first * 16 : count;
    *hi = (first + q + (i < r)) * 16 < count ? (first + q + (i < r)) * 16 : count;
}

static herd_status t_allreduce_native(herd_comm *c, float *buf, size_t count, const herd_allreduce_opts *o,
                                      double deadline)
{
    herd_threads_world *w = world_of(c);
    size_t n = w->n, r = c->rank, lo, hi;
    pthread_mutex_lock(&w->mu);
    w->ar_buf[r] = buf;
    herd_status st = barrier_locked(c, deadline, "in an allreduce, waiting for the other buffers");
    pthread_mutex_unlock(&w->mu);
    if (st < 0)
        return st;
    /* the pointers stay put until everyone has passed the last barrier */
    float *const *bufs = w->ar_buf;
    ar_chunk(count, n, r, &lo, &hi);
    /* each rank checks the chunk it summed, and every buffer's part of it;
     * the answers meet in ar_bad and row r of ar_in_bad, read between the
     * second and the third barrier */
    bool *in_bad = o->input_nonfinite ? w->ar_in_bad + r * n : NULL;
    if (in_bad)
        memset(in_bad, 0, n * sizeof *in_bad);
    w->ar_bad[r] = !sum_in_rank_order(bufs, n, buf, lo, hi, o->scale, o->nonfinite != NULL, in_bad);
    c->bytes_sent += 2 * (n - 1) * (hi - lo) * sizeof(float); /* what the others read of this buffer */
    st = barrier_at(c, deadline, "in an allreduce, waiting for the other sums");
    if (st < 0)
        return st;
    bool bad = false;
    for (size_t j = 0; j < n; j++) {
        bad = bad || w->ar_bad[j];
        if (o->input_nonfinite && w->ar_in_bad[j * n + r])
            *o->input_nonfinite = true;
    }
    if (o->nonfinite)
        *o->nonfinite = bad;
    /* every chunk from its owner's buffer: copied into ours, or handed to
     * apply where it lies (no copy) */
    for (size_t j = 0; j < n; j++) {
        ar_chunk(count, n, j, &lo, &hi);
        if (hi <= lo)
            continue;
        if (o->apply && !bad) /* bad only where nonfinite was asked for */
            o->apply(o->apply_ctx, lo, hi, bufs[j] + lo);
        else if (!o->apply && j != r)
            memcpy(buf + lo, bufs[j] + lo, (hi - lo) * sizeof(float));
    }
    return barrier_at(c, deadline, "in an allreduce, waiting for the others to copy");
}

/* ---- windows ---------------------------------------------------------- */

/* With w->mu locked: the slot of the seq-th window, created on first use. */
static win_slot *slot_get(herd_threads_world *w, uint64_t seq)
{
    for (win_slot *s = w->wins; s; s = s->next)
        if (s->seq == seq)
            return s;
    win_slot *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base = calloc(w->n, sizeof *s->base);
    s->bytes = calloc(w->n, sizeof *s->bytes);
    s->t = calloc(w->n, sizeof *s->t);
    if (!s->base || !s->bytes || !s->t) {
        free(s->base), free(s->bytes), free(s->t), free(s);
        return NULL;
    }
    s->seq = seq;
    pthread_mutex_init(&s->mu, NULL);
    cond_init(&s->cv);
    s->next = w->wins;
    w->wins = s;
    return s;
}

static herd_status t_win_create(herd_comm *c, void *base, size_t bytes, unsigned flags, herd_win **out)
{
    (void)flags; /* shared and exclusive locks are reader-writer locks here */
    thr_comm *tc = (thr_comm *)c;
    herd_threads_world *w = tc->world;
    uint64_t seq = tc->nwins++; /* collective calls come in the same order on every rank */
    herd_win *hw = malloc(sizeof *hw);
    unsigned char *held = calloc(w->n, 1);
    if (!hw || !held) {
        free(hw), free(held);
        return herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a window", c->rank);
    }
    pthread_mutex_lock(&w->mu);
    win_slot *s = slot_get(w, seq);
    herd_status st = HERD_OK;
    if (s) {
        s->base[c->rank] = base;
        s->bytes[c->rank] = bytes;
        /* after the rendezvous every rank's base is known */
        st = barrier_locked(c, herd__comm_deadline(c), "creating a window");
    } else {
        st = herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a window", c->rank);
    }
    pthread_mutex_unlock(&w->mu);
    if (st < 0) { /* the slot stays until the world is freed */
        free(hw), free(held);
        return st;
    }
    *hw = (herd_win){.slot = s, .held = held};
    *out = hw;
    return HERD_OK;
}

static herd_status t_win_lock(herd_comm *c, herd_win *hw, size_t target, bool exclusive, double deadline)
{
    herd_threads_world *w = world_of(c);
    if (hw->held[target])
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: win_lock: already holds a lock on rank %zu's window",
                            c->rank, target);
    win_slot *s = hw->slot;
    win_target *t = &s->t[target];
    struct timespec abs = abs_time(deadline);
    herd_status st = HERD_OK;
    pthread_mutex_lock(&s->mu);
    if (exclusive)
        t->writers_waiting++;
    for (;;) {
        if (atomic_load(&w->failed)) { /* also when the lock is free: the run is over */
            char what[64];
            snprintf(what, sizeof what, "locking rank %zu's window", target);
            st = remote_failure(c, what);
            break;
        }
        /* writers first: a waiting writer holds new readers back */
        if (exclusive ? !t->writer && t->readers == 0 : !t->writer && t->writers_waiting == 0)
            break;
        if (herd__now() >= deadline) {
            st = herd_err_set(&c->err, HERD_ETIMEOUT, "rank %zu: timed out after %g s locking rank %zu's window",
                              c->rank, herd__comm_timeout(c), target);
            break;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &abs);
    }
    if (exclusive && --t->writers_waiting == 0 && st < 0)
        pthread_cond_broadcast(&s->cv); /* readers we held back */
    if (st == HERD_OK) {
        if (exclusive)
            t->writer = true;
        else
            t->readers++;
        hw->held[target] = exclusive ? HELD_EXCLUSIVE : HELD_SHARED;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void release(win_slot *s, size_t target, int held)
{
    pthread_mutex_lock(&s->mu);
    if (held == HELD_EXCLUSIVE)
        s->t[target].writer = false;
    else
        s->t[target].readers--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static herd_status t_win_unlock(herd_comm *c, herd_win *hw, size_t target)
{
    if (!hw->held[target])
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: win_unlock: holds no lock on rank %zu's window", c->rank,
                            target);
    release(hw->slot, target, hw->held[target]);
    hw->held[target] = HELD_NONE;
    return HERD_OK;
}

/* An access must hold a lock on the target and stay inside its buffer. */
static herd_status check_access(herd_comm *c, herd_win *hw, size_t target, size_t offset, size_t bytes,
                                const char *fn)
{
    if (!hw->held[target])
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s: rank %zu's window is not locked (call win_lock)",
                            c->rank, fn, target);
    size_t have = hw->slot->bytes[target];
    if (offset > have || bytes > have - offset)
        return herd_err_set(&c->err, HERD_EINVAL,
                            "rank %zu: %s: offset %zu + %zu bytes is past the end of rank %zu's %zu-byte window",
                            c->rank, fn, offset, bytes, target, have);
    return HERD_OK;
}

static herd_status t_win_get(herd_comm *c, herd_win *hw, size_t target, size_t offset, void *dst, size_t bytes)
{
    herd_status st = check_access(c, hw, target, offset, bytes, "win_get");
    if (st < 0 || !bytes)
        return st;
    const char *src = (const char *)hw->slot->base[target] + offset;
    if (hw->held[target] == HELD_EXCLUSIVE || ((uintptr_t)src | bytes) % sizeof(uint32_t)) {
        memcpy(dst, src, bytes); /* unaligned bytes are never accumulated into */
        return HERD_OK;
    }
    /* shared lock: a shared-lock accumulate may be adding to these words */
    const uint32_t *s = (const uint32_t *)(const void *)src;
    char *d = dst;
    for (size_t i = 0; i < bytes / sizeof(uint32_t); i++) {
        uint32_t v = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
        memcpy(d + i * sizeof v, &v, sizeof v);
    }
    return HERD_OK;
}

static herd_status t_win_flush(herd_comm *c, herd_win *hw, size_t target)
{
    if (!hw->held[target])
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: win_flush: holds no lock on rank %zu's window", c->rank,
                            target);
    return HERD_OK;
}

static herd_status t_win_put(herd_comm *c, herd_win *hw, size_t target, size_t offset, const void *src, size_t bytes)
{
    herd_status st = check_access(c, hw, target, offset, bytes, "win_put");
    if (st < 0 || !bytes)
        return st;
    char *dst = (char *)hw->slot->base[target] + offset;
    if (hw->held[target] == HELD_EXCLUSIVE || ((uintptr_t)dst | bytes) % sizeof(uint32_t)) {
        memcpy(dst, src, bytes);
        return HERD_OK;
    }
    /* shared lock: others may read or accumulate into these words meanwhile */
    uint32_t *d = (uint32_t *)(void *)dst;
    const char *s = src;
    for (size_t i = 0; i < bytes / sizeof(uint32_t); i++) {
        uint32_t v;
        memcpy(&v, s + i * sizeof v, sizeof v);
        __atomic_store_n(&d[i], v, __ATOMIC_RELAXED);
    }
    return HERD_OK;
}

static herd_status t_win_accumulate(herd_comm *c, herd_win *hw, size_t target, size_t offset, const float *src,
                                    size_t count)
{
    herd_status st = check_access(c, hw, target, offset, count * sizeof(float), "win_accumulate");
    if (st < 0 || count == 0)
        return st;
    char *dst = (char *)hw->slot->base[target] + offset;
    if ((uintptr_t)dst % _Alignof(float))
        return herd_err_set(&c->err, HERD_EINVAL,
                            "rank %zu: win_accumulate: offset %zu of rank %zu's window is not float-aligned", c->rank,
                            offset, target);
    if (hw->held[target] == HELD_EXCLUSIVE) {
        float *d = (float *)(void *)dst;
        for (size_t i = 0; i < count; i++)
            d[i] += src[i];
        return HERD_OK;
    }
    /* shared lock: other ranks may add to the same elements at once */
    uint32_t *d = (uint32_t *)(void *)dst;
    for (size_t i = 0; i < count; i++) {
        uint32_t old = __atomic_load_n(&d[i], __ATOMIC_RELAXED), sum;
        do {
            float f;
            memcpy(&f, &old, sizeof f);
            f += src[i];
            memcpy(&sum, &f, sizeof sum);
        } while (!__atomic_compare_exchange_n(&d[i], &old, sum, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    }
    return HERD_OK;
}

static herd_status t_win_free(herd_comm *c, herd_win *hw)
{
    herd_threads_world *w = world_of(c);
    win_slot *s = hw->slot;
    for (size_t t = 0; t < w->n; t++) /* locks still held are released */
        if (hw->held[t])
            release(s, t, hw->held[t]);
    pthread_mutex_lock(&w->mu);
    /* after the rendezvous nobody uses the window any more; the last rank
     * out frees it (after a failed one, the world's free does) */
    herd_status st = atomic_load(&w->closed) ? HERD_OK : barrier_locked(c, herd__comm_deadline(c), "freeing a window");
    if (st == HERD_OK && ++s->freed == w->n) {
        for (win_slot **pp = &w->wins; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        slot_destroy(s);
    }
    pthread_mutex_unlock(&w->mu);
    free(hw->held);
    free(hw);
    return st;
}

static void t_free(herd_comm *c) { free(c); }

static const herd_comm_ops threads_ops = {
    .name = "threads",
    .isend = t_isend,
    .irecv = t_irecv,
    .wait = t_wait,
    .test = t_test,
    .cancel = t_cancel,
    .barrier = t_barrier,
    .win_create = t_win_create,
    .win_lock = t_win_lock,
    .win_unlock = t_win_unlock,
    .win_get = t_win_get,
    .win_put = t_win_put,
    .win_accumulate = t_win_accumulate,
    .win_flush = t_win_flush,
    .win_free = t_win_free,
    .allreduce_native = t_allreduce_native,
    .native_preferred = true,
    .free = t_free,
};

herd_status herd_comm_threads_create(herd_threads_world *w, size_t rank, herd_comm **out, herd_err *err)
{
    if (!out)
        return herd_err_set(err, HERD_EINVAL, "threads engine: out is NULL");
    *out = NULL;
    if (!w)
        return herd_err_set(err, HERD_EINVAL, "threads engine: world is NULL");
    if (rank >= w->n)
        return herd_err_set(err, HERD_EINVAL, "threads engine: rank %zu is not a rank of a %zu-worker world", rank,
                            w->n);
    thr_comm *c = calloc(1, sizeof *c);
    if (!c)
        return herd_err_set(err, HERD_ENOMEM, "threads engine: out of memory for rank %zu", rank);
    c->world = w;
    c->base.ops = &threads_ops;
    c->base.rank = rank;
    c->base.size = w->n;
    c->base.timeout_s = 60;
    c->base.any_thread = true;
    c->base.local_windows = true;
    *out = &c->base;
    return HERD_OK;
}

/* ---- the engine table: the functions above, on a herd_world ---------- */

static herd_status e_world_create(size_t workers, herd_world **out, herd_err *err)
{
    herd_threads_world *w;
    herd_status st = herd_threads_world_create(workers, &w, err);
    *out = st == HERD_OK ? &w->base : NULL;
    return st;
}

static herd_status e_endpoint(herd_world *w, size_t rank, herd_comm **out, herd_err *err)
{
    return herd_comm_threads_create((herd_threads_world *)w, rank, out, err);
}

static void e_fail(herd_world *w, size_t rank) { herd_threads_world_fail((herd_threads_world *)w, rank); }

static void e_close(herd_world *w) { herd_threads_world_close((herd_threads_world *)w); }

static void e_world_free(herd_world *w) { herd_threads_world_free((herd_threads_world *)w); }

const herd_engine herd__engine_threads = {
    .name = "threads",
    .caps = HERD_ENGINE_WINDOWS | HERD_ENGINE_NATIVE_ALLREDUCE | HERD_ENGINE_SHARED_MEMORY | HERD_ENGINE_ANY_THREAD |
            HERD_ENGINE_MANY_LOCAL | HERD_ENGINE_CHECKPOINT,
    .world_create = e_world_create,
    .endpoint = e_endpoint,
    .fail = e_fail,
    .close = e_close,
    .world_free = e_world_free,
};
