/* The threads engine: every worker is a thread of one process.
 *
 * Point-to-point: when the matching receive is already posted, a send copies
 * straight into the receiver's buffer (one copy); otherwise the message is
 * copied into the receiver's mailbox (a FIFO per destination, matched by
 * source and tag) and copied out by the receive. Waiting blocks on a condition variable with a deadline, so 16
 * workers on 2 cores never spin. Windows hand every rank the others' base
 * pointers; a reader-writer lock per target makes lock/unlock. A failed
 * world wakes every waiter, which then returns HERD_EREMOTE.
 */
#include "herd/herd_comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_WINDOWS = 64 };

typedef struct msg {
    struct msg *next;
    size_t src, len;
    int tag;
    unsigned char data[];
} msg;

typedef struct herd_req herd_req;

typedef struct mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *head, *tail;   /* arrived, not yet received */
    herd_req *posted;   /* receives waiting for a message, oldest first */
} mailbox;

typedef struct win_slot {
    void **base;
    size_t *bytes;
    pthread_rwlock_t *locks;
    size_t arrived, freed;
} win_slot;

struct herd_threads_world {
    size_t n;
    mailbox *box;
    pthread_mutex_t mu; /* barrier and window rendezvous */
    pthread_cond_t cv;
    size_t bar_count, bar_gen;
    atomic_int failed;
    atomic_size_t failed_rank;
    win_slot *wins[MAX_WINDOWS];
};

typedef struct thr_comm {
    herd_comm base;
    herd_threads_world *world;
    size_t nwins; /* windows created so far: the next one's id */
} thr_comm;

struct herd_req {
    bool recv;
    bool done;          /* a sender filled buf (under the mailbox lock) */
    herd_status st;
    size_t peer, len;
    int tag;
    void *buf;
    herd_req *next;     /* in the mailbox's posted list */
};

