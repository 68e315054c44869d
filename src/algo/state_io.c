/* The algorithms' checkpoint records (see state_io.h). */
#include "algo/state_io.h"

#include <inttypes.h>
#include <string.h>

herd__state_out herd__state_out_make(void *buf, size_t cap) { return (herd__state_out){.p = buf, .cap = buf ? cap : 0}; }

void *herd__state_reserve(herd__state_out *o, size_t bytes)
{
    void *at = o->p && o->len <= o->cap && bytes <= o->cap - o->len ? o->p + o->len : NULL;
    o->len += bytes;
    return at;
}

void herd__state_put(herd__state_out *o, const void *src, size_t bytes)
{
    void *at = herd__state_reserve(o, bytes);
    if (at && bytes)
        memcpy(at, src, bytes);
}

void herd__state_put_u64(herd__state_out *o, uint64_t v) { herd__state_put(o, &v, sizeof v); }

void herd__state_put_f64(herd__state_out *o, double v) { herd__state_put(o, &v, sizeof v); }

herd__state_in herd__state_in_make(const void *buf, size_t len) { return (herd__state_in){.p = buf, .len = buf ? len : 0}; }

const void *herd__state_take(herd__state_in *in, size_t bytes)
{
    if (in->bad || bytes > in->len - in->at) {
        in->bad = true;
        return NULL;
    }
    in->at += bytes;
    return in->p + in->at - bytes;
}

void herd__state_get(herd__state_in *in, void *dst, size_t bytes)
{
    const void *src = herd__state_take(in, bytes);
    if (src)
        memcpy(dst, src, bytes);
    else
        memset(dst, 0, bytes);
}

uint64_t herd__state_get_u64(herd__state_in *in)
{
    uint64_t v;
    herd__state_get(in, &v, sizeof v);
    return v;
}

double herd__state_get_f64(herd__state_in *in)
{
    double v;
    herd__state_get(in, &v, sizeof v);
    return v;
}

herd_status herd__state_layout(herd__state_in *in, uint64_t layout, herd_worker *w, const char *what)
{
    uint64_t got = herd__state_get_u64(in);
    if (in->bad || got != layout)
        return herd_err_set(&w->err, HERD_ECORRUPT,
                            "worker %zu: the checkpoint's %s state is not of the layout this herd reads "
                            "(layout word %016" PRIx64 ", want %016" PRIx64 ")",
                            w->rank, what, got, layout);
    return HERD_OK;
}

herd_status herd__state_end(const herd__state_in *in, herd_worker *w, const char *what)
{
    if (in->bad)
        return herd_err_set(&w->err, HERD_ECORRUPT, "worker %zu: the checkpoint's %s state is truncated (%zu bytes)",
                            w->rank, what, in->len);
    if (in->at != in->len)
        return herd_err_set(&w->err, HERD_ECORRUPT,
                            "worker %zu: the checkpoint's %s state has %zu bytes more than this run's state", w->rank,
                            what, in->len - in->at);
    return HERD_OK;
}

herd_status herd__state_win_copy(herd_comm *comm, herd_win *win, size_t target, bool put, void *buf, size_t bytes)
{
    herd_status st = herd_comm_win_lock(comm, win, target, true);
    if (st < 0)
        return st;
    st = put ? herd_comm_win_put(comm, win, target, 0, buf, bytes) : herd_comm_win_get(comm, win, target, 0, buf, bytes);
    HERD_KEEP_FIRST(st, herd_comm_win_unlock(comm, win, target));
    return st;
}
