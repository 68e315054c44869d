/* The loopback engine: a world of one worker, talking to itself. It is the
 * smallest engine that honours the seam (herd_engine.h): tagged
 * point-to-point to itself, barrier, one-sided windows on its own memory, no
 * native allreduce (herd_allreduce's own path serves a world of one). It
 * proves that an engine is one file plus one registry line, and runs a
 * training of one worker with no threads engine underneath.
 *
 * Point-to-point: a send whose receive is posted copies straight into it;
 * otherwise the message is copied into a queue (eager), so sends complete
 * at once. Matching is by tag, first in first out, as the other engines'.
 * A receive that no send has matched can only be matched by a later send of
 * this same worker, which cannot come while it waits: wait says so at once
 * (HERD_ETIMEOUT) instead of sleeping to the deadline.
 *
 * Threading: no locks; the endpoint is driven by one thread at a time, any
 * thread (HERD_ENGINE_ANY_THREAD), as herd_comm.h requires of every caller.
 */
#include "comm/comm_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A message that arrived before its receive. */
typedef struct lb_msg {
    struct lb_msg *next;
    size_t len;
    int tag;
    unsigned char data[];
} lb_msg;

struct herd_req {
    herd_req *next; /* in the posted list */
    bool recv, done;
    size_t len, got;
    int tag;
    void *buf;
};

struct herd_win {
    unsigned char *base;
    size_t bytes;
    bool held;
};

typedef struct lb_comm {
    herd_comm base;
    lb_msg *head, *tail;     /* arrived, not yet received, oldest first */
    herd_req *posted, *last; /* receives without a message, oldest first */
} lb_comm;

static lb_comm *lb(herd_comm *c) { return (lb_comm *)c; }

/* Copies a message into a receive and completes it; the length must match,
 * as on the other engines (wait reports a mismatch). */
static void fill(herd_req *r, const void *data, size_t bytes)
{
    r->got = bytes;
    if (bytes == r->len && bytes)
        memcpy(r->buf, data, bytes);
    r->done = true;
}

/* Takes `which` (or, which == NULL, the oldest receive posted for tag) off
 * the posted list; returns it or NULL. */
static herd_req *unpost(lb_comm *m, const herd_req *which, int tag)
{
    herd_req *prev = NULL;
    for (herd_req *r = m->posted; r; prev = r, r = r->next) {
        if (which ? r != which : r->tag != tag)
            continue;
        *(prev ? &prev->next : &m->posted) = r->next;
        if (m->last == r)
            m->last = prev;
        return r;
    }
    return NULL;
}

static herd_status new_req(herd_comm *c, bool recv, int tag, void *buf, size_t bytes, herd_req **out)
{
    herd_req *r = malloc(sizeof *r);
    if (!r)
        return herd_err_set(&c->err, HERD_ENOMEM, "rank 0: out of memory for a request");
    *r = (herd_req){.recv = recv, .tag = tag, .buf = buf, .len = bytes};
    *out = r;
    return HERD_OK;
}

static herd_status l_isend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    (void)peer; /* 0: the wrapper checked it */
    lb_comm *m = lb(c);
    herd_req *r = NULL;
    herd_status st = new_req(c, false, tag, NULL, bytes, &r);
    if (st < 0)
        return st;
    r->done = true;
    herd_req *rr = unpost(m, NULL, tag);
    if (rr) {
        fill(rr, buf, bytes);
        *req = r;
        return HERD_OK;
    }
    lb_msg *msg = malloc(sizeof *msg + bytes);
    if (!msg) {
        free(r);
        return herd_err_set(&c->err, HERD_ENOMEM, "rank 0: out of memory for a %zu-byte message", bytes);
    }
    *msg = (lb_msg){.len = bytes, .tag = tag};
    if (bytes)
        memcpy(msg->data, buf, bytes);
    *(m->tail ? &m->tail->next : &m->head) = msg;
    m->tail = msg;
    *req = r;
    return HERD_OK;
}