struct herd_win {
    win_slot *slot;
    size_t id;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct timespec to_abs(double deadline, clockid_t clk)
{
    double rel = deadline - now_s();
    if (rel < 0)
        rel = 0;
    struct timespec now;
    clock_gettime(clk, &now);
    double t = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec + rel;
    struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
    return ts;
}

static void init_cond(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

herd_status herd_threads_world_create(size_t n, herd_threads_world **out, herd_err *err)
{
    *out = NULL;
    if (n == 0)
        return herd_err_set(err, HERD_EINVAL, "threads engine: at least one worker");
    herd_threads_world *w = calloc(1, sizeof *w);
    if (w)
        w->box = calloc(n, sizeof *w->box);
    if (!w || !w->box) {
        free(w);
        return herd_err_set(err, HERD_ENOMEM, "threads engine: out of memory for %zu workers", n);
    }
    w->n = n;
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_init(&w->box[i].mu, NULL);
        init_cond(&w->box[i].cv);
    }
    pthread_mutex_init(&w->mu, NULL);
    init_cond(&w->cv);
    *out = w;
    return HERD_OK;
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
    for (size_t i = 0; i < MAX_WINDOWS; i++)
        if (w->wins[i]) {
            for (size_t t = 0; t < w->n; t++)
                pthread_rwlock_destroy(&w->wins[i]->locks[t]);
            free(w->wins[i]->base), free(w->wins[i]->bytes), free(w->wins[i]->locks), free(w->wins[i]);
        }
    free(w->box);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

void herd_threads_world_fail(herd_threads_world *w, size_t rank)
{
    if (!w || atomic_exchange(&w->failed, 1))
        return;
    atomic_store(&w->failed_rank, rank);
    for (size_t i = 0; i < w->n; i++) {
        pthread_mutex_lock(&w->box[i].mu);
        pthread_cond_broadcast(&w->box[i].cv);
        pthread_mutex_unlock(&w->box[i].mu);
    }
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static herd_threads_world *world_of(herd_comm *c) { return ((thr_comm *)c)->world; }

static herd_status remote_failure(herd_comm *c)
{
    return herd_err_set(&c->err, HERD_EREMOTE, "rank %zu: worker %zu failed", c->rank,
                        atomic_load(&world_of(c)->failed_rank));
}

/* With b locked: gives the data to the oldest receive posted for (src, tag),
 * if there is one, and wakes its waiter. */
static bool hand_over(mailbox *b, size_t src, int tag, const void *data, size_t bytes)
{
    for (herd_req **pp = &b->posted; *pp; pp = &(*pp)->next) {
        herd_req *rr = *pp;
        if (rr->peer != src || rr->tag != tag)
            continue;
        *pp = rr->next;
        if (rr->len != bytes)
            rr->st = HERD_EINVAL;
        else if (bytes)
            memcpy(rr->buf, data, bytes);
        rr->done = true;
        pthread_cond_broadcast(&b->cv);
        return true;
    }
    return false;
}

static herd_status t_isend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    herd_threads_world *w = world_of(c);
    herd_req *r = malloc(sizeof *r);
    if (!r)
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    *r = (herd_req){.recv = false, .peer = peer, .tag = tag};
    mailbox *b = &w->box[peer];
    *req = r;
    /* a posted receive from this rank with this tag takes the data directly
     * (none can be posted while an older message of ours waits: it would
     * have taken that one) */
    pthread_mutex_lock(&b->mu);
    bool handed = hand_over(b, c->rank, tag, buf, bytes);
    pthread_mutex_unlock(&b->mu);
    if (handed)
        return HERD_OK;
    msg *m = malloc(sizeof *m + bytes);
    if (!m) {
        free(r);
        *req = NULL;
        return herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a %zu-byte message", c->rank, bytes);
    }
    m->next = NULL, m->src = c->rank, m->len = bytes, m->tag = tag;
    if (bytes)
        memcpy(m->data, buf, bytes);
    pthread_mutex_lock(&b->mu);
    /* a receive may have been posted while we copied: hand it over */
    if (hand_over(b, c->rank, tag, m->data, bytes)) {
        pthread_mutex_unlock(&b->mu);
        free(m);
        return HERD_OK;
    }
    if (b->tail)
        b->tail->next = m;
    else
        b->head = m;
    b->tail = m;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return HERD_OK;
}

static int take(herd_comm *c, mailbox *b, herd_req *req, herd_status *st);

static herd_status t_irecv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req)
{
    herd_req *r = malloc(sizeof *r);
    if (!r)
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    *r = (herd_req){.recv = true, .peer = peer, .tag = tag, .buf = buf, .len = bytes};
    mailbox *b = &world_of(c)->box[c->rank];
    pthread_mutex_lock(&b->mu);
    herd_status st = HERD_OK;
    if (take(c, b, r, &st)) {
        r->done = true, r->st = st;
    } else { /* post it, after any older posted receive */
        herd_req **pp = &b->posted;
        while (*pp)
            pp = &(*pp)->next;
        *pp = r;
    }
    pthread_mutex_unlock(&b->mu);
    *req = r;
    return HERD_OK;
}

/* With the mailbox locked: removes a posted receive that is still waiting. */
static void unpost(mailbox *b, herd_req *req)
{
    for (herd_req **pp = &b->posted; *pp; pp = &(*pp)->next)
        if (*pp == req) {
            *pp = req->next;
            return;
        }
}

static herd_status size_mismatch(herd_comm *c, herd_req *req)
{
    return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: a message from rank %zu (tag %d) is not %zu bytes long",
                        c->rank, req->peer, req->tag, req->len);
}

/* With the mailbox locked: takes the first message from req's peer and tag. */
static int take(herd_comm *c, mailbox *b, herd_req *req, herd_status *st)
{
    msg *prev = NULL;
    for (msg *m = b->head; m; prev = m, m = m->next) {
        if (m->src != req->peer || m->tag != req->tag)
            continue;
        if (prev)
            prev->next = m->next;
        else
            b->head = m->next;
        if (b->tail == m)
            b->tail = prev;
        if (m->len != req->len)
            *st = herd_err_set(&c->err, HERD_EINVAL, "rank %zu: expected %zu bytes from rank %zu (tag %d), got %zu",
                               c->rank, req->len, req->peer, req->tag, m->len);
        else if (m->len)
            memcpy(req->buf, m->data, m->len);
        free(m);
        return 1;
    }
    return 0;
}

