/* The herd_comm_* wrappers: argument checks, byte counts, timeouts. */
#include "herd/herd_comm.h"

#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double deadline(const herd_comm *c) { return now_s() + (c->timeout_s > 0 ? c->timeout_s : 60); }

static herd_status check_peer(herd_comm *c, size_t peer, const void *buf, size_t bytes, const char *fn)
{
    if (peer >= c->size)
        return herd_err_set(&c->err, HERD_EINVAL, "%s: peer %zu is not a rank (size %zu)", fn, peer, c->size);
    if (bytes && !buf)
        return herd_err_set(&c->err, HERD_EINVAL, "%s: NULL buffer for %zu bytes", fn, bytes);
    return HERD_OK;
}

herd_status herd_comm_isend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    herd_status st = check_peer(c, peer, buf, bytes, "isend");
    if (st < 0)
        return st;
    st = c->ops->isend(c, peer, tag, buf, bytes, req);
    if (st == HERD_OK)
        c->bytes_sent += bytes;
    return st;
}

herd_status herd_comm_irecv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req)
{
    herd_status st = check_peer(c, peer, buf, bytes, "irecv");
    if (st < 0)
        return st;
    st = c->ops->irecv(c, peer, tag, buf, bytes, req);
    if (st == HERD_OK)
        c->bytes_recv += bytes;
    return st;
}

herd_status herd_comm_wait(herd_comm *c, herd_req *req)
{
    double t0 = now_s();
    herd_status st = c->ops->wait(c, req, t0 + (c->timeout_s > 0 ? c->timeout_s : 60));
    c->wait_s += now_s() - t0;
    return st;
}

herd_status herd_comm_test(herd_comm *c, herd_req *req, bool *done) { return c->ops->test(c, req, done); }

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
    double t0 = now_s();
    herd_status st = c->ops->barrier(c, deadline(c));
    c->wait_s += now_s() - t0;
    return st;
}

herd_status herd_comm_win_create(herd_comm *c, void *base, size_t bytes, herd_win **win)
{
    if (bytes && !base)
        return herd_err_set(&c->err, HERD_EINVAL, "win_create: NULL base for %zu bytes", bytes);
    return c->ops->win_create(c, base, bytes, win);
}

herd_status herd_comm_win_lock(herd_comm *c, herd_win *w, size_t target, bool exclusive)
{
    herd_status st = check_peer(c, target, NULL, 0, "win_lock");
    if (st < 0)
        return st;
    double t0 = now_s();
    st = c->ops->win_lock(c, w, target, exclusive, deadline(c));
    c->wait_s += now_s() - t0;
    return st;
}

herd_status herd_comm_win_unlock(herd_comm *c, herd_win *w, size_t target)
{
    herd_status st = check_peer(c, target, NULL, 0, "win_unlock");
    return st < 0 ? st : c->ops->win_unlock(c, w, target);
}

herd_status herd_comm_win_get(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes)
{
    herd_status st = check_peer(c, target, dst, bytes, "win_get");
    if (st < 0)
        return st;
    st = c->ops->win_get(c, w, target, offset, dst, bytes);
    if (st == HERD_OK)
        c->bytes_recv += bytes;
    return st;
}

herd_status herd_comm_win_put(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes)
{
    herd_status st = check_peer(c, target, src, bytes, "win_put");
    if (st < 0)
        return st;
    st = c->ops->win_put(c, w, target, offset, src, bytes);
    if (st == HERD_OK)
        c->bytes_sent += bytes;
    return st;
}

herd_status herd_comm_win_accumulate(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                     size_t count)
{
    herd_status st = check_peer(c, target, src, count * sizeof(float), "win_accumulate");
    if (st < 0)
        return st;
    st = c->ops->win_accumulate(c, w, target, offset, src, count);
    if (st == HERD_OK)
        c->bytes_sent += count * sizeof(float);
    return st;
}

herd_status herd_comm_win_free(herd_comm *c, herd_win *w) { return w ? c->ops->win_free(c, w) : HERD_OK; }

void herd_comm_free(herd_comm *c)
{
    if (c)
        c->ops->free(c);
}

const char *herd_comm_last_error(const herd_comm *c) { return c->err.msg; }
