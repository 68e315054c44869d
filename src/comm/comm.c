/* The herd_comm_* wrappers: every caller goes through them, whatever the
 * engine. They check arguments (naming the bad one in c->err), count bytes
 * (posted sends and receives, window traffic), time the waits into
 * c->wait_s and turn c->timeout_s into the engines' deadlines. Every window
 * call is timed, not only the lock: across hosts a get, an accumulate, a
 * flush or an unlock may wait for the target as long as a lock does.
 * herd_comm_wait always ends the request, also when it fails (timeout,
 * failed peer); so does a herd_comm_test that fails. For that, an engine's
 * wait frees the request only when it returns HERD_OK, its test only when
 * it sets *done, and the wrappers cancel (free) the rest. */
#include "comm/comm_internal.h"
#include "core/clock.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

double herd__comm_timeout(const herd_comm *c) { return c->timeout_s > 0 ? c->timeout_s : 60; }

double herd__comm_deadline(const herd_comm *c) { return herd__now() + herd__comm_timeout(c); }

static herd_status check_rank(herd_comm *c, size_t rank, const char *fn, const char *arg)
{
    if (rank >= c->size)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s: %s %zu is not a rank (size %zu)", c->rank, fn, arg,
                            rank, c->size);
    return HERD_OK;
}

static herd_status check_buf(herd_comm *c, const void *buf, size_t bytes, const char *fn, const char *arg)
{
    if (bytes && !buf)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s: %s is NULL for %zu bytes", c->rank, fn, arg, bytes);
    return HERD_OK;
}

static herd_status check_ptr(herd_comm *c, const void *p, const char *fn, const char *arg)
{
    if (!p)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s: %s is NULL", c->rank, fn, arg);
    return HERD_OK;
}

/* The checks shared by isend and irecv. A NULL c has no err to name the
 * argument in: the status alone says it, as in every wrapper. */
static herd_status check_p2p(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req,
                             const char *fn)
{
    herd_status st;
    if (!c)
        return HERD_EINVAL;
    if ((st = check_rank(c, peer, fn, "peer")) < 0 || (st = check_buf(c, buf, bytes, fn, "buf")) < 0 ||
        (st = check_ptr(c, req, fn, "req")) < 0)
        return st;
    if (tag < 0) /* MPI tags are non-negative */
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s: tag %d is negative", c->rank, fn, tag);
    return HERD_OK;
}

static herd_status send_with(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req,
                             bool sync)
{
    herd_status st = check_p2p(c, peer, tag, buf, bytes, req, sync ? "issend" : "isend");
    if (st < 0)
        return st;
    *req = NULL;
    st = (sync && c->ops->issend ? c->ops->issend : c->ops->isend)(c, peer, tag, buf, bytes, req);
    if (st == HERD_OK)
        c->bytes_sent += bytes;
    return st;
}

herd_status herd_comm_isend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    return send_with(c, peer, tag, buf, bytes, req, false);
}

herd_status herd_comm_issend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    return send_with(c, peer, tag, buf, bytes, req, true);
}

herd_status herd_comm_irecv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req)
{
    herd_status st = check_p2p(c, peer, tag, buf, bytes, req, "irecv");
    if (st < 0)
        return st;
    *req = NULL;
    st = c->ops->irecv(c, peer, tag, buf, bytes, req);
    if (st == HERD_OK)
        c->bytes_recv += bytes;
    return st;
}