static herd_status t_test(herd_comm *c, herd_req *req, bool *done)
{
    herd_status st = HERD_OK;
    *done = true;
    if (req->recv) {
        mailbox *b = &world_of(c)->box[c->rank];
        pthread_mutex_lock(&b->mu);
        *done = req->done;
        if (!*done && atomic_load(&world_of(c)->failed)) {
            unpost(b, req);
            pthread_mutex_unlock(&b->mu);
            free(req);
            *done = true;
            return remote_failure(c);
        }
        pthread_mutex_unlock(&b->mu);
        if (*done && req->st < 0)
            st = size_mismatch(c, req);
    }
    if (*done)
        free(req);
    return st;
}

static herd_status t_wait(herd_comm *c, herd_req *req, double deadline)
{
    herd_status st = HERD_OK;
    if (!req->recv) {
        free(req);
        return HERD_OK;
    }
    herd_threads_world *w = world_of(c);
    mailbox *b = &w->box[c->rank];
    struct timespec abs = to_abs(deadline, CLOCK_MONOTONIC);
    pthread_mutex_lock(&b->mu);
    while (!req->done) {
        if (atomic_load(&w->failed)) {
            unpost(b, req);
            st = remote_failure(c);
            break;
        }
        if (pthread_cond_timedwait(&b->cv, &b->mu, &abs) == ETIMEDOUT && !req->done) {
            unpost(b, req);
            st = herd_err_set(&c->err, HERD_ETIMEOUT,
                              "rank %zu: timed out after %g s waiting for a message from rank %zu (tag %d)", c->rank,
                              c->timeout_s, req->peer, req->tag);
            break;
        }
    }
    pthread_mutex_unlock(&b->mu);
    if (st == HERD_OK && req->st < 0)
        st = size_mismatch(c, req);
    free(req);
    return st;
}

static void t_cancel(herd_comm *c, herd_req *req)
{
    if (req->recv) {
        mailbox *b = &world_of(c)->box[c->rank];
        pthread_mutex_lock(&b->mu);
        unpost(b, req);
        pthread_mutex_unlock(&b->mu);
    }
    free(req);
}

static herd_status t_barrier(herd_comm *c, double deadline)
{
    herd_threads_world *w = world_of(c);
    herd_status st = HERD_OK;
    struct timespec abs = to_abs(deadline, CLOCK_MONOTONIC);
    pthread_mutex_lock(&w->mu);
    size_t gen = w->bar_gen;
    if (++w->bar_count == w->n) {
        w->bar_count = 0;
        w->bar_gen++;
        pthread_cond_broadcast(&w->cv);
    } else {
        while (gen == w->bar_gen) {
            if (atomic_load(&w->failed)) {
                st = remote_failure(c);
                break;
            }
            if (pthread_cond_timedwait(&w->cv, &w->mu, &abs) == ETIMEDOUT && gen == w->bar_gen) {
                st = herd_err_set(&c->err, HERD_ETIMEOUT,
                                  "rank %zu: timed out after %g s in a barrier (%zu of %zu ranks arrived)", c->rank,
                                  c->timeout_s, w->bar_count, w->n);
                break;
            }
        }
    }
    pthread_mutex_unlock(&w->mu);
    return st;
}

static herd_status t_win_create(herd_comm *c, void *base, size_t bytes, herd_win **out)
{
    thr_comm *tc = (thr_comm *)c;
    herd_threads_world *w = tc->world;
    size_t id = tc->nwins++;
    if (id >= MAX_WINDOWS)
        return herd_err_set(&c->err, HERD_EINVAL, "threads engine: at most %d windows", MAX_WINDOWS);
    herd_win *hw = malloc(sizeof *hw);
    if (!hw)
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    pthread_mutex_lock(&w->mu);
    win_slot *s = w->wins[id];
    if (!s) {
        s = calloc(1, sizeof *s);
        if (s) {
            s->base = calloc(w->n, sizeof *s->base);
            s->bytes = calloc(w->n, sizeof *s->bytes);
            s->locks = calloc(w->n, sizeof *s->locks);
        }
        if (!s || !s->base || !s->bytes || !s->locks) {
            if (s)
                free(s->base), free(s->bytes), free(s->locks);
            free(s);
            pthread_mutex_unlock(&w->mu);
            free(hw);
            return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
        }
        for (size_t t = 0; t < w->n; t++)
            pthread_rwlock_init(&s->locks[t], NULL);
        w->wins[id] = s;
    }
    s->base[c->rank] = base;
    s->bytes[c->rank] = bytes;
    s->arrived++;
    pthread_mutex_unlock(&w->mu);
    hw->slot = s, hw->id = id;
    herd_status st = t_barrier(c, now_s() + c->timeout_s); /* everyone's base is known after it */
    if (st < 0) {
        free(hw);
        return st;
    }
    *out = hw;
    return HERD_OK;
}