static herd_status l_irecv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req)
{
    (void)peer;
    lb_comm *m = lb(c);
    herd_req *r = NULL;
    herd_status st = new_req(c, true, tag, buf, bytes, &r);
    if (st < 0)
        return st;
    lb_msg *prev = NULL, *msg = m->head;
    while (msg && msg->tag != tag)
        prev = msg, msg = msg->next;
    if (msg) {
        *(prev ? &prev->next : &m->head) = msg->next;
        if (m->tail == msg)
            m->tail = prev;
        fill(r, msg->data, msg->len);
        free(msg);
    } else {
        *(m->last ? &m->last->next : &m->posted) = r;
        m->last = r;
    }
    *req = r;
    return HERD_OK;
}

/* The outcome of a completed request. */
static herd_status finished(herd_comm *c, const herd_req *r)
{
    if (r->recv && r->got != r->len)
        return herd_err_set(&c->err, HERD_EINVAL, "rank 0: expected %zu bytes from rank 0 (tag %d), got %zu", r->len,
                            r->tag, r->got);
    return HERD_OK;
}

/* Frees req once done (also when it failed: it has ended). */
static herd_status l_test(herd_comm *c, herd_req *req, bool *done)
{
    *done = req->done;
    if (!req->done)
        return HERD_OK;
    herd_status st = finished(c, req);
    free(req);
    return st;
}

/* Frees req only on success; the wrapper cancels the rest. */
static herd_status l_wait(herd_comm *c, herd_req *req, double deadline)
{
    (void)deadline; /* nothing can change while this worker waits */
    if (!req->done)
        return herd_err_set(&c->err, HERD_ETIMEOUT,
                            "rank 0: waiting for a message from rank 0 (tag %d) that was never sent: the loopback "
                            "engine's one worker would wait for itself",
                            req->tag);
    herd_status st = finished(c, req);
    if (st == HERD_OK)
        free(req);
    return st;
}

static void l_cancel(herd_comm *c, herd_req *req)
{
    if (req->recv && !req->done)
        unpost(lb(c), req, 0);
    free(req);
}

static herd_status l_barrier(herd_comm *c, double deadline)
{
    (void)c, (void)deadline; /* a world of one has nobody to wait for */
    return HERD_OK;
}

static herd_status l_win_create(herd_comm *c, void *base, size_t bytes, unsigned flags, herd_win **out)
{
    (void)flags;
    herd_win *w = malloc(sizeof *w);
    if (!w)
        return herd_err_set(&c->err, HERD_ENOMEM, "rank 0: out of memory for a window");
    *w = (herd_win){.base = base, .bytes = bytes};
    *out = w;
    return HERD_OK;
}

static herd_status l_win_lock(herd_comm *c, herd_win *w, size_t target, bool exclusive, double deadline)
{
    (void)target, (void)exclusive, (void)deadline; /* nobody else can hold it */
    if (w->held)
        return herd_err_set(&c->err, HERD_EINVAL, "rank 0: win_lock: already holds a lock on rank 0's window");
    w->held = true;
    return HERD_OK;
}

/* An access or an unlock needs the lock; an access stays inside the window. */
static herd_status check_access(herd_comm *c, const herd_win *w, size_t offset, size_t bytes, const char *fn)
{
    if (!w->held)
        return herd_err_set(&c->err, HERD_EINVAL, "rank 0: %s: rank 0's window is not locked (call win_lock)", fn);
    if (offset > w->bytes || bytes > w->bytes - offset)
        return herd_err_set(&c->err, HERD_EINVAL,
                            "rank 0: %s: offset %zu + %zu bytes is past the end of rank 0's %zu-byte window", fn,
                            offset, bytes, w->bytes);
    return HERD_OK;
}