herd_status herd_comm_wait(herd_comm *c, herd_req *req)
{
    if (!c)
        return HERD_EINVAL;
    herd_status st = check_ptr(c, req, "wait", "req");
    if (st < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->wait(c, req, t0 + herd__comm_timeout(c));
    if (st < 0) /* an engine frees only completed requests: the caller's is gone either way */
        c->ops->cancel(c, req);
    c->wait_s += herd__now() - t0;
    return st;
}

herd_status herd_comm_test(herd_comm *c, herd_req *req, bool *done)
{
    herd_status st;
    if (!c)
        return HERD_EINVAL;
    if ((st = check_ptr(c, req, "test", "req")) < 0 || (st = check_ptr(c, done, "test", "done")) < 0)
        return st;
    *done = false;
    st = c->ops->test(c, req, done);
    if (st < 0 && !*done) { /* a failed test ends the request too */
        c->ops->cancel(c, req);
        *done = true;
    }
    return st;
}

void herd_comm_cancel(herd_comm *c, herd_req *req)
{
    if (req)
        c->ops->cancel(c, req);
}

herd_status herd_comm_send(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes)
{
    herd_req *r;
    herd_status st = herd_comm_isend(c, peer, tag, buf, bytes, &r);
    return st < 0 ? st : herd_comm_wait(c, r);
}

herd_status herd_comm_recv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes)
{
    herd_req *r;
    herd_status st = herd_comm_irecv(c, peer, tag, buf, bytes, &r);
    return st < 0 ? st : herd_comm_wait(c, r);
}

herd_status herd_comm_barrier(herd_comm *c)
{
    if (!c)
        return HERD_EINVAL;
    double t0 = herd__now();
    c->collectives += c->size > 1;
    herd_status st = c->ops->barrier(c, t0 + herd__comm_timeout(c));
    c->wait_s += herd__now() - t0;
    return st;
}

/* Windows are a capability (HERD_ENGINE_WINDOWS): an engine without them
 * leaves every win_* hook NULL, and a caller learns so here, not by a crash. */
static herd_status check_windows(herd_comm *c, const char *fn)
{
    if (!c)
        return HERD_EINVAL;
    if (!c->ops->win_create || !c->ops->win_lock)
        return herd_err_set(&c->err, HERD_EUNSUPPORTED, "rank %zu: %s: the %s engine has no one-sided windows",
                            c->rank, fn, c->ops->name);
    return HERD_OK;
}