static herd_status t_win_lock(herd_comm *c, herd_win *hw, size_t target, bool exclusive, double deadline)
{
    struct timespec abs = to_abs(deadline, CLOCK_REALTIME);
    pthread_rwlock_t *l = &hw->slot->locks[target];
    int e = exclusive ? pthread_rwlock_timedwrlock(l, &abs) : pthread_rwlock_timedrdlock(l, &abs);
    if (e == ETIMEDOUT)
        return herd_err_set(&c->err, HERD_ETIMEOUT, "rank %zu: timed out after %g s locking rank %zu's window",
                            c->rank, c->timeout_s, target);
    if (e)
        return herd_err_set(&c->err, HERD_EINTERNAL, "rank %zu: window lock failed: %s", c->rank, strerror(e));
    return HERD_OK;
}

static herd_status t_win_unlock(herd_comm *c, herd_win *hw, size_t target)
{
    (void)c;
    pthread_rwlock_unlock(&hw->slot->locks[target]);
    return HERD_OK;
}

static herd_status check_range(herd_comm *c, herd_win *hw, size_t target, size_t offset, size_t bytes)
{
    size_t have = hw->slot->bytes[target];
    if (offset > have || bytes > have - offset)
        return herd_err_set(&c->err, HERD_EINVAL,
                            "rank %zu: access [%zu, %zu) past the end of rank %zu's %zu-byte window", c->rank, offset,
                            offset + bytes, target, have);
    return HERD_OK;
}

static herd_status t_win_get(herd_comm *c, herd_win *hw, size_t target, size_t offset, void *dst, size_t bytes)
{
    herd_status st = check_range(c, hw, target, offset, bytes);
    if (st == HERD_OK && bytes)
        memcpy(dst, (char *)hw->slot->base[target] + offset, bytes);
    return st;
}

static herd_status t_win_put(herd_comm *c, herd_win *hw, size_t target, size_t offset, const void *src, size_t bytes)
{
    herd_status st = check_range(c, hw, target, offset, bytes);
    if (st == HERD_OK && bytes)
        memcpy((char *)hw->slot->base[target] + offset, src, bytes);
    return st;
}

static herd_status t_win_accumulate(herd_comm *c, herd_win *hw, size_t target, size_t offset, const float *src,
                                    size_t count)
{
    herd_status st = check_range(c, hw, target, offset, count * sizeof(float));
    if (st < 0)
        return st;
    float *dst = (float *)(void *)((char *)hw->slot->base[target] + offset);
    for (size_t i = 0; i < count; i++)
        dst[i] += src[i];
    return HERD_OK;
}

static herd_status t_win_free(herd_comm *c, herd_win *hw)
{
    herd_status st = t_barrier(c, now_s() + c->timeout_s); /* nobody still uses it */
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
    .win_free = t_win_free,
    .free = t_free,
};

herd_status herd_comm_threads_create(herd_threads_world *w, size_t rank, herd_comm **out, herd_err *err)
{
    *out = NULL;
    if (!w || rank >= w->n)
        return herd_err_set(err, HERD_EINVAL, "threads engine: rank %zu of %zu", rank, w ? w->n : 0);
    thr_comm *c = calloc(1, sizeof *c);
    if (!c)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    c->world = w;
    c->base.ops = &threads_ops;
    c->base.rank = rank;
    c->base.size = w->n;
    c->base.timeout_s = 60;
    c->base.any_thread = true;
    *out = &c->base;
    return HERD_OK;
}