static herd_status l_win_unlock(herd_comm *c, herd_win *w, size_t target)
{
    (void)target;
    herd_status st = check_access(c, w, 0, 0, "win_unlock");
    if (st == HERD_OK)
        w->held = false;
    return st;
}

static herd_status l_win_flush(herd_comm *c, herd_win *w, size_t target)
{
    (void)target; /* every access completes at once */
    return check_access(c, w, 0, 0, "win_flush");
}

static herd_status l_win_get(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes)
{
    (void)target;
    herd_status st = check_access(c, w, offset, bytes, "win_get");
    if (st == HERD_OK && bytes)
        memcpy(dst, w->base + offset, bytes);
    return st;
}

static herd_status l_win_put(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes)
{
    (void)target;
    herd_status st = check_access(c, w, offset, bytes, "win_put");
    if (st == HERD_OK && bytes)
        memcpy(w->base + offset, src, bytes);
    return st;
}

static herd_status l_win_accumulate(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                    size_t count)
{
    (void)target;
    herd_status st = check_access(c, w, offset, count * sizeof(float), "win_accumulate");
    for (size_t i = 0; st == HERD_OK && i < count; i++) { /* memcpy: the offset need not be float-aligned */
        float f;
        memcpy(&f, w->base + offset + i * sizeof f, sizeof f);
        f += src[i];
        memcpy(w->base + offset + i * sizeof f, &f, sizeof f);
    }
    return st;
}

static herd_status l_win_free(herd_comm *c, herd_win *w)
{
    (void)c;
    free(w);
    return HERD_OK;
}

static void l_free(herd_comm *c)
{
    lb_comm *m = lb(c);
    for (lb_msg *msg = m->head, *next; msg; msg = next) /* sent, never received */
        next = msg->next, free(msg);
    free(m); /* posted receives belong to their callers */
}

static const herd_comm_ops loopback_ops = {
    .name = "loopback",
    .isend = l_isend,
    .irecv = l_irecv,
    .wait = l_wait,
    .test = l_test,
    .cancel = l_cancel,
    .barrier = l_barrier,
    .win_create = l_win_create,
    .win_lock = l_win_lock,
    .win_unlock = l_win_unlock,
    .win_get = l_win_get,
    .win_put = l_win_put,
    .win_accumulate = l_win_accumulate,
    .win_flush = l_win_flush,
    .win_free = l_win_free,
    .free = l_free,
};

/* ---- the engine table ------------------------------------------------- */

extern const herd_engine herd__engine_loopback; /* below */

static herd_status e_world_create(size_t workers, herd_world **out, herd_err *err)
{
    if (workers != 1)
        return herd_err_set(err, HERD_EINVAL, "the loopback engine runs exactly one worker, not %zu", workers);
    herd_world *w = malloc(sizeof *w);
    if (!w)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    *w = (herd_world){.engine = &herd__engine_loopback, .size = 1, .first_rank = 0, .nlocal = 1};
    *out = w;
    return HERD_OK;
}

static herd_status e_endpoint(herd_world *w, size_t rank, herd_comm **out, herd_err *err)
{
    (void)w, (void)rank; /* rank 0: herd_world_endpoint checked it */
    lb_comm *m = calloc(1, sizeof *m);
    if (!m)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    m->base = (herd_comm){.ops = &loopback_ops, .rank = 0, .size = 1, .timeout_s = 60, .any_thread = true,
                        .local_windows = true};
    *out = &m->base;
    return HERD_OK;
}

static void e_world_free(herd_world *w) { free(w); }

/* Every worker is in this process and there is one: checkpoints work. No
 * fail hook: with one worker, nobody else waits to be woken. */
const herd_engine herd__engine_loopback = {
    .name = "loopback",
    .caps = HERD_ENGINE_WINDOWS | HERD_ENGINE_ANY_THREAD | HERD_ENGINE_CHECKPOINT,
    .world_create = e_world_create,
    .endpoint = e_endpoint,
    .world_free = e_world_free,
};