static herd_status win_create(herd_comm *c, void *base, size_t bytes, unsigned flags, herd_win **win)
{
    herd_status st;
    if (!c)
        return HERD_EINVAL;
    if ((st = check_buf(c, base, bytes, "win_create", "base")) < 0 ||
        (st = check_ptr(c, win, "win_create", "win")) < 0)
        return st;
    *win = NULL;
    if ((st = check_windows(c, "win_create")) < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_create(c, base, bytes, flags, win);
    c->wait_s += herd__now() - t0;
    return st;
}

herd_status herd_comm_win_create(herd_comm *c, void *base, size_t bytes, herd_win **win)
{
    return win_create(c, base, bytes, 0, win);
}

herd_status herd_comm_win_create_shared(herd_comm *c, void *base, size_t bytes, herd_win **win)
{
    return win_create(c, base, bytes, HERD_WIN_SHARED_LOCKS, win);
}

/* The checks shared by every window call that names a target. */
static herd_status check_win(herd_comm *c, const herd_win *w, size_t target, const char *fn)
{
    herd_status st;
    if ((st = check_windows(c, fn)) < 0 || (st = check_ptr(c, w, fn, "win")) < 0)
        return st;
    return check_rank(c, target, fn, "target");
}

herd_status herd_comm_win_lock(herd_comm *c, herd_win *w, size_t target, bool exclusive)
{
    herd_status st = check_win(c, w, target, "win_lock");
    if (st < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_lock(c, w, target, exclusive, t0 + herd__comm_timeout(c));
    c->wait_s += herd__now() - t0;
    return st;
}

herd_status herd_comm_win_unlock(herd_comm *c, herd_win *w, size_t target)
{
    herd_status st = check_win(c, w, target, "win_unlock");
    if (st < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_unlock(c, w, target);
    c->wait_s += herd__now() - t0;
    return st;
}

/* The checks of a window call that sends count floats from src (fn's
 * argument `arg`). */
static herd_status check_floats(herd_comm *c, const herd_win *w, size_t target, const float *src, size_t count,
                                const char *fn, const char *arg)
{
    herd_status st = check_win(c, w, target, fn);
    if (st < 0)
        return st;
    if (count > SIZE_MAX / sizeof(float))
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s: count %zu is too large", c->rank, fn, count);
    return check_buf(c, src, count * sizeof(float), fn, arg);
}

herd_status herd_comm_win_unlock_begin(herd_comm *c, herd_win *w, size_t target)
{
    herd_status st = check_win(c, w, target, "win_unlock_begin");
    if (st < 0)
        return st;
    double t0 = herd__now();
    st = (c->ops->win_unlock_begin ? c->ops->win_unlock_begin : c->ops->win_unlock)(c, w, target);
    c->wait_s += herd__now() - t0;
    return st;
}

herd_status herd__comm_blend_by_parts(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                  size_t count, float alpha, float *fetched)
{
    herd_status st = c->ops->win_get(c, w, target, offset, fetched, count * sizeof(float));
    if (st == HERD_OK)
        st = c->ops->win_flush(c, w, target);
    if (st < 0)
        return st;
    float *d = malloc(count * sizeof *d);
    if (!d)
        return herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a window blend of %zu floats", c->rank,
                            count);
    for (size_t i = 0; i < count; i++)
        d[i] = alpha * (src[i] - fetched[i]);
    st = c->ops->win_accumulate(c, w, target, offset, d, count);
    if (st == HERD_OK) /* the accumulate reads d: done before it goes */
        st = c->ops->win_flush(c, w, target);
    free(d);
    return st;
}

herd_status herd__comm_heavy_ball_by_parts(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                           const float *upd, size_t count, float mu)
{
    float *v = malloc(count * sizeof *v);
    if (!v)
        return herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: out of memory for a window heavy-ball step of %zu floats",
                            c->rank, count);
    herd_status st = c->ops->win_get(c, w, target, offset_v, v, count * sizeof(float));
    if (st == HERD_OK)
        st = c->ops->win_flush(c, w, target);
    if (st == HERD_OK) {
        for (size_t i = 0; i < count; i++)
            v[i] = mu * v[i] - upd[i];
        st = c->ops->win_put(c, w, target, offset_v, v, count * sizeof(float));
    }
    if (st == HERD_OK)
        st = c->ops->win_accumulate(c, w, target, offset_x, v, count);
    if (st == HERD_OK) /* the put and the accumulate read v: done before it goes */
        st = c->ops->win_flush(c, w, target);
    free(v);
    return st;
}

herd_status herd_comm_win_heavy_ball(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                     const float *upd, size_t count, float mu)
{
    herd_status st = check_floats(c, w, target, upd, count, "win_heavy_ball", "upd");
    if (st < 0)
        return st;
    size_t bytes = count * sizeof(float);
    if ((offset_v < offset_x ? offset_x - offset_v : offset_v - offset_x) < bytes)
        return herd_err_set(&c->err, HERD_EINVAL,
                            "rank %zu: win_heavy_ball: v at %zu and x at %zu overlap (%zu bytes each)", c->rank,
                            offset_v, offset_x, bytes);
    double t0 = herd__now();
    st = (c->ops->win_heavy_ball ? c->ops->win_heavy_ball : herd__comm_heavy_ball_by_parts)(c, w, target, offset_v,
                                                                                            offset_x, upd, count, mu);
    c->wait_s += herd__now() - t0;
    if (st == HERD_OK)
        c->bytes_sent += bytes;
    return st;
}

herd_status herd_comm_win_blend(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                size_t count, float alpha, float *fetched)
{
    herd_status st = check_floats(c, w, target, src, count, "win_blend", "src");
    if (st < 0 || (st = check_buf(c, fetched, count * sizeof(float), "win_blend", "fetched")) < 0)
        return st;
    double t0 = herd__now();
    st = (c->ops->win_blend ? c->ops->win_blend : herd__comm_blend_by_parts)(c, w, target, offset, src, count, alpha, fetched);
    c->wait_s += herd__now() - t0;
    if (st == HERD_OK)
        c->bytes_sent += count * sizeof(float), c->bytes_recv += count * sizeof(float);
    return st;
}

herd_status herd_comm_win_wait(herd_comm *c, herd_win *w)
{
    herd_status st;
    if ((st = check_windows(c, "win_wait")) < 0 || (st = check_ptr(c, w, "win_wait", "win")) < 0)
        return st;
    if (!c->ops->win_wait)
        return HERD_OK;
    double t0 = herd__now();
    st = c->ops->win_wait(c, w);
    c->wait_s += herd__now() - t0;
    return st;
}

herd_status herd_comm_win_get(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes)
{
    herd_status st;
    if ((st = check_win(c, w, target, "win_get")) < 0 || (st = check_buf(c, dst, bytes, "win_get", "dst")) < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_get(c, w, target, offset, dst, bytes);
    c->wait_s += herd__now() - t0;
    if (st == HERD_OK)
        c->bytes_recv += bytes;
    return st;
}

herd_status herd_comm_win_put(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes)
{
    herd_status st;
    if ((st = check_win(c, w, target, "win_put")) < 0 || (st = check_buf(c, src, bytes, "win_put", "src")) < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_put(c, w, target, offset, src, bytes);
    c->wait_s += herd__now() - t0;
    if (st == HERD_OK)
        c->bytes_sent += bytes;
    return st;
}

herd_status herd_comm_win_accumulate(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                     size_t count)
{
    herd_status st = check_floats(c, w, target, src, count, "win_accumulate", "src");
    if (st < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_accumulate(c, w, target, offset, src, count);
    c->wait_s += herd__now() - t0;
    if (st == HERD_OK)
        c->bytes_sent += count * sizeof(float);
    return st;
}

herd_status herd_comm_win_flush(herd_comm *c, herd_win *w, size_t target)
{
    herd_status st = check_win(c, w, target, "win_flush");
    if (st < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_flush(c, w, target);
    c->wait_s += herd__now() - t0;
    return st;
}

herd_status herd_comm_win_free(herd_comm *c, herd_win *w)
{
    if (!w)
        return HERD_OK;
    herd_status st = check_windows(c, "win_free");
    if (st < 0)
        return st;
    double t0 = herd__now();
    st = c->ops->win_free(c, w);
    c->wait_s += herd__now() - t0;
    return st;
}

void herd_comm_free(herd_comm *c)
{
    if (c)
        c->ops->free(c);
}

const char *herd_comm_last_error(const herd_comm *c) { return c->err.msg; }

bool herd_comm_any_thread(const herd_comm *c) { return c->any_thread; }

bool herd_comm_windows_local(const herd_comm *c) { return c->local_windows; }

/* A worker's own compute: the engine's clock hooks where it has them
 * (herd_engine_clock), nothing elsewhere. */
void herd_comm_step_begin(herd_comm *c)
{
    if (c->clock)
        c->clock->step_begin(c);
}

void herd_comm_compute(herd_comm *c, double flops)
{
    if (c->clock)
        c->clock->compute(c, flops);
}

void herd_comm_combined(herd_comm *c, size_t nfloats)
{
    herd_comm_compute(c, HERD_COMM_COMBINE_FLOPS * (double)nfloats);
}

void herd_comm_span_begin(herd_comm *c, herd_compute_span *s)
{
    *s = (herd_compute_span){0};
    if (c->clock)
        c->clock->span_begin(c, s);
}

void herd_comm_span_reach(herd_comm *c, const herd_compute_span *s, double flops)
{
    if (c->clock)
        c->clock->span_reach(c, s, flops);
}
